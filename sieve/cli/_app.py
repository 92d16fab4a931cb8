"""The Typer application and the shared error boundary: a user error prints one clear line
(file, line, field where known) and exits 2 — never a traceback."""
from __future__ import annotations

import functools
import os
import sys
from typing import Any, Callable

import typer

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

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
        try:
            return fn(*args, **kwargs)
        except known as e:  # noqa: PERF203
            msg = e.args[0] if isinstance(e, KeyError) and e.args else str(e)
            if isinstance(e, OSError) and e.filename and e.strerror:
                msg = f"{e.filename}: {e.strerror}"
            msg = " ".join(str(msg).split())   # one line
            typer.secho(f"error: {msg}", fg=typer.colors.RED, err=True)
            raise typer.Exit(2) from None
        except KeyboardInterrupt:
            typer.secho("interrupted", fg=typer.colors.YELLOW, err=True)
            sys.exit(130)

    return wrapper
