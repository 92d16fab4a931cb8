"""The speed-ups of ``sieve eval`` (issue 15) memoise deterministic per-document and per-ranking work
inside the defenses (K-Means fits, RSG audits and script profiles, RSQ candidate rows and per-text
features, TRIS L2 features, TrustRAG ROUGE-L pairs). Decisions must not change: a run with every
memo disabled and a run with them (cold, then warm from an earlier run) give the same records."""
from __future__ import annotations

import pytest

from evaldata import strip_latency
from sieve.defenses import memo, rsq
from sieve.evaluation.runner import read_records, run_eval

DEFS = ["tris", "tris_l1", "tris_l2", "trustrag", "rsq", "rsq_rescore", "rsg", "rsg_rsq", "perplexity"]
#: (module, cache, size attribute) of every memo
MEMOS = memo.memos()


def _clear() -> None:
    memo.clear()


def _decisions(out):
    return sorted((r["query_id"], r["condition"], r["defense"],
                   [(d["doc_id"], d["removed"], d["status"], d["score"], d["threshold"], d["evidence"], d["reason"])
                    for d in r["decisions"]], r["context_ids"]) for r in read_records(out))


def test_memoised_defenses_decide_exactly_as_without_memo(tiny_dataset, eval_resources, tmp_path, monkeypatch):
    run = lambda out: run_eval(tiny_dataset, tmp_path / out, eval_resources, defenses=DEFS,  # noqa: E731
                               depth=20, progress=False)
    _clear()
    with monkeypatch.context() as m:
        for mod, _, size in MEMOS:
            m.setattr(mod, size, 0)          # every insert is evicted at once: no memo hit anywhere
        plain = run("plain")
        assert all(len(getattr(mod, cache)) == 0 for mod, cache, _ in MEMOS)
    _clear()
    cold = run("cold")
    assert any(len(getattr(mod, cache)) for mod, cache, _ in MEMOS)
    warm = run("warm")                       # every memo already holds this dataset's work
    assert strip_latency(cold) == strip_latency(plain) == strip_latency(warm)
    assert _decisions(tmp_path / "cold") == _decisions(tmp_path / "plain") == _decisions(tmp_path / "warm")


@pytest.mark.parametrize("eta", [0.2, 1.0, 5.0])
def test_rsq_rows_shared_across_thresholds_flag_at_each_threshold(eta, tiny_resources):
    """RSQ rows memoised without η_Q: `flagged` is recomputed for the threshold asked."""
    from sieve.types import RankedDocument, Ranking

    docs = [RankedDocument(f"d{i}", f"passage {i} about the river amazon and {i * 7} explorers", i + 1, 1.0 - i / 40)
            for i in range(20)]
    ranking = Ranking("who explored the amazon river", docs)
    _clear()
    fresh, _ = rsq.score_candidates(ranking, tiny_resources, eta_q=eta)
    rsq.score_candidates(ranking, tiny_resources, eta_q=eta + 10.0)     # memoise at another threshold first
    _clear()
    rsq.score_candidates(ranking, tiny_resources, eta_q=eta + 10.0)
    again, lat = rsq.score_candidates(ranking, tiny_resources, eta_q=eta)
    assert "memoised" in lat
    assert [r.evidence() for r in again] == [r.evidence() for r in fresh]
    assert [r.flagged for r in again] == [r.S >= eta for r in fresh]
