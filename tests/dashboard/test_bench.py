"""`sieve bench dashboard --browser`'s argument handling and its message when no browser can be driven
(no browser, server or model is started here: the bench's steps are replaced by ones that fail the test)."""
from __future__ import annotations

import sys

import pytest
from typer.testing import CliRunner

from sieve.dashboard import bench
from sieve.dashboard import browser as B


@pytest.fixture
def no_run(monkeypatch):
    """Any step of a real browser run fails the test: the checks must come before them."""
    def boom(*a, **k):
        raise AssertionError("the bench started a run")

    monkeypatch.setattr(bench, "_warm", boom)
    monkeypatch.setattr(bench, "_browser_once", boom)
    monkeypatch.setattr(bench, "class_mode", boom)


def _main(monkeypatch, *args: str) -> int:
    monkeypatch.setattr(sys, "argv", ["sieve.dashboard.bench", *args])
    return bench.main()


def test_without_chromium_one_line_and_exit_2(monkeypatch, capsys, tmp_path, no_run):
    monkeypatch.setattr(B, "CHROMIUM", str(tmp_path / "no-chromium"))
    assert _main(monkeypatch, "--browser") == 2
    out, err = capsys.readouterr()
    assert out.splitlines() == [out.strip()], out
    assert str(tmp_path / "no-chromium") in out and "apt-get install chromium chromium-driver" in out
    assert "Traceback" not in out + err


def test_missing_names_each_absent_piece(monkeypatch, tmp_path):
    chromium, driver = tmp_path / "chromium", tmp_path / "chromedriver"
    chromium.touch()
    driver.touch()
    monkeypatch.setattr(B, "CHROMIUM", str(chromium))
    monkeypatch.setattr(B, "CHROMEDRIVER", str(driver))
    real = B.importlib.util.find_spec
    monkeypatch.setattr(B.importlib.util, "find_spec", lambda name, *a: object() if name == "selenium" else real(name, *a))
    assert B.missing() is None
    driver.unlink()
    monkeypatch.setattr(B.importlib.util, "find_spec", lambda name, *a: None if name == "selenium" else real(name, *a))
    why = B.missing()
    assert why is not None and str(driver) in why and "selenium" in why and str(chromium) + "," not in why


def test_baseline_without_a_dashboard_one_line_and_exit_2(monkeypatch, capsys, tmp_path, no_run):
    monkeypatch.setattr(B, "missing", lambda: None)
    assert _main(monkeypatch, "--browser", "--baseline", str(tmp_path)) == 2
    out = capsys.readouterr().out
    assert out.splitlines() == [out.strip()] and f"no dashboard at {tmp_path.resolve()}" in out, out


@pytest.mark.parametrize("args, says", [(["--browser", "--class-mode"], "not allowed with"),
                                        (["--browser", "--repeats", "0"], "--repeats must be at least 1")])
def test_bad_arguments_exit_2(monkeypatch, capsys, no_run, args, says):
    with pytest.raises(SystemExit) as e:
        _main(monkeypatch, *args)
    assert e.value.code == 2 and says in capsys.readouterr().err


def test_cli_dispatches_browser_mode(monkeypatch, tmp_path):
    from sieve.cli import app

    monkeypatch.setattr(B, "CHROMEDRIVER", str(tmp_path / "no-chromedriver"))
    monkeypatch.setattr(sys, "argv", list(sys.argv))   # the CLI sets argv for the bench it runs
    monkeypatch.delitem(sys.modules, "sieve.dashboard.bench")   # the CLI runs it afresh as __main__
    res = CliRunner().invoke(app, ["bench", "dashboard", "--", "--browser"])
    assert res.exit_code == 2, res.output
    assert res.output.strip().splitlines() == [res.output.strip()] and "no-chromedriver" in res.output
