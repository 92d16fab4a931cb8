"""RSG (docs/algorithms.md §4) on hand-computed geometry."""
from dataclasses import asdict
from types import SimpleNamespace

import numpy as np
import pytest

from sieve.defenses.rsg import RSG, RSGParams, audit_corpus, density_without, neighbour_recall
from sieve.registry import DEFENSES
from sieve.types import Document, RankedDocument, Ranking

S = float(np.sqrt(1 - 0.81))


def five_doc_geometry():
    v = np.array([
        [1.0, 0, 0, 0],
        [0.9, S, 0, 0],      # sim(0,1) = 0.9
        [0.9, 0, S, 0],      # sim(0,2) = 0.9, sim(1,2) = 0.81
        [0, 0, 0, 1.0],
        [0, 0, 0.6, 0.8],    # sim(3,4) = 0.8 (< 0.85)
    ], np.float32)
    texts = ["alpha beta gamma", "delta epsilon zeta", "eta theta iota", "kappa lambda", "mu nu"]
    return [f"d{i}" for i in range(5)], texts, v


def test_density_floor_support_and_tail_with_ties():
    ids, texts, v = five_doc_geometry()
    a = audit_corpus(ids, texts, v)
    # k = min(16, N-1) = 4, so b_i = 4th similarity = 0 for docs 0-2
    assert a.neighbour_ids.shape == (5, 4)
    assert a.floor[:3].tolist() == pytest.approx([0.0, 0.0, 0.0], abs=1e-6)
    # doc0: two eligible neighbours at 0.9 → support 1, μ = 0.9 → D = 0.9
    # doc1/doc2: walk stops at 0.81 → one neighbour → support 0.5 → D = 0.45 (exact float32 tie)
    assert a.density.tolist() == pytest.approx([0.9, 0.45, 0.45, 0.0, 0.0], abs=1e-6)
    assert a.density[1] == a.density[2]
    assert a.tail_p.tolist() == pytest.approx([1 / 6, 3 / 6, 3 / 6, 5 / 6, 5 / 6])
    assert a.f_I == 0.0 and a.f_T == pytest.approx(0.05)
    assert a.topology.tolist() == pytest.approx([0.15, 0.05, 0.05, 0.03, 0.03])
    assert not a.flagged.any()
    row = a.row("d0")
    assert sorted(n["id"] for n in row.kept) == ["d1", "d2"] and row.dropped == []  # tie order is free
    assert row.eligible_neighbor_count == 2


def test_density_without_the_removed_neighbours():
    ids, texts, v = five_doc_geometry()
    a = audit_corpus(ids, texts, v)
    # nothing excluded: the audited D_i, bit for bit
    assert density_without(a, range(5), []).tolist() == a.density.tolist()
    # doc0 without d1: one retained neighbour (d2 at 0.9) → support 0.5 → D = 0.45 (d1, d2 do not walk to d1)
    assert density_without(a, [0, 1, 2], [1]).tolist() == pytest.approx([0.45, 0.45, 0.45], abs=1e-6)
    # doc1 and doc2 without d0: their only eligible neighbour gone → μ = b → 0
    assert density_without(a, [1, 2], [0]).tolist() == pytest.approx([0.0, 0.0], abs=1e-6)
    assert density_without(a, [0], [1, 2]).tolist() == [0.0]       # its whole dense core removed
    assert density_without(a, [3], [0, 1, 2]).tolist() == [0.0]    # not a neighbour: nothing changes


def _poisons_beside_a_true_passage():
    """Five poisons at cosine ~0.95 to one another, a true passage at ~0.90 to each, ten unrelated passages."""
    rng = np.random.default_rng(0)
    centre = np.zeros(32, np.float32)
    centre[0] = 1.0
    rows = []
    for i in range(5):                                   # the poisons: one direction each, small
        x = centre.copy()
        x[1 + i] = 0.22
        rows.append(x)
    gold = centre.copy()
    gold[10] = 0.45                                      # farther from each poison than they are from one another
    gold[1:6] = [0.01, 0.02, 0.03, 0.04, 0.05]           # no ties in its own neighbour order
    rows.append(gold)
    rows += [rng.normal(size=32).astype(np.float32) for _ in range(10)]
    v = np.stack(rows)
    v /= np.linalg.norm(v, axis=1, keepdims=True)
    texts = [f"poison {i} says word{i} and term{i}" for i in range(5)] + ["the true passage states facts"]
    texts += [f"unrelated page {i} about topic{i}" for i in range(10)]
    return [f"d{i}" for i in range(16)], texts, v


