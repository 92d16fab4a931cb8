"""The Typer application and the shared error boundary: a user error prints one clear line
(file, line, field where known) and exits 2 — never a traceback."""
from __future__ import annotations

import functools
import sys
from typing import Any, Callable

import typer

from sieve.runtime import configure_process_environment

app = typer.Typer(
    name="sieve",
    help=(
        "Sieve: detect and filter knowledge poisoning in retrieval-augmented generation.\n\n"
        "Typical session on the bundled demo:\n\n"
        "  sieve index demo_data            # embed the corpus once (cached)\n\n"
        "  sieve search demo_data \"who painted the Mona Lisa\" -k 10\n\n"
        "  sieve list                       # defenses and attacks\n\n"
        "  sieve eval demo_data --out runs/demo && sieve report runs/demo"
    ),
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


@app.callback()
def _program_settings() -> None:
    # Runs before every command: the `sieve` program's process settings (importing sieve.cli sets
    # nothing). No command module imports torch at import time, so OMP_WAIT_POLICY is in time.
    configure_process_environment()


class UserError(Exception):
    """An error caused by input or configuration; shown as one line, exit code 2."""


def user_errors(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Decorator for commands: known error types become a one-line message and exit code 2."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        from sieve.config import ConfigError

        known: tuple[type[BaseException], ...] = (UserError, ConfigError, FileNotFoundError, KeyError,
                                                  NotADirectoryError, IsADirectoryError, PermissionError,
                                                  FileExistsError)
        from sieve.ledger import LedgerError
        from sieve.safe_io import UnsafeWriteError

        known = known + (LedgerError, UnsafeWriteError)
        try:
            from sieve.corpus import DatasetError

            known = known + (DatasetError,)
        except ImportError:  # pragma: no cover
            pass
        try:
            from sieve.experiment import DefenseSpecError, ExperimentError

            known = known + (ExperimentError, DefenseSpecError)
        except ImportError:  # pragma: no cover
            pass
        try:
            from sieve.models.errors import ModelError

            known = known + (ModelError,)
        except ImportError:  # pragma: no cover
            pass
        known = known + (OSError,)   # a full disk, a read-only file system: one line, never a traceback
        import sqlite3

        try:
            return fn(*args, **kwargs)
        except known as e:
            msg = e.args[0] if isinstance(e, KeyError) and e.args else str(e)
            if isinstance(e, OSError) and e.filename and e.strerror:
                msg = f"{e.filename}: {e.strerror}"
            elif isinstance(e, OSError) and e.strerror:
                msg = e.strerror
            msg = " ".join(str(msg).split())   # one line
            typer.secho(f"error: {msg}", fg=typer.colors.RED, err=True)
            raise typer.Exit(2) from None
        except sqlite3.OperationalError as e:   # a cache database on a full or read-only disk
            if "locked" in str(e) or "busy" in str(e):
                raise
            try:
                from sieve.config import default_cache_dir

                where = f" under {default_cache_dir()}"
            except Exception:  # noqa: BLE001 - the message without the folder
                where = ""
            typer.secho(f"error: cache database{where}: {' '.join(str(e).split())}", fg=typer.colors.RED, err=True)
            raise typer.Exit(2) from None
        except KeyboardInterrupt:
            typer.secho("interrupted", fg=typer.colors.YELLOW, err=True)
            sys.exit(130)

    return wrapper
