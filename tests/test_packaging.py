"""Packaging: what importing Sieve does to a process, and what an installed wheel carries.

* Importing ``sieve`` and its library packages changes no environment variable; only Sieve's
  programs set their process settings (:func:`sieve.runtime.configure_process_environment`).
* The core modules import without the dashboard's dependencies (the ``dashboard`` extra) and without
  plotly (a core dependency, loaded only by ``sieve report``).
* The benchmarks are modules of the package (``sieve bench`` works from a wheel).

Each check runs in a fresh interpreter with a clean environment (none of the variables set).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from sieve.runtime import PROCESS_ENVIRONMENT, configure_process_environment

ROOT = Path(__file__).resolve().parents[1]

#: Library modules a user imports (every defense module is added from the package directory).
LIBRARY = ["sieve", "sieve.config", "sieve.types", "sieve.registry", "sieve.resources", "sieve.corpus",
           "sieve.index", "sieve.models", "sieve.models.loaders", "sieve.attacks", "sieve.defenses",
           "sieve.experiment", "sieve.evaluation", "sieve.evaluation.report", "sieve.ledger", "sieve.scale",
           "sieve.adapters", "sieve.service.app"]
DEFENSE_MODULES = sorted(f"sieve.defenses.{p.stem}" for p in (ROOT / "sieve" / "defenses").glob("*.py")
                         if p.stem != "__init__")
DASHBOARD_ONLY = ("streamlit", "plotly", "umap", "pandas")   # plotly: lazily, for reports

_PROBE = r"""
import importlib, json, os, sys
before = dict(os.environ)
failed = {}
for name in sys.argv[1:]:
    try:
        importlib.import_module(name)
    except Exception as e:   # reported, so one broken module does not hide the others
        failed[name] = f"{type(e).__name__}: {e}"
after = dict(os.environ)
changed = sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k))
print(json.dumps({"changed": changed, "failed": failed,
                  "loaded": sorted({m.split(".")[0] for m in sys.modules})}))
"""


def _clean_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in PROCESS_ENVIRONMENT}
    env["PYTHONPATH"] = str(ROOT)
    return env


def _probe(modules: list[str]) -> dict:
    out = subprocess.run([sys.executable, "-c", _PROBE, *modules], capture_output=True, text=True,
                         env=_clean_env(), cwd=ROOT, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def library_import() -> dict:
    return _probe(LIBRARY + DEFENSE_MODULES + ["sieve.cli", "sieve.runtime"])


def test_importing_sieve_and_its_packages_changes_no_environment_variable(library_import: dict) -> None:
    assert library_import["failed"] == {}, library_import["failed"]
    assert library_import["changed"] == [], ("importing the library changed the environment: "
                                             f"{library_import['changed']}")


def test_core_modules_do_not_import_the_dashboard_dependencies() -> None:
    got = _probe(["sieve.cli", "sieve.experiment", "sieve.service.app", "sieve.evaluation", "sieve.adapters",
                  *DEFENSE_MODULES])
    assert got["failed"] == {}, got["failed"]
    loaded = set(got["loaded"])
    assert not loaded & set(DASHBOARD_ONLY), sorted(loaded & set(DASHBOARD_ONLY))
    assert "torch" not in loaded   # models load lazily: OMP_WAIT_POLICY can still be set before torch


def test_the_programs_configure_their_process(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in PROCESS_ENVIRONMENT:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("TOKENIZERS_PARALLELISM", "true")    # a value the user set wins
    configure_process_environment()
    assert os.environ["HF_HUB_OFFLINE"] == "1" and os.environ["OMP_WAIT_POLICY"] == "PASSIVE"
    assert os.environ["TOKENIZERS_PARALLELISM"] == "true"


def test_a_cli_command_runs_with_the_program_settings() -> None:
    code = ("import os, sys; from sieve.cli import app\n"
            "assert 'HF_HUB_OFFLINE' not in os.environ\n"
            "from typer.testing import CliRunner\n"
            "r = CliRunner().invoke(app, ['bench', 'no-such-bench'])\n"
            "print(r.exit_code, os.environ.get('HF_HUB_OFFLINE'), os.environ.get('OMP_WAIT_POLICY'))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=_clean_env(), cwd=ROOT,
                         timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["2", "1", "PASSIVE"]


def test_the_benchmarks_are_modules_of_the_package() -> None:
    bench = ROOT / "sieve" / "bench"
    assert (bench / "__init__.py").is_file() and not (ROOT / "bench").exists()
    names = sorted(p.stem for p in bench.glob("*_bench.py"))
    assert {"index_bench", "defenses_bench", "serve_bench", "fusion_bench"} <= set(names)
    for name in names:   # no bench reaches for the checkout through sys.path any more
        text = (bench / f"{name}.py").read_text(encoding="utf-8")
        assert "parents[1]" not in text, name
