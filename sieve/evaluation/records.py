"""The run directory's records: JSON helpers, reading and writing records, record identity.

Size: over 500 lines — every reader and writer of a run's files (records, side files, config,
summary, the compact shipped run) is here, so that no other module needs to know a format.

One record per (query, condition, defense), appended and flushed per item by
:mod:`sieve.evaluation.runner`; a later record for the same key replaces an earlier one. Every
reader goes through :func:`read_records`, which returns whole records (``ranking``, ``decisions``,
``info`` inline) whatever the format on disk, so the dashboard and ``sieve report`` need no format
knowledge:

* **format 2** (what :class:`RecordWriter` writes): ``records.jsonl`` holds one small line per record with a
  ``ranking_ref`` and a ``detail_ref``; each (query, condition) ranking is stored once in
  ``rankings.jsonl``; the decisions (column-wise, evidence included) and ``info`` of each record
  are in ``decisions.jsonl.gz`` (one gzip line per record, sync-flushed per item so an interrupted
  run keeps every finished item). Side-file lines are ``{"ref": <sha256[:16] of body>, "body": …}``
  and are verified on every read; the run config stores each side file's size and the sha256 of
  that prefix (``side_files``), checked on open (appends after the last checkpoint are allowed and
  still verified line by line).
* **format 1**: ``records.jsonl`` with every field inline (read as it is).
* **compact shipped run**: only ``records.compact.jsonl.gz`` (dashboard demo run), read as it is
  (written by :func:`write_compact_records`).

The run's other files are read here too: ``config.json`` by :func:`read_run_config` (checksum
verified) and ``summary.json`` by :func:`read_summary`; :func:`has_records` says whether a
directory holds records in a format :func:`read_records` reads.
"""
from __future__ import annotations

import gzip
import hashlib
import json
import os
import zlib
from dataclasses import asdict, is_dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

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


def _default(x: Any) -> Any:
    if isinstance(x, (set, frozenset)):
        return sorted(x, key=str)
    if isinstance(x, np.ndarray):
        return x.tolist()
    if isinstance(x, np.generic):
        return x.item()
    return jsonable(x)


def dumps(obj: Any, compact: bool = False) -> str:
    """``json.dumps(jsonable(obj))`` in one pass: the encoder converts numpy values, sets, paths and
    dataclasses as :func:`jsonable` does; objects it cannot encode that way (non-finite floats,
    non-string keys) go through :func:`jsonable` first, so the text is the same either way."""
    seps = (",", ":") if compact else None
    try:
        return json.dumps(obj, ensure_ascii=False, allow_nan=False, default=_default, separators=seps)
    except (ValueError, TypeError):
        return json.dumps(jsonable(obj), ensure_ascii=False, allow_nan=False, separators=seps)


_orjson: Any
try:   # a C encoder ~5x faster than json's on the decision columns (most of a run's bytes)
    import orjson as _orjson
except ImportError:   # pragma: no cover - orjson is a core dependency
    _orjson = None


def dumps_bytes(obj: Any) -> bytes:
    """Compact UTF-8 JSON, the values of ``dumps(obj, compact=True)`` (text may differ: ``1e-5``); numpy values,
    sets, dataclasses, paths converted alike; what orjson refuses (non-str keys, ints > 64 bits) via dumps."""
    if _orjson is not None:
        try:
            return _orjson.dumps(obj, default=_default,
                                 option=_orjson.OPT_PASSTHROUGH_DATACLASS | _orjson.OPT_PASSTHROUGH_DATETIME)
        except (TypeError, ValueError):
            pass
    return dumps(obj, compact=True).encode("utf-8")


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


RECORDS = "records.jsonl"
RANKINGS = "rankings.jsonl"
DETAILS = "decisions.jsonl.gz"
COMPACT_RECORDS = "records.compact.jsonl.gz"
CONFIG = "config.json"
SUMMARY = "summary.json"
#: Files holding a run's records (``--force`` removes them; none may be a dataset file).
RECORD_FILES = (RECORDS, RANKINGS, DETAILS)
RECORDS_FORMAT = 2
#: The run config key with the side files' checkpoint (size + sha256 of that prefix).
SIDE_FILES_KEY = "side_files"
#: Columns of a decision (the fields of :class:`sieve.types.Decision`, in order).
_DECISION_FIELDS = ("doc_id", "removed", "status", "score", "threshold", "evidence", "reason", "layer")
_HEAD = '{"ref":"'
_BODY = '","body":'
_REF_LEN = 16


