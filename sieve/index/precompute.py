"""Filling the artifact cache ahead of query time (``sieve index --precompute``)."""
from __future__ import annotations

from typing import TYPE_CHECKING, Protocol, Sequence

import numpy as np

from sieve.constants import LM_TRACE_TOKENS, TOKEN_STATE_TOKENS
from sieve.index.cache import ArtifactCache
from sieve.index.embedding import embed_documents
from sieve.types import Document

if TYPE_CHECKING:
    from sieve.models.protocols import Embedder


class ArtifactSource(Protocol):
    """What :func:`precompute_artifacts` uses of a :class:`sieve.resources.Resources`: the retriever,
    the cache, and the cached per-document helpers whose keys query-time defenses read."""

    @property
    def retriever(self) -> "Embedder": ...

    @property
    def cache(self) -> ArtifactCache: ...

    def judge_embeddings(self, texts: list[str]) -> np.ndarray: ...

    def lm_traces(self, texts: Sequence[str], max_tokens: int = ...) -> list[np.ndarray]: ...

    def token_states_many(self, texts: Sequence[str], max_tokens: int = ..., kind: str = ...) -> list[np.ndarray]: ...


CHUNK = 64
"""Passages per cached batch call while precomputing (the models batch within it)."""

PRECOMPUTE_KINDS = ("retriever", "judge", "lm", "states")
"""Artifact kinds :func:`precompute_artifacts` can fill."""


def precompute_artifacts(documents: Sequence[Document], resources: ArtifactSource,
                         kinds: Sequence[str] = ("judge",), progress: bool = True,
                         lm_max_tokens: int = LM_TRACE_TOKENS,
                         states_max_tokens: int = TOKEN_STATE_TOKENS) -> dict[str, int]:
    """Fill the artifact cache with query-independent per-document features so that query-time
    defenses only read them. Keys follow the :class:`~sieve.resources.Resources` helpers on
    ``Document.text`` (what :class:`~sieve.types.RankedDocument` carries): ``judge`` →
    ``judge_embeddings``, ``lm`` → ``lm_traces``, ``states`` → ``token_states_many`` (batched:
    chunks of :data:`CHUNK` passages per call, one progress step each); ``retriever`` →
    retriever embeddings of ``model_text()`` (used by :meth:`VectorIndex.with_documents`).
    Returns the number of documents processed per kind."""
    from tqdm.auto import tqdm

    bad = [k for k in kinds if k not in PRECOMPUTE_KINDS]
    if bad:
        raise ValueError(f"unknown artifact kind(s) {bad}; choose from {PRECOMPUTE_KINDS}")
    docs = list(documents)
    texts = [d.text for d in docs]
    done: dict[str, int] = {}
    for kind in kinds:
        if kind == "retriever":
            embed_documents(docs, resources.retriever, resources.cache, progress, "retriever embeddings")
        else:
            label = {"judge": "judge embeddings", "lm": "LM surprisal traces", "states": "token states"}[kind]
            by_length = sorted(dict.fromkeys(texts), key=len)   # homogeneous chunks: little padding
            with tqdm(total=len(by_length), desc=label, unit="doc", disable=not progress, leave=False) as bar:
                for i in range(0, len(by_length), CHUNK):
                    chunk = by_length[i : i + CHUNK]
                    if kind == "judge":
                        resources.judge_embeddings(chunk)
                    elif kind == "lm":
                        resources.lm_traces(chunk, lm_max_tokens)
                    else:
                        resources.token_states_many(chunk, states_max_tokens)
                    bar.update(len(chunk))
        done[kind] = len(docs)
    return done
