"""Dashboard test fixtures: a tiny dataset + tiny-model run on disk and the env hooks that make the
service layer use them (SIEVE_DASHBOARD_TINY / _DATASET / _RUN / _LEDGER)."""
from __future__ import annotations

import pytest

from _dashdata import write_tiny_dataset, write_tiny_run


@pytest.fixture(scope="session")
def tiny_env(tmp_path_factory) -> dict[str, str]:
    base = tmp_path_factory.mktemp("dashboard")
    ds = write_tiny_dataset(base / "ds")
    run = write_tiny_run(ds, base / "run")
    return {"SIEVE_DASHBOARD_TINY": "1", "SIEVE_DASHBOARD_DATASET": str(ds), "SIEVE_DASHBOARD_RUN": str(run),
            "SIEVE_DASHBOARD_LEDGER": str(base / "ledger.sqlite")}


@pytest.fixture
def dash_env(tiny_env, monkeypatch) -> dict[str, str]:
    for k, v in tiny_env.items():
        monkeypatch.setenv(k, v)
    return tiny_env
