"""Shipped per-document artifacts: the demo starts warm (first explorer call: docs/results/dashboard.md).

Besides the retriever vectors (:func:`sieve.index.export_index_artifacts`), a dataset may carry an
*artifact pack* in ``<dataset>/.artifacts/pack/``: the query-independent per-document arrays the
query-time defenses read — judge embeddings (TRIS L1, TrustRAG) and causal-LM NLL traces (RSQ
E_p, perplexity filter) — for the corpus and every attack family's documents. Token states (RSQ
E_s) are not shipped: at ~80 tokens × 384 floats per passage they would weigh ~140 MB for the
demo; they are computed in batches on first use or by ``sieve index --precompute``.

Layout: one ``<kind>__<model>.npz`` per (cache kind, model id) holding ``keys`` (content hashes,
:func:`sieve.types.content_hash`), ``offsets`` and float16 ``data`` (rows of all arrays stacked),
plus ``manifest.json`` with the corpus hash, the model id of each file and its sha256.

On :func:`sieve.index.open_index` the pack seeds the artifact cache once (a marker row keyed by the
manifest's checksum makes later opens free). A pack is rejected — nothing seeded, the arrays are
computed on demand instead, and the reason logged — when the manifest fails to parse, a file
fails its checksum, the corpus hash differs from the dataset's, or a file's model id differs
from the configured model of its role (that file alone is skipped).

Rebuild the demo's vectors and pack (after the corpus, the attacks or a default model changed)::

    .venv/bin/python scripts/build_artifacts.py demo_data
"""
from __future__ import annotations

import functools
import hashlib
import json
import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, Sequence

import numpy as np

from sieve.corpus.hashing import corpus_hash
from sieve.index.cache import ArtifactCache
from sieve.index.storage import atomic_write, file_sha256, safe_name
from sieve.types import Document, content_hash

if TYPE_CHECKING:
    from sieve.corpus.dataset import Dataset

log = logging.getLogger("sieve.index")

PACK_DIR = "pack"
PACK_FORMAT = 1
SEEDED_KIND = "_shipped_pack"
"""Cache kind of the marker row that says a pack (by manifest checksum) was already seeded."""


class PackSource(Protocol):
    """What :func:`export_pack` / :func:`seed_from_pack` use of a :class:`sieve.resources.Resources`."""

    @property
    def cache(self) -> ArtifactCache: ...

    def artifact_model_ids(self) -> dict[str, str]: ...


def pack_texts(dataset: "Dataset") -> list[str]:
    """The passages a pack covers: the corpus, then every attack family's documents (unique)."""
    texts = [d.text for d in dataset.documents]
    for fam in dataset.attack_families():
        texts.extend(d.text for d in dataset.attack_documents(fam))
    return list(dict.fromkeys(texts))


def _file_name(kind: str, model_id: str) -> str:
    return f"{safe_name(kind)}__{safe_name(model_id)}.npz"


def export_pack(dataset: "Dataset", resources: Any, kinds: Sequence[str] = ("judge", "lm"),
                directory: str | Path | None = None, progress: bool = True) -> Path:
    """Compute (through the cache, batched) and write the pack of ``dataset`` for ``kinds``
    (``judge``: judge embeddings, ``lm``: NLL traces) into ``<dataset>/.artifacts/pack``."""
    from sieve.index.precompute import precompute_artifacts

    out = Path(directory) if directory is not None else Path(dataset.path) / ".artifacts" / PACK_DIR
    out.mkdir(parents=True, exist_ok=True)
    texts = pack_texts(dataset)
    docs = [Document(f"p{i}", t) for i, t in enumerate(texts)]
    precompute_artifacts(docs, resources, kinds=kinds, progress=progress)
    ids = resources.artifact_model_ids()
    files = []
    for kind in kinds:
        cache_kind = {"judge": "embedding@judge", "lm": "nll"}[kind]
        ckind, model_id = _cache_kind(cache_kind, ids)
        keys = [content_hash(t) for t in texts]
        got = resources.cache.get_many(ckind, model_id, keys)
        arrays = [np.asarray(got[k]) for k in keys]
        # one 1-d array per passage (an embedding row, or a trace); traces stay float32 (exact, small)
        data = np.concatenate([a.reshape(-1) for a in arrays]) if arrays else np.zeros(0, np.float32)
        data = data.astype(np.float16 if kind == "judge" else np.float32)
        offsets = np.cumsum([0] + [a.size for a in arrays]).astype(np.int64)
        name = _file_name(ckind, model_id)
        atomic_write(out / name, functools.partial(_save_npz, keys=keys, offsets=offsets, data=data))
        files.append({"file": name, "kind": ckind, "role": kind, "model_id": model_id, "n": len(keys),
                      "sha256": file_sha256(out / name), "bytes": (out / name).stat().st_size})
    manifest = {"format": PACK_FORMAT, "corpus_hash": corpus_hash(dataset.documents),
                "n_corpus": len(dataset.documents), "n_texts": len(texts),
                "attack_families": dataset.attack_families(), "files": files}
    atomic_write(out / "manifest.json", lambda p: p.write_text(json.dumps(manifest, indent=1), encoding="utf-8"))
    return out


