"""Low-level row readers per file format (JSON lines, CSV / TSV, Parquet).

Each yields ``(line or row number, row dict)`` and reports unreadable input to :class:`Issues`.
"""
from __future__ import annotations

import csv
import io
import json
from pathlib import Path
from typing import Any, Iterator

from sieve.corpus.errors import Issues

CORPUS_SUFFIXES = (".jsonl", ".csv", ".parquet")
"""File types accepted as a single corpus file (and as ``corpus.<suffix>`` in a directory)."""


def iter_jsonl(path: Path, label: str, issues: Issues) -> Iterator[tuple[int, dict[str, Any]]]:
    try:
        raw = path.read_bytes()
    except OSError as e:
        issues.add(label, None, None, f"cannot read file: {e.strerror or e}")
        return
    for i, bline in enumerate(raw.split(b"\n"), start=1):
        if i == 1 and bline.startswith(b"\xef\xbb\xbf"):
            bline = bline[3:]
        bline = bline.rstrip(b"\r")
        if not bline.strip():
            continue
        try:
            sline = bline.decode("utf-8")
        except UnicodeDecodeError as e:
            issues.add(label, i, None, f"not valid UTF-8 (byte 0x{bline[e.start]:02x} at column {e.start + 1})")
            continue
        try:
            row = json.loads(sline)
        except json.JSONDecodeError as e:
            issues.add(label, i, None, f"invalid JSON: {e.msg} (column {e.colno})")
            continue
        if not isinstance(row, dict):
            issues.add(label, i, None, f"must be a JSON object, got {type(row).__name__}")
            continue
        yield i, row


def iter_csv(path: Path, label: str, issues: Issues, delimiter: str = ",") -> Iterator[tuple[int, dict[str, Any]]]:
    try:
        raw = path.read_bytes()
    except OSError as e:
        issues.add(label, None, None, f"cannot read file: {e.strerror or e}")
        return
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        line = raw[: e.start].count(b"\n") + 1
        issues.add(label, line, None, f"not valid UTF-8 (byte 0x{raw[e.start]:02x})")
        return
    reader = csv.DictReader(io.StringIO(text, newline=""), delimiter=delimiter)
    if not reader.fieldnames:
        issues.add(label, 1, None, "missing header row")
        return
    for row in reader:
        if None in row:  # more cells than header columns
            issues.add(label, reader.line_num, None, f"has more cells than the header ({len(reader.fieldnames)})")
            continue
        yield reader.line_num, {k: v for k, v in row.items() if v is not None}


def iter_parquet(path: Path, label: str, issues: Issues) -> Iterator[tuple[int, dict[str, Any]]]:
    try:
        import pyarrow.parquet as pq

        table = pq.read_table(path)
    except Exception as e:  # noqa: BLE001 - any pyarrow failure is a bad file
        issues.add(label, None, None, f"cannot read Parquet file: {e}")
        return
    for i, row in enumerate(table.to_pylist(), start=1):
        yield i, row


def iter_rows(path: Path, label: str, issues: Issues) -> Iterator[tuple[int, dict[str, Any]]]:
    suffix = path.suffix.lower()
    if suffix == ".csv":
        return iter_csv(path, label, issues)
    if suffix == ".parquet":
        return iter_parquet(path, label, issues)
    return iter_jsonl(path, label, issues)
