"""rsg_rsq serial deployment (ALGORITHMS.md §5): quarantine, renumber, ≥ 20 survivors, RSQ on new ranks."""
from types import SimpleNamespace

import numpy as np
import pytest

from sieve.defenses.serial import SURVIVOR_REASON, SerialRSGRSQ
from sieve.registry import DEFENSES
from sieve.types import Document, RankedDocument, Ranking

WORDS = ["river", "mountain", "forest", "valley", "ocean", "desert", "island", "meadow", "glacier", "canyon",
         "prairie", "lagoon", "plateau", "tundra", "marsh", "delta", "fjord", "savanna", "reef", "volcano",
         "steppe", "basin", "cliff", "dune", "estuary", "harbor", "summit", "grove"]


def setup(n_docs, integrity_positions, anchor_positions=()):
    """Documents d1..dn in rank order; ``integrity_positions`` (1-based) carry a mixed-script trigger
    (RSG flags them: f_I > 5 % switches topology off); ``anchor_positions`` share a rare token."""
    texts = []
    for i in range(1, n_docs + 1):
        t = f"{WORDS[i % len(WORDS)]} item{i}"
        if i in integrity_positions:
            t = f"iPhone手机 trigger{i}"
        if i in anchor_positions:
            t = f"zorblax unique{i}"
        texts.append(t)
    ids = [f"d{i}" for i in range(1, n_docs + 1)]
    rng = np.random.default_rng(1)
    vecs = rng.normal(size=(n_docs, 48)).astype(np.float32)
    snap = SimpleNamespace(ids=ids, documents=[Document(i, t) for i, t in zip(ids, texts)], vectors=vecs)
    ranking = Ranking("which planet is the largest",
                      [RankedDocument(i, t, r + 1, 1 - r / 100) for r, (i, t) in enumerate(zip(ids, texts))],
                      query_id="q1")
    return snap, ranking


def test_registered_corpus_time():
    e = DEFENSES.entry("rsg_rsq")
    assert set(e.needs) == {"retriever", "lm", "token_encoder"}
    assert SerialRSGRSQ.corpus_time


def test_fewer_than_20_survivors_makes_rsq_unavailable(tiny_resources):
    snap, ranking = setup(22, integrity_positions={2, 4, 9})
    d = SerialRSGRSQ().fit(snap, tiny_resources)
    res = d.apply(ranking, tiny_resources)
    by_id = {x.doc_id: x for x in res.decisions}
    assert [by_id[i].layer for i in ("d2", "d4", "d9")] == ["RSG"] * 3
    assert all(by_id[i].removed for i in ("d2", "d4", "d9"))
    survivors = [x for x in res.decisions if x.layer == "RSQ"]
    assert len(survivors) == 19
    assert all(x.status == "unavailable" and not x.removed and x.reason == SURVIVOR_REASON for x in survivors)
    assert "re-retrieve" in SURVIVOR_REASON and "retrieve deeper" in SURVIVOR_REASON
    assert any("19 survivors" in w for w in res.warnings)
    assert [c.id for c in res.context] == ["d1", "d3", "d5", "d6", "d7"]
    assert res.info["quarantined_document_ids"] == ["d2", "d4", "d9"]


def test_rsq_runs_on_renumbered_survivors(tiny_resources):
    # d1..d3 are quarantined by RSG; d4..d8 share an anchor → after renumbering they are ranks 1–5.
    # On the original ranking they would be ranks 4–8 (not all candidates): RSQ must see the new ranks.
    snap, ranking = setup(25, integrity_positions={1, 2, 3}, anchor_positions={4, 5, 6, 7, 8})
    res = SerialRSGRSQ().fit(snap, tiny_resources).apply(ranking, tiny_resources)
    by_id = {x.doc_id: x for x in res.decisions}
    assert [by_id[f"d{i}"].layer for i in (1, 2, 3)] == ["RSG"] * 3
    for i, new_rank in zip(range(4, 9), range(1, 6)):
        x = by_id[f"d{i}"]
        assert x.layer == "RSQ" and x.status == "scored" and x.removed
        assert x.evidence["rank"] == new_rank and x.evidence["survivor_rank"] == new_rank
        assert x.evidence["E_a"] == pytest.approx(1.0)          # x=5, K=5 among the 20 survivors
    assert by_id["d9"].status == "not_examined" and by_id["d9"].evidence["survivor_rank"] == 6
    # one refill to 5 from the survivors, without rescoring
    assert [c.id for c in res.context] == ["d9", "d10", "d11", "d12", "d13"]
    assert res.layers_run == ["RSG", "RSQ"]
    assert res.info["rsq_flagged"] == ["d4", "d5", "d6", "d7", "d8"]


def test_unfitted_serial_warns(tiny_resources):
    _, ranking = setup(20, integrity_positions=set())
    res = SerialRSGRSQ().apply(ranking, tiny_resources)
    assert any("not fitted" in w for w in res.warnings)
    assert [x.status for x in res.decisions[:5]] == ["scored"] * 5


def test_serial_rejects_unknown_params():
    with pytest.raises(ValueError):
        SerialRSGRSQ(bogus=1)


def test_calibrate_uses_rsq_scores_only(tiny_resources):
    snap, ranking = setup(25, integrity_positions={1, 2, 3})
    d = SerialRSGRSQ().fit(snap, tiny_resources)
    scores = [x.score for x in d.inspect(ranking, tiny_resources) if x.layer == "RSQ" and x.score is not None]
    assert len(scores) == 5 and scores[0] == pytest.approx(0.2)
    d.calibrate([ranking], tiny_resources, clean_budget=0.05)
    # five clean RSQ candidates (S = 0.2 each; RSG's 1.0 scores are not mixed in): floor(5·0.05) = 0 →
    # threshold = the largest clean score, then the next float up (removal is at S ≥ η_Q)
    assert d.eta_q == float(np.nextafter(max(scores), np.inf))
    assert d.threshold_ == d.eta_q
