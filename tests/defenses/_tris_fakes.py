"""Test doubles shared by the TRIS / baseline / contract tests (not a fixture module)."""
from __future__ import annotations

from typing import Sequence

import numpy as np

from sieve.resources import Resources
from sieve.types import RankedDocument, Ranking


class FixedEmbedder:
    """Judge embedder whose vectors are given per text (hand-computable geometry)."""

    def __init__(self, vectors: dict[str, Sequence[float]], model_id: str = "fixed-judge"):
        self.vectors = {t: np.asarray(v, np.float32) / np.linalg.norm(v) for t, v in vectors.items()}
        self.dim = len(next(iter(self.vectors.values())))
        self.model_id = model_id
        self.max_tokens = 256

    def encode(self, texts, kind="passage", batch_size=32, progress=False):
        return np.vstack([self.vectors[t] for t in texts]).astype(np.float32)


def ranking_of(query: str, texts: Sequence[str], ids: Sequence[str] | None = None,
               poison: Sequence[bool] | None = None) -> Ranking:
    ids = list(ids) if ids is not None else [f"d{i}" for i in range(len(texts))]
    poison = list(poison) if poison is not None else [False] * len(texts)
    return Ranking(query, [RankedDocument(i, t, r + 1, 1.0 - r / 100, p) for r, (i, t, p) in
                           enumerate(zip(ids, texts, poison))], query_id="q1")


def resources_with(judge=None, llm=None, lm=None) -> Resources:
    from sieve.models.tiny import HashingEmbedder, HashingTokenEncoder, UnigramLM

    return Resources(retriever=HashingEmbedder(64), judge=judge or HashingEmbedder(48, "tiny-judge"),
                     lm=lm or UnigramLM(["the capital of france is paris"]), token_encoder=HashingTokenEncoder(),
                     llm=llm)
