"""Exact fast kernels behind TrustRAG's ROUGE-L and the K-Means of TRIS L1 / TrustRAG (docs/architecture.md).

Both give the same numbers as the plain implementations they replace, not approximations:

* :func:`lcs_lengths` / :func:`lcs_matrix` — longest-common-subsequence lengths of token sequences
  (a list of pairs / every pair).
  Tokens are mapped to integer ids (one alphabet per call, so equal ids mean equal tokens) and the
  LCS is RapidFuzz's bit-parallel ``LCSseq.similarity`` in C++ (Hyyrö's algorithm, the same one as
  :func:`sieve.defenses.text.lcs_length`, which stays the reference and the fallback when RapidFuzz
  is missing). tests/defenses/test_kernels.py checks it against the quadratic DP.
* :func:`kmeans_fit` — scikit-learn's own K-Means (k-means++ seeding, Lloyd iterations, best of
  ``n_init``) called through its internal steps, with the input validation and the per-iteration
  thread-pool switching of ``KMeans.fit`` done once per fit instead of once per Lloyd run. The inputs
  here are tiny (5–50 rows); for them ``KMeans.fit``'s fixed costs dominate and, on a loaded 2-core
  machine, re-setting the BLAS thread count around every Lloyd run cost far more than the
  clustering. Same random draws, same Cython kernels, same tie rule: the labels, centres, inertia and
  iteration count are bit-identical (the inertia to a few ulp, see :func:`same_fit`). Before its first use in a process the fast path is checked
  against ``KMeans.fit`` on fixed probes; any difference (e.g. another scikit-learn version whose
  internals changed), or a private module that no longer imports, switches it off for the process and
  the public ``KMeans`` (same parameters: lloyd, one OpenMP thread) is used. pyproject.toml bounds
  scikit-learn to the minor versions this was checked on.
"""
from __future__ import annotations

import importlib
import math
import warnings
from dataclasses import dataclass
from typing import Any, Hashable, Mapping, Sequence

import numpy as np

_LCSSEQ: Any
try:   # the C++ bit-parallel LCS; the pure-Python one of sieve.defenses.text is the fallback
    from rapidfuzz.distance import LCSseq as _LCSSEQ
except ImportError:   # pragma: no cover - rapidfuzz is a core dependency
    _LCSSEQ = None


def lcs_lengths(token_lists: Sequence[Sequence[Hashable]] | Mapping[int, Sequence[Hashable]],
                pairs: Sequence[tuple[int, int]]) -> list[int]:
    """LCS length of ``token_lists[i]`` and ``token_lists[j]`` for each ``(i, j)`` in ``pairs``."""
    if _LCSSEQ is None:
        from sieve.defenses.text import lcs_length

        return [lcs_length(token_lists[i], token_lists[j]) for i, j in pairs]
    vocab: dict[Hashable, int] = {}
    ids: dict[int, list[int]] = {}
    sim = _LCSSEQ.similarity
    out = []
    for i, j in pairs:
        for x in (i, j):
            if x not in ids:
                ids[x] = [vocab.setdefault(t, len(vocab)) for t in token_lists[x]]
        out.append(int(sim(ids[i], ids[j])))
    return out


def lcs_matrix(token_lists: Sequence[Sequence[Hashable]]) -> np.ndarray:
    """``(m, m)`` int matrix of the LCS lengths of every pair of ``token_lists`` (the diagonal holds
    each sequence's length), in one C++ call when RapidFuzz is there."""
    m = len(token_lists)
    if _LCSSEQ is None or m == 0:
        pairs = [(i, j) for i in range(m) for j in range(i, m)]
        out = np.zeros((m, m), dtype=np.int64)
        for (i, j), n in zip(pairs, lcs_lengths(token_lists, pairs)):
            out[i, j] = out[j, i] = n
        return out
    from rapidfuzz.process import cdist

    vocab: dict[Hashable, int] = {}
    ids = [[vocab.setdefault(t, len(vocab)) for t in seq] for seq in token_lists]
    return cdist(ids, ids, scorer=_LCSSEQ.similarity, dtype=np.int64)


@dataclass(frozen=True)
class KMeansFit:
    """The fitted values :func:`kmeans_fit` returns (the attribute names of scikit-learn's KMeans)."""

    labels_: np.ndarray
    cluster_centers_: np.ndarray
    inertia_: float
    n_iter_: int


_CONTROLLER: Any = None
_FAST_OK: bool | None = None   # None: not checked yet in this process


def _controller() -> Any:
    global _CONTROLLER
    if _CONTROLLER is None:   # scanning the loaded libraries costs ms: once per process
        from threadpoolctl import ThreadpoolController

        _CONTROLLER = ThreadpoolController()
    return _CONTROLLER


