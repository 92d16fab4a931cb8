"""What each configured role resolves to, and building the packaged caches (``sieve models``)."""
from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import sieve.models.cache as _cache
from sieve.config import SieveConfig
from sieve.models.errors import ModelError
from sieve.models.packaged import cache_entry, ensure_model_dir, expected_info
from sieve.models.registry import find_spec, known_names, package_installed
from sieve.models.resolve import config_or_default, resolve


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


def configured_roles(cfg: SieveConfig) -> list[tuple[str, str]]:
    """(role, configured name) for every role; an LLM endpoint shows as ``endpoint:<url>``."""
    roles = [("retriever", cfg.models.retriever), ("judge", cfg.models.judge),
             ("causal_lm", cfg.models.causal_lm), ("token_encoder", cfg.models.token_encoder)]
    if cfg.llm.resolved_base_url():
        roles.append(("llm", f"endpoint:{cfg.llm.resolved_base_url()}"))
    else:
        roles.append(("llm", cfg.llm.local_model))
    return roles


def model_status(config: SieveConfig | None = None) -> list[ModelStatus]:
    """One row per role: what it resolves to, whether packages and caches are present (no loading)."""
    cfg = config_or_default(config)
    rows: list[ModelStatus] = []
    for role, name in configured_roles(cfg):
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
    cfg = config_or_default(config)
    if names is None:
        names = []
        for role, name in configured_roles(cfg):
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
