"""The Geometry page's data: 2-D projections of judge space (TRIS L1) and retriever space (RSG)."""
from __future__ import annotations

from typing import TYPE_CHECKING, Mapping

import numpy as np

from sieve.types import DefenseResult, Ranking

if TYPE_CHECKING:
    import pandas as pd

    from sieve.defenses.rsg import RSGAudit
    from sieve.index import VectorIndex
    from sieve.resources import Resources


def computing_label(method: str, first: str) -> str:
    """The spinner text while ``first`` (e.g. "Ranking and clustering") and a 2-D projection run: it
    names the projection, and for UMAP that its first run in a process is slow and every projection is
    cached afterwards (:func:`sieve.dashboard.state.projection`)."""
    if method.lower() == "umap":
        return (f"{first.rstrip(',')} and computing the UMAP projection (the first UMAP in a process compiles its kernels: "
                "about a minute on 2 cores; every projection is cached afterwards)…")
    return f"{first.rstrip(',')} and computing the PCA projection…"


def project_2d(vectors: np.ndarray, method: str = "umap", seed: int = 12, n_neighbors: int = 15) -> np.ndarray:
    """2-D projection of row vectors: UMAP (cosine, ``n_neighbors`` clipped to n−1) or PCA."""
    x = np.asarray(vectors, dtype=np.float32)
    n = x.shape[0]
    if n == 0:
        return np.zeros((0, 2), np.float32)
    if n < 4 or method == "pca":
        from sklearn.decomposition import PCA

        if n < 2:
            return np.zeros((n, 2), np.float32)
        y = PCA(n_components=min(2, n, x.shape[1]), random_state=seed).fit_transform(x)
        return np.pad(y, ((0, 0), (0, 2 - y.shape[1]))).astype(np.float32)
    import warnings

    import umap

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        reducer = umap.UMAP(n_components=2, n_neighbors=max(2, min(n_neighbors, n - 1)), metric="cosine",
                            random_state=seed, init="random" if n < 10 else "spectral", n_jobs=1)
        return np.asarray(reducer.fit_transform(x), dtype=np.float32)


def ledger_column(ids: "list[str]", ledger: Mapping[str, str] | None) -> list[str]:
    """Each document's quarantine-ledger wording (:data:`sieve.ledger.STATE_WORDING`, the explorer's
    words: "excluded (open alert)", "restored (quarantine rolled back)", …) from ``ledger`` (doc id →
    state, :func:`sieve.dashboard.alerts.ledger_states`); '' for a document without an alert."""
    from sieve.ledger import STATE_WORDING

    states = ledger or {}
    return [STATE_WORDING.get(states.get(i, ""), "") for i in ids]


def judge_geometry(ranking: Ranking, resources: "Resources", tris_result: DefenseResult | None,
                   top_k: int = 50, method: str = "umap", xy: np.ndarray | None = None,
                   ledger: Mapping[str, str] | None = None) -> "pd.DataFrame":
    """The query's top-k in TRIS judge space: 2-D coordinates, K-Means cluster (from TRIS L1 evidence),
    poison flag, whether the document is in the kept majority, its quarantine-ledger wording
    (:func:`ledger_column`), id and snippet."""
    import pandas as pd

    docs = ranking.documents[:top_k]
    if xy is None:
        emb = resources.judge_embeddings([d.text for d in docs])
        xy = project_2d(emb, method, n_neighbors=min(10, max(2, len(docs) - 1)))
    rows = []
    for d, (x, y) in zip(docs, xy):
        dec = tris_result.decision_for(d.id) if tris_result is not None else None
        l1 = (dec.evidence or {}).get("L1", {}) if dec is not None else {}
        rows.append({"id": d.id, "rank": d.rank, "x": float(x), "y": float(y), "poison": bool(d.poison),
                     "cluster": str(l1.get("cluster", "n/a")), "in_majority": bool(l1.get("in_majority", False)),
                     "removed": bool(dec.removed) if dec is not None else False, "text": d.text})
    df = pd.DataFrame(rows)
    df["ledger"] = ledger_column([d.id for d in docs], ledger)
    return df


def corpus_geometry(view: "VectorIndex", audit: "RSGAudit", method: str = "umap",
                    xy: np.ndarray | None = None, ledger: Mapping[str, str] | None = None) -> "pd.DataFrame":
    """The snapshot in retriever space: 2-D coordinates coloured by RSG density contrast D_i, with
    each document's quarantine-ledger wording (:func:`ledger_column`)."""
    import pandas as pd

    if xy is None:
        xy = project_2d(view.vectors, method)
    return pd.DataFrame({"id": view.ids, "x": xy[:, 0], "y": xy[:, 1], "D": audit.density.astype(float),
                         "score": audit.score.astype(float), "flagged": audit.flagged.astype(bool),
                         "poison": [bool(d.poison) for d in view.documents],
                         "text": [d.text for d in view.documents],
                         "ledger": ledger_column(list(view.ids), ledger)})
