"""Stored vectors instead of re-embedding: the agreement gate, and the store's corpus as an index.

A store's vectors are used only when the source names the model that wrote them (``?model=NAME``,
``--store-model`` or the collection's metadata), that model is the retriever Sieve runs, and a
sample agrees: ``sample`` passages (default 256) are re-embedded by Sieve's retriever (through the
artifact cache) and compared with the stored rows —

* cosine of every sampled pair ≥ :data:`MIN_COSINE` (0.99), and
* recall@10 agreement ≥ :data:`MIN_AGREEMENT` (0.99): each sampled passage used as a query
  against the sample (itself excluded), the top 10 by stored vectors vs by Sieve's vectors —

the same gate as the reduced-precision encoder backends (sieve/models/onnx_backend.py). Otherwise
:class:`VectorDecision` says why and the corpus is re-embedded with Sieve's retriever (a store whose
vectors come from a model Sieve does not have stays auditable; the report states it).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np

from sieve.types import Document

if TYPE_CHECKING:
    from sieve.index.cache import ArtifactCache
    from sieve.index.vector import VectorIndex
    from sieve.models.protocols import Embedder
    from sieve.stores.readers import StoreCorpus

MIN_COSINE = 0.99
MIN_AGREEMENT = 0.99
AGREEMENT_K = 10
SAMPLE = 256
STORE_INDEX_FORMAT = "store-vectors-v1"


@dataclass
class VectorDecision:
    """Whether the stored vectors are used (``use_stored``), why, and the gate's numbers."""

    use_stored: bool
    reason: str
    model: str | None = None          # the store's model as named
    retriever: str = ""               # Sieve's retriever model id
    numbers: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"use_stored": self.use_stored, "reason": self.reason, "store_model": self.model,
                "retriever": self.retriever, **self.numbers}


def _unit(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, np.float64)
    return x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)


def recall_agreement(ref: np.ndarray, new: np.ndarray, k: int = AGREEMENT_K) -> float:
    """Mean over rows of |top-k(new) ∩ top-k(ref)| / k, each row a query against the others
    (itself excluded), by cosine."""
    a, b = _unit(ref), _unit(new)
    n = a.shape[0]
    k = min(k, n - 1)
    if k < 1:
        return 1.0
    sa, sb = a @ a.T, b @ b.T
    np.fill_diagonal(sa, -np.inf)
    np.fill_diagonal(sb, -np.inf)
    ta = np.argsort(-sa, axis=1, kind="stable")[:, :k]
    tb = np.argsort(-sb, axis=1, kind="stable")[:, :k]
    return float(np.mean([len(set(x.tolist()) & set(y.tolist())) / k for x, y in zip(ta, tb)]))


def sample_rows(n: int, sample: int = SAMPLE, seed: int = 0) -> np.ndarray:
    """Sorted row indices of the agreement sample (all rows when ``n <= sample``)."""
    if n <= sample:
        return np.arange(n)
    return np.sort(np.random.default_rng(seed).choice(n, size=sample, replace=False))


def check_agreement(stored: np.ndarray, documents: Sequence[Document], embedder: "Embedder",
                    cache: "ArtifactCache | None" = None, *, sample: int = SAMPLE, seed: int = 0,
                    progress: bool = False) -> dict[str, Any]:
    """Re-embed a sample of ``documents`` with ``embedder`` and compare with the ``stored`` rows.
    Returns the numbers and ``passed``; a dimension mismatch fails without embedding."""
    from sieve.index.embedding import embed_documents, finalise

    rows = sample_rows(len(documents), sample, seed)
    out: dict[str, Any] = {"sample": int(rows.size), "required_cosine": MIN_COSINE,
                           "required_agreement": MIN_AGREEMENT, "k": AGREEMENT_K}
    dim = getattr(embedder, "dim", None)
    if dim is None:                                   # one passage tells the model's width
        dim = np.asarray(embedder.encode([documents[int(rows[0])].model_text()])).shape[-1]
    if int(dim) != stored.shape[1]:
        out.update(passed=False, why=f"stored vectors have {stored.shape[1]} dimensions, "
                                     f"{embedder.model_id} gives {int(dim)}")
        return out
    fresh = finalise(embed_documents([documents[int(i)] for i in rows], embedder, cache, progress,
                                     "agreement sample"))[1]
    if fresh.shape[1] != stored.shape[1]:
        out.update(passed=False, why=f"stored vectors have {stored.shape[1]} dimensions, "
                                     f"{embedder.model_id} gives {fresh.shape[1]}")
        return out
    ref = stored[rows]
    cos = np.sum(_unit(ref) * _unit(fresh), axis=1)
    agree = recall_agreement(ref, fresh)
    out.update(min_cosine=round(float(cos.min()), 6), mean_cosine=round(float(cos.mean()), 6),
               recall_at_10_agreement=round(agree, 6))
    ok = float(cos.min()) >= MIN_COSINE and agree >= MIN_AGREEMENT
    out["passed"] = bool(ok)
    if not ok:
        out["why"] = (f"min cosine {cos.min():.4f} (need ≥ {MIN_COSINE}), recall@10 agreement {agree:.4f} "
                      f"(need ≥ {MIN_AGREEMENT}) on {rows.size} re-embedded passages")
    return out


