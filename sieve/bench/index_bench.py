"""Indexing benchmark: embedding throughput per retriever, query latency, index load time
(cold = first open in a fresh process, warm = reopen in the same process) and ArtifactCache reads.

    .venv/bin/python -m sieve.bench.index_bench [--n 200] [--queries 30] [--load-docs 20000]
                                          [--retrievers all-mpnet-base-v2,all-MiniLM-L6-v2,multilingual-e5-small]
                                          [--backends torch,torch-bf16,onnx]   (models.backend, docs/models.md)
                                          [--baseline CHECKOUT [--rounds 2]]    (indexing path, old vs this tree)

Passages: demo_data/corpus.jsonl if present, else the PoisonedRAG MS MARCO poison texts from
../shared/data (read only), else synthetic sentences. Prints a table; nothing is asserted.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from sieve.bench import DEMO_DATA, ROOT
from sieve.index import ArtifactCache, VectorIndex
from sieve.types import Document, content_hash


def passages(n: int) -> tuple[list[str], list[str]]:
    """(passages, queries)."""
    demo = DEMO_DATA / "corpus.jsonl"
    if demo.exists():
        texts = [json.loads(ln)["text"] for ln in demo.read_text(encoding="utf-8").splitlines() if ln.strip()]
        qpath = DEMO_DATA / "queries.jsonl"
        qs = [json.loads(ln)["text"] for ln in qpath.read_text(encoding="utf-8").splitlines() if ln.strip()] \
            if qpath.exists() else texts[:50]
        if len(texts) >= n:
            return texts[:n], qs
    shared = ROOT.parent / "shared" / "data" / "poisonedrag" / "msmarco.json"
    if shared.exists():
        data = json.loads(shared.read_text(encoding="utf-8"))
        texts = [t for e in data.values() for t in e["adv_texts"]]
        return texts[:n], [e["question"] for e in data.values()]
    rng = np.random.default_rng(0)
    words = "river city capital ocean mountain painter author science history music language".split()
    texts = [" ".join(rng.choice(words, 60)) for _ in range(n)]
    return texts, [" ".join(rng.choice(words, 8)) for _ in range(50)]


def pct(xs: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(xs), q))


class RandomEmbedder:
    """Deterministic random unit vectors with a real model's shape (index-load timing only)."""

    def __init__(self, model_id: str = "bench-random-768", dim: int = 768):
        self.model_id, self.dim, self.max_tokens = model_id, dim, 512

    def encode(self, texts, kind="passage", batch_size=32, progress=False):
        out = np.stack([np.random.default_rng(int(content_hash(t)[:8], 16)).standard_normal(self.dim) for t in texts])
        return (out / np.linalg.norm(out, axis=1, keepdims=True)).astype(np.float32)


def bench_retrievers(names: list[str], texts: list[str], queries: list[str], nq: int,
                     backends: tuple[str, ...] = ("torch",)) -> list[tuple]:
    from sieve.config import ModelsConfig, SieveConfig
    from sieve.index.embedding import embed_documents
    from sieve.models import load_embedder

    rows: list[tuple[Any, ...]] = []
    for name, backend in ((n, b) for n in names for b in backends):
        cfg = SieveConfig(models=ModelsConfig(backend=backend))
        t0 = time.perf_counter()
        try:
            emb = load_embedder(name, cfg)
        except Exception as e:  # noqa: BLE001 - report and continue
            rows.append((name, f"unavailable: {e}"))
            continue
        load_s = time.perf_counter() - t0
        emb.encode(texts[:4], kind="passage")  # warm-up
        docs = [Document(f"bench-{i}", t) for i, t in enumerate(texts)]
        t0, c0 = time.perf_counter(), time.process_time()
        embed_documents(docs, emb, None, progress=False, desc="")   # the indexing path (chunks, batch size)
        docs_s = len(texts) / (time.perf_counter() - t0)
        cpu_ms_doc = (time.process_time() - c0) * 1000 / len(texts)
        lat, cpu = [], []
        for q in queries[:nq]:
            t1, c1 = time.perf_counter(), time.process_time()
            emb.encode([q], kind="query")
            lat.append((time.perf_counter() - t1) * 1000)
            cpu.append((time.process_time() - c1) * 1000)
        rows.append((f"{name}:{getattr(emb, 'backend', 'torch')}" if backends != ("torch",) else name, emb.model_id,
                     emb.dim, load_s, docs_s, cpu_ms_doc, pct(lat, 50), pct(lat, 95), pct(cpu, 50)))
    return rows


