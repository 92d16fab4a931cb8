"""sieve/index/knn.py: plans from corpus size, exact against brute force, approximate recall, and RSG
flags of approximate vs exact on a small clustered corpus (issue 13)."""
import numpy as np
import pytest

from sieve.defenses.rsg import audit_corpus, flag_overlap, neighbour_recall
from sieve.index.knn import EXACT_MAX, knn_graph, plan_knn, sampled_recall, unit_matrix
from sieve.scale.synthetic import SyntheticCorpus


@pytest.fixture(scope="module")
def corpus():
    return SyntheticCorpus(6000, dim=96, seed=11).chunk(0, 6000)


def test_plan_follows_corpus_size():
    assert plan_knn(EXACT_MAX).mode == "exact"
    big = plan_knn(EXACT_MAX + 1)
    assert big.mode == "ivf" and big.nprobe == 6
    assert plan_knn(1_000_000).nlist == round((6 * 1_000_000) ** 0.5)
    assert plan_knn(100_000).nlist < plan_knn(1_000_000).nlist
    assert plan_knn(5, k=16, mode="exact").k == 4          # k = min(16, N - 1)
    with pytest.raises(ValueError, match="unknown kNN mode"):
        plan_knn(100, mode="lsh")


def test_exact_matches_brute_force(corpus):
    x = unit_matrix(corpus.vectors[:800])
    g = knn_graph(x, 16, "exact")
    s = x @ x.T
    np.fill_diagonal(s, -np.inf)
    brute = np.argsort(-s, axis=1, kind="stable")[:, :16]
    assert (g.ids != np.arange(800)[:, None]).all()                      # self masked
    np.testing.assert_allclose(g.sims, np.take_along_axis(s, brute, axis=1), atol=1e-6)
    assert neighbour_recall(brute, g.ids) > 0.999


def test_float16_memmap_input_is_accepted(corpus, tmp_path):
    path = tmp_path / "v.npy"
    np.save(path, corpus.vectors[:500].astype(np.float16))
    mm = np.load(path, mmap_mode="r")
    g = knn_graph(mm, 8, "exact")
    ref = knn_graph(corpus.vectors[:500].astype(np.float16).astype(np.float32), 8, "exact")
    np.testing.assert_array_equal(g.ids, ref.ids)


@pytest.mark.parametrize("mode", ["ivf", "hnsw"])
def test_approximate_recall_on_clustered_corpus(corpus, mode):
    x = unit_matrix(corpus.vectors)
    g = knn_graph(x, 16, mode)
    rec = sampled_recall(x, g.ids, sample=400)
    assert rec["recall"] >= 0.95, rec
    exact = knn_graph(x, 16, "exact")
    full = neighbour_recall(exact.ids, g.ids)
    assert abs(full - rec["recall"]) < 0.02              # the sample estimates the full recall


def test_ivf_postings_cover_every_document_nprobe_times(corpus):
    from sieve.index.knn import train_ivf

    x = unit_matrix(corpus.vectors)
    plan = plan_knn(len(x), 16, "ivf")
    part = train_ivf(x, plan)
    assert np.bincount(part.postings, minlength=len(x)).tolist() == [plan.nprobe] * len(x)
    members = np.concatenate([part.members(c) for c in range(plan.nlist)])
    assert sorted(members.tolist()) == list(range(len(x)))               # each document queried once
    for c in range(0, plan.nlist, 17):                                    # a member is posted in its own list
        assert np.isin(part.members(c), part.candidates(c)).all()


def test_approximate_vs_exact_flags_within_tolerance(corpus):
    exact = audit_corpus(corpus.ids, corpus.texts, corpus.vectors, mode="exact")
    approx = audit_corpus(corpus.ids, corpus.texts, corpus.vectors, mode="ivf", recall_sample=500)
    assert exact.flagged.sum() > 50                                     # the budget is in use
    assert flag_overlap(exact, approx) >= 0.95
    # the coordinated groups (the synthetic "poison") are flagged by both
    coord = corpus.kind == 2
    assert exact.flagged[coord].mean() > 0.8 and approx.flagged[coord].mean() > 0.8