def same_model(store_model: str, retriever_id: str) -> bool:
    """The store's model name and Sieve's retriever model id denote the same model."""
    def norm(s: str) -> str:
        s = s.strip().lower()
        return s.rsplit("/", 1)[-1]

    if norm(store_model) == norm(retriever_id):
        return True
    from sieve.models.tiny import TESTING_RETRIEVER, HashingEmbedder

    if TESTING_RETRIEVER in (store_model, retriever_id):     # the hidden in-process test retriever
        tiny = {TESTING_RETRIEVER, HashingEmbedder(dim=64).model_id}
        return store_model in tiny and retriever_id in tiny
    try:
        from sieve.models.loaders import embedder_model_id

        return norm(embedder_model_id(store_model)) == norm(retriever_id)
    except Exception:  # noqa: BLE001 - a name Sieve does not know is simply not the same model
        return False


def decide_vectors(corpus: "StoreCorpus", embedder: "Embedder", cache: "ArtifactCache | None" = None, *,
                   sample: int = SAMPLE, progress: bool = False) -> VectorDecision:
    """Use the store's vectors, or re-embed, and why (module docstring)."""
    rid = str(embedder.model_id)
    model = corpus.model
    if corpus.vectors is None:
        return VectorDecision(False, "the store holds no vectors: re-embedding with Sieve's retriever", model, rid)
    if not model:
        return VectorDecision(False, "the store does not name the model of its vectors (add &model=NAME to the "
                                     "source): re-embedding with Sieve's retriever", model, rid)
    if not same_model(model, rid):
        return VectorDecision(False, f"the stored vectors come from {model}, not from Sieve's retriever {rid} "
                                     "(pass --retriever to use it if Sieve has it): re-embedding with "
                                     f"{rid}", model, rid)
    nums = check_agreement(corpus.vectors, corpus.documents, embedder, cache, sample=sample, progress=progress)
    if not nums["passed"]:
        return VectorDecision(False, f"stored vectors refused: {nums['why']}; re-embedding with {rid}", model, rid,
                              nums)
    return VectorDecision(True, f"stored vectors used (agreement on {nums['sample']} passages: min cosine "
                                f"{nums['min_cosine']:.4f}, recall@10 {nums['recall_at_10_agreement']:.4f})",
                          model, rid, nums)


def stored_index(corpus: "StoreCorpus", embedder: "Embedder", cache: "ArtifactCache | None" = None) -> "VectorIndex":
    """The store's corpus as a :class:`~sieve.index.VectorIndex` on its stored vectors (float16
    round trip and L2 normalisation as every Sieve index; nothing embedded, nothing written)."""
    from sieve.index.embedding import finalise
    from sieve.index.storage import make_manifest
    from sieve.index.vector import VectorIndex

    assert corpus.vectors is not None
    _, v32 = finalise(corpus.vectors)
    manifest = make_manifest(embedder, corpus.documents, v32.shape[1])
    manifest.update(format=STORE_INDEX_FORMAT, source=corpus.uri.canonical())
    return VectorIndex(corpus.documents, v32, embedder, manifest, None, cache)