_COLD = """
import sys, time, json
sys.path.insert(0, {root!r})
t0 = time.perf_counter()
from sieve.index import VectorIndex
from sieve.types import Document
import numpy as np
t_import = time.perf_counter() - t0
from sieve.bench.index_bench import RandomEmbedder
docs = [Document(f"d{{i}}", f"synthetic passage number {{i}} about topic {{i % 97}}") for i in range({n})]
t1 = time.perf_counter()
idx = VectorIndex.open_or_build(docs, RandomEmbedder(), {ws!r}, progress=False)
t_open = time.perf_counter() - t1
assert idx.build_report.action == "reused", idx.build_report
print(json.dumps({{"import_s": t_import, "open_s": t_open}}))
"""


def bench_index_load(n: int, workdir: Path) -> dict[str, float]:
    docs = [Document(f"d{i}", f"synthetic passage number {i} about topic {i % 97}") for i in range(n)]
    ws = workdir / "ws"
    emb = RandomEmbedder()
    t0 = time.perf_counter()
    VectorIndex.open_or_build(docs, emb, ws, progress=False)
    build_s = time.perf_counter() - t0
    code = _COLD.format(root=str(ROOT), n=n, ws=str(ws))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    cold = json.loads(out.stdout.strip().splitlines()[-1])
    warm = []
    for _ in range(5):
        t0 = time.perf_counter()
        idx = VectorIndex.open_or_build(docs, emb, ws, progress=False)
        warm.append(time.perf_counter() - t0)
    qv = emb.encode(["q"], kind="query")[0]
    lat = []
    for _ in range(50):
        t0 = time.perf_counter()
        idx.search(qv, 20)
        lat.append((time.perf_counter() - t0) * 1000)
    view = idx.with_documents([Document(f"p{i}", f"poison {i}", poison=True) for i in range(250)])
    lat_v = []
    for _ in range(50):
        t0 = time.perf_counter()
        view.search(qv, 20)
        lat_v.append((time.perf_counter() - t0) * 1000)
    return {"n": n, "build_s": build_s, "cold_import_s": cold["import_s"], "cold_open_s": cold["open_s"],
            "warm_open_s": statistics.median(warm), "search_p50_ms": pct(lat, 50), "search_p95_ms": pct(lat, 95),
            "search_view_p50_ms": pct(lat_v, 50)}


def bench_cache(workdir: Path, reps: int = 50) -> dict[str, float]:
    rng = np.random.default_rng(0)
    path = workdir / "artifacts.sqlite"
    texts = [f"doc {i}" for i in range(200)]
    arrays = [rng.standard_normal((250, 768)).astype(np.float16) for _ in texts]
    c = ArtifactCache.open(path)
    c.put_many("states@256", "bench", texts, arrays)
    cold, cold_cpu, warm = [], [], []
    for _ in range(reps):
        subset = [texts[i] for i in rng.choice(200, 20, replace=False)]
        c.clear_memory()
        t0, c0 = time.perf_counter(), time.process_time()
        c.get_or_compute("states@256", "bench", subset, lambda m: [])
        cold.append((time.perf_counter() - t0) * 1000)
        cold_cpu.append((time.process_time() - c0) * 1000)
        t0 = time.perf_counter()
        c.get_or_compute("states@256", "bench", subset, lambda m: [])
        warm.append((time.perf_counter() - t0) * 1000)
    return {"cold_p50_ms": pct(cold, 50), "cold_p95_ms": pct(cold, 95), "cold_cpu_p50_ms": pct(cold_cpu, 50),
            "warm_p50_ms": pct(warm, 50), "warm_p95_ms": pct(warm, 95),
            "db_mb": os.path.getsize(path) / 2**20}


_INDEXING = """
import json, sys, time
sys.path.insert(0, sys.argv[1])
import sieve
from sieve.config import ModelsConfig, SieveConfig
from sieve.index.embedding import embed_documents
from sieve.models import load_embedder
from sieve.types import Document
name, backend, texts = sys.argv[2], sys.argv[3], json.loads(sys.stdin.read())
cfg = SieveConfig() if backend == "torch" else SieveConfig(models=ModelsConfig(backend=backend))
emb = load_embedder(name, cfg)
emb.encode(texts[:4], kind="passage")
docs = [Document(f"bench-{i}", t) for i, t in enumerate(texts)]
t0 = time.perf_counter()
embed_documents(docs, emb, None, progress=False, desc="")
print(json.dumps({"docs_s": len(texts) / (time.perf_counter() - t0)}))
"""


