"""``sieve ledger ...``: review the quarantine ledger (list, confirm, dismiss, roll back, reopen, export).

Moved out of ``sieve/cli/audit.py``. A corrupt ledger file is detected on open, moved aside to a
side file by :class:`~sieve.ledger.Ledger` and reported as a one-line error (exit 2); an export
never writes over the ledger, a dataset file or an unrelated file without ``--force``
(:mod:`sieve.safe_io`).
"""
from __future__ import annotations

import functools
import getpass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

import typer

from sieve.cli._app import UserError, app, user_errors
from sieve.cli.common import plain

if TYPE_CHECKING:
    from sieve.ledger import Ledger

ledger_app = typer.Typer(help="Review the quarantine ledger: list, confirm, dismiss, roll back, export alerts.",
                         no_args_is_help=True)
app.add_typer(ledger_app, name="ledger")
_LEDGER_HELP = "Quarantine ledger file (default: <cache dir>/ledger.sqlite)."


def _ledger(path: Optional[Path], config_file: Optional[Path] = None) -> "Ledger":
    from sieve.config import SieveConfig
    from sieve.ledger import Ledger, default_ledger_path

    p = path or default_ledger_path(SieveConfig.load(config_file))
    if path is not None and not p.exists():
        raise UserError(f"ledger file not found: {p}")
    return Ledger(p)   # a corrupt ledger is moved aside and reported (LedgerCorruptError → exit 2)


def _ledger_errors(fn):
    """LedgerError (bad id, forbidden transition, bad filter) → one-line user error."""
    @functools.wraps(fn)
    def wrapper(*a: Any, **kw: Any) -> Any:
        from sieve.ledger import LedgerError

        try:
            return fn(*a, **kw)
        except LedgerError as e:
            raise UserError(str(e)) from None

    return wrapper


@ledger_app.command("list")
@user_errors
@_ledger_errors
def ledger_list(
    state: Optional[str] = typer.Option(None, "--state", help="open, confirmed, dismissed or rolled_back."),
    detector: Optional[str] = typer.Option(None, "--detector", help="e.g. rsg"),
    min_score: Optional[float] = typer.Option(None, "--min-score"),
    sort: str = typer.Option("-score", "--sort", help="score, -score, created, -created or doc."),
    limit: int = typer.Option(50, "--limit", min=1),
    ledger_path: Optional[Path] = typer.Option(None, "--ledger", help=_LEDGER_HELP),
) -> None:
    """List quarantine alerts (newest evidence first by default: highest score)."""
    with _ledger(ledger_path) as led:
        alerts = led.list(state=state, detector=detector, min_score=min_score, sort=sort, limit=limit)
        counts = led.counts()
    typer.echo("alerts     " + ", ".join(f"{k} {v}" for k, v in counts.items()))
    for a in alerts:
        score = "n/a" if a.score is None else f"{a.score:.3f}"
        typer.echo(f"{a.alert_id}  {a.state:<11} {plain(a.detector):<5} score {score}  {plain(a.doc_id, 40)}  "
                   f"{plain(a.reason, 60)}")


def _transition(alert_id: str, new_state: str, who: Optional[str], why: str, ledger_path: Optional[Path]) -> None:
    with _ledger(ledger_path) as led:
        a = led.transition(alert_id, new_state, who or getpass.getuser(), why)
    typer.echo(f"{a.alert_id}  {plain(a.doc_id)}: now {a.state}")


_WHO = typer.Option(None, "--who", help="Analyst name (default: the login name).")
_WHY = typer.Option("", "--why", help="Reason, kept in the alert history.")
_WHY_REQUIRED = typer.Option(..., "--why", help="Reason for restoring the document (required; kept in the "
                                                "alert history).", show_default=False)


@ledger_app.command("confirm")
@user_errors
@_ledger_errors
def ledger_confirm(alert_id: str = typer.Argument(...), who: Optional[str] = _WHO, why: str = _WHY,
                   ledger_path: Optional[Path] = typer.Option(None, "--ledger", help=_LEDGER_HELP)) -> None:
    """Confirm an open alert: the document stays out of retrieval."""
    _transition(alert_id, "confirmed", who, why, ledger_path)


@ledger_app.command("dismiss")
@user_errors
@_ledger_errors
def ledger_dismiss(alert_id: str = typer.Argument(...), who: Optional[str] = _WHO, why: str = _WHY,
                   ledger_path: Optional[Path] = typer.Option(None, "--ledger", help=_LEDGER_HELP)) -> None:
    """Dismiss an open alert as a false positive: the document is retrievable again."""
    _transition(alert_id, "dismissed", who, why, ledger_path)


@ledger_app.command("rollback")
@user_errors
@_ledger_errors
def ledger_rollback(alert_id: str = typer.Argument(...), who: Optional[str] = _WHO, why: str = _WHY_REQUIRED,
                    ledger_path: Optional[Path] = typer.Option(None, "--ledger", help=_LEDGER_HELP)) -> None:
    """Roll back a confirmed quarantine: the document is restored to retrieval (--why is required)."""
    if not why.strip():
        raise UserError("--why must not be empty: say why the document is restored")
    _transition(alert_id, "rolled_back", who, why, ledger_path)


@ledger_app.command("reopen")
@user_errors
@_ledger_errors
def ledger_reopen(alert_id: str = typer.Argument(...), who: Optional[str] = _WHO, why: str = _WHY,
                  ledger_path: Optional[Path] = typer.Option(None, "--ledger", help=_LEDGER_HELP)) -> None:
    """Reopen a dismissed or rolled-back alert for review."""
    _transition(alert_id, "open", who, why, ledger_path)


@ledger_app.command("export")
@user_errors
@_ledger_errors
def ledger_export(
    out: Path = typer.Argument(..., help="CSV file to write."),
    state: Optional[str] = typer.Option(None, "--state"),
    detector: Optional[str] = typer.Option(None, "--detector"),
    ledger_path: Optional[Path] = typer.Option(None, "--ledger", help=_LEDGER_HELP),
    force: bool = typer.Option(False, "--force", help="Replace an existing file that is not an earlier export "
                                                      "(the ledger itself is never replaced)."),
) -> None:
    """Export alerts (with evidence as JSON) to CSV. Never writes over the ledger; an existing file
    is replaced only if it is an earlier export, or with --force."""
    from sieve.ledger import is_ledger_export
    from sieve.safe_io import check_output

    with _ledger(ledger_path) as led:
        check_output(out, force=force, protected=led.files(), own=is_ledger_export, what="ledger export")
        n = led.export_csv(out, state=state, detector=detector)
    typer.echo(f"{n} alerts written to {out}")
