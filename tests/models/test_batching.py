"""Batched model work (issue 15): batched results equal one-at-a-time results within 1e-4, and
cache misses are filled by batched calls (sieve/models/batching.py, Resources.lm_traces)."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from sieve.index import ArtifactCache
from sieve.models import batching
from sieve.resources import Resources

DEMO = Path(__file__).resolve().parents[2] / "demo_data" / "corpus.jsonl"


def demo_texts(n: int) -> list[str]:
    rows = [json.loads(line)["text"] for line in DEMO.read_text(encoding="utf-8").splitlines()[:n]]
    return rows + ["Short.", "x", "A much longer passage " * 150]   # 1 token, and one truncated at 512


@pytest.mark.realmodel
def test_batched_lm_traces_equal_one_at_a_time(real_lm):
    texts = demo_texts(10)
    batched = batching.lm_traces(real_lm, texts, 512)
    for t, b in zip(texts, batched):
        single = real_lm.token_nll(t, 512)[1]
        assert b.shape == single.shape
        np.testing.assert_allclose(b, single, atol=1e-4, rtol=0)
    assert batched[-2].size == 0 and batched[-1].size == 511


@pytest.mark.realmodel
def test_batched_token_states_equal_one_at_a_time(real_token_encoder):
    texts = demo_texts(10)
    batched = batching.token_states(real_token_encoder, texts, 256)
    for t, b in zip(texts, batched):
        single = real_token_encoder.token_states(t, 256)
        assert b.shape == single.shape
        np.testing.assert_allclose(b, single, atol=1e-4, rtol=0)


class CountingLM:
    """Wraps a causal LM and counts batched calls and texts."""

    def __init__(self, inner):
        self.inner, self.model_id = inner, inner.model_id
        self.calls: list[int] = []

    def token_nll(self, text, max_tokens=512):
        self.calls.append(1)
        return self.inner.token_nll(text, max_tokens)

    def token_nll_many(self, texts, max_tokens=512, batch_size=8, tokens=True):
        self.calls.append(len(texts))
        return self.inner.token_nll_many(texts, max_tokens=max_tokens, batch_size=batch_size, tokens=tokens)


@pytest.mark.realmodel
def test_resources_fill_misses_in_one_batched_call(real_lm, tiny_token_encoder):
    lm = CountingLM(real_lm)
    res = Resources(causal_lm=lm, token_encoder=tiny_token_encoder, cache=ArtifactCache.in_memory())
    texts = demo_texts(6)[:6]
    res.lm_trace(texts[0])
    assert lm.calls == [1]
    got = res.lm_traces(texts)                  # 5 misses, one batched call; the hit is read
    assert lm.calls == [1, 5]
    np.testing.assert_allclose(got[3], real_lm.token_nll(texts[3])[1], atol=1e-4)
    res.lm_traces(texts)
    assert lm.calls == [1, 5]                   # all cached now


def test_batch_size_scales_with_threads(monkeypatch):
    monkeypatch.setenv("SIEVE_THREADS", "2")
    assert batching.batch_size(batching.LM_BATCH) == 8
    monkeypatch.setenv("SIEVE_THREADS", "8")
    assert batching.batch_size(batching.LM_BATCH) == 32
    monkeypatch.setenv("SIEVE_THREADS", "64")
    assert batching.batch_size(batching.STATES_BATCH) == 128