def indexing_vs_baseline(baseline: Path, names: list[str], backends: tuple[str, ...], texts: list[str],
                         rounds: int) -> None:
    """docs/s of the indexing path (``embed_documents``) of ``baseline`` (PyTorch fp32 only) and of this
    tree (every backend), each in a fresh process, alternating for ``rounds`` rounds."""
    print(f"\n## indexing path (embed_documents), baseline {baseline} vs this tree; {rounds} alternating rounds")
    print(f"{'retriever':<22} {'tree':<9} {'backend':<11} {'docs/s per round':<28} {'x baseline (median)':>20}")
    sides = [(baseline, "baseline", "torch")] + [(ROOT, "this", b) for b in backends]
    for name in names:
        got: dict[tuple[str, str], list[float]] = {}
        for _ in range(rounds):
            for tree, label, backend in sides:
                out = subprocess.run([sys.executable, "-c", _INDEXING, str(tree), name, backend],
                                     input=json.dumps(texts), capture_output=True, text=True, cwd=tree)
                lines = [ln for ln in out.stdout.splitlines() if ln.startswith("{")]
                got.setdefault((label, backend), []).append(json.loads(lines[-1])["docs_s"] if lines else float("nan"))
        base = float(np.median(got[("baseline", "torch")]))
        for (label, backend), v in got.items():
            print(f"{name:<22} {label:<9} {backend:<11} {', '.join(f'{x:.1f}' for x in v):<28} "
                  f"{np.median(v) / base:>19.2f}x")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=200, help="passages embedded per retriever")
    ap.add_argument("--queries", type=int, default=30, help="queries for the latency percentiles")
    ap.add_argument("--load-docs", type=int, default=20000, help="documents in the index-load test")
    ap.add_argument("--retrievers", default="all-mpnet-base-v2,all-MiniLM-L6-v2,multilingual-e5-small")
    ap.add_argument("--backends", default="torch", help="models.backend values to compare (e.g. torch,torch-bf16,onnx)")
    ap.add_argument("--baseline", type=Path, default=None,
                    help="a checkout of older code: also time its indexing path against this tree's")
    ap.add_argument("--rounds", type=int, default=2, help="--baseline: alternating rounds")
    args = ap.parse_args()
    texts, queries = passages(args.n)
    if args.baseline is not None:
        print(f"# {len(texts)} passages (mean {np.mean([len(t) for t in texts]):.0f} chars), {os.cpu_count()} CPUs")
        indexing_vs_baseline(args.baseline, [s for s in args.retrievers.split(",") if s],
                             tuple(b for b in args.backends.split(",") if b), texts, args.rounds)
        return
    print(f"# {len(texts)} passages (mean {np.mean([len(t) for t in texts]):.0f} chars), "
          f"{os.cpu_count()} CPUs, torch threads {os.environ.get('SIEVE_THREADS', 'default')}")

    print("\n## embedding throughput and query latency")
    print("(wall-clock figures include CPU contention from other processes; CPU ms are this process's CPU time)")
    print(f"{'retriever':<30} {'dim':>4} {'load s':>7} {'docs/s':>8} {'CPU ms/doc':>11} {'query p50 ms':>13} "
          f"{'query p95 ms':>13} {'query CPU p50':>14}")
    for row in bench_retrievers([s for s in args.retrievers.split(",") if s], texts, queries, args.queries,
                                tuple(b for b in args.backends.split(",") if b)):
        if len(row) == 2:
            print(f"{row[0]:<30} {row[1]}")
        else:
            name, _, dim, load_s, dps, cpu_doc, p50, p95, cpu_q = row
            print(f"{name:<30} {dim:>4} {load_s:>7.1f} {dps:>8.1f} {cpu_doc:>11.1f} {p50:>13.1f} {p95:>13.1f} "
                  f"{cpu_q:>14.1f}")

    with tempfile.TemporaryDirectory() as tmp:
        r = bench_index_load(args.load_docs, Path(tmp))
        print(f"\n## index load ({r['n']} documents x 768-d, fp16 on disk)")
        print(f"build (random vectors, write)      {r['build_s'] * 1000:8.1f} ms")
        print(f"cold open (fresh process)          {r['cold_open_s'] * 1000:8.1f} ms  "
              f"(+ import sieve.index {r['cold_import_s'] * 1000:.0f} ms)")
        print(f"warm open (same process, median)   {r['warm_open_s'] * 1000:8.1f} ms  "
              f"(cold/warm {r['cold_open_s'] / r['warm_open_s']:.2f}x)")
        print(f"search k=20 p50 / p95              {r['search_p50_ms']:8.2f} / {r['search_p95_ms']:.2f} ms")
        print(f"search k=20 with 250 added docs    {r['search_view_p50_ms']:8.2f} ms (p50)")
        c = bench_cache(Path(tmp))
        print("\n## ArtifactCache: read 20 arrays of 250x768 fp16 (of 200 stored)")
        print(f"cold (SQLite) p50 / p95            {c['cold_p50_ms']:8.2f} / {c['cold_p95_ms']:.2f} ms  "
              f"(CPU p50 {c['cold_cpu_p50_ms']:.2f} ms; includes float16 -> float32)")
        print(f"warm (LRU)    p50 / p95            {c['warm_p50_ms']:8.3f} / {c['warm_p95_ms']:.3f} ms")
        print(f"database size                      {c['db_mb']:8.1f} MB")


if __name__ == "__main__":
    main()