def test_mutual_density_keeps_the_poisons_dense_and_not_the_true_passage_beside_them():
    from sieve.defenses.rsg import mutual_neighbours

    ids, texts, v = _poisons_beside_a_true_passage()
    a = audit_corpus(ids, texts, v)
    S_ = v @ v.T
    assert S_[0, 1] > S_[0, 5] > 0.85                     # the geometry the docstring states
    mutual = mutual_neighbours(a.neighbour_ids, np.arange(6), 4)
    # each poison's retained neighbours are the other four poisons and the true passage; the four name it
    # (and the true passage names four of the poisons: a neighbour counts when *it* names the document)
    for i in range(5):
        kept = {int(j) for j in a.neighbour_ids[i][a.kept[i]]}
        named = {int(j) for j in a.neighbour_ids[i][a.kept[i] & mutual[i]]}
        assert kept == set(range(6)) - {i} and set(range(5)) - {i} <= named
    assert {int(j) for j in a.neighbour_ids[5][a.kept[5]]} == set(range(5))
    assert not (mutual[5] & a.kept[5]).any()             # no poison names the true passage
    plain, m4 = density_without(a, range(6), []), density_without(a, range(6), [], mutual=4)
    assert plain[5] > 0.4 and m4[5] == 0.0               # dense by the poisons' company only
    assert m4[:5].tolist() == plain[:5].tolist()         # the poisons' density does not change
    assert density_without(a, range(16), [], mutual=0).tolist() == a.density.tolist()
    # with m = 6 the poisons name it (it is their fifth-nearest) and it is dense again
    assert density_without(a, [5], [], mutual=6)[0] == pytest.approx(plain[5])


def test_lexical_ceiling_drops_near_duplicates():
    ids, texts, v = five_doc_geometry()
    texts[1] = texts[0]                       # Jaccard 1 > 0.60 → dropped from each other's lists
    a = audit_corpus(ids, texts, v)
    assert a.density[0] == pytest.approx(0.45)    # only d2 kept: support 0.5
    assert a.density[1] == 0.0                    # no retained neighbour: μ = b → D = 0
    row = a.row("d0")
    assert [n["id"] for n in row.dropped] == ["d1"] and row.dropped[0]["jaccard"] == 1.0


def test_empty_token_union_is_kept():
    ids, texts, v = five_doc_geometry()
    texts[0], texts[1] = "!!!", "???"
    a = audit_corpus(ids, texts, v)
    assert a.row("d0").kept[0]["jaccard"] == 0.0


def clustered_corpus(n=40, n_integrity=0, seed=3):
    rng = np.random.default_rng(seed)
    v = rng.normal(size=(n, 64)).astype(np.float32)
    base = rng.normal(size=64)
    base /= np.linalg.norm(base)
    for i, scale in enumerate([0.05, 0.06, 0.07]):    # a tight 3-document cluster: rows 0..2
        noise = rng.normal(size=64)
        v[i] = base + scale * noise / np.linalg.norm(noise)
    texts = [f"passage number {i} word{i} term{i} topic{i}" for i in range(n)]
    for j in range(n_integrity):
        texts[10 + j] = f"iPhone手机 {j}"               # adjacent Latin→CJK transition
    return [f"d{i}" for i in range(n)], texts, v


