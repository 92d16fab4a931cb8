"""Where a bench writes its result files: never over a file the bench did not write.

A bench's ``--out`` (or ``--json``) names files that are replaced on every run. Replacing the user's
own ``suite.md`` or a notes file of the same name would lose it (README "Standards": no command
overwrites what the user owns), so every output path is claimed *before* the run starts — a run
of thirty minutes must not fail at its last step — through :func:`sieve.safe_io.check_output`: a
missing file is fine, a file this bench wrote earlier (it names the bench in its first lines) is
replaced, anything else needs ``--force``, and a dataset file is refused even then. A refusal is
one line on stderr and exit code 2, as for every bad input. The files are then written atomically
(:func:`sieve.safe_io.atomic_write_text`), so an interrupted write leaves the old file whole.
"""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Callable, Sequence

from sieve.safe_io import UnsafeWriteError, atomic_write_text, check_output

#: How far into a file its bench's name is looked for (the result files put it on their first line).
HEAD_CHARS = 4096


def mentions(signature: str) -> Callable[[Path], bool]:
    """A recogniser: the file's first :data:`HEAD_CHARS` characters contain ``signature`` (e.g.
    ``"sieve bench suite"``, which every result file of that bench carries near its top)."""
    def written_by_the_bench(path: Path) -> bool:
        try:
            with open(path, encoding="utf-8", errors="replace") as fh:
                return signature in fh.read(HEAD_CHARS)
        except OSError:
            return False
    return written_by_the_bench


def claim_outputs(paths: Sequence[Path], ours: Callable[[Path], bool], *, force: bool = False,
                  what: str = "--out file") -> list[Path]:
    """Check every path a bench is about to write (module docstring); exit 2 with a one-line error on
    the first that may not be written. Returns the paths."""
    try:
        return [check_output(p, force=force, own=ours, what=what) for p in paths]
    except UnsafeWriteError as e:
        print(f"error: {e}", file=sys.stderr)
        raise SystemExit(2) from None


def write_outputs(files: dict[Path, str]) -> None:
    """Write each claimed file atomically (one-line error and exit 2 if the disk refuses)."""
    try:
        for path, text in files.items():
            atomic_write_text(path, text)
    except UnsafeWriteError as e:
        print(f"error: {e}", file=sys.stderr)
        raise SystemExit(2) from None
