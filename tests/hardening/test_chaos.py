"""Endpoint chaos during a small ``sieve eval`` (issue 14): an OpenAI-compatible endpoint that
answers HTTP 500, malformed JSON, or stalls. Documents still fail open, but the run counts the
failures per defense (``n_llm_errors`` in summary.json), prints them, and the circuit breaker stops
calling the dead endpoint after 3 consecutive failed attempts. The endpoint is a real local HTTP
server (tests/hardening/hardening_helpers.py)."""
from __future__ import annotations

import json

import pytest

from hardening_helpers import ChaosEndpoint, sieve

LIMIT = 2


@pytest.mark.parametrize("mode", ["500", "malformed", "stall"])
def test_failing_endpoint_is_counted_printed_and_cut_off(ds, tmp_path, mode):
    server = ChaosEndpoint(mode)
    try:
        cfg = tmp_path / "sieve.yaml"
        cfg.write_text(f"llm:\n  base_url: {server.url}\n  model: m\n  timeout_s: 1\n  retries: 2\n", encoding="utf-8")
        out = tmp_path / f"run-{mode}"
        res = sieve("eval", ds, "--out", out, "-d", "none,tris_l3", "-a", "pr_b", "--limit", LIMIT, "--no-progress",
                    "--retriever", "tiny-hashing", "--config", cfg)
    finally:
        server.close()
    assert res.exit_code == 0, res.output
    summary = json.loads((out / "summary.json").read_text(encoding="utf-8"))
    rows = {(r["defense"], r["attack"]): r for r in summary["results"]}
    # tris_l3 asks the endpoint once per query: every call failed, and every failure is counted
    for cond in ("clean", "pr_b"):
        assert rows[("none", cond)]["n_llm_errors"] == 0 and rows[("none", cond)]["degraded"] == []
        row = rows[("tris_l3", cond)]
        assert row["n_llm_errors"] == LIMIT and row["queries"] == LIMIT and row["n_errors"] == 0
        assert any("LLM endpoint errors" in d for d in row["degraded"])
    assert any("circuit breaker opened" in d for d in rows[("tris_l3", "pr_b")]["degraded"])
    health = summary["llm_health"]
    assert health["calls"] == health["errors"] == 2 * LIMIT
    # the breaker opened after 3 failed attempts: the endpoint saw 3 requests, the rest were refused
    assert server.hits == 3, server.hits
    assert health["short_circuited"] == 2 * LIMIT - (1 if mode != "malformed" else 3)
    assert "DEGRADED" in res.output and f"{LIMIT} LLM endpoint errors on {LIMIT}/{LIMIT} queries" in res.output
    expected = {"500": "HTTP 500", "malformed": "unreadable response", "stall": "timed out after 1 s"}[mode]
    assert expected in res.output
    if mode == "stall":
        # the breaker bounds the cost by calls, not by a clock: 3 timed-out requests for the whole run
        # (not 3 × timeout per query); how long that takes is for `sieve bench`, not a test
        assert server.hits == 3 and health["short_circuited"] == 2 * LIMIT - 1
    # the records say which items were degraded
    recs = [json.loads(ln) for ln in (out / "records.jsonl").read_text(encoding="utf-8").splitlines()]
    assert {r["llm_errors"] for r in recs if r["defense"] == "tris_l3"} == {1}
    assert {r["llm_errors"] for r in recs if r["defense"] == "none"} == {0}
