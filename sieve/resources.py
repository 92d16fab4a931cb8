"""Lazy access to models and per-document caches for defenses, attacks and the runner.

A :class:`Resources` is handed to every ``Defense.inspect`` call. Each model role
(:attr:`Resources.ROLES`) is loaded on first use (once per process) from :mod:`sieve.models`, unless
the caller injected one (tests pass tiny in-process models). Query-independent per-document work
goes through the :class:`~sieve.index.ArtifactCache` keyed by content hash + model id
(docs/design.md). The cache keys of the LM trace and the token states carry the token limits of
:mod:`sieve.constants`.

Import direction: this module imports :mod:`sieve.models`, :mod:`sieve.index.cache` and (for query
vectors) :mod:`sieve.index.vector`; none imports it back (:func:`sieve.index.open_index` /
:func:`sieve.index.precompute_artifacts` take a ``Resources`` structurally, and tiny test resources
live in :mod:`sieve.testing_models`).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Sequence

import numpy as np

import sieve.models.batching as batching
from sieve.config import MODEL_ROLES, SieveConfig
from sieve.constants import LM_TRACE_TOKENS, TOKEN_STATE_TOKENS

if TYPE_CHECKING:
    from sieve.index.cache import ArtifactCache
    from sieve.models.protocols import CausalLM, Embedder, LLMClient, TokenEncoder

_UNSET: Any = object()


class Resources:
    """The model roles of one configuration, loaded lazily, plus the artifact cache.

    Models may be injected by role name: ``retriever``, ``judge``, ``causal_lm`` (``lm`` is the
    older keyword for the same role, kept for compatibility), ``token_encoder``, ``llm``.
    """

    ROLES: tuple[str, ...] = MODEL_ROLES
    """The canonical role names: ("retriever", "judge", "causal_lm", "token_encoder", "llm")."""

    def __init__(
        self,
        config: SieveConfig | None = None,
        *,
        retriever: "Embedder | None" = None,
        judge: "Embedder | None" = None,
        causal_lm: "CausalLM | None" = None,
        token_encoder: "TokenEncoder | None" = None,
        llm: "LLMClient | None" = _UNSET,
        cache: "ArtifactCache | None" = None,
        lm: "CausalLM | None" = None,
    ) -> None:
        if causal_lm is not None and lm is not None and causal_lm is not lm:
            raise ValueError("give the causal LM once: causal_lm= (lm= is its older alias)")
        self.config = config or SieveConfig().validate()
        self._retriever = retriever
        self._judge = judge
        self._lm = causal_lm if causal_lm is not None else lm
        self._token_encoder = token_encoder
        self._llm = llm
        self._cache = cache
        self._tokenizer: Any = None
        # a persistent cache is keyed by model id, which identifies weights only for models
        # resolved from the config; injected (test) models get an in-memory cache by default
        self._models_injected = any(m is not None for m in (retriever, judge, self._lm, token_encoder))

    # -- models (lazy) ---------------------------------------------------------------------------
    @property
    def retriever(self) -> "Embedder":
        if self._retriever is None:
            from sieve.models.loaders import load_embedder

            self._retriever = load_embedder(self.config.models.retriever, self.config)
        return self._retriever

    @property
    def judge(self) -> "Embedder":
        if self._judge is None:
            from sieve.models.loaders import load_embedder

            self._judge = load_embedder(self.config.models.judge, self.config, role="judge")
        return self._judge

    @property
    def causal_lm(self) -> "CausalLM":
        """The causal LM (RSQ surprisal E_p, perplexity filter)."""
        if self._lm is None:
            from sieve.models.loaders import load_causal_lm

            self._lm = load_causal_lm(self.config.models.causal_lm, self.config)
        return self._lm

    @property
    def lm(self) -> "CausalLM":
        """Alias of :attr:`causal_lm` (the same object), kept for compatibility."""
        return self.causal_lm

    @property
    def token_encoder(self) -> "TokenEncoder":
        if self._token_encoder is None:
            from sieve.models.loaders import load_token_encoder

            self._token_encoder = load_token_encoder(
                self.config.models.token_encoder, self.config.models.token_encoder_layer, self.config
            )
        return self._token_encoder

    @property
    def llm(self) -> "LLMClient | None":
        """The generator / verifier, or ``None`` when LLM use is disabled in the config."""
        if self._llm is _UNSET:
            if not self.config.llm.enabled:
                self._llm = None
            else:
                from sieve.models.loaders import load_llm

                self._llm = load_llm(self.config)
        return self._llm

    @property
    def cache(self) -> "ArtifactCache":
        if self._cache is None:
            from sieve.index.cache import ArtifactCache

            self._cache = (ArtifactCache.in_memory() if self._models_injected
                           else ArtifactCache.default(self.config))
        return self._cache

    # -- cached per-document artifacts -------------------------------------------------------------
    def judge_embeddings(self, texts: list[str]) -> np.ndarray:
        """Judge-space embeddings [n, d] (L2-normalised), cached per document (TRIS L1)."""
        if not texts:
            return np.zeros((0, self.judge.dim), np.float32)
        arrs = self.cache.get_or_compute(   # the judge is loaded only for cache misses
            "embedding", self._judge_id(), texts, lambda miss: list(self.judge.encode(miss, kind="passage"))
        )
        return np.vstack(arrs).astype(np.float32)

    def judge_query_embedding(self, query: str) -> np.ndarray:
        """The query's judge-space embedding (``kind="query"``, L2-normalised), persisted in the
        artifact cache like the retriever's query vectors (:func:`sieve.index.vector.query_embedding`,
        the judge's id; the judge is loaded only on a miss)."""
        from sieve.index.vector import query_embedding

        v = np.asarray(query_embedding(query, self._judge_id(), lambda: self.judge, self.cache), dtype=np.float32)
        return v / max(float(np.linalg.norm(v)), 1e-12)

    def _judge_id(self) -> str:
        """The judge's model id without loading it when the configuration already says it."""
        return str(self._judge.model_id) if self._judge is not None else self.artifact_model_ids()["judge"]

    def lm_trace(self, text: str, max_tokens: int = LM_TRACE_TOKENS) -> np.ndarray:
        """Per-token NLL trace of the causal LM (RSQ E_p, perplexity filter), cached per document
        under kind ``nll@<max_tokens>``."""
        return self.lm_traces([text], max_tokens)[0]

    def lm_traces(self, texts: Sequence[str], max_tokens: int = LM_TRACE_TOKENS) -> list[np.ndarray]:
        """:meth:`lm_trace` of many texts: cache misses are computed in length-sorted, padded
        batches (:func:`sieve.models.batching.lm_traces`); hits are read from the cache."""
        if not texts:
            return []
        # keyed by the model id alone: when every trace is cached (shipped pack, precompute) the
        # LM weights are never loaded
        return self.cache.get_or_compute(f"nll@{max_tokens}", self.causal_lm_id(), list(texts),
                                         lambda miss: batching.lm_traces(self.causal_lm, miss, max_tokens))

    def token_states(self, text: str, max_tokens: int = TOKEN_STATE_TOKENS) -> np.ndarray:
        """Token hidden states for BERTScore (RSQ E_s), cached per document under kind
        ``states@<max_tokens>``."""
        return self.token_states_many([text], max_tokens)[0]

    def token_states_many(self, texts: Sequence[str], max_tokens: int = TOKEN_STATE_TOKENS,
                          kind: str = "states") -> list[np.ndarray]:
        """:meth:`token_states` of many texts, misses computed in length-sorted batches. ``kind``
        names the cache entry (``"states"`` for documents, ``"query_states"`` for RSQ queries)."""
        if not texts:
            return []
        enc = self.token_encoder
        return self.cache.get_or_compute(f"{kind}@{max_tokens}", enc.model_id, list(texts),
                                         lambda miss: batching.token_states(enc, miss, max_tokens))

    def lm_token_strings(self, text: str, max_tokens: int = LM_TRACE_TOKENS) -> list[str] | None:
        """Display strings of the tokens an LM trace scores (positions 2..L), from the causal LM's
        tokenizer alone: no forward pass, and the LM weights are not loaded when only the
        tokenizer is needed (traces read from shipped artifacts). ``None`` if the LM has none."""
        tok = self._lm_tokenizer()
        if tok is None:
            return None
        ids = tok(text, add_special_tokens=False)["input_ids"][:max_tokens]
        return [tok.decode([t]) for t in ids[1:]]

    def _lm_tokenizer(self) -> Any:
        if self._lm is not None:
            return getattr(self._lm, "tokenizer", None)
        if self._tokenizer is None:
            from sieve.models.loaders import load_causal_lm_tokenizer

            self._tokenizer = load_causal_lm_tokenizer(self.config.models.causal_lm, self.config)
        return self._tokenizer

    def artifact_model_ids(self) -> dict[str, str]:
        """Model id per role whose per-document artifacts are cached (judge, causal_lm,
        token_encoder), without loading any weights: the keys of shipped artifact packs."""
        from sieve.models.loaders import embedder_model_id, token_encoder_model_id

        m = self.config.models
        return {
            # an int8 judge's id depends on its agreement gate: known only once loaded
            "judge": (str(self.judge.model_id) if self._judge is not None or m.backend in ("onnx-int8", "torch-bf16")
                      else embedder_model_id(m.judge, "judge")),
            "causal_lm": self.causal_lm_id(),
            "token_encoder": (str(self._token_encoder.model_id) if self._token_encoder is not None
                              else token_encoder_model_id(m.token_encoder, m.token_encoder_layer)),
        }

    def causal_lm_id(self) -> str:
        """The causal LM's model id without loading its weights (cache keys of shipped traces)."""
        if self._lm is not None:
            return str(self._lm.model_id)
        from sieve.models.loaders import causal_lm_model_id

        return causal_lm_model_id(self.config.models.causal_lm)
