"""Audited snapshots of a store in the quarantine ledger: the ``snapshots`` table that
``sieve audit SOURCE --since`` reads (sieve/experiment/stores.py; README "Audit a vector store").

One row per audited snapshot of a store source: its corpus hash and index version, the number of
documents and of new ones (the batch), the snapshot it was audited from (``parent``) and where its
neighbour lists are saved (``state_path``).
"""
from __future__ import annotations

import sqlite3
import time
from typing import Any, ContextManager

SNAPSHOTS_SCHEMA = """
CREATE TABLE IF NOT EXISTS snapshots (
    snapshot_id   TEXT PRIMARY KEY,
    source        TEXT NOT NULL,
    corpus_hash   TEXT NOT NULL,
    index_version TEXT NOT NULL DEFAULT '',
    n_docs        INTEGER NOT NULL,
    new_docs      INTEGER NOT NULL DEFAULT 0,
    parent        TEXT,
    state_path    TEXT NOT NULL DEFAULT '',
    created_at    REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS snapshots_source ON snapshots(source);
"""


class SnapshotTable:
    """The snapshot methods of :class:`~sieve.ledger.Ledger` (it provides the connection and the
    transactions)."""

    _conn: sqlite3.Connection

    def _write(self) -> ContextManager[sqlite3.Connection]:   # provided by Ledger
        raise NotImplementedError

    def _db(self, doing: str = "read") -> ContextManager[None]:   # provided by Ledger
        raise NotImplementedError

    def add_snapshot(self, snapshot_id: str, *, source: str, corpus_hash: str, index_version: str, n_docs: int,
                     new_docs: int, parent: str | None = None, state_path: str = "") -> None:
        """Record an audited snapshot of a store source (again: its state path and time are updated)."""
        now = time.time()
        with self._write() as c:
            c.execute("INSERT INTO snapshots (snapshot_id, source, corpus_hash, index_version, n_docs, new_docs, "
                      "parent, state_path, created_at) VALUES (?,?,?,?,?,?,?,?,?) ON CONFLICT(snapshot_id) DO "
                      "UPDATE SET state_path = excluded.state_path, created_at = excluded.created_at",
                      (snapshot_id, source, corpus_hash, index_version, int(n_docs), int(new_docs), parent,
                       state_path, now))

    def snapshot(self, snapshot_id: str) -> dict[str, Any] | None:
        """The recorded snapshot ``snapshot_id`` (a dict of its columns), or None."""
        with self._db():
            row = self._conn.execute("SELECT * FROM snapshots WHERE snapshot_id = ?", (snapshot_id,)).fetchone()
        return dict(row) if row is not None else None

    def snapshots(self, *, source: str | None = None) -> list[dict[str, Any]]:
        """Recorded snapshots, newest first (of one ``source`` when given)."""
        sql = "SELECT * FROM snapshots" + (" WHERE source = ?" if source is not None else "") + \
            " ORDER BY created_at DESC"
        with self._db():
            return [dict(r) for r in self._conn.execute(sql, (source,) if source is not None else ())]
