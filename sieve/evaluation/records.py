"""The run directory's records: JSON helpers, ``records.jsonl`` reading, record identity.

One line of ``records.jsonl`` per (query, condition, defense), appended and flushed per item by
:mod:`sieve.evaluation.runner`; a later line for the same key replaces an earlier one.
"""
from __future__ import annotations

import json
import os
from dataclasses import asdict, is_dataclass
from pathlib import Path
from typing import Any, Iterable

import numpy as np


class RunError(ValueError):
    """The run cannot start or continue as asked (incompatible run dir, unknown attack, …)."""


def jsonable(x: Any) -> Any:
    """Convert numpy values, sets, tuples, paths and dataclasses into JSON-serialisable values."""
    if isinstance(x, dict):
        return {str(k): jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple, set, frozenset)):
        items = sorted(x, key=str) if isinstance(x, (set, frozenset)) else x
        return [jsonable(v) for v in items]
    if isinstance(x, np.ndarray):
        return jsonable(x.tolist())
    if isinstance(x, np.generic):
        return jsonable(x.item())
    if isinstance(x, float):
        return x if np.isfinite(x) else None
    if isinstance(x, (str, int, bool)) or x is None:
        return x
    if isinstance(x, Path):
        return str(x)
    if is_dataclass(x) and not isinstance(x, type):
        return jsonable(asdict(x))
    return str(x)


def dumps(obj: Any) -> str:
    return json.dumps(jsonable(obj), ensure_ascii=False, allow_nan=False)


def write_json_atomic(path: Path, obj: Any) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(jsonable(obj), ensure_ascii=False, indent=2, allow_nan=False) + "\n", encoding="utf-8")
    os.replace(tmp, path)


def read_records(run_dir: str | Path, repair: bool = False) -> list[dict[str, Any]]:
    """Read ``records.jsonl``. A truncated last line (a run interrupted mid-write) is ignored, and
    removed from the file when ``repair``; a malformed line elsewhere is an error naming the line."""
    path = Path(run_dir) / "records.jsonl"
    if not path.exists():
        return []
    raw = path.read_text(encoding="utf-8")
    lines = raw.split("\n")
    out: list[dict[str, Any]] = []
    good_chars = 0
    for i, line in enumerate(lines):
        if not line.strip():
            good_chars += len(line) + 1
            continue
        try:
            rec = json.loads(line)
            if not isinstance(rec, dict):
                raise ValueError("not an object")
        except ValueError as e:
            if all(not rest.strip() for rest in lines[i + 1 :]):
                if repair:
                    path.write_text(raw[:good_chars], encoding="utf-8")
                break
            raise RunError(f"{path}:{i + 1}: malformed record ({e}); repair or delete the line, or rerun with --force") from None
        out.append(rec)
        good_chars += len(line) + 1
    return out


def record_key(rec: dict[str, Any]) -> tuple[str, str, str]:
    return (str(rec["query_id"]), str(rec["condition"]), str(rec["defense"]))


def latest_records(records: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """One record per (query, condition, defense); a later line replaces an earlier one."""
    seen: dict[tuple[str, str, str], dict[str, Any]] = {}
    for r in records:
        seen[record_key(r)] = r
    return list(seen.values())


