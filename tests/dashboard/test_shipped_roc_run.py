"""The Trade-offs page draws ROC curves from the shipped detection run (demo_data/runs/demo-nollm),
which is shipped as a compact file only (sieve/evaluation/records.py: records.compact.jsonl.gz)."""
from __future__ import annotations

from sieve.dashboard import runs as R


def test_the_shipped_compact_detection_run_is_found_and_covers_every_family():
    path = R.default_roc_run()
    assert path is not None and path.name == "demo-nollm"
    run = R.load_run(path)
    assert {"fusion", "ragdefender", "trustrag", "tris_l2"} <= set(run.defenses)
    families = {"pr_b", "payload_only", "single_trigger", "single_fluent", "near_duplicate", "judge_aware"}
    assert families <= set(run.conditions)
    rd = R.roc_data(run, "fusion", "single_fluent")
    assert rd is not None and len(rd["pos"]) == 64 and len(rd["neg"]) > 500
