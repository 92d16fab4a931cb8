"""Quarantine ledger: corpus-time flags (RSG, or any detector) awaiting analyst review.

Size: about 500 lines — the alerts schema, the state machine, the reads and the CSV export are one
SQLite store. The snapshots table is sieve/ledger_snapshots.py; the errors and what is done with a
damaged or unreadable file, sieve/ledger_errors.py; the CSV export, sieve/ledger_export.py (every
name stays importable from here).

docs/design.md "Product decisions": quarantine is never deletion. Each flag is one row with the
document id and content hash, the corpus id/hash and index version it was computed on, the
detector, score, threshold, evidence (JSON) and reason. An analyst moves it through

    open ──confirm──▶ confirmed ──rollback──▶ rolled_back ──reopen──▶ open
      └───dismiss──▶ dismissed ──reopen──▶ open

and every transition is kept in a history table (who / when / why). Retrieval can exclude
flagged documents by policy (:meth:`Ledger.excluded_ids`); a rolled-back or dismissed flag no
longer excludes its document. The user's corpus files are never touched.

Storage: embedded SQLite in WAL mode with a busy timeout; writes use ``BEGIN IMMEDIATE`` so
several processes can add and transition alerts concurrently. Adding the same flag twice
(same content hash, detector, corpus hash and index version) is a no-op.

Integrity: every open runs ``PRAGMA integrity_check``. A damaged ledger — only what SQLite itself
calls corruption: the check fails, ``SQLITE_CORRUPT`` ("database disk image is malformed") or
``SQLITE_NOTADB`` ("file is not a database") — is moved aside to ``<name>.corrupt-<timestamp>`` (with
its ``-wal`` / ``-shm`` side files) and :class:`LedgerCorruptError` names the side file; the next open
starts an empty ledger. Everything else SQLite or the OS reports (a full disk, a read-only folder or
file, an immutable file, an I/O error) is :class:`LedgerIOError`, one line naming the path and the
cause: the file is never moved, so its quarantine stays in force. A file that is not SQLite at all
(e.g. a corpus given as ``--ledger``) is never moved: :class:`LedgerError` refuses it. Rolling back a
confirmed quarantine needs a reason (``why``).
"""
from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping

from sieve.ledger_errors import (  # noqa: F401 - re-exported: sieve.ledger is the public contract
    _SQLITE_CORRUPT,
    _SQLITE_MAGIC,
    _SQLITE_NOTADB,
    _VERIFIED,
    DamagedFile,
    LedgerCorruptError,
    LedgerError,
    LedgerIOError,
    _cause,
    _disk_full,
    _file_stamp,
    _IntegrityFailure,
    _io_error,
    _looks_damaged_sqlite,
    is_corruption,
)
from sieve.ledger_export import EXPORT_COLUMNS, CsvExport, _json_default, is_ledger_export  # noqa: F401
from sieve.ledger_snapshots import SNAPSHOTS_SCHEMA, SnapshotTable

STATES = ("open", "confirmed", "dismissed", "rolled_back")

#: The one wording of each ledger state, used by every page, defense reason and face. Only the
#: ledger quarantines; a detector's own removal is a "flag" (:data:`DETECTOR_FLAG`).
STATE_WORDING: dict[str, str] = {
    "open": "excluded (open alert)", "confirmed": "excluded (confirmed poison)",
    "dismissed": "restored (dismissed as a false alarm)", "rolled_back": "restored (quarantine rolled back)",
}
DETECTOR_FLAG = "flagged"

#: Allowed analyst transitions: state → {new state}.
TRANSITIONS: dict[str, frozenset[str]] = {
    "open": frozenset({"confirmed", "dismissed"}),
    "confirmed": frozenset({"rolled_back"}),
    "dismissed": frozenset({"open"}),
    "rolled_back": frozenset({"open"}),
}

#: Retrieval-exclusion policies: which alert states keep a document out of retrieval.
EXCLUSION_POLICIES: dict[str, tuple[str, ...]] = {
    "open_and_confirmed": ("open", "confirmed"),
    "confirmed_only": ("confirmed",),
    "none": (),
}

SORTS = {
    "score": "score ASC", "-score": "score DESC",
    "created": "created_at ASC, alert_id", "-created": "created_at DESC, alert_id",
    "doc": "doc_id ASC",
}