def sklearn_kmeans(X: np.ndarray, n_clusters: int, random_state: Any, n_init: int, max_iter: int) -> KMeansFit:
    """``KMeans(...).fit(X)`` on one OpenMP thread, warnings about duplicate points silenced (the reference,
    and the fallback when the private steps are unavailable)."""
    from sklearn.cluster import KMeans

    with warnings.catch_warnings(), _controller().limit(limits=1, user_api="openmp"):
        warnings.simplefilter("ignore")
        km = KMeans(n_clusters=n_clusters, random_state=random_state, n_init=n_init, max_iter=max_iter,
                    algorithm="lloyd").fit(X)
    return KMeansFit(km.labels_, km.cluster_centers_, float(km.inertia_), int(km.n_iter_))


def _one_batch(n_x: int, n_y: int, n_features: int) -> bool:
    """Whether scikit-learn's float32 upcast distance takes a single chunk (its batch-size rule)."""
    maxmem = max(((n_x + n_y) * n_features + n_x * n_y) / 10, 10 * 2**17)
    tmp = 2.0 * n_features
    batch = max(int((-tmp + math.sqrt(tmp**2 + 4 * maxmem)) / 2), 1)
    return n_x <= batch and n_y <= batch


def _sq_distances(A: np.ndarray, X: np.ndarray, x_sq: np.ndarray) -> np.ndarray:
    """``sklearn.metrics.pairwise._euclidean_distances(A, X, Y_norm_squared=x_sq, squared=True)``
    for dense ``A`` (centres or candidates, not ``X`` itself) without its input checks: the same
    operations in the same order (float32 input: one float64-upcast chunk, as scikit-learn takes
    for these sizes — checked by the caller)."""
    if X.dtype == np.float32:
        A64, X64 = A.astype(np.float64), X.astype(np.float64)
        aa = np.einsum("ij,ij->i", A64, A64)[:, None]
        xx = np.einsum("ij,ij->i", X64, X64)[None, :]
        d = -2 * (A64 @ X64.T)
        d += aa
        d += xx
        out = d.astype(np.float32, copy=False)
    else:
        out = -2 * (A @ X.T)
        out += np.einsum("ij,ij->i", A, A)[:, None]
        out += np.reshape(x_sq, (1, -1))
    np.maximum(out, np.asarray(0, dtype=out.dtype), out=out)
    return out


def _kmeans_plusplus(X: np.ndarray, n_clusters: int, x_sq: np.ndarray, weights: np.ndarray,
                     rs: np.random.RandomState) -> np.ndarray:
    """``sklearn.cluster._kmeans._kmeans_plusplus`` for dense input (same draws, same arithmetic)."""
    n_samples, n_features = X.shape
    centers = np.empty((n_clusters, n_features), dtype=X.dtype)
    n_local_trials = 2 + int(np.log(n_clusters))
    center_id = rs.choice(n_samples, p=weights / weights.sum())
    centers[0] = X[center_id]
    closest = _sq_distances(centers[0, np.newaxis], X, x_sq)
    current_pot = closest @ weights
    for c in range(1, n_clusters):
        rand_vals = rs.uniform(size=n_local_trials) * current_pot
        candidate_ids = np.searchsorted(np.cumsum(weights * closest), rand_vals)
        np.clip(candidate_ids, None, closest.size - 1, out=candidate_ids)
        dist = _sq_distances(X[candidate_ids], X, x_sq)
        np.minimum(closest, dist, out=dist)
        candidates_pot = dist @ weights.reshape(-1, 1)
        best = np.argmin(candidates_pot)
        current_pot = candidates_pot[best]
        closest = dist[best]
        centers[c] = X[candidate_ids[best]]
    return centers


def _private_kmeans() -> Any:
    """scikit-learn's private ``sklearn.cluster._kmeans`` module, or ``None`` when it does not import."""
    try:
        return importlib.import_module("sklearn.cluster._kmeans")
    except ImportError:
        return None


