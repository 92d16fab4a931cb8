"""rsg_rsq serial deployment (docs/algorithms.md §5): quarantine, renumber, ≥ 20 survivors, RSQ on new ranks;
one decision per document reflecting both layers on one normalised score scale (threshold 1.0)."""
from types import SimpleNamespace

import numpy as np
import pytest

from sieve.defenses.pipeline import Serial, normalised_score
from sieve.defenses.rsq import UNAVAILABLE_REASON
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


def SerialRSGRSQ(**params):
    """``rsg_rsq``: the registered preset of the one serial composition."""
    return DEFENSES.create("rsg_rsq", **params)


def test_registered_corpus_time():
    e = DEFENSES.entry("rsg_rsq")
    assert set(e.needs) == {"retriever", "causal_lm", "token_encoder"}
    assert e.factory is Serial and Serial.corpus_time
    assert [s.label for s in SerialRSGRSQ().stages_] == ["rsg", "rsq"]


def _norm(value, threshold):
    return value / threshold


def test_fewer_than_20_survivors_makes_rsq_unavailable(tiny_resources):
    snap, ranking = setup(22, integrity_positions={2, 4, 9})
    d = SerialRSGRSQ().fit(snap, tiny_resources)
    res = d.apply(ranking, tiny_resources)
    by_id = {x.doc_id: x for x in res.decisions}
    assert [by_id[i].layer for i in ("d2", "d4", "d9")] == ["RSG"] * 3
    assert all(by_id[i].removed for i in ("d2", "d4", "d9"))
    # survivors keep their RSG decisions (scored by RSG, kept); RSQ's unavailability is in evidence
    survivors = [x for x in res.decisions if not x.removed]
    assert len(survivors) == 19
    for x in survivors:
        assert x.layer == "RSG" and x.status == "scored" and x.score is not None
        assert x.evidence["rsq"]["status"] == "unavailable" and x.evidence["rsq"]["reason"] == UNAVAILABLE_REASON
        assert UNAVAILABLE_REASON in x.reason
        assert x.score == _norm(x.evidence["rsg"]["score"], 0.5) and x.threshold == 1.0
    assert "retrieve deeper" in UNAVAILABLE_REASON
    assert any("19 documents" in w for w in res.warnings)
    assert [c.id for c in res.context] == ["d1", "d3", "d5", "d6", "d7"]
    assert res.info["rsg"]["flagged"] == ["d2", "d4", "d9"]


def test_rsq_runs_on_renumbered_survivors(tiny_resources):
    # d1..d3 are quarantined by RSG; d4..d8 share an anchor → after renumbering they are ranks 1–5.
    # On the original ranking they would be ranks 4–8 (not all candidates): RSQ must see the new ranks.
    snap, ranking = setup(25, integrity_positions={1, 2, 3}, anchor_positions={4, 5, 6, 7, 8})
    res = SerialRSGRSQ().fit(snap, tiny_resources).apply(ranking, tiny_resources)
    by_id = {x.doc_id: x for x in res.decisions}
    for i in (1, 2, 3):
        x = by_id[f"d{i}"]
        assert x.layer == "RSG" and x.removed and x.status == "scored"
        assert x.evidence["rsg"]["flagged"] and x.evidence["rsq"]["status"] == "skipped"
        assert x.score == _norm(x.evidence["rsg"]["score"], 0.5) == 2.0
    for i, new_rank in zip(range(4, 9), range(1, 6)):
        x = by_id[f"d{i}"]
        assert x.layer == "RSQ" and x.status == "scored" and x.removed
        rsq = x.evidence["rsq"]
        assert rsq["rank"] == new_rank and x.evidence["survivor_rank"] == new_rank
        assert rsq["E_a"] == pytest.approx(1.0)          # x=5, K=5 among the 20 survivors
        assert rsq["S"] >= 1.0 and rsq["flagged"] and rsq["threshold"] == 1.0
        assert x.evidence["rsg"]["score"] == 0.0 and not x.evidence["rsg"]["flagged"]
    x = by_id["d9"]
    assert x.status == "scored" and x.layer == "RSG" and not x.removed and x.evidence["survivor_rank"] == 6
    assert x.evidence["rsq"]["status"] == "not_examined" and "ranks 1–5 only" in x.evidence["rsq"]["reason"]
    # one refill to 5 from the survivors, without rescoring
    assert [c.id for c in res.context] == ["d9", "d10", "d11", "d12", "d13"]
    assert res.layers_run == ["rsg:rsg", "rsq:rsq"]
    assert res.info["rsq"]["rounds"][0]["flagged"] == ["d4", "d5", "d6", "d7", "d8"]


