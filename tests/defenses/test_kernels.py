"""The exact fast kernels (sieve/defenses/kernels.py): LCS against the quadratic DP, K-Means against
scikit-learn's ``KMeans.fit`` on fixed inputs, TrustRAG's ROUGE-L matrix against the DP."""
from __future__ import annotations

import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sieve.defenses import kernels, memo, tris, trustrag
from sieve.defenses.text import lcs_length, word_tokens


def lcs_dp(a: list, b: list) -> int:
    """Textbook O(|a||b|) dynamic programme."""
    prev = [0] * (len(b) + 1)
    for x in a:
        cur = [0]
        for j, y in enumerate(b):
            cur.append(prev[j] + 1 if x == y else max(prev[j + 1], cur[j]))
        prev = cur
    return prev[-1]


tokens = st.lists(st.sampled_from(["a", "b", "c", "d", "the", "of", "x1", ""]), max_size=70)


@settings(max_examples=300, deadline=None)
@given(st.lists(tokens, min_size=2, max_size=6))
def test_lcs_lengths_equal_the_dp(seqs: list[list[str]]) -> None:
    pairs = [(i, j) for i in range(len(seqs)) for j in range(len(seqs)) if i != j]
    got = kernels.lcs_lengths(seqs, pairs)
    assert got == [lcs_dp(seqs[i], seqs[j]) for i, j in pairs]
    assert got == [lcs_length(seqs[i], seqs[j]) for i, j in pairs]


@settings(max_examples=200, deadline=None)
@given(st.lists(tokens, min_size=0, max_size=6))
def test_lcs_matrix_equals_the_dp(seqs: list[list[str]]) -> None:
    got = kernels.lcs_matrix(seqs)
    assert got.shape == (len(seqs), len(seqs))
    assert [[int(x) for x in row] for row in got] == [[lcs_dp(a, b) for b in seqs] for a in seqs]


def test_lcs_matrix_fallback_without_rapidfuzz(monkeypatch: pytest.MonkeyPatch) -> None:
    seqs = [["a", "b", "c", "a"], ["b", "a", "c"], []]
    want = kernels.lcs_matrix(seqs)
    monkeypatch.setattr(kernels, "_LCSSEQ", None)
    assert np.array_equal(kernels.lcs_matrix(seqs), want) and want[0, 1] == 2 and want[0, 0] == 4


def test_lcs_lengths_long_sequences_past_one_machine_word() -> None:
    rng = np.random.default_rng(3)
    a = [f"w{int(t)}" for t in rng.integers(0, 12, 300)]
    b = [f"w{int(t)}" for t in rng.integers(0, 12, 180)]
    (n,) = kernels.lcs_lengths([a, b], [(0, 1)])
    assert n == lcs_dp(a, b) and n > 64


def test_lcs_lengths_fallback_without_rapidfuzz(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(kernels, "_LCSSEQ", None)
    seqs = [["a", "b", "c", "a"], ["b", "a", "c"], []]
    assert kernels.lcs_lengths(seqs, [(0, 1), (1, 0), (0, 2)]) == [2, 2, 0]


words = st.lists(st.sampled_from(["Paris", "is", "the", "capital", "of", "France", "Berlin", "x", "1999"]),
                 max_size=40).map(" ".join)


@settings(max_examples=100, deadline=None)
@given(st.lists(words, min_size=0, max_size=7))
def test_pairwise_rouge_equals_the_dp_definition(texts: list[str]) -> None:
    memo.clear()
    got = trustrag.pairwise_rouge(texts)
    toks = [word_tokens(t) for t in texts]
    for i in range(len(texts)):
        assert got[i, i] == 0.0
        for j in range(len(texts)):
            if i != j:
                n = lcs_dp(toks[i], toks[j])
                want = 0.0 if n == 0 else 2.0 * n / (len(toks[i]) + len(toks[j]))
                assert got[i, j] == want
    assert np.array_equal(trustrag.pairwise_rouge(texts), got)   # memoised pairs give the same matrix


def _inputs() -> list[tuple[np.ndarray, int, int]]:
    rng = np.random.default_rng(11)
    out = []
    for t in range(40):
        dtype = np.float32 if t % 2 == 0 else np.float64
        n = int(rng.integers(3, 50))
        X = rng.normal(size=(n, 384 if t % 3 else 16)).astype(dtype)
        if t % 5 == 0:   # two tight groups: a poisoned-looking cluster
            X[: n // 3] = X[0] + 0.01 * rng.normal(size=(n // 3, X.shape[1])).astype(dtype)
        if t % 7 == 0:   # duplicate rows: fewer distinct points than clusters
            X = np.repeat(X[:2], 3, axis=0)
        k = 2 if t % 4 else int(min(4, len(X)))
        out.append((X, k, 42 if t % 2 else 0))
    return out


@pytest.mark.parametrize("n_init,max_iter", [(10, 300), (10, 500)])
def test_kmeans_fit_identical_to_sklearn_fit(n_init: int, max_iter: int) -> None:
    from sklearn.cluster import KMeans

    assert kernels.fast_path_ok()
    for X, k, seed in _inputs():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ref = KMeans(n_clusters=k, random_state=seed, n_init=n_init, max_iter=max_iter).fit(X)
        got = kernels.kmeans_fit(X, k, seed, n_init=n_init, max_iter=max_iter)
        assert np.array_equal(got.labels_, ref.labels_), (X.shape, k)
        assert got.cluster_centers_.dtype == ref.cluster_centers_.dtype
        assert np.array_equal(got.cluster_centers_, ref.cluster_centers_), (X.shape, k)
        assert got.n_iter_ == ref.n_iter_
        assert got.inertia_ == pytest.approx(ref.inertia_, rel=1e-5)


def test_kmeans_plusplus_draws_identical_to_sklearn() -> None:
    from sklearn.cluster import _kmeans as SK

    for X, k, seed in _inputs():
        X = X - X.mean(axis=0)
        x_sq = SK.row_norms(X, squared=True)
        w = np.ones(len(X), dtype=X.dtype)
        ref, _ = SK._kmeans_plusplus(X, k, x_squared_norms=x_sq, sample_weight=w,
                                     random_state=np.random.RandomState(seed))
        assert np.array_equal(kernels._kmeans_plusplus(X, k, x_sq, w, np.random.RandomState(seed)), ref)


def test_fit_kmeans_memo_returns_the_fit_of_a_fresh_call() -> None:
    memo.clear()
    X, k, seed = _inputs()[1]
    first = tris.fit_kmeans(X, k, random_state=seed)
    assert tris.fit_kmeans(X.copy(), k, random_state=seed) is first          # same bytes: one fit
    fresh = kernels.sklearn_kmeans(X, k, seed, 10, 300)
    assert kernels.same_fit(first, fresh)
    other = tris.fit_kmeans(X, k, random_state=seed + 1)                      # other parameters: its own fit
    assert other is not first


def test_unusable_fast_path_falls_back_to_sklearn(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(kernels, "_FAST_OK", False)
    called = []
    real = kernels.sklearn_kmeans
    monkeypatch.setattr(kernels, "sklearn_kmeans", lambda *a: called.append(a) or real(*a))
    X, k, seed = _inputs()[3]
    got = kernels.kmeans_fit(X, k, seed)
    assert called and kernels.same_fit(got, real(X, k, seed, 10, 300))
    with pytest.raises(ValueError):   # scikit-learn's own error for fewer samples than clusters
        kernels.kmeans_fit(X[:1], 2, 0)
