"""Offline model stack: one place that resolves each role to a model (docs/models.md).

A role's name is one of

* ``"default"`` — the packaged default for the role (:data:`sieve.config.MODEL_DEFAULTS`:
  retriever all-mpnet-base-v2, judge all-MiniLM-L6-v2, causal LM smollm2-135m, token encoder
  all-MiniLM-L6-v2 at layer 4, LLM qwen2.5-coder-0.5b);
* a registered short name or alias (:data:`sieve.models.registry.MODEL_SPECS`);
* a local path: a sentence-transformers / transformers directory, or a ``.gguf`` file;
* a Hugging Face model id *only if* it is already in the local HF cache (never downloaded).

Loaders cache one instance per process, keyed by (name, layer, cache dir). Packaged weights that
need joining or dequantising are built once under ``<cache_dir>/models`` (:mod:`sieve.models.cache`).

This face only re-exports; the logic lives in :mod:`~sieve.models.resolve` (names → models),
:mod:`~sieve.models.loaders` (one loader per role), :mod:`~sieve.models.packaged` (packaged
weights as loadable directories), :mod:`~sieve.models.status` (``sieve models``) and
:mod:`~sieve.models.threads`.
"""
from __future__ import annotations

from sieve.models.errors import LLMError, ModelError, ModelNotInstalledError
from sieve.models.loaders import load_causal_lm, load_embedder, load_llm, load_token_encoder
from sieve.models.packaged import cache_entry, ensure_model_dir, expected_info
from sieve.models.registry import MODEL_SPECS, ModelSpec, find_spec, known_names
from sieve.models.resolve import DEFAULTS, Resolution, resolve
from sieve.models.status import ModelStatus, build_caches, model_status
from sieve.models.threads import configure_threads

__all__ = [
    "load_embedder", "load_causal_lm", "load_token_encoder", "load_llm", "resolve", "ensure_model_dir",
    "Resolution", "model_status", "build_caches", "ModelError", "ModelNotInstalledError", "LLMError",
    "DEFAULTS", "MODEL_SPECS", "ModelSpec", "ModelStatus", "cache_entry", "configure_threads",
    "expected_info", "find_spec", "known_names",
]
