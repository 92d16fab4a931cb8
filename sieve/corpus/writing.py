"""Writing JSON lines (used by the attack factory and exports; never on the user's input files)."""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Iterable

from sieve.safe_io import atomic_open
from sieve.types import AttackRecord


def write_jsonl(path: str | os.PathLike[str], rows: Iterable[dict[str, Any]]) -> int:
    """Write ``rows`` as JSON lines atomically (temp file + rename, :func:`sieve.safe_io.atomic_open`).
    Returns the number of rows."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    n = 0
    with atomic_open(p, "w", encoding="utf-8", newline="\n") as f:
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=False))
            f.write("\n")
            n += 1
    return n


def attack_record_to_row(rec: AttackRecord) -> dict[str, Any]:
    """The ``attacks.jsonl`` line of ``rec`` (inverse of the loader)."""
    docs = []
    for d in rec.documents:
        meta = {k: v for k, v in d.metadata.items()}
        row: dict[str, Any] = {"id": d.id, "text": d.text}
        if d.title:
            row["title"] = d.title
        if meta:
            row["metadata"] = meta
        docs.append(row)
    return {"query_id": rec.query_id, "query": rec.query, "correct_answers": list(rec.correct_answers),
            "target_answer": rec.target_answer, "attack": rec.attack, "documents": docs, **rec.metadata}
