"""``sieve bench NAME``: run a benchmark of the :mod:`sieve.bench` package (speed and memory are
measured there, never in unit tests). Each prints percentiles and ratios.

The benches ship in the package, so this works from an installed wheel too. The CLI face does not
import them (faces never import each other): it finds the package's modules and runs one as
``__main__``, as ``python -m sieve.bench.NAME_bench`` does.
"""
from __future__ import annotations

import importlib.util
import runpy
import sys
from pathlib import Path

import typer

from sieve.cli._app import UserError, app, user_errors

BENCH_PACKAGE = "sieve.bench"
#: Benchmarks of a face live in that face's package (the library does not import faces): name → module.
FACE_BENCHES = {"dashboard": "sieve.dashboard.bench"}


def available() -> dict[str, str]:
    """Benchmark name (``index``) → its module (``sieve.bench.index_bench``, or a face's own
    :data:`FACE_BENCHES`)."""
    spec = importlib.util.find_spec(BENCH_PACKAGE)   # imports `sieve`, not the bench package
    dirs = list(spec.submodule_search_locations or []) if spec is not None else []
    names = sorted({p.stem for d in dirs for p in Path(d).glob("*_bench.py")})
    found = {n.removesuffix("_bench"): f"{BENCH_PACKAGE}.{n}" for n in names}
    found.update({n: m for n, m in FACE_BENCHES.items() if importlib.util.find_spec(m.rsplit(".", 1)[0])})
    return dict(sorted(found.items()))


@app.command("bench", context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
@user_errors
def bench(
    ctx: typer.Context,
    name: str = typer.Argument(..., help="Benchmark to run, e.g. 'index', 'defenses', 'rsq', 'rsg', 'attacks', "
                                         "'dashboard', 'serve', 'scale', 'eval', 'suite', 'stores', 'fusion'."),
    args: list[str] = typer.Argument(None, help="Arguments passed to the benchmark (`sieve bench NAME -- --help` "
                                                "shows its own options; the `--` is needed for --help only)."),
) -> None:
    """Run a speed benchmark and print its table (modules sieve/bench/*_bench.py): `sieve bench NAME [ARGS]`."""
    benches = available()
    if name not in benches:
        known = ", ".join(benches) or "none (the sieve.bench package is missing)"
        raise UserError(f"unknown benchmark {name!r}; available: {known}")
    module = benches[name]
    passed = [*(args or []), *ctx.args]
    if passed[:1] == ["--"]:
        passed = passed[1:]
    sys.argv = [module, *passed]
    runpy.run_module(module, run_name="__main__", alter_sys=True)
