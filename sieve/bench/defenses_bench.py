"""TRIS latency benchmark (docs/design.md budget: L1+L2 ≤ 10 ms/query at k = 50 with cached judge
embeddings) and the cost of L3 with the local model.

    .venv/bin/python -m sieve.bench.defenses_bench [--queries 32] [--repeats 5] [--l3-queries 2] [--l3-docs 5]

Rankings of 50 documents come from demo_data/source/*.json: a topic's question, its five
PoisonedRAG black-box poisons (question ⊕ payload from demo_data/targets.jsonl) placed at ranks
1, 3, 5, 7, 9, then the topic's passages and passages of other topics (synthetic text if the demo
sources are absent). The judge is the real packaged all-MiniLM-L6-v2.

* L1+L2: judge caches are filled first (one encode per document), then ``tris`` with L3 off is
  timed over every ranking ``--repeats`` times; prints p50/p95 of L1, L2 and total, and how many
  poisons / clean documents were removed.
* L3: the likelihood verifier with the packaged local LLM (Qwen2.5-Coder-0.5B) on the first
  ``--l3-docs`` documents of ``--l3-queries`` rankings; prints seconds per query and per call.

Nothing is asserted; numbers go in the report.
"""
from __future__ import annotations

import argparse
import glob
import json
import time
from pathlib import Path

import numpy as np

from sieve.bench import DEMO_DATA
from sieve.config import SieveConfig
from sieve.defenses.l3 import LikelihoodVerifier
from sieve.defenses.tris import TRIS
from sieve.resources import Resources
from sieve.types import RankedDocument, Ranking

K = 50
POISON_RANKS = (0, 2, 4, 6, 8)


def build_rankings(n_queries: int) -> list[Ranking]:
    files = sorted(glob.glob(str(DEMO_DATA / "source" / "*.json")))
    targets: dict[str, dict] = {}
    tpath = DEMO_DATA / "targets.jsonl"
    if tpath.exists():
        for line in tpath.read_text(encoding="utf-8").splitlines():
            if line.strip():
                t = json.loads(line)
                targets[t["query_id"]] = t
    if not files:
        return _synthetic(n_queries)
    topics = [json.loads(Path(f).read_text(encoding="utf-8")) for f in files]
    pool = [(t["slug"], p) for t in topics for p in t["passages"]]
    out: list[Ranking] = []
    for ti, topic in enumerate(topics):
        for q in topic["questions"]:
            tgt = targets.get(q["id"])
            if tgt is None:
                continue
            poisons = [f"{q['text']} {p}" for p in tgt["payloads"][:5]]
            own = [p for s, p in pool if s == topic["slug"]]
            others = [p for s, p in pool if s != topic["slug"]]
            rot = (ti * 37) % len(others)
            clean = own + others[rot:] + others[:rot]
            docs: list[RankedDocument] = []
            ci = pi = 0
            for r in range(K):
                if r in POISON_RANKS and pi < len(poisons):
                    docs.append(RankedDocument(f"{q['id']}-poison-{pi}", poisons[pi], r + 1, 1.0, True))
                    pi += 1
                else:
                    p = clean[ci]
                    ci += 1
                    docs.append(RankedDocument(p["id"], p["text"], r + 1, 0.5, False, p.get("title", "")))
            out.append(Ranking(q["text"], docs, q["id"]))
            break
        if len(out) >= n_queries:
            break
    return out


def _synthetic(n_queries: int) -> list[Ranking]:
    rng = np.random.RandomState(0)
    words = [f"w{i}" for i in range(500)]
    out = []
    for qi in range(n_queries):
        q = f"what is the value of thing {qi}"
        docs = []
        for r in range(K):
            text = " ".join(rng.choice(words, 60))
            poison = r in POISON_RANKS
            docs.append(RankedDocument(f"s{qi}-{r}", (q + " " + text) if poison else text, r + 1, 0.5, poison))
        out.append(Ranking(q, docs, f"s{qi}"))
    return out


def pct(xs: list[float]) -> str:
    a = np.asarray(xs)
    return f"p50 {np.percentile(a, 50):7.2f} ms   p95 {np.percentile(a, 95):7.2f} ms"


def bench_l1l2(rankings: list[Ranking], repeats: int, res: Resources) -> None:
    t = time.perf_counter()
    for r in rankings:
        res.judge_embeddings([d.text for d in r.documents])
    print(f"judge cache fill: {len(rankings) * K} passages in {time.perf_counter() - t:.1f} s "
          f"({res.judge.model_id})")
    tris = TRIS(l3_mode="off")
    tris.apply(rankings[0], res)  # warm-up (imports)
    l1, l2, tot = [], [], []
    removed_p = removed_c = 0
    for rep in range(repeats):
        for r in rankings:
            out = tris.apply(r, res)
            l1.append(out.latency_ms["L1"])
            l2.append(out.latency_ms.get("L2", 0.0))
            tot.append(out.latency_ms["total"])
            if rep == 0:
                rm = set(out.removed_ids)
                removed_p += sum(1 for d in r.documents if d.poison and d.id in rm)
                removed_c += sum(1 for d in r.documents if not d.poison and d.id in rm)
    n_p = sum(d.poison for r in rankings for d in r.documents)
    print(f"TRIS L1+L2 at k={K}, {len(rankings)} rankings x {repeats}: ")
    print(f"  L1     {pct(l1)}")
    print(f"  L2     {pct(l2)}")
    print(f"  total  {pct(tot)}   (budget 10 ms; p50 ratio {np.percentile(tot, 50) / 10:.2f}x)")
    print(f"  removed {removed_p}/{n_p} poisons, {removed_c}/{len(rankings) * K - n_p} clean documents")


def bench_l3(rankings: list[Ranking], n_queries: int, n_docs: int, res: Resources) -> None:
    t = time.perf_counter()
    llm = res.llm
    if llm is None:
        print("L3: no LLM configured; skipped")
        return
    print(f"L3 local LLM load: {time.perf_counter() - t:.1f} s ({llm.model_id})")
    verifier = LikelihoodVerifier(llm)
    per_query, per_call = [], []
    for r in rankings[:n_queries]:
        t = time.perf_counter()
        out = verifier.verify(r.query, r.documents[:n_docs])
        dt = time.perf_counter() - t
        per_query.append(dt)
        per_call.append(dt / max(1, out.llm_calls))
        print(f"  {r.query_id}: {out.status}, y_int={out.internal_answer!r}, "
              f"deltas={[round(v.score, 2) if v.score is not None else None for v in out.verdicts]}, "
              f"poison={[d.poison for d in r.documents[:n_docs]]}, {dt:.1f} s, {out.llm_calls} calls")
    print(f"L3 ({n_docs} docs/query): {np.mean(per_query):.1f} s/query, {np.mean(per_call):.2f} s/call "
          f"→ ≈ {np.mean(per_call) * (2 + K):.0f} s for a full k={K} working set")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--queries", type=int, default=32)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--l3-queries", type=int, default=2)
    ap.add_argument("--l3-docs", type=int, default=5)
    args = ap.parse_args()
    res = Resources(SieveConfig().validate())
    rankings = build_rankings(args.queries)
    bench_l1l2(rankings, args.repeats, res)
    if args.l3_queries > 0:
        bench_l3(rankings, args.l3_queries, args.l3_docs, res)


if __name__ == "__main__":
    main()
