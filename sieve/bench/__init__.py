"""Benchmarks: speed and memory, measured here and never in unit tests (docs/design.md "Performance budgets").

Each ``*_bench`` module is a program that prints percentiles and ratios; nothing is asserted.
``sieve bench NAME [ARGS]`` runs ``sieve.bench.NAME_bench`` as ``__main__`` (so does
``python -m sieve.bench.NAME_bench``), from a source checkout or an installed wheel.

A face (docs/architecture.md): the benches import the library and the faces they measure; nothing
imports them. Being programs, importing this package gives the process Sieve's program settings
(:func:`sieve.runtime.configure_process_environment`: offline switches, ``OMP_WAIT_POLICY`` before
torch loads) — ``python -m sieve.bench.NAME_bench`` runs like ``sieve bench NAME``.
"""
from __future__ import annotations

from pathlib import Path

from sieve.runtime import configure_process_environment

configure_process_environment()

#: The directory that holds the ``sieve`` package: the source checkout, or site-packages when
#: installed from a wheel. Benches that compare code trees put it first on a child's ``sys.path``.
ROOT = Path(__file__).resolve().parents[2]

#: The bundled demo knowledge base: the checkout's, else ``./demo_data`` (a wheel does not ship it).
DEMO_DATA = ROOT / "demo_data" if (ROOT / "demo_data").is_dir() else Path("demo_data")

