"""K-Means without scikit-learn's private module (sieve/defenses/kernels.py): when
``sklearn.cluster._kmeans`` does not import, :func:`kernels.kmeans_fit` uses the public ``KMeans``
and returns what the fast path returns."""
from __future__ import annotations

import sys

import numpy as np
import pytest
import sklearn.cluster

from sieve.defenses import kernels


def _matrices() -> list[tuple[np.ndarray, int, int]]:
    rng = np.random.default_rng(7)
    two = np.vstack([rng.normal(0, 1, (12, 16)), rng.normal(2.5, 1, (8, 16))])
    return [(two.astype(np.float32), 2, 42), (two, 3, 0), (rng.normal(size=(25, 8)), 4, 42)]


def test_kmeans_falls_back_to_public_kmeans_when_the_private_module_is_gone(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(kernels, "_FAST_OK", None)
    assert kernels.fast_path_ok()
    fast = [kernels.kmeans_fit(X, k, seed) for X, k, seed in _matrices()]

    # the private module no longer imports (renamed or removed in another scikit-learn version)
    monkeypatch.setitem(sys.modules, "sklearn.cluster._kmeans", None)
    monkeypatch.delattr(sklearn.cluster, "_kmeans", raising=False)
    monkeypatch.setattr(kernels, "_FAST_OK", None)
    with pytest.raises(ImportError):
        from sklearn.cluster import _kmeans  # noqa: F401
    public = []
    real = kernels.sklearn_kmeans
    monkeypatch.setattr(kernels, "sklearn_kmeans", lambda *a: public.append(a) or real(*a))
    assert not kernels.fast_path_ok()
    slow = [kernels.kmeans_fit(X, k, seed) for X, k, seed in _matrices()]

    assert len(public) == len(slow)   # every fit went through the public estimator
    for (X, k, _), a, b in zip(_matrices(), fast, slow):
        assert np.array_equal(a.labels_, b.labels_), (X.shape, k)
        assert a.cluster_centers_.dtype == b.cluster_centers_.dtype
        assert np.array_equal(a.cluster_centers_, b.cluster_centers_), (X.shape, k)
        assert a.n_iter_ == b.n_iter_
        assert kernels.same_fit(a, b)
