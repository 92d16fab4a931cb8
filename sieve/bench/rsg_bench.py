"""RSG throughput benchmark: docs/s of the exact scan vs. approximate (HNSW, IVF) neighbour
search, and the approximate modes' neighbour recall against exact on the same data.

    .venv/bin/python -m sieve.bench.rsg_bench [--sizes 10000,100000] [--dim 384] [--demo-embedder all-MiniLM-L6-v2]

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
import time
from pathlib import Path
from typing import Any

import numpy as np

from sieve.bench import DEMO_DATA
from sieve.defenses.rsg import audit_corpus, neighbour_recall


def demo_corpus() -> tuple[list[str], list[str], list[bool]] | None:
    files = sorted(glob.glob(str(DEMO_DATA / "source" / "*.json")))
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


def sampled_exact(vectors: np.ndarray, rows: np.ndarray, k: int = 16) -> tuple[float, np.ndarray]:
    """Exact kNN (FAISS flat, self masked) for a sample of rows: (seconds, neighbour ids [len(rows), k])."""
    import faiss

    x = vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
    x = np.ascontiguousarray(x, dtype=np.float32)
    t = time.perf_counter()
    index = faiss.IndexFlatIP(x.shape[1])
    index.add(x)
    _, idx = index.search(x[rows], k + 1)
    dt = time.perf_counter() - t
    out = np.array([[j for j in r if j != i][:k] for i, r in zip(rows, idx)], np.int64)
    return dt, out


def run_large(label: str, ids, texts, vectors, modes: list[str], sample: int) -> None:
    """Large corpora: exact throughput estimated from a row sample (kNN dominates, O(N) per row);
    approximate modes run the full audit; recall measured on the sampled rows."""
    rng = np.random.default_rng(1)
    rows = np.sort(rng.choice(len(ids), min(sample, len(ids)), replace=False))
    dt, exact_rows = sampled_exact(vectors, rows)
    est = len(rows) / dt
    print(f"{label:<22} {len(ids):>7}  exact  {len(ids) / est:8.1f} s* {est:9.0f} docs/s  "
          f"(* kNN time extrapolated from {len(rows)} sampled rows)")
    for mode in modes:
        if mode == "exact":
            continue
        t = time.perf_counter()
        a = audit_corpus(ids, texts, vectors, mode=mode)
        dt = time.perf_counter() - t
        rec = neighbour_recall(exact_rows, a.neighbour_ids[rows])
        print(f"{label:<22} {len(ids):>7}  {mode:<6} {dt:8.2f} s  {len(ids) / dt:9.0f} docs/s  "
              f"recall {rec:.4f} (on the sample)  flags {int(a.flagged.sum()):>5}")


def run(label: str, ids, texts, vectors, modes: list[str]) -> dict[str, Any]:
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
    ap.add_argument("--full-exact-max", type=int, default=20000,
                    help="above this size the exact scan is timed on a row sample")
    ap.add_argument("--sample", type=int, default=5000)
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
        if n > args.full_exact_max:
            run_large(f"synthetic d={args.dim}", ids, texts, vecs, modes, args.sample)
        else:
            run(f"synthetic d={args.dim}", ids, texts, vecs, modes)


if __name__ == "__main__":
    main()