def test_every_document_in_the_snapshot_is_scored_by_rsg(tiny_resources):
    # d1 and d25 are not in the audited snapshot: RSG did not examine them
    snap, ranking = setup(25, integrity_positions=set())
    keep = [i for i, x in enumerate(snap.ids) if x not in ("d1", "d25")]
    snap = SimpleNamespace(ids=[snap.ids[i] for i in keep], documents=[snap.documents[i] for i in keep],
                           vectors=snap.vectors[keep])
    d = SerialRSGRSQ(eta_q=10.0).fit(snap, tiny_resources)
    decisions = d.inspect(ranking, tiny_resources).decisions
    by_id = {x.doc_id: x for x in decisions}
    for x in decisions:
        assert x.threshold == 1.0
        if x.doc_id in ("d1", "d25"):
            assert x.evidence["rsg"]["status"] == "not_examined"
        else:
            assert x.status == "scored" and x.evidence["rsg"]["status"] == "scored"
            assert x.evidence["rsg"]["score"] is not None and x.evidence["rsg"]["threshold"] == 0.5
    # d1: scored by RSQ only → its score is the RSQ layer's normalised S
    x1 = by_id["d1"]
    assert x1.layer == "RSQ" and x1.status == "scored"
    assert x1.score == _norm(x1.evidence["rsq"]["S"], 10.0) and set(x1.evidence["layer_scores"]) == {"RSQ"}
    # d25: outside the snapshot and outside RSQ's top 5 → nobody scored it
    x25 = by_id["d25"]
    assert x25.status == "not_examined" and x25.score is None and not x25.removed
    assert x25.evidence["rsq"]["status"] == "not_examined"
    # survivors at survivor rank ≥ 6 keep their RSG decision: kept, scored, RSG score on the combined scale
    for x in decisions[5:24]:
        assert x.layer == "RSG" and x.status == "scored" and not x.removed
        assert x.evidence["survivor_rank"] >= 6 and "ranks 1–5 only" in x.reason
        assert x.score == _norm(x.evidence["rsg"]["score"], 0.5)


def test_combined_score_is_max_of_normalised_layer_scores(tiny_resources):
    # no integrity alerts → the topology branch is on and every document has a small RSG score
    # (T ≈ 0.026); with η_Q = 10 the RSQ candidates' S/η_Q = 0.02 is below RSG's 0.026/0.5
    snap, ranking = setup(25, integrity_positions=set())
    for eta_q, dominant in ((10.0, "RSG"), (0.1, "RSQ")):
        decisions = SerialRSGRSQ(eta_q=eta_q).fit(snap, tiny_resources).inspect(ranking, tiny_resources).decisions
        for x in decisions[:5]:
            g = _norm(x.evidence["rsg"]["score"], x.evidence["rsg"]["threshold"])
            q = _norm(x.evidence["rsq"]["S"], eta_q)
            assert x.layer == "RSQ" and x.evidence["rsg"]["score"] > 0
            assert x.evidence["layer_scores"] == {"RSG": g, "RSQ": q}
            assert x.score == max(g, q) and x.threshold == 1.0
            assert x.score == (g if dominant == "RSG" else q)
            # removed iff a layer removed iff combined score ≥ 1.0
            assert x.removed == (x.evidence["rsq"]["flagged"] or x.evidence["rsg"]["flagged"])
            assert x.removed == (x.score >= 1.0) == (dominant == "RSQ")


