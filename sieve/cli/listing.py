"""``sieve list``: every registered defense and attack, one line each."""
from __future__ import annotations

import typer

from sieve.cli._app import app
from sieve.cli.common import plain
from sieve.registry import ATTACKS, DEFENSES


@app.command("list")
def list_recipes() -> None:
    """List every registered defense and attack: name, paper, what it needs to run, and the package
    of each plugin (``(from my-plugin 0.1)``; built-ins come from sieve-rag). A plugin that failed to
    load is skipped with a warning line."""
    problems = [p for reg in (DEFENSES, ATTACKS) for p in reg.load(log_problems=False)]
    for title, reg in (("defenses", DEFENSES), ("attacks", ATTACKS)):
        typer.secho(title, bold=True)
        entries = reg.entries()
        w = max((len(e.name) for e in entries), default=4)
        for e in entries:
            needs = ", ".join(e.needs) if e.needs else "nothing"
            origin = "" if e.builtin else f"  (from {plain(e.provider)})"   # plugin metadata: untrusted text
            typer.echo(f"  {plain(e.name):<{w}}  {plain(e.summary)}  [{plain(e.paper)}; needs: {plain(needs)}]{origin}")
    for p in problems:
        typer.secho(f"warning: {plain(p.message)}", fg=typer.colors.YELLOW, err=True)