_SCHEMA = """
CREATE TABLE IF NOT EXISTS alerts (
    alert_id      TEXT PRIMARY KEY,
    doc_id        TEXT NOT NULL,
    content_hash  TEXT NOT NULL,
    corpus_id     TEXT NOT NULL DEFAULT '',
    corpus_hash   TEXT NOT NULL DEFAULT '',
    index_version TEXT NOT NULL DEFAULT '',
    detector      TEXT NOT NULL,
    score         REAL,
    threshold     REAL,
    evidence      TEXT NOT NULL DEFAULT '{}',
    reason        TEXT NOT NULL DEFAULT '',
    created_at    REAL NOT NULL,
    state         TEXT NOT NULL DEFAULT 'open',
    updated_at    REAL NOT NULL,
    UNIQUE (content_hash, detector, corpus_hash, index_version)
);
CREATE INDEX IF NOT EXISTS alerts_state ON alerts(state);
CREATE INDEX IF NOT EXISTS alerts_doc ON alerts(doc_id);
CREATE TABLE IF NOT EXISTS history (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    alert_id   TEXT NOT NULL REFERENCES alerts(alert_id),
    from_state TEXT,
    to_state   TEXT NOT NULL,
    who        TEXT NOT NULL,
    why        TEXT NOT NULL DEFAULT '',
    at         REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS history_alert ON history(alert_id);
""" + SNAPSHOTS_SCHEMA


@dataclass
class Flag:
    """One flag to record (a detector decided to quarantine ``doc_id``)."""

    doc_id: str
    content_hash: str
    score: float | None
    threshold: float | None
    evidence: dict[str, Any] = field(default_factory=dict)
    reason: str = ""


@dataclass
class Alert:
    alert_id: str
    doc_id: str
    content_hash: str
    corpus_id: str
    corpus_hash: str
    index_version: str
    detector: str
    score: float | None
    threshold: float | None
    evidence: dict[str, Any]
    reason: str
    created_at: float
    state: str
    updated_at: float

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class HistoryEntry:
    alert_id: str
    from_state: str | None
    to_state: str
    who: str
    why: str
    at: float


def alert_id_for(content_hash: str, detector: str, corpus_hash: str, index_version: str) -> str:
    """Deterministic alert id: the same flag on the same corpus version always gets the same id."""
    key = "\x1f".join((content_hash, detector, corpus_hash, index_version))
    return "A-" + hashlib.sha256(key.encode("utf-8")).hexdigest()[:12]


def default_ledger_path(config: Any = None) -> Path:
    """``<config.cache_dir>/ledger.sqlite`` (default cache dir when no config is given)."""
    from sieve.config import default_cache_dir

    base = Path(getattr(config, "cache_dir", None) or default_cache_dir())
    return base / "ledger.sqlite"