def test_topology_flags_only_within_budget():
    ids, texts, v = clustered_corpus()
    a = audit_corpus(ids, texts, v)
    assert (a.density[3:] == 0).all() and (a.density[:3] > 0.5).all()
    # f_T = 0.05, p ≤ 0.05 ⇔ #{D ≥ D_i} ≤ 2.05 → the two densest cluster documents
    order = np.argsort(-a.density[:3])
    assert set(a.flagged_ids) == {ids[order[0]], ids[order[1]]}
    assert a.row(ids[order[0]]).branch == "topology"


def test_integrity_alerts_consume_the_budget():
    ids, texts, v = clustered_corpus(n_integrity=1)     # f_I = 1/40 → f_T = 0.025: only p = 1/41
    a = audit_corpus(ids, texts, v)
    assert a.f_I == pytest.approx(0.025) and a.f_T == pytest.approx(0.025)
    top = ids[int(np.argmax(a.density))]
    assert set(a.flagged_ids) == {"d10", top}
    assert a.row("d10").branch == "integrity"


def test_topology_switched_off_when_integrity_exceeds_five_percent():
    ids, texts, v = clustered_corpus(n_integrity=3)     # f_I = 0.075 > 0.05
    a = audit_corpus(ids, texts, v)
    assert a.f_T == 0.0 and (a.topology == 0).all()
    assert a.flagged_ids == ["d10", "d11", "d12"]


@pytest.mark.parametrize("vectors,msg", [
    (np.ones(4, np.float32), "2-D"),
    (np.ones((1, 4), np.float32), "at least 2"),
    (np.ones((2, 4), np.int64), "float"),
    (np.array([[1, 0], [np.nan, 1]], np.float32), "non-finite"),
    (np.array([[1, 0], [0, 0]], np.float32), "zero vector"),
])
def test_validation_errors(vectors, msg):
    n = vectors.shape[0] if vectors.ndim == 2 else 1
    with pytest.raises(ValueError, match=msg):
        audit_corpus([f"d{i}" for i in range(n)], ["x"] * n, vectors)


def test_length_mismatch():
    with pytest.raises(ValueError, match="length mismatch"):
        audit_corpus(["a", "b"], ["x"], np.eye(2, dtype=np.float32))


@pytest.mark.parametrize("mode", ["hnsw", "ivf"])
def test_approximate_modes_recall(mode):
    rng = np.random.default_rng(0)
    centers = rng.normal(size=(20, 32))
    v = (centers[rng.integers(0, 20, 2000)] + 0.3 * rng.normal(size=(2000, 32))).astype(np.float32)
    ids, texts = [f"d{i}" for i in range(2000)], [f"t{i}" for i in range(2000)]
    exact = audit_corpus(ids, texts, v)
    approx = audit_corpus(ids, texts, v, mode=mode)
    assert neighbour_recall(exact, exact) == 1.0
    assert neighbour_recall(exact, approx) > 0.85


def test_unknown_mode():
    ids, texts, v = five_doc_geometry()
    with pytest.raises(ValueError, match="mode"):
        audit_corpus(ids, texts, v, mode="lsh")


def test_defense_fit_inspect_quarantine():
    ids, texts, v = clustered_corpus(n_integrity=3)
    snap = SimpleNamespace(ids=ids, documents=[Document(i, t) for i, t in zip(ids, texts)], vectors=v)
    rsg = DEFENSES.create("rsg").fit(snap, None)
    ranking = Ranking("q", [RankedDocument(i, t, r + 1, 0.5) for r, (i, t) in
                            enumerate(zip(["d11", "d0", "new"], [texts[11], texts[0], "unseen"]))])
    res = rsg.apply(ranking, None, k_ctx=5)
    d11, d0, new = res.decisions
    assert d11.removed and d11.status == "scored" and d11.score == 1.0 and d11.threshold == 0.5
    assert d11.evidence["branch"] == "integrity" and d11.evidence["adjacent_transitions"] == 1
    assert not d0.removed and d0.status == "scored"
    assert new.status == "not_examined" and not new.removed
    assert [d.id for d in res.context] == ["d0", "new"]
    assert RSG.corpus_time


