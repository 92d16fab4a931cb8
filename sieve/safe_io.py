"""Writing files the user can trust: atomic writes and the overwrite guard every command uses.

Rules (docs/design.md "Product decisions": the user's files are never modified):

* a command never writes over a file of the dataset it reads, nor over the quarantine ledger —
  not even with ``--force`` (:func:`check_output` with ``protected=``);
* it never writes over an existing file that is not its own output unless ``--force`` is given
  (``own=`` recognises a file the same command wrote earlier, e.g. a report or an export);
* every write goes to a temporary file in the same directory and is renamed over the target
  (:func:`atomic_open`, :func:`atomic_write_text`), so an interrupted write leaves the old file.

Errors are :class:`UnsafeWriteError` (a ``ValueError``) with a one-line message naming the path;
an OS error while writing (full disk, read-only file system, permissions, immutable file) is its
subclass :class:`WriteFailedError`, naming the path and the cause, after the temporary file was
removed. The command line turns them into ``error: …`` and exit code 2.
"""
from __future__ import annotations

import os
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any, Callable, Iterable, Iterator

#: Files of a dataset directory (docs/design.md; the loaders in sieve/corpus read these).
DATASET_FILE_SUFFIXES = (".jsonl", ".json", ".csv", ".tsv", ".parquet", ".txt", ".yaml", ".yml")


class UnsafeWriteError(ValueError):
    """A write was refused (would replace a protected or foreign file, or the path cannot be written)."""


class WriteFailedError(UnsafeWriteError):
    """The operating system refused a write (full disk, read-only file system, permissions, I/O
    error): one line naming the target and the cause; no partial file is left behind."""

    def __init__(self, message: str, path: Path, errno_: int | None = None) -> None:
        super().__init__(message)
        self.path = path
        self.errno = errno_


def write_failed(path: str | os.PathLike[str], err: OSError, what: str = "") -> WriteFailedError:
    """``err`` while writing ``path`` as one :class:`WriteFailedError` line (path and cause)."""
    import errno as _errno

    cause = err.strerror or str(err) or type(err).__name__
    if err.errno in (_errno.ENOSPC, getattr(_errno, "EDQUOT", -1)):
        cause += " (the disk is full)"
    elif err.errno == _errno.EROFS:
        cause += " (the file system is mounted read-only)"
    elif err.errno in (_errno.EACCES, _errno.EPERM):
        cause += " (no write permission, or the file is immutable)"
    label = f"{what} " if what else ""
    return WriteFailedError(f"cannot write {label}{path}: {cause}; nothing was written there "
                            "(an earlier file at that path is unchanged)", Path(path), err.errno)


def _same(a: Path, b: Path) -> bool:
    try:
        if a.exists() and b.exists():
            return os.path.samefile(a, b)
    except OSError:
        pass
    return a.resolve() == b.resolve()


#: File names of a Sieve dataset directory (sieve/corpus loaders); never replaced by any command.
DATASET_FILE_NAMES = ("corpus.jsonl", "queries.jsonl", "attacks.jsonl", "targets.jsonl", "contexts.jsonl",
                      "qrels.jsonl", "qrels.tsv")


def in_a_dataset(path: str | os.PathLike[str]) -> bool:
    """True when ``path`` is one of the dataset files of a directory that holds a ``corpus.jsonl``
    (protected even when the command was not given that dataset)."""
    p = Path(path)
    return p.name in DATASET_FILE_NAMES and (p.parent / "corpus.jsonl").is_file()


def dataset_files(dataset_path: str | os.PathLike[str]) -> list[Path]:
    """Every file that belongs to a dataset: the file itself for a single-file corpus, else the
    data files at the top of the directory and under ``qrels/`` (BEIR layout). Sub-directories
    such as ``runs/`` hold outputs, not data."""
    p = Path(dataset_path)
    if p.is_file():
        return [p]
    if not p.is_dir():
        return []
    candidates = [*p.iterdir(), *((p / "qrels").rglob("*") if (p / "qrels").is_dir() else [])]
    return [f for f in candidates
            if f.is_file() and f.suffix.lower() in DATASET_FILE_SUFFIXES and not f.name.startswith(".")]


