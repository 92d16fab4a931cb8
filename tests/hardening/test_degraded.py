"""Degraded runs say so (issue 14): a defense that cannot run at the given depth fails the spec;
a run without clean queries warns; a row whose decisions are all unavailable is marked."""
from __future__ import annotations

import json

import pytest

from hardening_helpers import one_line_error, sieve
from sieve.evaluation.report import degradation_notes, format_table
from sieve.evaluation.summary import summary_row
from sieve.experiment import DefenseSpecError, Experiment, build_defense, prepare_defense
from sieve.experiment.defenses import check_depth, min_documents

TINY = ("--retriever", "tiny-hashing")


def test_rsq_at_depth_5_fails_the_spec_instead_of_a_none_lookalike_table(ds, tmp_path):
    err = one_line_error(sieve("eval", ds, "--out", tmp_path / "r", "-d", "none,rsq", "--depth", "5", "--k-ctx", "5",
                               "--limit", "1", "--no-progress", *TINY))
    assert "rsq needs at least 20 retrieved documents" in err and "--depth" in err
    assert not (tmp_path / "r" / "records.jsonl").exists()


def test_prepare_defense_checks_the_depth(ds, tiny_resources):
    from sieve.corpus import load_dataset

    exp = Experiment(load_dataset(ds), tiny_resources, depth=5)
    for spec in ("rsq", "perplexity+rsq"):
        with pytest.raises(DefenseSpecError, match="needs at least 20"):
            prepare_defense(exp, spec, params={} if "+" in spec else {"eta_q": 1.0})
    assert min_documents(build_defense("perplexity")) is None
    assert min_documents(build_defense("perplexity+rsq")) == 20
    check_depth(build_defense("rsq"), 20)          # deep enough: no error


def test_missing_queries_jsonl_warns_loudly(ds, tmp_path):
    (ds / "queries.jsonl").unlink()
    (ds / "qrels.jsonl").unlink()
    out = tmp_path / "r"
    res = sieve("eval", ds, "--out", out, "-d", "none", "-a", "pr_b", "--limit", "1", "--no-progress", *TINY)
    assert res.exit_code == 0, res.output
    assert "DEGRADED" in res.output and "no clean condition: queries.jsonl is missing" in res.output
    summary = json.loads((out / "summary.json").read_text(encoding="utf-8"))
    assert summary["warnings"] and "calibrated" in summary["warnings"][0]
    assert {r["attack"] for r in summary["results"]} == {"pr_b"}


def _rec(statuses, **extra):
    return {"query_id": "q", "condition": "a", "defense": "rsq", "own_poison_ids": [], "ranking": [],
            "context_ids": [], "decisions": [{"doc_id": f"d{i}", "status": s, "removed": False, "score": None,
                                              "reason": "RSQ needs at least 20 retrieved documents"}
                                             for i, s in enumerate(statuses)], **extra}


def test_all_unavailable_row_is_marked_and_printed():
    row = summary_row("rsq", "a", [_rec(["unavailable"] * 5), _rec(["unavailable"] * 5)], [])
    assert row["n_unavailable"] == 10 and row["n_llm_errors"] == 0
    assert row["degraded"] == ["every decision is 'unavailable' — this row measures nothing "
                               "(RSQ needs at least 20 retrieved documents)"]
    partial = summary_row("rsq", "a", [_rec(["unavailable", "scored"])], [])
    assert partial["degraded"] == ["1 of 2 decisions unavailable"]
    normal = summary_row("rsq", "a", [_rec(["scored", "scored"])], [])
    assert normal["degraded"] == [] and "DEGRADED" not in format_table({"results": [normal]})
    table = format_table({"results": [row]})
    assert "DEGRADED" in table and "rsq × a: every decision is 'unavailable'" in table
    assert degradation_notes({"results": [row], "warnings": ["w"]})[0] == "warning: w"


def test_llm_errors_are_summed_per_row():
    recs = [_rec(["scored"], llm_errors=2, llm_last_error="HTTP 500"), _rec(["scored"], llm_errors=0),
            _rec(["scored"], llm_errors=1, llm_circuit_open=True)]
    row = summary_row("tris_l3", "a", recs, [])
    assert row["n_llm_errors"] == 3
    assert row["degraded"] == ["3 LLM endpoint errors on 2/3 queries (affected decisions failed open; "
                               "circuit breaker opened); last failure: HTTP 500"]
