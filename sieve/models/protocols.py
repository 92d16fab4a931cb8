"""Interfaces of the model roles. Implementations live beside this file; tests may pass tiny
in-process models that satisfy the same protocol.

Roles (docs/design.md "Models"): retriever / judge = :class:`Embedder`; causal LM for surprisal and
perplexity = :class:`CausalLM`; BERTScore token encoder = :class:`TokenEncoder`; generator and
L3 verifier = :class:`LLMClient`.
"""
from __future__ import annotations

from typing import Protocol, Sequence, runtime_checkable

import numpy as np

from sieve.constants import LM_TRACE_TOKENS


@runtime_checkable
class Embedder(Protocol):
    model_id: str          # stable id used in manifests and cache keys, e.g. "all-mpnet-base-v2"
    dim: int
    max_tokens: int

    def encode(self, texts: Sequence[str], kind: str = "passage", batch_size: int = 32,
               progress: bool = False) -> np.ndarray:
        """float32 array [n, dim], rows L2-normalised. ``kind`` is "query" or "passage"."""
        ...


@runtime_checkable
class CausalLM(Protocol):
    model_id: str

    def token_nll(self, text: str, max_tokens: int = LM_TRACE_TOKENS) -> tuple[list[str], np.ndarray]:
        """Per-token NLL in nats for tokens 2..L of ``text`` (no BOS), and those tokens' strings."""
        ...

    def answer_nll(self, answer: str, context: str) -> float:
        """Mean NLL (nats/token) of ``answer`` tokens following ``context``."""
        ...

    def generate(self, prompt: str, system: str | None = None, max_new_tokens: int = 64) -> str:
        """Greedy chat completion."""
        ...


@runtime_checkable
class TokenEncoder(Protocol):
    model_id: str   # includes the layer, e.g. "all-mpnet-base-v2@layer9"

    def token_states(self, text: str, max_tokens: int) -> np.ndarray:
        """float32 [L, d] hidden states of the content tokens (special tokens dropped), rows L2-normalised.
        Truncation to ``max_tokens`` (special tokens included) happens before dropping specials."""
        ...


@runtime_checkable
class LLMClient(Protocol):
    model_id: str
    supports_nll: bool

    def generate(self, prompt: str, system: str | None = None, max_tokens: int = 128,
                 temperature: float = 0.0, json_mode: bool = False) -> str:
        """One completion. Raises :class:`sieve.models.errors.LLMError` on transport/timeout failure."""
        ...

    def nll(self, answer: str, context: str) -> float:
        """Mean NLL of ``answer`` given ``context``; raises LLMError if the backend cannot score."""
        ...