def check_output(path: str | os.PathLike[str], *, force: bool = False, protected: Iterable[str | os.PathLike[str]] = (),
                 own: Callable[[Path], bool] | None = None, what: str = "output",
                 dataset_file_ok: bool = False) -> Path:
    """Validate ``path`` as a file a command is about to (over)write; returns it as a ``Path``.

    * a directory, or a parent that is a file → error;
    * one of ``protected`` (dataset files, the ledger) → error, even with ``force``;
    * an existing file → error unless ``force`` or ``own(path)`` says the command wrote it.
    A file of a dataset directory (:func:`in_a_dataset`) is refused too, unless ``dataset_file_ok``
    (``sieve attack --append-to DATASET/attacks.jsonl``, whose purpose is to merge into it).
    Missing parent directories are created."""
    p = Path(path)
    if p.is_dir():
        raise UnsafeWriteError(f"{what} {p} is a directory; give a file path")
    for q in protected:
        if _same(p, Path(q)):
            raise UnsafeWriteError(f"refusing to write {what} to {p}: it is part of the dataset or ledger "
                                   "this command reads; choose another path")
    if p.exists() and in_a_dataset(p) and not dataset_file_ok:
        raise UnsafeWriteError(f"refusing to write {what} to {p}: it is a file of the dataset in {p.parent} "
                               "(never replaced, not even with --force); choose another path")
    for anc in [p.parent, *p.parent.parents]:
        if anc.exists():
            if not anc.is_dir():
                raise UnsafeWriteError(f"cannot write {what} {p}: {anc} is a file, not a directory")
            break
    if p.exists() and not force and not (own is not None and _safe_call(own, p)):
        raise UnsafeWriteError(f"{p} already exists and was not written by this command; "
                               "use --force to replace it, or choose another path")
    try:
        p.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise UnsafeWriteError(f"cannot create the directory of {what} {p}: {e.strerror or e}") from None
    return p


def check_output_dir(path: str | os.PathLike[str], *, protected: Iterable[str | os.PathLike[str]] = (),
                     what: str = "output directory") -> Path:
    """Validate ``path`` as a directory a command writes into (created if missing)."""
    p = Path(path)
    if p.exists() and not p.is_dir():
        raise UnsafeWriteError(f"{what} {p} is a file; give a directory")
    for q in protected:
        if Path(q).is_dir() and _same(p, Path(q)):
            raise UnsafeWriteError(f"refusing to use {p} as the {what}: it is the dataset directory; "
                                   "choose another path")
    for anc in p.parents:
        if anc.exists():
            if not anc.is_dir():
                raise UnsafeWriteError(f"cannot create {what} {p}: {anc} is a file, not a directory")
            break
    try:
        p.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise UnsafeWriteError(f"cannot create {what} {p}: {e.strerror or e}") from None
    return p


def _safe_call(fn: Callable[[Path], bool], p: Path) -> bool:
    try:
        return bool(fn(p))
    except Exception:  # noqa: BLE001 - an unreadable file is simply "not ours"
        return False


@contextmanager
def atomic_open(path: str | os.PathLike[str], mode: str = "w", encoding: str | None = "utf-8",
                newline: str | None = None) -> Iterator[IO[Any]]:
    """Open a temporary file next to ``path``; on success it is flushed, fsynced and renamed over
    ``path`` (the old content stays intact if anything fails)."""
    p = Path(path)
    binary = "b" in mode
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{p.name}.", suffix=".tmp", dir=str(p.parent))
    except OSError as e:
        raise write_failed(p, e) from None
    try:
        with os.fdopen(fd, mode, encoding=None if binary else encoding,
                       newline=None if binary else newline) as fh:
            yield fh
            fh.flush()
            os.fsync(fh.fileno())
        if p.exists():
            try:
                os.chmod(tmp, p.stat().st_mode & 0o777)
            except OSError:
                pass
        else:
            os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, p)
    except BaseException as e:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        # an OS error of the write itself (no file name, or the temporary file / target): one line
        if isinstance(e, OSError) and not isinstance(e, (FileNotFoundError, IsADirectoryError)) \
                and e.filename in (None, tmp, str(p)):
            raise write_failed(p, e) from None
        raise


def _umask() -> int:
    m = os.umask(0)
    os.umask(m)
    return m


def atomic_write_text(path: str | os.PathLike[str], text: str, encoding: str = "utf-8") -> Path:
    with atomic_open(path, "w", encoding=encoding) as fh:
        fh.write(text)
    return Path(path)


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes) -> Path:
    with atomic_open(path, "wb") as fh:
        fh.write(data)
    return Path(path)


def file_sha256(path: str | os.PathLike[str]) -> str:
    """sha256 (hex) of a file's bytes, read in 4 MiB chunks (artifact checksums in manifests)."""
    import hashlib

    sha = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(1 << 22):
            sha.update(chunk)
    return sha.hexdigest()