class Ledger(SnapshotTable, CsvExport, DamagedFile):
    """The quarantine ledger at ``path`` (created on first use)."""

    def __init__(self, path: str | os.PathLike[str] | None = None, timeout_s: float = 60.0, *,
                 must_exist: bool = False) -> None:
        """Open (or create) the ledger. ``must_exist``: refuse a missing file instead of starting an
        empty ledger (:class:`LedgerIOError`) — a long-running service whose ledger disappeared (moved
        aside as corrupt, deleted) must not go on silently with an empty quarantine."""
        self.path = Path(path) if path is not None else default_ledger_path()
        self._timeout = timeout_s
        self._read_only_cause: str | None = None
        try:
            if self.path.is_dir():
                raise LedgerError(f"ledger path {self.path} is a directory; give a .sqlite file")
            existed = self.path.is_file() and self.path.stat().st_size > 0
            if must_exist and not existed:
                raise LedgerIOError(f"quarantine ledger {self.path} is missing or empty (moved aside as corrupt, "
                                    "or deleted); refusing to start an empty quarantine in its place", self.path)
            if existed:
                with open(self.path, "rb") as fh:
                    head = fh.read(len(_SQLITE_MAGIC))
                if head != _SQLITE_MAGIC and not _looks_damaged_sqlite(self.path, head):
                    raise LedgerError(f"{self.path} is not a quarantine ledger (not a SQLite file); "
                                      "it was not modified — give another --ledger path")
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise _io_error(self.path, e) from None
        stamp = _file_stamp(self.path)   # before connecting (opening in WAL mode creates the -wal file)
        try:
            self._connect()
            if existed and stamp not in _VERIFIED:
                res = self.integrity_check()
                if res != "ok":
                    lines = [x for x in res.splitlines() if x.strip() and not x.startswith("***")]
                    raise _IntegrityFailure("integrity check: " + (lines[0] if lines else res.strip()))
        except sqlite3.DatabaseError as e:
            if isinstance(e, sqlite3.OperationalError) and ("locked" in str(e) or "busy" in str(e)):
                self._close_quietly()
                raise
            if not is_corruption(e):   # full disk, read-only folder, immutable file, I/O error: never moved
                self._close_quietly()
                if existed and self._open_read_only(e):
                    return   # reads (and so the quarantine) keep working; writes fail with the cause
                raise _io_error(self.path, e) from None
            self._quarantine_file(e)
        try:
            with self._write() as c:   # executescript would commit on its own; run statements in one transaction
                for stmt in _SCHEMA.split(";"):
                    if stmt.strip():
                        c.execute(stmt)
        except LedgerError:
            self._close_quietly()
            raise

    @property
    def read_only(self) -> bool:
        """True when the ledger could only be opened for reading (full disk, read-only folder or file)."""
        return self._read_only_cause is not None

    def _close_quietly(self) -> None:
        try:
            self._conn.close()
        except Exception:  # noqa: BLE001 - the connection may never have opened
            pass

    def _connect(self) -> None:
        self._conn = sqlite3.connect(str(self.path), timeout=self._timeout, isolation_level=None,
                                     check_same_thread=False)
        self._conn.row_factory = sqlite3.Row
        self._conn.execute(f"PRAGMA busy_timeout = {int(self._timeout * 1000)}")
        self._retry(lambda: self._conn.execute("PRAGMA journal_mode=WAL"))
        self._conn.execute("PRAGMA synchronous=NORMAL")

    # -- plumbing -----------------------------------------------------------------------------
    def _retry(self, fn: Any) -> Any:
        deadline = time.monotonic() + self._timeout
        while True:
            try:
                return fn()
            except sqlite3.OperationalError as e:
                if "locked" not in str(e) and "busy" not in str(e) or time.monotonic() > deadline:
                    raise
                time.sleep(0.01)

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        """One IMMEDIATE transaction (takes the write lock up front; waits up to the busy timeout).
        A failed write (full disk, read-only file, damage) rolls back and is one :class:`LedgerError`
        naming the ledger; nothing is moved."""
        if self._read_only_cause is not None:
            raise _io_error(self.path, sqlite3.OperationalError(self._read_only_cause), "write")
        with self._db("write"):
            self._retry(lambda: self._conn.execute("BEGIN IMMEDIATE"))
            try:
                yield self._conn
            except BaseException:
                try:
                    self._conn.execute("ROLLBACK")
                except sqlite3.Error:
                    pass
                raise
            else:
                self._retry(lambda: self._conn.execute("COMMIT"))

    @contextmanager
    def _db(self, doing: str = "read") -> Iterator[None]:
        """SQLite / OS errors of an operation as one :class:`LedgerError` naming the ledger: damage is
        :class:`LedgerCorruptError` (the file is checked, and moved aside, on its next open), anything
        else :class:`LedgerIOError`. Lock timeouts stay ``sqlite3.OperationalError``."""
        try:
            yield
        except sqlite3.DatabaseError as e:
            if isinstance(e, sqlite3.OperationalError) and ("locked" in str(e) or "busy" in str(e)):
                raise
            if is_corruption(e):
                raise LedgerCorruptError(f"quarantine ledger {self.path} is corrupt ({_cause(e)}); it is moved aside "
                                         "on its next open", self.path, None) from None
            raise _io_error(self.path, e, doing) from None
        except OSError as e:
            raise _io_error(self.path, e, doing) from None

    def close(self) -> None:
        self._conn.close()
        # this file passed its check on open and was changed since only through SQLite by this
        # process: remember its stamp, so reopening it unchanged does not scan it again
        # (only once its times are settled: a write in the same timestamp tick could hide a change)
        stamp = _file_stamp(self.path)
        if all(t is None or time.time_ns() - t > 2_000_000_000 for t in stamp[2::3]):
            _VERIFIED.add(stamp)

    def __enter__(self) -> "Ledger":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # -- writing ------------------------------------------------------------------------------
    def add_flags(self, flags: Iterable[Flag], *, detector: str, corpus_id: str = "", corpus_hash: str = "",
                  index_version: str = "", who: str = "sieve") -> list[str]:
        """Record flags as ``open`` alerts; returns their alert ids (existing ids for repeats).

        Idempotent per (content hash, detector, corpus hash, index version)."""
        now = time.time()
        ids: list[str] = []
        with self._write() as c:
            for f in flags:
                aid = alert_id_for(f.content_hash, detector, corpus_hash, index_version)
                cur = c.execute(
                    "INSERT OR IGNORE INTO alerts (alert_id, doc_id, content_hash, corpus_id, corpus_hash, "
                    "index_version, detector, score, threshold, evidence, reason, created_at, state, updated_at) "
                    "VALUES (?,?,?,?,?,?,?,?,?,?,?,?,'open',?)",
                    (aid, f.doc_id, f.content_hash, corpus_id, corpus_hash, index_version, detector,
                     None if f.score is None else float(f.score),
                     None if f.threshold is None else float(f.threshold),
                     json.dumps(f.evidence, default=_json_default), f.reason, now, now),
                )
                if cur.rowcount:
                    c.execute("INSERT INTO history (alert_id, from_state, to_state, who, why, at) VALUES (?,?,?,?,?,?)",
                              (aid, None, "open", who, f.reason or f"flagged by {detector}", now))
                ids.append(aid)
        return ids

    def transition(self, alert_id: str, new_state: str, who: str, why: str = "") -> Alert:
        """Move an alert to ``new_state`` if allowed (see :data:`TRANSITIONS`); record who/when/why."""
        if new_state not in STATES:
            raise LedgerError(f"unknown state {new_state!r}; states: {', '.join(STATES)}")
        if not who or not str(who).strip():
            raise LedgerError("transition needs a non-empty 'who'")
        now = time.time()
        with self._write() as c:
            row = c.execute("SELECT state FROM alerts WHERE alert_id = ?", (alert_id,)).fetchone()
            if row is None:
                raise LedgerError(f"no alert with id {alert_id!r}")
            cur = row["state"]
            if new_state not in TRANSITIONS[cur]:
                allowed = ", ".join(sorted(TRANSITIONS[cur])) or "none"
                raise LedgerError(f"alert {alert_id}: cannot go from {cur!r} to {new_state!r} (allowed: {allowed})")
            if new_state == "rolled_back" and not (why and str(why).strip()):
                raise LedgerError(f"alert {alert_id}: rolling back a confirmed quarantine needs a reason ('why')")
            c.execute("UPDATE alerts SET state = ?, updated_at = ? WHERE alert_id = ?", (new_state, now, alert_id))
            c.execute("INSERT INTO history (alert_id, from_state, to_state, who, why, at) VALUES (?,?,?,?,?,?)",
                      (alert_id, cur, new_state, str(who), why, now))
        return self.get(alert_id)

    def confirm(self, alert_id: str, who: str, why: str = "") -> Alert:
        return self.transition(alert_id, "confirmed", who, why)

    def dismiss(self, alert_id: str, who: str, why: str = "") -> Alert:
        return self.transition(alert_id, "dismissed", who, why)

    def rollback(self, alert_id: str, who: str, why: str = "") -> Alert:
        """Undo a confirmed quarantine: the document is restored to retrieval."""
        return self.transition(alert_id, "rolled_back", who, why)

    def reopen(self, alert_id: str, who: str, why: str = "") -> Alert:
        return self.transition(alert_id, "open", who, why)

    # -- reading ------------------------------------------------------------------------------
    @staticmethod
    def _alert(row: sqlite3.Row) -> Alert:
        d = dict(row)
        d["evidence"] = json.loads(d["evidence"] or "{}")
        return Alert(**d)

    def get(self, alert_id: str) -> Alert:
        with self._db():
            row = self._conn.execute("SELECT * FROM alerts WHERE alert_id = ?", (alert_id,)).fetchone()
        if row is None:
            raise LedgerError(f"no alert with id {alert_id!r}")
        return self._alert(row)

    def alerts(self, *, detector: str | None = None, state: str | None = None, min_score: float | None = None,
               doc_id: str | None = None, corpus_hash: str | None = None, sort: str = "-score",
               limit: int | None = None) -> list[Alert]:
        """Alerts matching the filters, sorted by ``sort`` (one of :data:`SORTS`)."""
        if sort not in SORTS:
            raise LedgerError(f"unknown sort {sort!r}; choose from {', '.join(SORTS)}")
        if state is not None and state not in STATES:
            raise LedgerError(f"unknown state {state!r}; states: {', '.join(STATES)}")
        where: list[str] = []
        args: list[Any] = []
        for col, val in (("detector", detector), ("state", state), ("doc_id", doc_id), ("corpus_hash", corpus_hash)):
            if val is not None:
                where.append(f"{col} = ?")
                args.append(val)
        if min_score is not None:
            where.append("score >= ?")
            args.append(float(min_score))
        sql = "SELECT * FROM alerts" + (" WHERE " + " AND ".join(where) if where else "") + f" ORDER BY {SORTS[sort]}"
        if limit is not None:
            sql += f" LIMIT {int(limit)}"
        with self._db():
            return [self._alert(r) for r in self._conn.execute(sql, args)]

    def history(self, alert_id: str) -> list[HistoryEntry]:
        with self._db():
            rows = self._conn.execute("SELECT alert_id, from_state, to_state, who, why, at FROM history "
                                      "WHERE alert_id = ? ORDER BY id", (alert_id,)).fetchall()
        if not rows:
            self.get(alert_id)  # raises for an unknown id
        return [HistoryEntry(**dict(r)) for r in rows]

    def counts(self) -> dict[str, int]:
        out = {s: 0 for s in STATES}
        with self._db():
            for r in self._conn.execute("SELECT state, COUNT(*) AS n FROM alerts GROUP BY state"):
                out[r["state"]] = r["n"]
        return out

    def excluded_ids(self, policy: str = "open_and_confirmed", *, corpus_hash: str | None = None) -> set[str]:
        """Document ids to keep out of retrieval under ``policy`` (see :data:`EXCLUSION_POLICIES`)."""
        if policy not in EXCLUSION_POLICIES:
            raise LedgerError(f"unknown exclusion policy {policy!r}; choose from {', '.join(EXCLUSION_POLICIES)}")
        states = EXCLUSION_POLICIES[policy]
        if not states:
            return set()
        sql = f"SELECT DISTINCT doc_id FROM alerts WHERE state IN ({','.join('?' * len(states))})"
        args: list[Any] = list(states)
        if corpus_hash is not None:
            sql += " AND corpus_hash = ?"
            args.append(corpus_hash)
        with self._db():
            return {r["doc_id"] for r in self._conn.execute(sql, args)}

    def quarantined_ids(self, documents: Iterable[Any], policy: str = "open_and_confirmed") -> set[str]:
        """Ids of ``documents`` (objects with ``id`` and ``hash``/``text``) that retrieval must exclude
        under ``policy``: an alert in an excluded state for the same document id *and* the same
        content hash (a document edited since it was flagged is not excluded by the old flag)."""
        if policy not in EXCLUSION_POLICIES:
            raise LedgerError(f"unknown exclusion policy {policy!r}; choose from {', '.join(EXCLUSION_POLICIES)}")
        states = EXCLUSION_POLICIES[policy]
        if not states:
            return set()
        with self._db():
            rows = self._conn.execute(
                f"SELECT doc_id, content_hash FROM alerts WHERE state IN ({','.join('?' * len(states))})", list(states))
            flagged = {(r["doc_id"], r["content_hash"]) for r in rows}
        if not flagged:
            return set()
        from sieve.types import content_hash

        out: set[str] = set()
        for d in documents:
            h = getattr(d, "hash", None) or content_hash(d.text)
            if (d.id, h) in flagged:
                out.add(d.id)
        return out

    def files(self) -> list[Path]:
        """The ledger file and its SQLite side files (never an output of any command)."""
        return [self.path, *(self.path.with_name(self.path.name + s) for s in ("-wal", "-shm", "-journal"))]

    def integrity_check(self) -> str:
        return str(self._conn.execute("PRAGMA integrity_check").fetchone()[0])

    list = alerts  # ``ledger.list(state="open")`` (defined last: it shadows the builtin in the class body)


def flags_from_decisions(decisions: Iterable[Any], hashes: Mapping[str, str]) -> list[Flag]:
    """Flags for the removed :class:`~sieve.types.Decision` objects; ``hashes`` maps doc id → content hash."""
    out = []
    for d in decisions:
        if d.removed:
            out.append(Flag(d.doc_id, hashes[d.doc_id], d.score, d.threshold, dict(d.evidence), d.reason))
    return out
