"""``--calibration-queries``: a limited run learns its thresholds on more clean queries than it
evaluates (sieve/evaluation/runner.py), and still only on clean queries."""
from __future__ import annotations

import json

import pytest

from sieve.evaluation.runner import RunError, run_eval


def _learned(out):
    cfg = json.loads((out / "config.json").read_text())
    return cfg["calibrated"]["perplexity"]["threshold"], cfg


def test_limited_run_calibrates_on_the_requested_clean_queries(tiny_dataset, eval_resources, tmp_path, monkeypatch):
    from sieve.evaluation import runner

    seen = []
    material = runner._RunState._clean_material

    def spy(self, items):
        out = material(self, items)
        seen.append((len(items), {r.condition for r in out}))
        return out

    monkeypatch.setattr(runner._RunState, "_clean_material", spy)
    kw = dict(defenses=["none", "perplexity"], depth=20, progress=False, command="test")
    full, _ = _learned((run_eval(tiny_dataset, tmp_path / "full", eval_resources, **kw), tmp_path / "full")[1])
    small, _ = _learned((run_eval(tiny_dataset, tmp_path / "small", eval_resources, limit=1, **kw), tmp_path / "small")[1])
    wide, cfg = _learned((run_eval(tiny_dataset, tmp_path / "wide", eval_resources, limit=1,
                                   calibration_queries=1000, **kw), tmp_path / "wide")[1])
    assert wide == pytest.approx(full, rel=1e-12)       # every clean query of the dataset, as without --limit
    n = cfg["dataset"]["queries"]
    assert [k for k, _ in seen] == [n, 1, n] and all(c == {"clean"} for _, c in seen)
    assert cfg["conditions"]["clean"] == 1 and cfg["calibration_queries"] == cfg["dataset"]["queries"]
    assert cfg["fingerprint"]["calibration_queries"] == 1000


def test_calibration_queries_must_be_positive(tiny_dataset, eval_resources, tmp_path):
    with pytest.raises(RunError, match="calibration-queries"):
        run_eval(tiny_dataset, tmp_path / "x", eval_resources, defenses=["none"], calibration_queries=0, progress=False)