def _ref(body: str | bytes) -> str:
    return hashlib.sha256(body if isinstance(body, bytes) else body.encode("utf-8")).hexdigest()[:_REF_LEN]


def _ref_line_bytes(ref: str, body: bytes) -> bytes:   # the side-file line {"ref": …, "body": …}
    return b"".join((_HEAD.encode(), ref.encode(), _BODY.encode(), body, b"}\n"))


def _lines(path: Path, fh: Any) -> Iterator[tuple[int, bytes]]:
    """(line number, bytes) of a binary file object; a gzip stream that ends inside a member (an
    interrupted write; the writer sync-flushes per line) ends the iteration with its last whole line."""
    i = 0
    try:
        for i, b in enumerate(fh, 1):
            yield i, b
    except EOFError:
        return
    except (OSError, zlib.error) as e:   # gzip.BadGzipFile is an OSError
        raise RunError(f"{path}: not a gzip file or damaged ({e}); rerun with --force") from None


def _open(path: Path) -> Any:
    try:
        return gzip.open(path, "rb") if path.suffix == ".gz" else open(path, "rb")
    except OSError as e:
        raise RunError(f"{path}: cannot read it ({e.strerror or e})") from None


def _parse_file(path: Path, parse: Callable[[str, int], Any]) -> tuple[list[tuple[int, Any]], int | None]:
    """``parse(line, number)`` of every non-empty line, streamed (a run's records can be hundreds of
    MB: the file is never held in memory as one string). A line that cannot be decoded or parsed
    (``parse`` raises ValueError) is an error naming it unless only blank lines follow it — the
    last line of an interrupted run — in which case it is dropped and the byte length of the good
    prefix is returned (else None)."""
    out: list[tuple[int, Any]] = []
    good = 0
    bad: RunError | None = None
    with _open(path) as fh:
        for i, b in _lines(path, fh):
            if bad is not None:
                if b.strip():
                    raise bad
                continue
            if not b.strip():
                good += len(b)
                continue
            try:
                out.append((i, parse(b.decode("utf-8"), i)))
            except RunError as e:
                bad = e
                continue
            except UnicodeDecodeError:
                bad = RunError(f"{path}:{i}: not UTF-8 text (damaged); repair or delete the line, or rerun with --force")
                continue
            except ValueError as e:
                bad = RunError(f"{path}:{i}: malformed record ({e}); repair or delete the line, or rerun with --force")
                continue
            good += len(b)
    return out, (good if bad is not None else None)


def _record(line: str, _i: int) -> dict[str, Any]:
    rec = json.loads(line)
    if not isinstance(rec, dict):
        raise ValueError("not an object")
    return rec


def _side_rows(path: Path, parse: Callable[[str], Any] | None = None) -> tuple[dict[str, Any], int | None]:
    """``ref → body`` of a side file (the body text, or ``parse(body)``), every line verified against
    its ref; a last line that does not verify (interrupted write) is dropped (its byte offset returned)."""
    def row(line: str, i: int) -> tuple[str, Any]:
        line = line.rstrip("\n")
        ok = line.startswith(_HEAD) and line[len(_HEAD) + _REF_LEN:].startswith(_BODY) and line.endswith("}")
        ref = line[len(_HEAD):len(_HEAD) + _REF_LEN]
        body = line[len(_HEAD) + _REF_LEN + len(_BODY):-1]
        if not ok or _ref(body) != ref:
            raise RunError(f"{path}:{i}: line does not match its reference (damaged or edited); rerun with --force")
        return ref, (parse(body) if parse else body)

    rows, good = _parse_file(path, row)
    return dict(v for _, v in rows), good


