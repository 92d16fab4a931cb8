"""The ``sieve`` command. Each sub-module registers its commands on :data:`app`:

* ``data``     – ``sieve index``, ``sieve search``
* ``models``   – ``sieve models``
* ``attack``   – ``sieve attack``
* ``audit``    – ``sieve audit``
* ``ledger``   – ``sieve ledger ...``
* ``evaluate`` – ``sieve eval``, ``sieve report``, ``sieve calibrate``
* ``bench``    – ``sieve bench ...``
* ``listing``  – ``sieve list``
* ``serve``    – ``sieve serve`` (HTTP service)
"""
from __future__ import annotations

import importlib

from sieve.cli._app import app

for _m in ("listing", "data", "models", "attack", "audit", "ledger", "evaluate", "bench", "serve"):
    try:
        importlib.import_module(f"sieve.cli.{_m}")
    except ModuleNotFoundError as _e:  # not written yet; tests/test_cli.py requires all of them
        if _e.name != f"sieve.cli.{_m}":
            raise

__all__ = ["app"]
