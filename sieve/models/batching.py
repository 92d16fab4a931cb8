"""Batched model work over many documents: length-sorted, padded batches.

Every per-document model call of Sieve that runs over many texts goes through here — causal-LM
NLL traces (RSQ E_p, perplexity filter), token states (RSQ E_s) — so cache misses are filled batch
by batch instead of one forward pass per text. Models without a batched method (the tiny test
models of :mod:`sieve.models.tiny`) are called one text at a time; the result is the same.

Batch sizes are tuned on the 2-core CPU this project targets (``sieve bench models``; the
measurements are in docs/results/speed.md): padding waste grows with the batch, so length sorting
matters more than size; beyond 8 sequences of up to 512 tokens the causal LM gains nothing on 2
threads, the 6-layer token encoder keeps gaining up to 32. More threads ⇒ larger batches pay
(:func:`batch_size`).
"""
from __future__ import annotations

import os
from typing import Any, Sequence

import numpy as np

LM_BATCH = 8
"""Causal-LM sequences per forward pass at 2 threads (SmolLM2-135M, ≤ 512 tokens)."""
STATES_BATCH = 32
"""Token-encoder sequences per forward pass at 2 threads (MiniLM-L6, ≤ 256 tokens)."""
EMBED_BATCH = 8
"""Sentence-encoder sequences per forward pass at 2 threads: mpnet fp32 was fastest at 8 (larger
batches pad more; docs/results/speed.md §3). An embedder may declare its own ``encode_batch`` (the
bfloat16 encoder: 16)."""


def embed_batch(embedder: Any) -> int:
    """Sequences per forward pass for ``embedder``: its ``encode_batch`` or :data:`EMBED_BATCH`,
    scaled with the thread count (:func:`batch_size`)."""
    return batch_size(int(getattr(embedder, "encode_batch", EMBED_BATCH)))


def threads() -> int:
    """Threads the model runtimes use: ``$SIEVE_THREADS`` or the CPUs this process may run on."""
    return max(1, int(os.environ.get("SIEVE_THREADS") or len(os.sched_getaffinity(0)) or 1))


def batch_size(base: int) -> int:
    """``base`` (tuned at 2 threads) scaled with the thread count, capped at 4×."""
    return int(base * min(4, max(1, threads() // 2)))


def lm_traces(lm: Any, texts: Sequence[str], max_tokens: int) -> list[np.ndarray]:
    """Per-token NLL traces (float32) of ``texts`` in input order, batched when ``lm`` can."""
    texts = list(texts)
    many = getattr(lm, "token_nll_many", None)
    if many is not None:
        return [np.asarray(tr, np.float32) for _, tr in many(texts, max_tokens=max_tokens, tokens=False,
                                                             batch_size=batch_size(LM_BATCH))]
    return [np.asarray(lm.token_nll(t, max_tokens)[1], np.float32) for t in texts]


def token_states(encoder: Any, texts: Sequence[str], max_tokens: int) -> list[np.ndarray]:
    """Token states (float32 [L, d], rows L2-normalised) of ``texts`` in input order."""
    texts = list(texts)
    many = getattr(encoder, "token_states_many", None)
    if many is not None:
        return [np.asarray(s, np.float32) for s in many(texts, max_tokens, batch_size=batch_size(STATES_BATCH))]
    return [np.asarray(encoder.token_states(t, max_tokens), np.float32) for t in texts]
