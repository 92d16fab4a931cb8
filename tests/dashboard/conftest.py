"""Dashboard test fixtures: a tiny dataset + tiny-model run on disk and the env hooks that make the
service layer use them (SIEVE_DASHBOARD_TINY / _DATASET / _RUN / _LEDGER), a fresh ledger per test, and
a tiny-model dashboard server with a headless Chromium for the browser tests."""
from __future__ import annotations

import os
from pathlib import Path

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


@pytest.fixture
def fresh_ledger(dash_env, tmp_path, monkeypatch):
    """An empty quarantine ledger of this test only (the dashboard reads SIEVE_DASHBOARD_LEDGER)."""
    path = tmp_path / "ledger.sqlite"
    monkeypatch.setenv("SIEVE_DASHBOARD_LEDGER", str(path))
    return path


@pytest.fixture
def tiny_server(tmp_path, tiny_env):
    """A fresh dashboard server on the tiny models with its own ledger, and a headless Chromium."""
    from _browser import CHROMEDRIVER, CHROMIUM, chrome, streamlit_app

    if not (Path(CHROMIUM).exists() and Path(CHROMEDRIVER).exists()):
        pytest.skip("chromium/chromedriver not installed (apt-get install chromium chromium-driver)")
    env = {k: v for k, v in os.environ.items() if not k.startswith("SIEVE_DASHBOARD_")}
    env.update(tiny_env)
    env["SIEVE_DASHBOARD_LEDGER"] = str(tmp_path / "ledger.sqlite")
    with streamlit_app(env, tmp_path / "streamlit.log") as url, chrome(tmp_path / "chrome") as driver:
        yield url, driver
