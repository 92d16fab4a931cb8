"""Calibration on clean queries only, saved to YAML, read back by the runner and the CLI."""
from __future__ import annotations

import json

import numpy as np
import pytest
import yaml
from typer.testing import CliRunner

from sieve.cli import app
from sieve.config import ConfigError
from sieve.corpus import load_dataset
from sieve.defenses.perplexity import Perplexity
from sieve.evaluation.calibrate import apply_calibration, calibrate_on_dataset, load_calibration, save_calibration
from sieve.evaluation.metrics import threshold_at_clean_budget
from sieve.evaluation.runner import read_records, run_eval
from sieve.experiment import Experiment


def test_round_trip_and_merge(tmp_path):
    p = tmp_path / "cal.yaml"
    save_calibration(p, "perplexity", {"threshold": np.float64(41.5)}, {"clean_budget": 0.05})
    save_calibration(p, "rsq", {"eta_q": 1.25})
    assert load_calibration(p) == {"perplexity": {"threshold": 41.5}, "rsq": {"eta_q": 1.25}}
    raw = yaml.safe_load(p.read_text())
    assert raw["meta"]["perplexity"]["clean_budget"] == 0.05
    d = apply_calibration(Perplexity(), load_calibration(p))
    assert d.threshold == 41.5
    assert load_calibration(None) == {}


@pytest.mark.parametrize("text,msg", [("defenses: [1, 2]\n", "'defenses' must be a mapping"),
                                      ("defenses:\n  rsq: 3\n", "defenses.rsq must be a mapping"),
                                      ("defenses: {rsq: {eta_q: [1]}}\n", "defenses.rsq.eta_q"),
                                      ("a: [\n", "invalid YAML"),
                                      # a defense's parameters at the top level would be silently ignored
                                      ("answer_consistency:\n  extractor: lm\n",
                                       r"unknown top-level key 'answer_consistency'.*did you mean defenses\.answer_consistency"),
                                      ("thresholds: {rsq: 1}\n", r"unknown top-level key 'thresholds'.*'meta'$")])
def test_bad_files_name_the_field(tmp_path, text, msg):
    p = tmp_path / "bad.yaml"
    p.write_text(text)
    with pytest.raises(ConfigError, match=msg) as ei:
        load_calibration(p)
    assert "bad.yaml" in str(ei.value)
    with pytest.raises(ConfigError, match="not found"):
        load_calibration(tmp_path / "missing.yaml")


def test_calibrate_defense_uses_clean_rankings_only(tiny_dataset, eval_resources):
    ds = load_dataset(tiny_dataset)
    out = calibrate_on_dataset(ds, "perplexity", eval_resources, clean_budget=0.1, depth=20)
    rankings = Experiment(ds, eval_resources, depth=20).clean_rankings()
    assert len(rankings) == 4 and not any(d.poison for r in rankings for d in r.documents)
    p = Perplexity()
    scores = [p.score_text(d.text, eval_resources) for r in rankings for d in r.documents]
    assert out["params"]["threshold"] == pytest.approx(float(np.nextafter(threshold_at_clean_budget(scores, 0.1), np.inf)))
    # at most 10 % of the 80 clean documents score above it
    assert sum(s >= out["params"]["threshold"] for s in scores) <= 8
    with pytest.raises(ValueError, match="no score threshold"):
        calibrate_on_dataset(ds, "none", eval_resources)


def test_runner_reads_calibration_file(tiny_dataset, eval_resources, tmp_path):
    cal = save_calibration(tmp_path / "cal.yaml", "perplexity", {"threshold": 1e9})
    run_eval(tiny_dataset, tmp_path / "run", eval_resources, defenses=["perplexity"], depth=20, calibration=cal,
             progress=False)
    cfg = json.loads((tmp_path / "run" / "config.json").read_text())
    assert cfg["defenses"]["perplexity"]["params"]["threshold"] == 1e9
    assert cfg["calibrated"] == {}                      # given, so not re-learned
    assert not any(d["removed"] for r in read_records(tmp_path / "run") for d in r["decisions"])


def test_cli_calibrate_then_eval(tiny_dataset, tmp_path, monkeypatch):
    monkeypatch.setenv("SIEVE_CACHE_DIR", str(tmp_path / "cache"))
    runner = CliRunner()
    cal = tmp_path / "cal.yaml"
    res = runner.invoke(app, ["calibrate", str(tiny_dataset), "--defense", "perplexity", "--clean-budget", "0.05",
                              "--out", str(cal), "--depth", "20", "--retriever", "tiny-hashing"])
    assert res.exit_code == 0, res.output
    thr = load_calibration(cal)["perplexity"]["threshold"]
    assert f"threshold = {thr:.6g}" in res.output
    res = runner.invoke(app, ["eval", str(tiny_dataset), "--out", str(tmp_path / "run"), "--defenses", "none,perplexity",
                              "--depth", "20", "--retriever", "tiny-hashing", "--calibration", str(cal), "--no-progress"])
    assert res.exit_code == 0, res.output
    assert json.loads((tmp_path / "run" / "config.json").read_text())["defenses"]["perplexity"]["params"]["threshold"] == thr
    bad = runner.invoke(app, ["calibrate", str(tiny_dataset), "--defense", "none", "--retriever", "tiny-hashing"])
    assert bad.exit_code == 2 and "no score threshold" in bad.output