def _save_npz(path: Path, keys: list[str], offsets: np.ndarray, data: np.ndarray) -> None:
    with open(path, "wb") as fh:
        np.savez_compressed(fh, keys=np.asarray(keys, dtype="S32"), offsets=offsets, data=data)


def _cache_kind(name: str, ids: dict[str, str]) -> tuple[str, str]:
    """(cache kind, model id) of a pack role, from the resources' configured model ids."""
    from sieve.constants import LM_TRACE_TOKENS

    if name == "embedding@judge":
        return "embedding", ids["judge"]
    return f"nll@{LM_TRACE_TOKENS}", ids["causal_lm"]


def seed_from_pack(dataset: "Dataset", resources: Any, directory: str | Path | None = None) -> dict[str, Any]:
    """Seed ``resources.cache`` from the dataset's pack (see the module docstring). Returns a
    report: ``status`` (``seeded``, ``already``, ``none``, ``rejected``), ``reason``, ``rows``."""
    d = Path(directory) if directory is not None else Path(dataset.path) / ".artifacts" / PACK_DIR
    mpath = d / "manifest.json"
    if not mpath.is_file():
        return {"status": "none", "reason": f"no pack in {d}", "rows": 0}
    try:
        raw = mpath.read_bytes()
        manifest = json.loads(raw)
        files = list(manifest["files"])
    except (OSError, ValueError, KeyError, TypeError) as e:
        return _reject(d, f"manifest unreadable ({e})")
    chash = corpus_hash(dataset.documents)
    if manifest.get("corpus_hash") != chash:
        return _reject(d, "corpus hash differs (the corpus changed since the pack was built)")
    cache: ArtifactCache = resources.cache
    digest = hashlib.sha256(raw).hexdigest()[:32]
    ids = resources.artifact_model_ids()
    want = {"judge": ids.get("judge"), "lm": ids.get("causal_lm")}
    marker = f"{digest}:{want['judge']}:{want['lm']}"
    if cache.get_many(SEEDED_KIND, "pack", [content_hash(marker)]):
        return {"status": "already", "reason": "seeded before", "rows": 0}
    rows, skipped, other_model = 0, [], []
    for f in files:
        try:
            path = d / str(f["file"])
            if want.get(str(f.get("role"))) != f.get("model_id"):   # another configured model: not an error
                other_model.append(f"{f['file']}: model id {f.get('model_id')} is not the configured "
                                   f"{f.get('role')} model {want.get(str(f.get('role')))}")
                continue
            if file_sha256(path) != f.get("sha256"):
                skipped.append(f"{f['file']} fails its checksum")
                continue
            with np.load(path, allow_pickle=False) as z:
                keys = [k.decode("ascii") for k in z["keys"]]
                offsets, data = z["offsets"], z["data"]
        except (OSError, ValueError, KeyError, TypeError) as e:
            skipped.append(f"{f.get('file')}: unreadable ({e})")
            continue
        have = cache.get_many(str(f["kind"]), str(f["model_id"]), keys)
        todo = [i for i, k in enumerate(keys) if k not in have]
        cache.put_keys(str(f["kind"]), str(f["model_id"]), [keys[i] for i in todo],
                       [data[offsets[i]:offsets[i + 1]] for i in todo])
        rows += len(todo)
    for why in skipped:
        log.warning("shipped artifact pack %s: %s; those artifacts are computed on demand", d, why)
    for why in other_model:
        log.info("shipped artifact pack %s: %s; skipped", d, why)
    if not skipped:   # damaged files are retried next time; a model mismatch is final for this marker
        cache.put_keys(SEEDED_KIND, "pack", [content_hash(marker)], [np.zeros(1, np.float32)])
    reasons = skipped + other_model
    return {"status": "seeded" if not reasons else "partial", "reason": "; ".join(reasons) or "ok", "rows": rows}


def _reject(d: Path, why: str) -> dict[str, Any]:
    log.warning("shipped artifact pack %s rejected: %s; artifacts are computed on demand", d, why)
    return {"status": "rejected", "reason": why, "rows": 0}

