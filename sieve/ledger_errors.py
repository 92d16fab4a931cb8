"""Ledger errors, and what is done with a ledger file that cannot be used (sieve/ledger.py).

Only what SQLite itself calls corruption — a failed ``PRAGMA integrity_check``, ``SQLITE_CORRUPT``
("database disk image is malformed") or ``SQLITE_NOTADB`` ("file is not a database") — is damage:
the file is moved aside to ``<name>.corrupt-<timestamp>`` with its ``-wal`` / ``-shm`` side files
(:class:`LedgerCorruptError`). Everything else SQLite or the OS reports (a full disk, a read-only
folder or file, an immutable file, an I/O error) is :class:`LedgerIOError`, one line naming the path
and the cause; the file is never moved and, when it can still be read, it is opened read-only so its
quarantine stays in force (docs/design.md "Product decisions": quarantine is never deletion).
"""
from __future__ import annotations

import os
import sqlite3
import time
from pathlib import Path
from typing import Any


class LedgerError(ValueError):
    """Invalid ledger operation (unknown alert, forbidden transition, bad filter)."""


class LedgerCorruptError(LedgerError):
    """The ledger file failed its integrity check; it was moved to :attr:`side_file`."""

    def __init__(self, message: str, path: Path, side_file: Path | None) -> None:
        super().__init__(message)
        self.path = path
        self.side_file = side_file


class LedgerIOError(LedgerError):
    """The ledger could not be read or written (full disk, permissions, read-only or immutable file,
    I/O error). The file was not moved or changed; its quarantine stays in force."""

    def __init__(self, message: str, path: Path) -> None:
        super().__init__(message)
        self.path = path


#: SQLite primary result codes that mean the file itself is damaged (everything else is I/O).
_SQLITE_CORRUPT, _SQLITE_NOTADB = 11, 26


class _IntegrityFailure(sqlite3.DatabaseError):
    """``PRAGMA integrity_check`` did not answer ``ok`` (corruption by definition)."""


def is_corruption(err: BaseException) -> bool:
    """True only when SQLite says the file is damaged: a failed integrity check, ``SQLITE_CORRUPT``
    or ``SQLITE_NOTADB``. Full disks, permissions, locks and I/O errors are not corruption."""
    if isinstance(err, _IntegrityFailure):
        return True
    if not isinstance(err, sqlite3.DatabaseError):
        return False
    code = getattr(err, "sqlite_errorcode", None)
    if isinstance(code, int):
        return (code & 0xFF) in (_SQLITE_CORRUPT, _SQLITE_NOTADB)
    msg = str(err).lower()
    return "malformed" in msg or "not a database" in msg


def _cause(err: BaseException) -> str:
    if isinstance(err, OSError):
        return err.strerror or str(err) or type(err).__name__
    return " ".join(str(err).split()) or type(err).__name__


def _io_error(path: Path, err: BaseException, doing: str = "open") -> LedgerIOError:
    cause = _cause(err)
    hint = ""
    low = cause.lower()
    if "readonly" in low or "read-only" in low or "permission" in low or "not permitted" in low \
            or "unable to open" in low:
        hint = " (check that the file and its folder are writable and the file is not immutable)"
    elif "full" in low or "no space" in low or _disk_full(path):
        hint = " (the disk is full)"
    return LedgerIOError(f"cannot {doing} quarantine ledger {path}: {cause}{hint}; the ledger was not moved "
                         "or changed and its quarantine stays in force", path)


def _disk_full(path: Path) -> bool:
    try:
        st = os.statvfs(path.parent if not path.is_dir() else path)
    except OSError:
        return False
    return st.f_bavail * st.f_frsize < 64 * 1024


_SQLITE_MAGIC = b"SQLite format 3\x00"

#: Ledger files this process verified (``PRAGMA integrity_check`` on open) and last closed, keyed
#: by path, size and modification time of the file and its WAL: a file changed by anything else is
#: checked again; search opens the ledger for every snapshot, so an unchanged one is not re-scanned.
_VERIFIED: set[tuple[Any, ...]] = set()


def _file_stamp(path: Path) -> tuple[Any, ...]:
    out: list[Any] = [str(path.resolve())]
    for p in (path, path.with_name(path.name + "-wal")):
        try:
            st = p.stat()
            out += [st.st_size, st.st_mtime_ns, st.st_ino]
        except OSError:
            out += [None, None, None]
    return tuple(out)



def _looks_damaged_sqlite(path: Path, head: bytes) -> bool:
    """A SQLite file whose header was overwritten (a ledger hit by corruption, not a user file):
    the ``.sqlite``/``.db`` suffix and binary content (NUL bytes) in the first page."""
    if path.suffix.lower() not in (".sqlite", ".sqlite3", ".db"):
        return False
    with open(path, "rb") as fh:
        page = fh.read(4096)
    return b"\x00" in page


class DamagedFile:
    """The part of :class:`~sieve.ledger.Ledger` that handles a file it cannot use as is: the
    read-only fallback after an I/O error, and moving a corrupt file aside."""

    path: Path
    _timeout: float
    _conn: sqlite3.Connection
    _read_only_cause: str | None

    def _open_read_only(self, cause: BaseException) -> bool:
        """After an I/O error on open: the same file read-only (``mode=ro``; ``immutable=1`` when no
        write-ahead log holds unapplied changes), integrity-checked. Writes then raise
        :class:`LedgerIOError` with the original ``cause``."""
        wal = self.path.with_name(self.path.name + "-wal")
        try:
            wal_empty = not wal.exists() or wal.stat().st_size == 0
        except OSError:
            wal_empty = False
        uri = self.path.resolve().as_uri()
        for query in ("mode=ro", *(("mode=ro&immutable=1",) if wal_empty else ())):
            try:
                conn = sqlite3.connect(f"{uri}?{query}", uri=True, timeout=self._timeout, isolation_level=None,
                                       check_same_thread=False)
                conn.row_factory = sqlite3.Row
                res = str(conn.execute("PRAGMA integrity_check").fetchone()[0])
            except sqlite3.Error as e:
                if is_corruption(e):
                    self._conn = conn
                    self._quarantine_file(e)
                try:
                    conn.close()
                except Exception:  # noqa: BLE001
                    pass
                continue
            if res != "ok":
                self._conn = conn
                self._quarantine_file(_IntegrityFailure("integrity check: " + res.splitlines()[0]))
            self._conn = conn
            self._read_only_cause = _cause(cause)
            return True
        return False

    def _quarantine_file(self, err: BaseException) -> None:
        """Move a damaged ledger (and its WAL side files) aside and raise :class:`LedgerCorruptError`."""
        try:
            self._conn.close()
        except Exception:  # noqa: BLE001 - the connection may never have opened
            pass
        stamp = time.strftime("%Y%m%dT%H%M%S")
        side = self.path.with_name(f"{self.path.name}.corrupt-{stamp}")
        n = 1
        while side.exists():
            side = self.path.with_name(f"{self.path.name}.corrupt-{stamp}-{n}")
            n += 1
        moved: Path | None = None
        try:
            os.replace(self.path, side)
            moved = side
            for suffix in ("-wal", "-shm"):
                extra = self.path.with_name(self.path.name + suffix)
                if extra.exists():
                    os.replace(extra, side.with_name(side.name + suffix))
        except OSError:
            moved = None
        detail = " ".join(str(err).split()) or type(err).__name__
        where = f"moved to {moved}" if moved else "could not be moved aside"
        raise LedgerCorruptError(f"quarantine ledger {self.path} is corrupt ({detail}); {where}; "
                                 "a new empty ledger is started on next use", self.path, moved)
