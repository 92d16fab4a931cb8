"""Tiny deterministic in-process models that satisfy the model protocols.

They exist so unit tests run in milliseconds without packaged weights; every model-backed
component also has a test against the real packaged model (``tests/models``). They are not
used by default anywhere in the product. A :class:`~sieve.resources.Resources` made of them is
built by :func:`sieve.testing_models.tiny_resources` (not here: this package never imports
:mod:`sieve.resources`).
"""
from __future__ import annotations

import hashlib
import math
import re
from typing import Callable, Sequence

import numpy as np

from sieve.constants import LM_TRACE_TOKENS

_WORD = re.compile(r"\w+", re.UNICODE)

TESTING_RETRIEVER = "tiny-hashing"
"""Hidden retriever name the CLI resolves to the tiny models (tests, smoke checks)."""


def _bucket(token: str, dim: int) -> tuple[int, float]:
    h = int.from_bytes(hashlib.blake2b(token.encode("utf-8"), digest_size=8).digest(), "little")
    return h % dim, (1.0 if (h >> 63) & 1 else -1.0)


class HashingEmbedder:
    """Bag-of-words (+ bigrams) hashed into ``dim`` signed buckets, L2-normalised."""

    def __init__(self, dim: int = 64, model_id: str = "tiny-hashing", max_tokens: int = 256):
        self.dim = dim
        self.model_id = f"{model_id}-{dim}"
        self.max_tokens = max_tokens

    def encode(self, texts: Sequence[str], kind: str = "passage", batch_size: int = 32,
               progress: bool = False) -> np.ndarray:
        out = np.zeros((len(texts), self.dim), np.float32)
        for i, t in enumerate(texts):
            toks = [w.lower() for w in _WORD.findall(t)][: self.max_tokens]
            for tok in toks + [a + " " + b for a, b in zip(toks, toks[1:])]:
                j, s = _bucket(tok, self.dim)
                out[i, j] += s
            n = np.linalg.norm(out[i])
            if n == 0:
                out[i, 0] = 1.0
            else:
                out[i] /= n
        return out


class HashingTokenEncoder:
    """Per-token vectors: hashed one-hot of the token mixed with its neighbours, L2-normalised."""

    def __init__(self, dim: int = 32):
        self.dim = dim
        self.model_id = f"tiny-token-{dim}"

    def token_states(self, text: str, max_tokens: int) -> np.ndarray:
        toks = [w.lower() for w in _WORD.findall(text)][: max(0, max_tokens - 2)]
        out = np.zeros((len(toks), self.dim), np.float32)
        for i, tok in enumerate(toks):
            j, s = _bucket(tok, self.dim)
            out[i, j] += s
            if i > 0:
                j2, s2 = _bucket(toks[i - 1], self.dim)
                out[i, j2] += 0.3 * s2
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        norms[norms == 0] = 1.0
        return out / norms


class UnigramLM:
    """Word-level unigram LM with add-one smoothing, fitted on ``corpus``; NLL per word in nats.

    ``generate`` returns ``reply(prompt)`` if given, else the most frequent word.
    """

    def __init__(self, corpus: Sequence[str] = (), reply: Callable[[str], str] | None = None,
                 model_id: str = "tiny-unigram"):
        self.model_id = model_id
        self.counts: dict[str, int] = {}
        for t in corpus:
            for w in _WORD.findall(t.lower()):
                self.counts[w] = self.counts.get(w, 0) + 1
        self.total = sum(self.counts.values())
        self.vocab = len(self.counts) + 1
        self._reply = reply

    def _nll(self, w: str) -> float:
        return -math.log((self.counts.get(w, 0) + 1) / (self.total + self.vocab))

    def token_nll(self, text: str, max_tokens: int = LM_TRACE_TOKENS) -> tuple[list[str], np.ndarray]:
        toks = [w.lower() for w in _WORD.findall(text)][:max_tokens]
        return toks[1:], np.array([self._nll(w) for w in toks[1:]], np.float32)

    def answer_nll(self, answer: str, context: str) -> float:
        ctx = set(_WORD.findall(context.lower()))
        toks = _WORD.findall(answer.lower())
        if not toks:
            return 0.0
        return float(np.mean([0.05 if w in ctx else self._nll(w) for w in toks]))

    def generate(self, prompt: str, system: str | None = None, max_new_tokens: int = 64) -> str:
        if self._reply is not None:
            return self._reply(prompt)
        return max(self.counts, key=lambda w: self.counts[w]) if self.counts else ""


class ScriptedLLM:
    """An :class:`~sieve.models.protocols.LLMClient` whose replies come from a Python function.

    ``reply(prompt, system) -> str`` may raise :class:`sieve.models.errors.LLMError` to simulate
    endpoint failures. ``nll`` delegates to ``scorer`` when given.
    """

    def __init__(self, reply: Callable[[str, str | None], str],
                 scorer: Callable[[str, str], float] | None = None, model_id: str = "scripted"):
        self.model_id = model_id
        self._reply = reply
        self._scorer = scorer
        self.supports_nll = scorer is not None
        self.calls: list[tuple[str, str | None]] = []

    def generate(self, prompt: str, system: str | None = None, max_tokens: int = 128,
                 temperature: float = 0.0, json_mode: bool = False) -> str:
        self.calls.append((prompt, system))
        return self._reply(prompt, system)

    def nll(self, answer: str, context: str) -> float:
        if self._scorer is None:
            from sieve.models.errors import LLMError

            raise LLMError(f"{self.model_id} cannot score likelihoods")
        return self._scorer(answer, context)

