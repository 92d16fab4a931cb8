"""RSQ latency benchmark (docs/design.md budget: ≤ 30 ms/query at n = 20 with per-document caches).

    .venv/bin/python -m sieve.bench.rsq_bench [--queries 16] [--cold 6]

Rankings of 20 documents are built from demo_data/source/*.json (per topic: the question, its five
poison payloads or five clean passages as ranks 1–5, then the topic's other passages and passages
of other topics as ranks 6–20); synthetic sentences if the sources are absent. Real packaged
models (SmolLM2-135M surprisal, all-mpnet-base-v2 layer-9 token states).

* cold: empty artifact cache — 5 LM traces + 20 token-state passes + the query per ranking;
* warm: per-document caches filled — only the query's token states and arithmetic remain;
* hot: the query's token states cached too (the same query under clean and attack conditions).

Prints p50/p95 per mode, the warm per-stage breakdown and flag counts; nothing is asserted.
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import statistics
import time
from pathlib import Path

import numpy as np

from sieve.bench import DEMO_DATA
from sieve.config import SieveConfig
from sieve.defenses.rsq import RSQ
from sieve.index import ArtifactCache
from sieve.resources import Resources
from sieve.types import RankedDocument, Ranking


def build_rankings(n_queries: int) -> list[tuple[Ranking, bool]]:
    files = sorted(glob.glob(str(DEMO_DATA / "source" / "*.json")))
    out: list[tuple[Ranking, bool]] = []
    if files:
        topics = [json.loads(Path(f).read_text(encoding="utf-8")) for f in files]
        for t_i, topic in enumerate(topics):
            if len(out) >= n_queries:
                break
            q = topic["questions"][0]["text"]
            own = [p["text"] for p in topic["passages"]]
            others = [p["text"] for o in topics[t_i + 1:t_i + 4] for p in o["passages"][:4]]
            payloads = [p["text"] for p in topic["target"]["payloads"]]
            poisoned = t_i % 2 == 0
            texts = (payloads + own + others)[:20] if poisoned else (own + others)[:20]
            docs = [RankedDocument(f"{topic['slug']}-{i}", t, i + 1, 1 - i / 100, poisoned and i < 5)
                    for i, t in enumerate(texts)]
            out.append((Ranking(q, docs, query_id=topic["slug"]), poisoned))
        return out
    rng = np.random.default_rng(0)
    words = "river mountain city empire war science music art king ocean planet energy trade language".split()
    for i in range(n_queries):
        texts = [" ".join(rng.choice(words, 60)) + "." for _ in range(20)]
        docs = [RankedDocument(f"s{i}-{j}", t, j + 1, 1 - j / 100) for j, t in enumerate(texts)]
        out.append((Ranking(f"what about {words[i % len(words)]}", docs, query_id=f"s{i}"), False))
    return out


def pct(xs: list[float]) -> str:
    xs = sorted(xs)
    p95 = xs[min(len(xs) - 1, int(round(0.95 * (len(xs) - 1))))]
    return f"p50 {statistics.median(xs):8.1f} ms   p95 {p95:8.1f} ms   (n={len(xs)})"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--queries", type=int, default=16)
    ap.add_argument("--cold", type=int, default=6, help="rankings timed with an empty cache")
    ap.add_argument("--repeats", type=int, default=3, help="warm passes over all rankings")
    args = ap.parse_args()

    cfg = SieveConfig().validate()
    t0 = time.perf_counter()
    res = Resources(cfg, cache=ArtifactCache.in_memory(), llm=None)
    res.lm, res.token_encoder  # noqa: B018 - load once, outside the timings
    print(f"models loaded in {time.perf_counter() - t0:.1f} s: {res.lm.model_id}, {res.token_encoder.model_id}")
    rankings = build_rankings(args.queries)
    rsq = RSQ()

    cold: list[float] = []
    for r, _ in rankings[: args.cold]:
        res._cache = ArtifactCache.in_memory()          # fresh, empty cache per ranking
        t = time.perf_counter()
        rsq.apply(r, res)
        cold.append((time.perf_counter() - t) * 1000)
        print(f"  cold {r.query_id}: {cold[-1]:.0f} ms", flush=True)
    # fill the caches for every ranking (what `sieve index` / precompute_artifacts does at index time)
    res._cache = ArtifactCache.in_memory()
    t = time.perf_counter()
    for r, _ in rankings:
        rsq.apply(r, res)
    fill = time.perf_counter() - t
    print(f"  cache filled in {fill:.1f} s", flush=True)

    warm: list[float] = []
    hot: list[float] = []
    stages: dict[str, list[float]] = {}
    hot_stages: dict[str, list[float]] = {}
    flags = {"poison": [0, 0], "clean": [0, 0]}
    for rep in range(args.repeats):
        for r, _poisoned in rankings:
            # warm: documents cached, the query is new (trailing spaces change its cache key only)
            fresh = Ranking(r.query + " " * (rep + 1), r.documents, r.query_id)
            t = time.perf_counter()
            result = rsq.apply(fresh, res)
            warm.append((time.perf_counter() - t) * 1000)
            for k, v in result.latency_ms.items():
                if k != "total":
                    stages.setdefault(k, []).append(v)
            # hot: the same query seen before (e.g. clean + attack conditions of one evaluation)
            t = time.perf_counter()
            again = rsq.apply(r, res)
            hot.append((time.perf_counter() - t) * 1000)
            for k, v in again.latency_ms.items():
                if k != "total":
                    hot_stages.setdefault(k, []).append(v)
            if rep == 0:
                for d in result.decisions[:5]:
                    key = "poison" if r.documents[[x.id for x in r.documents].index(d.doc_id)].poison else "clean"
                    flags[key][0] += int(d.removed)
                    flags[key][1] += 1

    print(f"rankings: {len(rankings)} × 20 documents ({'demo_data/source' if rankings[0][0].query_id[0] != 's' else 'synthetic'})")
    print(f"cold  (empty cache) : {pct(cold)}")
    print(f"warm  (cached docs) : {pct(warm)}   budget 30 ms (query token states computed)")
    print(f"hot   (+ cached q)  : {pct(hot)}   (query token states cached too)")
    print(f"cold/warm p50 ratio : {statistics.median(cold) / statistics.median(warm):.0f}×")
    print(f"cache fill          : {fill:.1f} s for {len(rankings)} rankings")
    print("warm stage p50      : " + ", ".join(f"{k} {statistics.median(v):.2f} ms" for k, v in stages.items()))
    print("hot stage p50       : " + ", ".join(f"{k} {statistics.median(v):.2f} ms" for k, v in hot_stages.items()))
    print(f"load average        : {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs (other processes inflate every number)")
    print(f"flagged candidates  : poison {flags['poison'][0]}/{flags['poison'][1]}, "
          f"clean {flags['clean'][0]}/{flags['clean'][1]} (η_Q = 1.0)")


if __name__ == "__main__":
    main()
