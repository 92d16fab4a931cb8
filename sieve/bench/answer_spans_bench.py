"""LM-scored answer spans (docs/algorithms.md §14.1): span-scoring throughput and new-query latency.

    sieve bench answer_spans [--queries 24] [--k 5] [--repeats 2]
    .venv/bin/python -m sieve.bench.answer_spans_bench --queries 24

Real clean rankings of the first ``--queries`` demo questions (the packaged retriever; vectors are
shipped or cached), the candidate spans of each top-``--k`` passage, the packaged causal LM.

1. **Throughput** (passages/s and spans/s), measured alternately ``--repeats`` times in one process:
   the baseline scores each span by one uncached pass over prompt + span
   (:func:`sieve.models.span_scoring.span_logprobs_reference`), the batched path by one prefix pass
   per passage whose key/value cache serves a padded batch of all its spans
   (:func:`~sieve.models.span_scoring.span_logprobs`); prints the ratio and the largest difference.
2. **Latency per query** of ``answer_consistency.inspect`` (p50/p95 ms): lexical extractor (the
   baseline), LM extractor on a new query (empty span cache), LM extractor warm (every (query,
   document) span score cached).

Numbers depend on machine load (run under ``flock /tmp/sieve-bench.lock`` with ``uptime`` around
it); they are printed, never asserted.
"""
from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np

from sieve.bench import DEMO_DATA
from sieve.config import SieveConfig
from sieve.corpus import load_dataset
from sieve.defenses.answer_consistency import AnswerConsistency
from sieve.defenses.answer_evidence import span_candidates, span_prompt
from sieve.experiment import Experiment
from sieve.index import ArtifactCache
from sieve.models.span_scoring import span_logprobs, span_logprobs_reference
from sieve.resources import Resources


def pct(xs: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(xs, float), q)) if xs else float("nan")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="LM-scored answer spans benchmark")
    ap.add_argument("--data", type=Path, default=DEMO_DATA)
    ap.add_argument("--queries", type=int, default=24)
    ap.add_argument("--k", type=int, default=5)
    ap.add_argument("--repeats", type=int, default=2)
    args = ap.parse_args(argv)
    if not (args.data / "corpus.jsonl").exists():
        print(f"skipped: no dataset at {args.data}")
        return 0

    ds = load_dataset(args.data)
    res = Resources(SieveConfig.load())
    rankings = Experiment(ds, res).clean_rankings(limit=args.queries)
    lm = res.causal_lm
    items = [(span_prompt(r.query, d.text), span_candidates(r.query, d.text))
             for r in rankings for d in r.documents[:args.k]]
    n_pass, n_span = len(items), sum(len(s) for _, s in items)
    span_logprobs(lm, *items[0])   # warm-up
    span_logprobs_reference(lm, *items[0])
    print(f"causal LM {lm.model_id}; {len(rankings)} queries x top-{args.k} = {n_pass} passages, {n_span} spans "
          f"({n_span / max(1, n_pass):.1f} per passage)")

    t_ref, t_bat, diff = [], [], 0.0
    for _ in range(args.repeats):   # alternate, so load changes hit both alike
        t = time.perf_counter()
        ref = [span_logprobs_reference(lm, p, s) for p, s in items]
        t_ref.append(time.perf_counter() - t)
        t = time.perf_counter()
        bat = [span_logprobs(lm, p, s) for p, s in items]
        t_bat.append(time.perf_counter() - t)
        for a, b in zip(ref, bat):
            ok = np.isfinite(a) & np.isfinite(b)
            if ok.any():
                diff = max(diff, float(np.abs(a[ok] - b[ok]).max()))
    s_ref, s_bat = min(t_ref), min(t_bat)
    print(f"\n{'span scoring':<34}{'passages/s':>11}{'spans/s':>9}{'ratio':>7}")
    print(f"{'one pass per span (baseline)':<34}{n_pass / s_ref:>11.1f}{n_span / s_ref:>9.1f}{1.0:>7.2f}")
    print(f"{'cached prefix + span batch':<34}{n_pass / s_bat:>11.1f}{n_span / s_bat:>9.1f}{s_ref / s_bat:>7.2f}")
    print(f"largest |batched - baseline| = {diff:.2e} nats/token (best of {args.repeats} runs each)")

    def latencies(extractor: str, fresh: bool) -> list[float]:
        out = []
        d = AnswerConsistency(threshold=1e9, extractor=extractor)
        shared = ArtifactCache.in_memory()
        for rk in rankings:
            rr = Resources(res.config, causal_lm=lm, cache=ArtifactCache.in_memory() if fresh else shared)
            if not fresh:
                d.inspect(rk, rr, args.k)   # fill the cache: the timed call is warm
            t = time.perf_counter()
            ins = d.inspect(rk, rr, args.k)
            out.append((time.perf_counter() - t) * 1000)
            assert ins.info["extractor"] == extractor
        return out

    lex, new, warm = latencies("lexical", True), latencies("lm", True), latencies("lm", False)
    base = pct(lex, 50)
    print(f"\n{'answer_consistency per query':<34}{'p50 ms':>8}{'p95 ms':>8}{'p50 / lexical':>15}")
    for name, xs in (("lexical (baseline)", lex), ("lm, new query", new), ("lm, warm (cached spans)", warm)):
        print(f"{name:<34}{pct(xs, 50):>8.1f}{pct(xs, 95):>8.1f}{pct(xs, 50) / base:>15.1f}")
    print(f"n = {len(rankings)} queries")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