def _prefix_sha256(path: Path, n: int) -> str | None:
    h = hashlib.sha256()
    left = n
    with open(path, "rb") as fh:
        while left > 0:
            chunk = fh.read(min(left, 1 << 20))
            if not chunk:
                return None
            h.update(chunk)
            left -= len(chunk)
    return h.hexdigest()


def verify_side_files(run_dir: Path, cfg: dict[str, Any]) -> None:
    """Check each side file against the checkpoint in the run config (size + sha256 of that prefix)."""
    for name, info in (cfg.get(SIDE_FILES_KEY) or {}).items():
        if name not in (RANKINGS, DETAILS) or not isinstance(info, dict):
            continue
        path = run_dir / name
        if not path.exists():
            raise RunError(f"{path}: missing (config.json lists it); the run is incomplete — rerun with --force")
        want, n = info.get("sha256"), int(info.get("bytes") or 0)
        if path.stat().st_size < n or _prefix_sha256(path, n) != want:
            raise RunError(f"{path}: checksum mismatch with config.json (the file was damaged or edited); "
                           "rerun with --force or use a new --out")


def _decisions_from_columns(cols: dict[str, Any], ranking: list[dict[str, Any]]) -> list[dict[str, Any]]:
    ids = cols.get("doc_id")
    if ids is None:
        ids = [d["id"] for d in ranking][: len(cols.get("removed") or [])]
    columns = [ids if f == "doc_id" else cols.get(f) or [None] * len(ids) for f in _DECISION_FIELDS]
    return [dict(zip(_DECISION_FIELDS, vals)) for vals in zip(*columns)]


def _without_evidence(rec: dict[str, Any]) -> dict[str, Any]:
    for d in rec.get("decisions") or []:
        if isinstance(d, dict) and d.get("evidence"):
            d["evidence"] = {}
    return rec


def read_records(run_dir: str | Path, repair: bool = False, *, evidence: bool = True) -> list[dict[str, Any]]:
    """Every record of a run directory, whole (see the module docstring for the formats). A
    truncated last line (a run interrupted mid-write) is ignored, and removed from the file when
    ``repair``; a malformed line elsewhere, a side-file line that does not match its reference, or
    a side file that does not match the run config's checkpoint is an error naming the file.
    ``evidence=False`` empties every decision's evidence as it is read (the summary needs none;
    peak memory stays far below the run's size)."""
    run_dir = Path(run_dir)
    path = run_dir / RECORDS
    slim = (lambda r: r) if evidence else _without_evidence
    if not path.exists():
        compact = run_dir / COMPACT_RECORDS
        if compact.exists():
            return [slim(rec) for _, rec in _parse_file(compact, _record)[0]]
        return []
    parsed, good = _parse_file(path, lambda line, i: slim(_record(line, i)))
    if good is not None and repair:
        os.truncate(path, good)
    if not any("detail_ref" in rec for _, rec in parsed):
        return [rec for _, rec in parsed]
    if not repair and (run_dir / "config.json").exists():
        verify_side_files(run_dir, read_run_config(run_dir / "config.json"))
    rankings: dict[str, Any] = {}
    if (run_dir / RANKINGS).exists():
        rankings, rk_good = _side_rows(run_dir / RANKINGS)
        if rk_good is not None and repair:
            os.truncate(run_dir / RANKINGS, rk_good)

    def body(text: str) -> Any:
        if not evidence:
            obj = json.loads(text)
            obj.get("decisions", {}).pop("evidence", None)
            return obj
        return text

    details: dict[str, Any] = {}
    if (run_dir / DETAILS).exists():
        details, d_good = _side_rows(run_dir / DETAILS, body)
        if repair and (d_good is not None or not _gzip_complete(run_dir / DETAILS)):
            _rewrite_gzip_prefix(run_dir / DETAILS, d_good)
    out: list[dict[str, Any]] = []
    parsed_rankings: dict[str, list[dict[str, Any]]] = {}
    for line, rec in parsed:
        if "detail_ref" not in rec:
            out.append(rec)
            continue
        rref, dref = rec.pop("ranking_ref", None), rec.pop("detail_ref")
        if dref not in details:
            if repair and line == parsed[-1][0]:
                continue   # its detail line was lost in an interrupted write: the item is redone
            raise RunError(f"{path}:{line}: its decisions ({dref}) are missing from {DETAILS} (damaged or "
                           "incomplete run); rerun with --force")
        if rref is None:
            ranking: list[dict[str, Any]] = []
        else:
            if rref not in rankings:
                raise RunError(f"{path}:{line}: its ranking ({rref}) is missing from {RANKINGS} (damaged or "
                               "incomplete run); rerun with --force")
            if rref not in parsed_rankings:
                parsed_rankings[rref] = json.loads(rankings[rref])
            ranking = list(parsed_rankings[rref])
        b = details[dref]
        b = json.loads(b) if isinstance(b, str) else b
        rec["ranking"] = ranking
        rec["decisions"] = _decisions_from_columns(b.get("decisions") or {}, ranking)
        if not evidence:
            for d in rec["decisions"]:
                d["evidence"] = {}
        if "info" in b:
            rec["info"] = b["info"]
        out.append(rec)
    return out


