"""The run directory's records: JSON helpers, ``records.jsonl`` reading, record identity.

One line of ``records.jsonl`` per (query, condition, defense), appended and flushed per item by
:mod:`sieve.evaluation.runner`; a later line for the same key replaces an earlier one.
"""
from __future__ import annotations

import hashlib
import json
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
    from sieve.safe_io import atomic_write_text

    atomic_write_text(path, json.dumps(jsonable(obj), ensure_ascii=False, indent=2, allow_nan=False) + "\n")


#: Key of the run config's own checksum (sha256 of the canonical JSON of every other key).
CHECKSUM_KEY = "sha256"


def config_checksum(cfg: dict[str, Any]) -> str:
    body = {k: v for k, v in jsonable(cfg).items() if k != CHECKSUM_KEY}
    canon = json.dumps(body, ensure_ascii=False, sort_keys=True, separators=(",", ":"), allow_nan=False)
    return hashlib.sha256(canon.encode("utf-8")).hexdigest()


#: Key written inside every checksummed run config, so that losing the checksum key is itself detected.
CHECKSUM_MARKER = "checksummed"


def write_run_config(path: Path, cfg: dict[str, Any]) -> None:
    """Write a run's ``config.json`` atomically with its checksum (verified by :func:`read_run_config`)."""
    body = {k: v for k, v in jsonable(cfg).items() if k != CHECKSUM_KEY}
    body[CHECKSUM_MARKER] = 1   # inside the checksummed body: a damaged checksum key cannot pass as an old run
    write_json_atomic(path, {**body, CHECKSUM_KEY: config_checksum(body)})


def is_run_config(path: Path) -> bool:
    """True when ``path`` is a ``config.json`` written by ``sieve eval`` (safe to replace)."""
    try:
        obj = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(obj, dict) and "fingerprint" in obj and "sieve_version" in obj


def read_run_config(path: Path) -> dict[str, Any]:
    """A run's ``config.json``, verified: unreadable, invalid JSON, not an object or a checksum
    mismatch (damaged or edited) raise :class:`RunError` naming the file. Runs written before the
    checksum existed have no ``sha256`` key and are read as they are."""
    path = Path(path)
    try:
        raw = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise RunError(f"{path}: run config is not UTF-8 text (damaged); rerun with --force or use a new --out") from None
    except IsADirectoryError:
        raise RunError(f"{path}: is a directory, not a run config") from None
    except OSError as e:
        raise RunError(f"{path}: cannot read the run config ({e.strerror or e})") from None
    try:
        obj = json.loads(raw)
    except ValueError as e:
        raise RunError(f"{path}: run config is not valid JSON ({e}); damaged — rerun with --force "
                       "or use a new --out") from None
    if not isinstance(obj, dict):
        raise RunError(f"{path}: run config must be a JSON object; damaged — rerun with --force or use a new --out")
    want = obj.get(CHECKSUM_KEY)
    if want is None and CHECKSUM_MARKER in obj:
        raise RunError(f"{path}: run config checksum is missing (the file was damaged or edited); "
                       "rerun with --force or use a new --out")
    if want is not None and want != config_checksum(obj):
        raise RunError(f"{path}: run config checksum mismatch (the file was damaged or edited); "
                       "rerun with --force or use a new --out")
    return obj


def read_records(run_dir: str | Path, repair: bool = False) -> list[dict[str, Any]]:
    """Read ``records.jsonl``. A truncated last line (a run interrupted mid-write) is ignored, and
    removed from the file when ``repair``; a malformed line elsewhere is an error naming the line."""
    path = Path(run_dir) / "records.jsonl"
    if not path.exists():
        return []
    try:
        raw = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        line = path.read_bytes()[: e.start].count(b"\n") + 1
        raise RunError(f"{path}:{line}: not UTF-8 text (damaged); repair or delete the line, or rerun with --force") from None
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


