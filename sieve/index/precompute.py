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

    def lm_trace(self, text: str, max_tokens: int = ...) -> np.ndarray: ...

    def token_states(self, text: str, max_tokens: int = ...) -> np.ndarray: ...


PRECOMPUTE_KINDS = ("retriever", "judge", "lm", "states")
"""Artifact kinds :func:`precompute_artifacts` can fill."""


def precompute_artifacts(documents: Sequence[Document], resources: ArtifactSource,
                         kinds: Sequence[str] = ("judge",), progress: bool = True,
                         lm_max_tokens: int = LM_TRACE_TOKENS,
                         states_max_tokens: int = TOKEN_STATE_TOKENS) -> dict[str, int]:
    """Fill the artifact cache with query-independent per-document features so that query-time
    defenses only read them. Keys follow the :class:`~sieve.resources.Resources` helpers on
    ``Document.text`` (what :class:`~sieve.types.RankedDocument` carries): ``judge`` →
    ``judge_embeddings``, ``lm`` → ``lm_trace``, ``states`` → ``token_states``; ``retriever`` →
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
        elif kind == "judge":
            with tqdm(total=len(texts), desc="judge embeddings", unit="doc", disable=not progress, leave=False) as bar:
                for i in range(0, len(texts), 64):
                    resources.judge_embeddings(texts[i : i + 64])
                    bar.update(len(texts[i : i + 64]))
        else:
            fn = (lambda t: resources.lm_trace(t, lm_max_tokens)) if kind == "lm" else \
                 (lambda t: resources.token_states(t, states_max_tokens))
            label = "LM surprisal traces" if kind == "lm" else "token states"
            for t in tqdm(texts, desc=label, unit="doc", disable=not progress, leave=False):
                fn(t)
        done[kind] = len(docs)
    return done
