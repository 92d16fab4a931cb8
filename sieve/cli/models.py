"""``sieve models``: what each model role resolves to, whether its packages and caches are present,
and ``--build`` to build every cache once (with progress)."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from sieve.cli._app import app, user_errors


def _size(n: float) -> str:
    if n <= 0:
        return "-"
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GB"  # pragma: no cover


def _yes_no(v: Optional[bool]) -> str:
    return "-" if v is None else ("yes" if v else "NO")


@app.command("models")
@user_errors
def models_command(
    build: bool = typer.Option(False, "--build", help="Build every model cache now (joins, dequantises; once)."),
    config: Optional[Path] = typer.Option(None, "--config", "-c", help="sieve.yaml (default: $SIEVE_CONFIG or built-in defaults)."),
) -> None:
    """Show each model role, what it resolves to, installed packages, caches and their size."""
    from sieve.config import SieveConfig
    from sieve.models import build_caches, model_status
    from sieve.models.cache import models_dir

    cfg = SieveConfig.load(config)
    if build:
        for name, path, secs in build_caches(cfg, progress=True):
            typer.echo(f"ready  {name:<22} {path}  ({secs:.1f} s)")
    rows = model_status(cfg)
    header = ("role", "resolves to", "installed", "cache", "size")
    table = [(r.role, r.resolves_to, _yes_no(r.installed),
              ("in package" if r.installed else "-") if r.cache_ready is None
              else ("ready" if r.cache_ready else "not built"),
              _size(r.cache_bytes)) for r in rows]
    widths = [max(len(str(x[i])) for x in [header, *table]) for i in range(len(header))]
    typer.secho("  ".join(h.ljust(w) for h, w in zip(header, widths)).rstrip(), bold=True)
    for line in table:
        typer.echo("  ".join(str(c).ljust(w) for c, w in zip(line, widths)).rstrip())
    mdir = models_dir(cfg.cache_dir)
    typer.echo(f"\ncache dir: {mdir}")
    for r in rows:
        if r.note:
            typer.echo(f"note ({r.role}): {r.note}")
        if r.installed is False:
            typer.secho(f"missing package for {r.role}: {r.missing_package}. Install with:\n  {r.install}",
                        fg=typer.colors.YELLOW)
    if not build and any(r.cache_ready is False for r in rows):
        typer.echo("caches are built on first use, or now with: sieve models --build")
