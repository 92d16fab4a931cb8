"""``sieve bench NAME``: run a benchmark script from ``bench/`` (speed and memory are measured
there, never in unit tests). Each prints percentiles and ratios."""
from __future__ import annotations

import runpy
import sys
from pathlib import Path

import typer

from sieve.cli._app import UserError, app, user_errors

BENCH_DIR = Path(__file__).resolve().parents[2] / "bench"


def available() -> dict[str, Path]:
    return {p.stem.removesuffix("_bench"): p for p in sorted(BENCH_DIR.glob("*_bench.py"))}


@app.command("bench")
@user_errors
def bench(
    name: str = typer.Argument(..., help="Benchmark to run, e.g. 'index', 'defenses', 'rsq', 'rsg', 'attacks', 'dashboard', 'serve', 'scale', 'eval'."),
    args: list[str] = typer.Argument(None, help="Extra arguments passed to the benchmark script."),
) -> None:
    """Run a speed benchmark and print its table (see bench/*.py)."""
    benches = available()
    if name not in benches:
        known = ", ".join(benches) or "none (bench/ not found: run from a source checkout)"
        raise UserError(f"unknown benchmark {name!r}; available: {known}")
    sys.argv = [str(benches[name]), *(args or [])]
    runpy.run_path(str(benches[name]), run_name="__main__")
