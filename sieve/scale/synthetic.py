"""Synthetic corpora for the scale benchmarks (docs/results/scale.md) and tests.

Uniform random vectors are the wrong stand-in for retriever embeddings: in 384 dimensions every
pair is nearly orthogonal, there is no neighbourhood structure, and approximate kNN recall collapses
on them. Real sentence embeddings (docs/models.md: MiniLM) sit near low-dimensional topic manifolds
and contain groups of near-duplicates. :func:`synthetic_corpus` reproduces that structure:

* **topics** — ``n // DOCS_PER_TOPIC`` random unit centres; each topic has its own random
  ``TOPIC_RANK``-dimensional subspace with ``SUBTOPICS`` sub-topic points in it, and a document is
  centre + (sub-topic point + Gaussian jitter) mapped into that subspace + a small isotropic
  residual (nearest-neighbour cosines ≈ 0.6–0.85, across topics ≈ 0);
* **benign near-duplicate groups** (``dup_fraction`` of documents) — copies of a seed document
  (cosine ≈ 0.97) whose texts share almost every token (Jaccard > 0.6: RSG's lexical ceiling drops
  them, docs/algorithms.md §4.2);
* **coordinated groups** (``coord_fraction``) — tight clusters (cosine ≈ 0.95) of lexically distinct
  texts: what a PoisonedRAG-style injection looks like to RSG's topology branch (§4.3).

Texts are short bags of topic words (RSG only uses their ASCII token sets). Generation is chunked and
seeded: row ``i`` of a corpus is the same whatever chunk size is used to read it.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

import numpy as np

#: mean documents per topic (a topic ≈ one subject area of an enterprise knowledge base).
DOCS_PER_TOPIC = 2000
#: intrinsic dimension of a topic's manifold; MiniLM corpora have a participation ratio of a few tens.
TOPIC_RANK = 24
#: sub-topics per topic (shared offsets in each topic's subspace): documents about one product
#: feature or one page family; a document is a sub-topic point plus SUBTOPIC_SPREAD of noise.
SUBTOPICS = 50
SUBTOPIC_SPREAD = 0.45
#: spread inside the topic subspace and isotropic residual (relative to the unit topic centre).
TOPIC_SPREAD = 0.8
RESIDUAL = 0.25
#: members per near-duplicate / coordinated group (PoisonedRAG injects ~5 passages per target).
GROUP_SIZE = 5
#: words per text and words per topic vocabulary.
TEXT_WORDS = 14
TOPIC_VOCAB = 400
#: rows generated from one seed (a multiple of GROUP_SIZE).
PAGE = 1000


@dataclass
class Chunk:
    """Rows [start, start + len) of a synthetic corpus."""

    start: int
    ids: list[str]
    texts: list[str]
    vectors: np.ndarray          # float32, unit rows
    kind: np.ndarray             # 0 plain, 1 benign duplicate, 2 coordinated (the "poison" label)


class SyntheticCorpus:
    """A seeded corpus of ``n`` documents in ``dim`` dimensions, produced chunk by chunk."""

    def __init__(self, n: int, dim: int = 384, seed: int = 0, dup_fraction: float = 0.02,
                 coord_fraction: float = 0.005) -> None:
        if n < GROUP_SIZE * 2:
            raise ValueError(f"synthetic corpus needs at least {GROUP_SIZE * 2} documents, got {n}")
        self.n, self.dim, self.seed = int(n), int(dim), int(seed)
        rng = np.random.default_rng(seed)
        self.n_topics = max(4, self.n // DOCS_PER_TOPIC)
        c = rng.normal(size=(self.n_topics, dim)).astype(np.float32)
        self.centres = c / np.linalg.norm(c, axis=1, keepdims=True)
        basis = rng.normal(size=(self.n_topics, dim, TOPIC_RANK)).astype(np.float32)
        self.bases = basis / np.sqrt(dim)
        self.vocab = [[f"t{t}w{w}" for w in range(TOPIC_VOCAB)] for t in range(min(self.n_topics, 4096))]
        # Group layout: every GROUP_SIZE-aligned block of rows is either plain, a benign-duplicate
        # group or a coordinated group, decided by one seeded draw per block.
        self.sub_points = rng.normal(size=(SUBTOPICS, TOPIC_RANK)).astype(np.float32)
        n_blocks = self.n // GROUP_SIZE
        u = rng.random(n_blocks)
        self.block_kind = np.where(u < coord_fraction, 2, np.where(u < coord_fraction + dup_fraction, 1, 0)).astype(np.int8)

    def __len__(self) -> int:
        return self.n

    def chunk(self, start: int, stop: int) -> Chunk:
        """Rows [start, stop). Generated per PAGE rows with one seed per page, so chunking never
        changes a row."""
        start, stop = int(start), min(int(stop), self.n)
        p0, p1 = start // PAGE, (stop - 1) // PAGE + 1
        parts = [self._page(p) for p in range(p0, p1)]
        off = start - p0 * PAGE
        v = np.concatenate([q[0] for q in parts])[off: off + stop - start]
        texts = [t for q in parts for t in q[1]][off: off + stop - start]
        kind = np.concatenate([q[2] for q in parts])[off: off + stop - start]
        return Chunk(start, [f"s{i}" for i in range(start, stop)], texts, v, kind)

    def chunks(self, size: int = 50_000) -> Iterator[Chunk]:
        for s in range(0, self.n, size):
            yield self.chunk(s, s + size)

    def _page(self, page: int) -> tuple[np.ndarray, list[str], np.ndarray]:
        rng = np.random.default_rng((self.seed, page))
        lo = page * PAGE
        rows = min(PAGE, self.n - lo)
        blocks = np.arange(lo, lo + rows) // GROUP_SIZE
        kind = np.where(blocks < self.block_kind.size, self.block_kind[np.minimum(blocks, self.block_kind.size - 1)], 0)
        grouped = kind > 0
        topics = rng.integers(0, self.n_topics, rows)
        sub = rng.integers(0, SUBTOPICS, rows)
        z = self.sub_points[sub] + SUBTOPIC_SPREAD * rng.normal(size=(rows, TOPIC_RANK)).astype(np.float32)
        resid = rng.normal(size=(rows, self.dim)).astype(np.float32) * (RESIDUAL / np.sqrt(self.dim))
        # a group shares its first member's topic and seed point; members are jittered copies
        first = np.searchsorted(blocks, blocks)            # row of the block's first member
        topics = np.where(grouped, topics[first], topics)
        z = np.where(grouped[:, None], z[first] + 0.12 * z, z)
        resid = np.where(grouped[:, None], 0.3 * resid, resid)
        v = np.empty((rows, self.dim), np.float32)
        for t in np.unique(topics):                        # one GEMM per topic present
            m = topics == t
            v[m] = self.centres[t] + TOPIC_SPREAD * (z[m] @ self.bases[t].T)
        v += resid
        v /= np.linalg.norm(v, axis=1, keepdims=True)
        word_idx = rng.integers(0, TOPIC_VOCAB, (rows, TEXT_WORDS))
        dup = kind == 1                                    # benign duplicates: the first member's
        word_idx = np.where(dup[:, None], word_idx[first], word_idx)       # words, one changed
        swap = rng.integers(0, TOPIC_VOCAB, rows)
        pos = (np.arange(rows) - first) % TEXT_WORDS
        word_idx[dup, pos[dup]] = swap[dup]
        texts = []
        for t, w in zip(topics, word_idx):
            vocab = self.vocab[int(t) % len(self.vocab)]
            texts.append(" ".join([vocab[i] for i in w]))
        return v, texts, kind.astype(np.int8)
