"""Packaged model weights as loadable directories: the per-model caches under ``<cache_dir>/models``.

Packaged weights that need joining or dequantising are built once (:mod:`sieve.models.cache`).
"""
from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import sieve.models.cache as _cache
from sieve.models.errors import ModelError
from sieve.models.registry import (
    SOURCE_ENGINE,
    SOURCE_GGUF,
    SOURCE_PACKAGE_DIR,
    SOURCE_SPLIT_ZIP,
    ModelSpec,
    require_packages,
)
from sieve.models.threads import configure_threads


def _located(spec: ModelSpec) -> list[Path]:
    """The package files of a packaged model (its spec's ``locate``)."""
    if spec.locate is None:   # pragma: no cover - every packaged spec has one
        raise ModelError(f"{spec.name}: no package files to locate")
    return spec.locate(spec)


def cache_entry(spec: ModelSpec, cache_dir: Path) -> Path:
    return _cache.models_dir(cache_dir) / spec.name


def ensure_model_dir(spec: ModelSpec, cache_dir: Path, role: str = "model", progress: bool = True) -> Path:
    """The loadable directory of a packaged model, building its cache first if needed."""
    require_packages(spec, role)
    if spec.source in (SOURCE_PACKAGE_DIR, SOURCE_ENGINE):
        path = _located(spec)[0]
        bad = [rel for rel, size in spec.expected_sizes.items()
               if not (path / rel).exists() or (path / rel).stat().st_size != size]
        if bad:
            raise ModelError(f"package files of {spec.name} are damaged ({', '.join(bad)}); reinstall: {spec.install}")
        return path
    entry = cache_entry(spec, cache_dir)
    if spec.source == SOURCE_SPLIT_ZIP:
        def build(tmp: Path) -> dict:
            _cache.say(f"sieve: building the {spec.name} cache (join + unzip, ≈15 s, once) in {entry}")
            return _cache.extract_split_zip(_located(spec), tmp, progress=progress)
    elif spec.source == SOURCE_GGUF:
        def build(tmp: Path) -> dict:
            secs = "≈30 s" if (spec.source_size or 0) < 200_000_000 else "≈90 s"
            _cache.say(f"sieve: building the {spec.name} cache (dequantise GGUF, {secs}, once) in {entry}")
            return gguf_build(spec, tmp, progress)
    else:  # pragma: no cover
        raise ModelError(f"unknown source kind {spec.source!r} for {spec.name}")
    return _cache.ensure_entry(entry, build, expected_sizes=spec.expected_sizes,
                               expected_info=expected_info(spec), label=spec.name)


def expected_info(spec: ModelSpec) -> dict:
    """Manifest fields a valid cache of ``spec`` must carry (a dtype change forces a rebuild)."""
    return {"save_dtype": spec.save_dtype} if spec.source == SOURCE_GGUF else {}


def gguf_build(spec: ModelSpec, tmp: Path, progress: bool) -> dict:
    parts = _located(spec)
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


def local_gguf_dir(path: Path, cache_dir: Path) -> Path:
    """A user-supplied .gguf file, dequantised once into ``models/local-<name>-<key>``."""
    st = path.stat()
    key = hashlib.sha1(f"{path.resolve()}|{st.st_size}|{int(st.st_mtime)}".encode()).hexdigest()[:10]
    entry = _cache.models_dir(cache_dir) / f"local-{path.stem}-{key}"

    def build(tmp: Path) -> dict:
        _cache.say(f"sieve: dequantising {path} once into {entry}")
        configure_threads()
        return _cache.dequantise_gguf(path.parent, path.name, tmp)

    return _cache.ensure_entry(entry, build, label=path.name)