def has_records(run_dir: str | Path) -> bool:
    """True when ``run_dir`` holds records :func:`read_records` reads (``records.jsonl`` or a compact run)."""
    d = Path(run_dir)
    return (d / RECORDS).is_file() or (d / COMPACT_RECORDS).is_file()


def read_summary(run_dir: str | Path) -> dict[str, Any]:
    """A run's ``summary.json`` (``run_dir`` or the file itself); unreadable, invalid JSON or not an
    object raise :class:`RunError` naming the file."""
    path = Path(run_dir)
    if path.is_dir():
        path = path / SUMMARY
    try:
        obj = json.loads(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError:
        raise RunError(f"{path}: not UTF-8 text (damaged); rerun `sieve eval` or `sieve report` to rewrite it") from None
    except OSError as e:
        raise RunError(f"{path}: cannot read it ({e.strerror or e})") from None
    except ValueError as e:
        raise RunError(f"{path}: invalid JSON ({e})") from None
    if not isinstance(obj, dict):
        raise RunError(f"{path}: a run summary must be a JSON object")
    return obj


def write_compact_records(run_dir: str | Path, records: Iterable[dict[str, Any]]) -> Path:
    """Write ``records`` as the compact shipped-run file (``records.compact.jsonl.gz``, one JSON line
    each, replaced atomically); :func:`read_records` reads it when ``records.jsonl`` is absent."""
    d = Path(run_dir)
    d.mkdir(parents=True, exist_ok=True)
    tmp = d / (COMPACT_RECORDS + ".tmp")
    with gzip.open(tmp, "wt", encoding="utf-8", compresslevel=9) as fh:
        for rec in records:
            fh.write(json.dumps(rec, separators=(",", ":")) + "\n")
    os.replace(tmp, d / COMPACT_RECORDS)
    return d / COMPACT_RECORDS


def _gzip_complete(path: Path) -> bool:
    """True when the gzip file ends with a whole member (not an interrupted write)."""
    try:
        with gzip.open(path, "rb") as fh:
            while fh.read(1 << 20):
                pass
    except EOFError:
        return False
    except (OSError, zlib.error):
        return True     # damaged, not truncated: left for the reader's error
    return True


def _rewrite_gzip_prefix(path: Path, good: int | None) -> None:
    """Rewrite an interrupted gzip side file as one whole member holding its good lines."""
    from sieve.safe_io import atomic_write_bytes

    data = bytearray()
    with gzip.open(path, "rb") as fh:
        for _, b in _lines(path, fh):
            data += b
    if good is not None:
        del data[good:]
    elif data and not data.endswith(b"\n"):
        del data[data.rfind(b"\n") + 1:]
    atomic_write_bytes(path, gzip.compress(bytes(data), 6))


class RecordWriter:
    """Appends format-2 records (see the module docstring): the ranking once per (query,
    condition), the decisions column-wise into the gzip side file, then the small line of
    ``records.jsonl`` — in that order, each flushed, so a record line exists only when what it
    refers to is on disk."""

    def __init__(self, run_dir: str | Path):
        self.dir = Path(run_dir)
        self._rankings: set[str] = set()
        rk = self.dir / RANKINGS
        if rk.exists():
            self._rankings = set(_side_rows(rk)[0])
        self._sha = {RANKINGS: hashlib.sha256(), DETAILS: hashlib.sha256()}
        self._bytes = {RANKINGS: 0, DETAILS: 0}
        for name in (RANKINGS, DETAILS):
            p = self.dir / name
            if p.exists():
                with open(p, "rb") as fh:
                    for chunk in iter(lambda: fh.read(1 << 20), b""):
                        self._sha[name].update(chunk)
                        self._bytes[name] += len(chunk)
        try:
            self.records = open(self.dir / RECORDS, "a", encoding="utf-8")
            self.rankings = open(rk, "ab")
            self.details = open(self.dir / DETAILS, "ab")
        except OSError as e:
            from sieve.safe_io import write_failed

            raise write_failed(e.filename or self.dir, e, "run file") from None
        self._z = zlib.compressobj(6, zlib.DEFLATED, 31)

    def _put(self, name: str, fh: Any, data: bytes) -> None:
        try:
            fh.write(data)
            fh.flush()
        except OSError as e:   # full disk: one line naming the file; the resume drops the torn line
            from sieve.safe_io import write_failed

            raise write_failed(self.dir / name, e, "run file") from None
        self._sha[name].update(data)
        self._bytes[name] += len(data)

    def write(self, rec: dict[str, Any], decisions: list[Any] | None = None) -> None:
        """Write one record. ``rec`` holds every field but the decisions (``ranking`` as a list of
        ``{id, rank, score, poison}``, ``info`` optional); ``decisions`` are
        :class:`~sieve.types.Decision` objects or their dicts, in ranking order."""
        head = {k: v for k, v in rec.items() if k not in ("ranking", "decisions", "info")}
        ranking = rec.get("ranking") or []
        rref = None
        if ranking:
            rbody = dumps_bytes(ranking)
            rref = _ref(rbody)
            if rref not in self._rankings:
                self._put(RANKINGS, self.rankings, _ref_line_bytes(rref, rbody))
                self._rankings.add(rref)
        decs = list(decisions if decisions is not None else rec.get("decisions") or [])
        get = (lambda d, f: d.get(f)) if decs and isinstance(decs[0], dict) else getattr
        cols = {f: [get(d, f) for d in decs] for f in _DECISION_FIELDS}
        if cols["doc_id"] == [d["id"] for d in ranking][: len(decs)]:
            del cols["doc_id"]
        body: dict[str, Any] = {"decisions": cols}
        if "info" in rec:
            body["info"] = rec["info"]
        dbody = dumps_bytes(body)
        dref = _ref(dbody)
        data = self._z.compress(_ref_line_bytes(dref, dbody)) + self._z.flush(zlib.Z_SYNC_FLUSH)
        self._put(DETAILS, self.details, data)
        head["ranking_ref"], head["detail_ref"] = rref, dref
        try:
            self.records.write(dumps(head) + "\n")
            self.records.flush()
        except OSError as e:
            from sieve.safe_io import write_failed

            raise write_failed(self.dir / RECORDS, e, "run file") from None

    def checkpoint(self) -> dict[str, dict[str, Any]]:
        """The side files' size and sha256 so far (for the run config; see :func:`verify_side_files`)."""
        return {n: {"bytes": self._bytes[n], "sha256": self._sha[n].hexdigest()} for n in (RANKINGS, DETAILS)}

    def close(self) -> None:
        """Finish the gzip member (its trailer) and close the files."""
        if self.details.closed:
            return
        self._put(DETAILS, self.details, self._z.flush())
        for fh in (self.records, self.rankings, self.details):
            fh.close()

    def __enter__(self) -> "RecordWriter":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def record_key(rec: dict[str, Any]) -> tuple[str, str, str]:
    return (str(rec["query_id"]), str(rec["condition"]), str(rec["defense"]))


def latest_records(records: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """One record per (query, condition, defense); a later line replaces an earlier one."""
    seen: dict[tuple[str, str, str], dict[str, Any]] = {}
    for r in records:
        seen[record_key(r)] = r
    return list(seen.values())


