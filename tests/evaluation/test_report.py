"""`sieve report`: terminal table and the self-contained HTML report; the `sieve eval` CLI."""
from __future__ import annotations

import json

from typer.testing import CliRunner

from sieve.cli import app
from sieve.evaluation.report import PLOT_IDS, format_table, load_run, write_report
from sieve.evaluation.runner import SUMMARY_KEYS, run_eval


def test_report_html_and_table(tiny_dataset, eval_resources, tmp_path):
    out = tmp_path / "run"
    run_eval(tiny_dataset, out, eval_resources, defenses=["none", "tris_l2", "rsq"], depth=20, progress=False)
    path = write_report(out)
    page = path.read_text()
    for div in PLOT_IDS:
        assert f'id="{div}"' in page
    assert page.count("plotly.js v") == 1 and "<script src=" not in page  # embedded once, no network
    assert "What these numbers do not show" in page and "Wilson" in page
    _, summary, _ = load_run(out)
    table = format_table(summary).splitlines()
    assert len(table) == 3 + 6
    assert table[3].split()[:3] == ["none", "clean", "4"]
    l2 = next(line for line in table if line.startswith("tris_l2") and " pr_b " in line).split()
    assert l2[3:5] == ["0.000", "1.000"]     # poison-in-context, poison removal


def test_cli_eval_and_report(tiny_dataset, tmp_path, monkeypatch):
    monkeypatch.setenv("SIEVE_CACHE_DIR", str(tmp_path / "cache"))
    runner = CliRunner()
    out = tmp_path / "run"
    res = runner.invoke(app, ["eval", str(tiny_dataset), "--out", str(out), "--defenses", "none,tris_l2",
                              "--attacks", "pr_b", "--depth", "20", "--retriever", "tiny-hashing", "--no-progress"])
    assert res.exit_code == 0, res.output
    summary = json.loads((out / "summary.json").read_text())
    assert set(summary) >= {"dataset", "retriever", "results"}
    assert all(set(SUMMARY_KEYS) <= set(r) for r in summary["results"])
    assert "tris_l2" in res.output
    res = runner.invoke(app, ["report", str(out)])
    assert res.exit_code == 0, res.output
    assert (out / "report.html").exists() and "poison-in-ctx" in res.output


def test_cli_errors_are_one_line(tiny_dataset, tmp_path, monkeypatch):
    monkeypatch.setenv("SIEVE_CACHE_DIR", str(tmp_path / "cache"))
    runner = CliRunner()
    res = runner.invoke(app, ["report", str(tmp_path / "nope")])
    assert res.exit_code == 2 and "run directory not found" in res.output
    res = runner.invoke(app, ["eval", str(tiny_dataset), "--out", str(tmp_path / "r"), "--attacks", "zzz",
                              "--retriever", "tiny-hashing", "--defenses", "none"])
    assert res.exit_code == 2 and "unknown attack family 'zzz'" in res.output and "Traceback" not in res.output
    res = runner.invoke(app, ["eval", str(tiny_dataset), "--out", str(tmp_path / "r"), "--defenses", "nope",
                              "--retriever", "tiny-hashing"])
    assert res.exit_code == 2 and "unknown defense" in res.output