def test_removed_iff_a_layer_removed_iff_score_at_least_one(tiny_resources):
    snap, ranking = setup(26, integrity_positions={1, 2}, anchor_positions={3, 4, 5, 6, 7})
    # 2 of 26 integrity alerts (f_I < 5 %): topology stays on; d3..d7 are RSQ-flagged survivors
    decisions = SerialRSGRSQ().fit(snap, tiny_resources).inspect(ranking, tiny_resources).decisions
    layers_removed = 0
    for x in decisions:
        rsg_removed = bool(x.evidence["rsg"]["flagged"])
        rsq_removed = bool(x.evidence["rsq"].get("flagged", False))
        assert x.removed == (rsg_removed or rsq_removed) == (x.score >= 1.0)
        layers_removed += x.removed
    assert [x.removed for x in decisions[:7]] == [True] * 7
    assert layers_removed == 7


def test_normalised_score_boundary_matches_layer_rule():
    eta = float(np.nextafter(0.7, np.inf))            # what calibration produces: one ulp above a clean S
    assert normalised_score(0.7, eta, False) < 1.0
    assert normalised_score(eta, eta, True) == 1.0
    assert normalised_score(0.5, 0.5, True) == 1.0 and normalised_score(0.25, 0.5, False) == 0.5
    # a layer decision always wins over float rounding, in both directions
    assert normalised_score(1.0, 1.0, False) < 1.0 and normalised_score(0.9, 1.0, True) == 1.0
    # degenerate (non-positive) calibrated threshold: order-preserving shift, still finite
    t = float(np.nextafter(-np.inf, np.inf))
    assert np.isfinite(normalised_score(0.3, t, True)) and normalised_score(0.3, t, True) >= 1.0


def test_unfitted_serial_warns(tiny_resources):
    _, ranking = setup(20, integrity_positions=set())
    res = SerialRSGRSQ().apply(ranking, tiny_resources)
    assert any("rsg: not fitted" in w for w in res.warnings)
    assert [x.status for x in res.decisions[:5]] == ["scored"] * 5


def test_serial_rejects_unknown_params_and_takes_the_stages_params():
    with pytest.raises(ValueError, match="rsg_rsq: unknown parameter 'bogus'; valid parameters: stages, rsg__"):
        SerialRSGRSQ(bogus=1)
    d = SerialRSGRSQ(mode="hnsw", eta_q=2.0, rsq__trace_tokens=False, **{"rsg.block_size": 64})
    assert d.stage("rsg").rsg_params().mode == "hnsw" and d.stage("rsq").eta_q == 2.0
    assert d.stage("rsq").trace_tokens is False and d.stage("rsg").block_size == 64
    assert d.get_params()["rsq__eta_q"] == 2.0 and d.get_params()["stages"] == ("rsg", "rsq")


def test_calibrate_uses_rsq_scores_only(tiny_resources):
    snap, ranking = setup(25, integrity_positions={1, 2, 3})
    d = SerialRSGRSQ(eta_q=4.0).fit(snap, tiny_resources)
    decisions = d.inspect(ranking, tiny_resources).decisions
    raw = [x.evidence["rsq"]["S"] for x in decisions if x.layer == "RSQ"]
    combined = [x.score for x in decisions if x.layer == "RSQ"]
    assert len(raw) == 5 and raw[0] == pytest.approx(0.2)
    assert combined[0] == pytest.approx(0.05)         # S / η_Q: the combined scale differs from S
    d.stage("rsq").set_params(eta_q=None)          # learn it
    assert d.threshold_param == "rsq__eta_q" and not d.is_calibrated()
    d.calibrate([ranking], tiny_resources, clean_budget=0.05)
    # five clean RSQ candidates (raw S = 0.2 each; RSG's scores and the combined score are not mixed
    # in): floor(5·0.05) = 0 → threshold = the largest clean S, then the next float up (S ≥ η_Q)
    rsq = d.stage("rsq")
    assert rsq.eta_q == float(np.nextafter(max(raw), np.inf))
    assert rsq.threshold_ == rsq.eta_q and d.get_params()["rsq__eta_q"] == rsq.eta_q
    # after calibration the clean candidates sit just below the combined threshold and are kept
    after = [x for x in d.inspect(ranking, tiny_resources).decisions if x.layer == "RSQ"]
    assert all(not x.removed and x.score < 1.0 for x in after)