def test_unfitted_rsg_is_unavailable():
    r = Ranking("q", [RankedDocument("a", "x", 1, 0.1)])
    assert RSG().inspect(r, None).decisions[0].status == "unavailable"


def test_rsg_params_validated():
    with pytest.raises(ValueError, match="rsg: unknown parameter 'k'; valid parameters: neighbor_count"):
        RSG(k=3)
    assert RSG().get_params() == asdict(RSGParams())
    assert RSG(mode="hnsw").rsg_params() == RSGParams(mode="hnsw")


# --- issue 13: one statistics function, modes from sieve/index/knn.py ------------------------------
def _reference_density(nb_ids, nb_sims, texts, p):
    """The per-row loop RSG used before the statistics were vectorised (§4.2–4.3), as an oracle."""
    from sieve.defenses.scripts import ascii_tokens

    toks = [frozenset(ascii_tokens(t)) for t in texts]
    out = []
    for i in range(nb_ids.shape[0]):
        valid = nb_ids[i] >= 0
        b = np.float32(nb_sims[i, np.flatnonzero(valid)[-1]]) if valid.any() else np.float32(0.0)
        retained = []
        for j in range(nb_ids.shape[1]):
            if nb_ids[i, j] < 0 or nb_sims[i, j] < np.float32(p.semantic_threshold):
                break
            a, c = toks[i], toks[int(nb_ids[i, j])]
            jac = len(a & c) / len(a | c) if (a | c) else 0.0
            if jac <= p.lexical_ceiling:
                retained.append(nb_sims[i, j])
        mu = np.float32(np.mean(np.asarray(retained[: p.dense_core_count], np.float32))) if retained else b
        excess = (float(mu) - float(b)) / max(1e-6, 1.0 - float(b))
        out.append(np.float32(min(1.0, len(retained) / p.support_scale) * min(1.0, max(0.0, excess))))
    return np.array(out, np.float32)


def test_density_statistics_match_the_reference_loop():
    from sieve.defenses.rsg import TokenSets, density_statistics
    from sieve.index.knn import knn_graph
    from sieve.scale.synthetic import SyntheticCorpus

    ch = SyntheticCorpus(3000, dim=64, seed=5, dup_fraction=0.05, coord_fraction=0.02).chunk(0, 3000)
    p = RSGParams()
    g = knn_graph(ch.vectors, 16, "exact")
    st = density_statistics(np.arange(3000), g.ids, g.sims, TokenSets(ch.texts), p)
    ref = _reference_density(g.ids, g.sims, ch.texts, p)
    assert (ref > 0).sum() > 100          # the corpus exercises the walk, not only zeros
    np.testing.assert_array_equal(st.density, ref)          # bit-identical, so tail ties are too
    # a batch of rows gives the same values as the whole corpus (what each Ray actor computes)
    rows = np.arange(1000, 1500)
    part = density_statistics(rows, g.ids[rows], g.sims[rows], TokenSets(ch.texts), p)
    np.testing.assert_array_equal(part.density, st.density[rows])
    np.testing.assert_array_equal(part.kept, st.kept[rows])


def test_auto_mode_is_exact_on_small_corpora_and_reports_no_recall():
    ids, texts, v = clustered_corpus()
    a = audit_corpus(ids, texts, v, mode="auto")
    e = audit_corpus(ids, texts, v)
    assert a.knn["mode"] == "exact" and a.recall is None
    np.testing.assert_array_equal(a.flagged, e.flagged)


def test_ivf_audit_carries_sampled_recall():
    from sieve.scale.synthetic import SyntheticCorpus

    ch = SyntheticCorpus(4000, dim=64, seed=2).chunk(0, 4000)
    a = audit_corpus(ch.ids, ch.texts, ch.vectors, mode="ivf", recall_sample=300)
    assert a.knn["mode"] == "ivf" and a.knn["nlist"] > 1
    assert a.recall["n"] == 300 and a.recall["k"] == 16
    assert a.recall["ci95"][0] <= a.recall["recall"] <= a.recall["ci95"][1]
    assert a.recall["recall"] >= 0.95
