"""RSG throughput benchmark: docs/s of the exact scan vs. approximate (HNSW, IVF) neighbour
search, and the approximate modes' neighbour recall against exact on the same data.

    .venv/bin/python bench/rsg_bench.py [--sizes 10000,100000] [--dim 384] [--demo-embedder all-MiniLM-L6-v2]

* demo size: demo_data/source/*.json passages + their poison payloads (~780 documents), embedded
  once with ``--demo-embedder`` (cached in the Sieve artifact cache); also prints how many
  payloads RSG flags there;
* synthetic: random clustered unit vectors (``--dim``) with short random-word texts.

Prints a table; nothing is asserted.
"""
from __future__ import annotations

import argparse
import glob
import json
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from sieve.defenses.rsg import audit_corpus, neighbour_recall  # noqa: E402


def demo_corpus() -> tuple[list[str], list[str], list[bool]] | None:
    files = sorted(glob.glob(str(ROOT / "demo_data" / "source" / "*.json")))
    if not files:
        return None
    ids, texts, poison = [], [], []
    for f in files:
        topic = json.loads(Path(f).read_text(encoding="utf-8"))
        for p in topic["passages"]:
            ids.append(p["id"]); texts.append(p["text"]); poison.append(False)  # noqa: E702
        for j, p in enumerate(topic["target"]["payloads"]):
            ids.append(f"{topic['slug']}-poison-{j}"); texts.append(p["text"]); poison.append(True)  # noqa: E702
    return ids, texts, poison


def synthetic(n: int, dim: int, seed: int = 0) -> tuple[list[str], list[str], np.ndarray]:
    rng = np.random.default_rng(seed)
    n_clusters = max(10, n // 50)
    centres = rng.normal(size=(n_clusters, dim)).astype(np.float32)
    centres /= np.linalg.norm(centres, axis=1, keepdims=True)
    assign = rng.integers(0, n_clusters, n)
    noise = rng.normal(size=(n, dim)).astype(np.float32)
    noise /= np.linalg.norm(noise, axis=1, keepdims=True)
    scale = rng.uniform(0.3, 0.9, size=(n, 1)).astype(np.float32)   # within-cluster cosine ≈ 0.55–0.95
    v = centres[assign] + scale * noise
    vocab = [f"w{i}" for i in range(5000)]
    texts = [" ".join(rng.choice(vocab, 12)) for _ in range(n)]
    return [f"s{i}" for i in range(n)], texts, v


def run(label: str, ids, texts, vectors, modes: list[str]) -> dict[str, object]:
    results = {}
    exact = None
    for mode in modes:
        t = time.perf_counter()
        a = audit_corpus(ids, texts, vectors, mode=mode)
        dt = time.perf_counter() - t
        if mode == "exact":
            exact = a
        rec = neighbour_recall(exact, a) if exact is not None else float("nan")
        same_flags = (len(set(a.flagged_ids) ^ set(exact.flagged_ids)) if exact is not None else 0)
        results[mode] = a
        print(f"{label:<22} {len(ids):>7}  {mode:<6} {dt:8.2f} s  {len(ids) / dt:9.0f} docs/s  "
              f"recall {rec:.4f}  flags {int(a.flagged.sum()):>5}  flag diff vs exact {same_flags}")
    return results


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="10000,100000")
    ap.add_argument("--dim", type=int, default=384)
    ap.add_argument("--demo-embedder", default="all-MiniLM-L6-v2")
    ap.add_argument("--modes", default="exact,hnsw,ivf")
    args = ap.parse_args()
    modes = args.modes.split(",")
    print(f"{'corpus':<22} {'docs':>7}  {'mode':<6} {'time':>10}  {'throughput':>16}  …")

    demo = demo_corpus()
    if demo is not None:
        from sieve.config import SieveConfig
        from sieve.index import ArtifactCache
        from sieve.models import load_embedder

        ids, texts, poison = demo
        cfg = SieveConfig().validate()
        emb = load_embedder(args.demo_embedder, cfg)
        cache = ArtifactCache.default(cfg)
        t = time.perf_counter()
        vecs = np.vstack(cache.get_or_compute("embedding", emb.model_id, texts,
                                              lambda miss: list(emb.encode(miss, kind="passage"))))
        print(f"(demo embeddings {emb.model_id}: {time.perf_counter() - t:.1f} s, cached)")
        res = run(f"demo ({emb.model_id[:12]})", ids, texts, vecs, modes)
        a = res["exact"]
        flagged = set(a.flagged_ids)
        n_pos = sum(poison)
        tp = sum(1 for i, p in zip(ids, poison) if p and i in flagged)
        fp = sum(1 for i, p in zip(ids, poison) if not p and i in flagged)
        print(f"  demo exact: payloads flagged {tp}/{n_pos}, clean flagged {fp}/{len(ids) - n_pos}, "
              f"f_I={a.f_I:.4f} f_T={a.f_T:.4f}")
    for n in [int(s) for s in args.sizes.split(",") if s]:
        ids, texts, vecs = synthetic(n, args.dim)
        run(f"synthetic d={args.dim}", ids, texts, vecs, modes)


if __name__ == "__main__":
    main()