def _fast_kmeans(X: np.ndarray, n_clusters: int, random_state: int, n_init: int, max_iter: int) -> KMeansFit:
    """``KMeans.fit`` (scikit-learn ≥ 1.4, dense input, lloyd, k-means++, tol 1e-4) step by step."""
    K = _private_kmeans()
    if K is None:
        raise ImportError("sklearn.cluster._kmeans is not importable")

    dtype = X.dtype if X.dtype in (np.float32, np.float64) else np.float64
    X = np.array(X, dtype=dtype, order="C", copy=True)              # validate_data(copy=True)
    tol = K._tolerance(X, 1e-4)                                      # _check_params_vs_input, before centring
    rs = np.random.RandomState(random_state)                         # check_random_state(int)
    weights = np.ones(X.shape[0], dtype=X.dtype)                     # _check_sample_weight(None)
    x_mean = X.mean(axis=0)
    X -= x_mean
    x_sq = K.row_norms(X, squared=True)
    lloyd = K._kmeans_single_lloyd.__wrapped__   # without its per-call BLAS limit: the caller holds one
    # the plain k-means++ is most of a tiny fit's cost (input checks around two small distance
    # products); scikit-learn's own is used where its float32 distances would take several chunks
    own_init = X.dtype == np.float64 or _one_batch(max(n_clusters, 2 + int(np.log(n_clusters))), *X.shape)
    best = None
    for _ in range(n_init):
        if own_init:
            init = _kmeans_plusplus(X, n_clusters, x_sq, weights, rs)
        else:
            init, _ = K._kmeans_plusplus(X, n_clusters, x_squared_norms=x_sq, sample_weight=weights, random_state=rs)
        labels, inertia, centers, n_iter = lloyd(X, weights, init, max_iter=max_iter, verbose=False, tol=tol,
                                                 n_threads=1)
        if best is None or (inertia < best[1] and not K._is_same_clustering(labels, best[0], n_clusters)):
            best = (labels, inertia, centers, n_iter)
    assert best is not None   # n_init >= 1
    labels, inertia, centers, n_iter = best
    centers += x_mean
    return KMeansFit(labels, centers, float(inertia), int(n_iter))


def same_fit(a: KMeansFit, b: KMeansFit) -> bool:
    """Same labels, centres (bit for bit, same dtype) and iteration count; inertia equal to a few
    units in the last place of the data's dtype. (``KMeans.fit`` itself returns inertias a few ulp
    apart for the same input within one process — its vectorised distance sums round differently
    with the memory state; measured with float32 judge vectors — while labels and centres do not
    move; nothing in Sieve reads the inertia.)"""
    eps = float(np.finfo(b.cluster_centers_.dtype).eps) if b.cluster_centers_.dtype.kind == "f" else 1e-15
    return (np.array_equal(a.labels_, b.labels_) and a.cluster_centers_.dtype == b.cluster_centers_.dtype
            and np.array_equal(a.cluster_centers_, b.cluster_centers_) and a.n_iter_ == b.n_iter_
            and abs(a.inertia_ - b.inertia_) <= 64 * eps * max(1.0, abs(b.inertia_)))


def _probe_inputs() -> list[tuple[np.ndarray, int]]:
    rng = np.random.default_rng(20260101)
    two = np.vstack([rng.normal(0, 1, (9, 24)), rng.normal(3, 1, (6, 24))])
    dup = np.repeat(rng.normal(size=(2, 8)), 3, axis=0)   # duplicate rows, fewer distinct points than k
    return [(two.astype(np.float32), 2), (two, 3), (rng.normal(size=(30, 16)), 5), (dup, 3),
            (rng.normal(size=(7, 384)).astype(np.float32), 2)]


def fast_path_ok() -> bool:
    """Whether :func:`kmeans_fit` may use the step-by-step fit (checked once per process on probes)."""
    global _FAST_OK
    if _FAST_OK is None and _private_kmeans() is None:
        _FAST_OK = False   # the private module moved: the public estimator only
    if _FAST_OK is None:
        try:
            ok = True
            for X, k in _probe_inputs():
                with warnings.catch_warnings(), _controller().limit(limits=1):
                    warnings.simplefilter("ignore")
                    fast = _fast_kmeans(X, k, 0, 10, 300)
                ok = ok and same_fit(fast, sklearn_kmeans(X, k, 0, 10, 300))
            _FAST_OK = ok
        except Exception:  # noqa: BLE001 - internals moved: use the public estimator
            _FAST_OK = False
    return _FAST_OK


def kmeans_fit(X: np.ndarray, n_clusters: int, random_state: Any, n_init: int = 10, max_iter: int = 300) -> KMeansFit:
    """scikit-learn K-Means of ``X`` (see the module docstring); the same result as ``KMeans.fit``."""
    X = np.asarray(X)
    seeded = isinstance(random_state, (int, np.integer))
    if not seeded or X.ndim != 2 or X.shape[0] < n_clusters or not np.isfinite(X).all() or not fast_path_ok():
        return sklearn_kmeans(X, n_clusters, random_state, n_init, max_iter)   # also its errors
    with warnings.catch_warnings(), _controller().limit(limits=1):
        warnings.simplefilter("ignore")
        return _fast_kmeans(X, n_clusters, int(random_state), int(n_init), int(max_iter))
