"""Interrupted runs resume: records are appended per item and the summary is recomputed from them."""
from __future__ import annotations

import json

import pytest

from evaldata import strip_latency
from sieve.evaluation.runner import RunError, read_records, record_key, run_eval, write_summary

DEFS = ["none", "tris_l2", "rsq"]


def _run(ds, out, res, **kw):
    return run_eval(ds, out, res, defenses=DEFS, depth=20, progress=False, **kw)


def test_truncated_records_resume_without_duplicates(tiny_dataset, eval_resources, tmp_path):
    out = tmp_path / "run"
    full = _run(tiny_dataset, out, eval_resources)
    lines = (out / "records.jsonl").read_text().splitlines(keepends=True)
    assert len(lines) == 18
    # Ctrl-C in the middle of writing line 8: 7 complete lines plus half a line
    (out / "records.jsonl").write_text("".join(lines[:7]) + lines[7][: len(lines[7]) // 2])
    (out / "summary.json").unlink()
    partial = write_summary(out)                  # the summary of an interrupted run comes from its records
    assert sum(r["queries"] for r in partial["results"]) == 7
    again = _run(tiny_dataset, out, eval_resources)
    recs = read_records(out)
    assert len(recs) == 18 and len({record_key(r) for r in recs}) == 18
    assert strip_latency(again) == strip_latency(full)
    # the first 7 records were kept, not recomputed
    assert (out / "records.jsonl").read_text().splitlines(keepends=True)[:7] == lines[:7]


def test_complete_run_rerun_is_a_no_op(tiny_dataset, eval_resources, tmp_path):
    out = tmp_path / "run"
    _run(tiny_dataset, out, eval_resources)
    before = (out / "records.jsonl").read_text()
    _run(tiny_dataset, out, eval_resources)
    assert (out / "records.jsonl").read_text() == before


def test_incompatible_rerun_is_refused_unless_forced(tiny_dataset, eval_resources, tmp_path):
    out = tmp_path / "run"
    _run(tiny_dataset, out, eval_resources)
    with pytest.raises(RunError, match=r"k_ctx.*--out.*--force"):
        _run(tiny_dataset, out, eval_resources, k_ctx=3)
    s = _run(tiny_dataset, out, eval_resources, k_ctx=3, force=True)
    assert json.loads((out / "config.json").read_text())["k_ctx"] == 3
    assert len(read_records(out)) == 18 and s["results"]


def test_corrupt_line_in_the_middle_is_a_clear_error(tiny_dataset, eval_resources, tmp_path):
    out = tmp_path / "run"
    _run(tiny_dataset, out, eval_resources)
    lines = (out / "records.jsonl").read_text().splitlines(keepends=True)
    lines[3] = "{broken\n"
    (out / "records.jsonl").write_text("".join(lines))
    with pytest.raises(RunError, match=r"records.jsonl:4"):
        _run(tiny_dataset, out, eval_resources)


def test_resume_relearns_calibrated_state_that_is_no_parameter(tiny_dataset, eval_resources, tmp_path):
    """fusion learns clean nulls besides its threshold: a run resumed after the clean condition gets
    the learned thresholds back through build_defense's calibration mapping, and fusion (still not
    calibrated: no nulls) learns them again on the clean rankings, through prepare_defense, instead
    of failing every remaining item with "not calibrated"."""
    out = tmp_path / "run"
    defs = ["none", "perplexity", "fusion"]
    full = run_eval(tiny_dataset, out, eval_resources, defenses=defs, depth=20, progress=False)
    learned = json.loads((out / "config.json").read_text())["calibrated"]
    assert {"perplexity", "fusion"} <= set(learned)
    lines = (out / "records.jsonl").read_text().splitlines(keepends=True)
    n_clean = sum(json.loads(line)["condition"] == "clean" for line in lines)
    assert 0 < n_clean < len(lines)
    (out / "records.jsonl").write_text("".join(lines[:n_clean]))   # interrupted right after the clean condition
    again = run_eval(tiny_dataset, out, eval_resources, defenses=defs, depth=20, progress=False)
    recs = read_records(out)
    assert [r for r in recs if r.get("error")] == []
    assert strip_latency(again) == strip_latency(full)
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["calibrated"] == learned and "calibration_errors" not in cfg
