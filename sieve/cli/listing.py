"""``sieve list``: every registered defense and attack, one line each."""
from __future__ import annotations

import typer

from sieve.cli._app import app
from sieve.registry import ATTACKS, DEFENSES


@app.command("list")
def list_recipes() -> None:
    """List every registered defense and attack: name, paper, and what it needs to run."""
    for title, reg in (("defenses", DEFENSES), ("attacks", ATTACKS)):
        typer.secho(title, bold=True)
        entries = reg.entries()
        w = max((len(e.name) for e in entries), default=4)
        for e in entries:
            needs = ", ".join(e.needs) if e.needs else "nothing"
            typer.echo(f"  {e.name:<{w}}  {e.summary}  [{e.paper}; needs: {needs}]")
