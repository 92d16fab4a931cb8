"""RSG at scale (issue 13): engine × corpus size × kNN mode → docs/s, neighbour recall@16, flag overlap
with exact, peak RSS.

    sieve bench scale [--sizes 10000,100000,1000000] [--engines local,ray] [--modes ivf]
                      [--exact-max 100000] [--ray-max 100000] [--dim 384] [--workdir DIR]
    sieve bench scale --embed 10000 [--embed-retriever tiny-hashing|MODEL] [--engines local,ray] [--repeats R]

For each size a clustered synthetic corpus (sieve/scale/synthetic.py: topics, sub-topics,
near-duplicate and coordinated groups) is written once as float16 shards (sieve/scale/shards.py).
Every (engine, mode, size) then runs in a fresh subprocess that memory-maps the shards, so its peak
RSS (ru_maxrss) is its own. Timed: RSG given the vectors — float16→float32 conversion, kNN,
per-document statistics, script integrity, corpus tail and flags. Not timed: generating and opening
the shards, and the recall sample (timed and printed separately).

``--embed N`` times the user path ``sieve audit --corpus`` instead (sieve/experiment/audit.py:
``run_corpus_audit``): a JSONL corpus of N synthetic texts is embedded with ``--embed-retriever``
(tiny-hashing, or a real model name) into shards and audited, once per engine (local baseline, then
ray) and repeat, each in a fresh shard directory; printed: embedding docs/s (p50/p90), ray ÷ local,
and the RSG seconds.

Wall-clock docs/s depend on what else runs on the machine; each run also reports its own CPU time
(user + system, all threads of the process) and docs per CPU-second, which do not.

Baseline measured in the same run: the exact mode at the same size (sizes ≤ --exact-max); above
that, exact throughput is estimated from 2,000 sampled rows (exact kNN is O(N) per row) and the
overlap is "n/a". Ratios are approximate ÷ exact docs/s. With --repeats R > 1 each configuration is
run R times and p50/p90 of docs/s are printed.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from sieve.bench.outputs import claim_outputs, mentions, write_outputs


def build_corpus(n: int, dim: int, workdir: Path) -> Path:
    from sieve.scale.shards import MANIFEST, write_shards
    from sieve.scale.synthetic import SyntheticCorpus

    out = workdir / f"synthetic-{n}-{dim}"
    if (out / MANIFEST).exists():
        return out
    corpus = SyntheticCorpus(n, dim=dim, seed=0)
    t = time.perf_counter()
    write_shards(out, ((c.ids, c.texts, c.vectors) for c in corpus.chunks(65_536)), "synthetic",
                 {"generator": "sieve.scale.synthetic", "n": n, "dim": dim, "seed": 0})
    np.save(out / "kind.npy", np.concatenate([c.kind for c in corpus.chunks(65_536)]))
    print(f"# corpus {n:,} × {dim}: written in {time.perf_counter() - t:.1f} s → {out}", flush=True)
    return out


def one(args: argparse.Namespace) -> None:
    """Child: one (engine, mode) audit of one shard directory; prints a JSON line."""
    from sieve.defenses.rsg import RSGParams, audit_corpus
    from sieve.index.knn import sampled_recall, unit_matrix
    from sieve.scale.shards import open_shards

    peak = {}
    shards = open_shards(Path(args.one))
    ids, texts, vectors = shards.ids, shards.texts, shards.vectors
    peak["open_shards"] = _peak_gib()
    n = len(ids)
    params = RSGParams(mode=args.mode)
    layout = None
    t = time.perf_counter()
    ru0 = resource.getrusage(resource.RUSAGE_SELF)
    if args.engine == "ray":
        from sieve.scale.ray_engine import ray_audit

        audit, layout = ray_audit(ids, texts, vectors, params, num_cpus=os.cpu_count(), recall_sample=0)
    else:
        audit = audit_corpus(ids, texts, vectors, params, recall_sample=0)
    seconds = time.perf_counter() - t
    peak["audit"] = _peak_gib()
    ru1 = resource.getrusage(resource.RUSAGE_SELF)
    cpu = (ru1.ru_utime - ru0.ru_utime) + (ru1.ru_stime - ru0.ru_stime)   # this process, all threads
    rec = None
    rec_s = 0.0
    if args.mode != "exact":
        t = time.perf_counter()
        rec = sampled_recall(unit_matrix(vectors), audit.neighbour_ids, sample=1000)
        rec_s = time.perf_counter() - t
        peak["recall_sample"] = _peak_gib()
    np.save(Path(args.flags_out), audit.flagged)
    kind = np.load(Path(args.one) / "kind.npy")
    print(json.dumps({
        "n": n, "engine": args.engine, "mode": args.mode, "seconds": seconds, "docs_per_s": n / seconds, "cpu_seconds": cpu,
        "docs_per_cpu_s": n / cpu if cpu > 0 else None,
        "recall": rec, "recall_seconds": rec_s, "flags": int(audit.flagged.sum()),
        "coordinated_flagged": float(audit.flagged[kind == 2].mean()) if (kind == 2).any() else None,
        "peak_rss_gib": _peak_gib(), "peak_rss_after_gib": peak,
        "knn": audit.knn, "ray": layout}), flush=True)


def _peak_gib() -> float:
    """Peak RSS of this process so far (ru_maxrss, KiB on Linux) in GiB; read after each phase it
    shows which phase set the peak (the recall sample's exact blocks took 16 GB at 1M before
    sieve/index/knn.py capped them)."""
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2 ** 20, 3)


def exact_estimate(path: Path, sample: int = 2000) -> float:
    """Exact kNN docs/s estimated from ``sample`` rows (the kNN dominates; O(N) per row)."""
    from sieve.index.knn import exact_rows, unit_matrix
    from sieve.scale.shards import open_shards

    x = unit_matrix(open_shards(path, verify=False).vectors)
    rows = np.sort(np.random.default_rng(1).choice(x.shape[0], sample, replace=False))
    t = time.perf_counter()
    exact_rows(x, rows, 16)
    return sample / (time.perf_counter() - t)


def embed_bench(args: argparse.Namespace, workdir: Path) -> None:
    """``--embed N``: sieve audit --corpus end to end, local vs ray, embedding docs/s."""
    from functools import partial

    from sieve.experiment.audit import run_corpus_audit
    from sieve.scale.synthetic import SyntheticCorpus

    n = args.embed
    src = workdir / f"embed-{n}.jsonl"
    if not src.exists():
        ch = SyntheticCorpus(n, dim=8, seed=0).chunk(0, n)
        with open(src, "w", encoding="utf-8") as fh:
            fh.writelines(json.dumps({"id": i, "text": t}) + "\n" for i, t in zip(ch.ids, ch.texts))
    if args.embed_retriever == "tiny-hashing":
        from sieve.models.tiny import HashingEmbedder

        factory, model_id = partial(HashingEmbedder, dim=64), HashingEmbedder(dim=64).model_id
    else:
        from sieve.config import SieveConfig
        from sieve.models.loaders import embedder_model_id, load_embedder

        factory = partial(load_embedder, args.embed_retriever, SieveConfig.load(None))
        model_id = embedder_model_id(args.embed_retriever)
    rows: dict[str, list[dict]] = {}
    for engine in args.engines.split(","):
        for r in range(max(1, args.repeats)):
            with tempfile.TemporaryDirectory(dir=workdir) as wd:
                t = time.perf_counter()
                rep, ing = run_corpus_audit(src, workdir=Path(wd), embedder=factory, model_id=model_id,
                                            mode="auto", engine=engine, progress=False)
                assert ing is not None   # a text corpus is always embedded
                rows.setdefault(engine, []).append({"embed_docs_per_s": ing.docs_per_second,
                                                    "rsg_seconds": rep.summary["seconds"],
                                                    "total_seconds": time.perf_counter() - t,
                                                    "flags": rep.summary["flags"]})
                print(f"# {engine} run {r + 1}: {ing.docs_per_second:,.0f} docs/s embedding, "
                      f"total {time.perf_counter() - t:.1f} s", flush=True)
    base = float(np.percentile([x["embed_docs_per_s"] for x in rows.get("local", [])], 50)) if "local" in rows else None
    print(f"# sieve audit --corpus, {n:,} synthetic texts, retriever {model_id}, repeats {args.repeats}")
    print(f"{'engine':<6} {'embed docs/s p50/p90':>22} {'vs local':>8} {'RSG s p50':>9} {'total s p50':>11} {'flags':>6}")
    for engine, rs in rows.items():
        rates = [x["embed_docs_per_s"] for x in rs]
        p50, p90 = np.percentile(rates, 50), np.percentile(rates, 90)
        print(f"{engine:<6} {f'{p50:,.0f}/{p90:,.0f}':>22} {(p50 / base if base else float('nan')):>7.2f}x "
              f"{np.percentile([x['rsg_seconds'] for x in rs], 50):>9.2f} "
              f"{np.percentile([x['total_seconds'] for x in rs], 50):>11.1f} {rs[-1]['flags']:>6}")
    print(f"# load average at end {os.getloadavg()[0]:.1f} (shared box: other jobs run concurrently)", flush=True)


def run_child(path: Path, engine: str, mode: str, flags_out: Path) -> dict:
    cmd = [sys.executable, "-m", "sieve.bench.scale_bench", "--one", str(path), "--engine", engine, "--mode", mode, "--flags-out", str(flags_out)]
    res = subprocess.run(cmd, capture_output=True, text=True)
    if res.returncode != 0:
        return {"error": (res.stderr or res.stdout).strip().splitlines()[-1:] or ["failed"]}
    return json.loads([line for line in res.stdout.splitlines() if line.startswith("{")][-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="10000,100000")
    ap.add_argument("--engines", default="local,ray")
    ap.add_argument("--modes", default="ivf", help="approximate modes to time (exact is the baseline)")
    ap.add_argument("--exact-max", type=int, default=100_000, help="largest size with a full exact run")
    ap.add_argument("--ray-max", type=int, default=100_000, help="largest size run on the Ray engine")
    ap.add_argument("--dim", type=int, default=384)
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--workdir", type=Path, default=None)
    ap.add_argument("--json", type=Path, default=None, help="also write every result to this file (a file an earlier "
                                                             "scale bench wrote is replaced; any other needs --force)")
    ap.add_argument("--force", action="store_true", help="replace --json even if this bench did not write it")
    ap.add_argument("--embed", type=int, default=0, help="time sieve audit --corpus on N synthetic texts instead")
    ap.add_argument("--embed-retriever", default="tiny-hashing", help="retriever for --embed (a model name)")
    ap.add_argument("--one", help=argparse.SUPPRESS)
    ap.add_argument("--engine", default="local", help=argparse.SUPPRESS)
    ap.add_argument("--mode", default="ivf", help=argparse.SUPPRESS)
    ap.add_argument("--flags-out", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.one:
        one(args)
        return
    try:
        sizes = [int(x) for x in args.sizes.split(",") if x.strip()]
    except ValueError:
        ap.error(f"--sizes must be comma-separated whole numbers (e.g. 10000,100000); got {args.sizes!r}")
    if args.json:   # claimed before the run (sieve/bench/outputs.py); its rows carry "docs_per_s"
        claim_outputs([args.json], mentions('"docs_per_s"'), force=args.force, what="--json")
    workdir = args.workdir or Path(tempfile.gettempdir()) / "sieve-scale-bench"
    workdir.mkdir(parents=True, exist_ok=True)
    print(f"# machine: {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f} at start "
          f"(shared box: other jobs run concurrently)", flush=True)
    if args.embed:
        embed_bench(args, workdir)
        return
    results = []
    header = (f"{'engine':<6} {'mode':<6} {'size':>9} {'docs/s':>9} {'p50/p90':>15} {'vs exact':>8} "
              f"{'recall@16 (95% CI, n)':>30} {'overlap':>8} {'flags':>6} {'coord':>5} {'peak RSS':>9}")
    for n in sizes:
        path = build_corpus(n, args.dim, workdir)
        done = []
        for engine in args.engines.split(","):       # approximate runs first: the exact baseline is the slow one
            if engine == "ray" and n > args.ray_max:
                continue
            for mode in args.modes.split(","):
                runs = [run_child(path, engine, mode, workdir / f"flags-{n}-{engine}-{mode}.npy")
                        for _ in range(max(1, args.repeats))]
                r = dict(runs[-1])
                if "error" in r:
                    print(f"{engine:<6} {mode:<6} {n:>9,} failed: {r['error']}", flush=True)
                    continue
                rates = [x["docs_per_s"] for x in runs if "docs_per_s" in x]
                r["p50"], r["p90"] = float(np.percentile(rates, 50)), float(np.percentile(rates, 90))
                r["size"] = n
                local = workdir / f"flags-{n}-local-{mode}.npy"
                if engine == "ray" and local.exists():
                    r["identical_to_local"] = bool(np.array_equal(np.load(workdir / f"flags-{n}-ray-{mode}.npy"),
                                                                  np.load(local)))
                done.append(r)
                print(f"# done: {engine} {mode} {n:,}: {r['docs_per_s']:,.0f} docs/s, "
                      f"recall {r['recall']['recall'] if r.get('recall') else 'exact'}, "
                      f"peak RSS {r['peak_rss_gib']:.2f} GiB (peak after "
                      + ", ".join(f"{k} {v:.2f}" for k, v in r.get("peak_rss_after_gib", {}).items()) + ")", flush=True)
        base_flags = None
        if n <= args.exact_max:
            r = run_child(path, "local", "exact", workdir / f"flags-{n}-local-exact.npy")
            base = r.get("docs_per_s", float("nan"))
            if "error" not in r:
                base_flags = np.load(workdir / f"flags-{n}-local-exact.npy")
                r.update(size=n, overlap=1.0)
                results.append(r)
        else:
            base = exact_estimate(path)
            print(f"# exact at {n:,}: {base:,.0f} docs/s estimated from 2,000 sampled rows (full run not computable here)",
                  flush=True)
        for r in [x for x in results if x.get("size") == n and x["mode"] == "exact"]:
            r["ratio"] = 1.0
        for r in done:
            r["ratio"] = r["docs_per_s"] / base if base == base else None
            if base_flags is not None:
                flags = np.load(workdir / f"flags-{n}-{r['engine']}-{r['mode']}.npy")
                union = int((flags | base_flags).sum())
                r["overlap"] = float((flags & base_flags).sum()) / union if union else 1.0
            results.append(r)
        print(header, flush=True)
        for r in [x for x in results if x.get("size") == n]:
            print(_row(r), flush=True)
    if args.json:
        write_outputs({args.json: json.dumps(results, indent=1)})
    for r in results:
        if r.get("ray"):
            s = r["ray"]["seconds"]
            print(f"# ray {r['size']:,}: identical flags to local: {r.get('identical_to_local')}; stages "
                  + ", ".join(f"{k} {v:.1f}s" for k, v in s.items()), flush=True)
    for r in results:
        if r.get("docs_per_cpu_s") and r["engine"] == "local":
            print(f"# {r['engine']} {r['mode']} {r['size']:,}: {r['cpu_seconds']:.1f} CPU-s → "
                  f"{r['docs_per_cpu_s']:,.0f} docs per CPU-second (×2 cores = {2 * r['docs_per_cpu_s']:,.0f} docs/s "
                  f"on an idle 2-core box, if it scaled perfectly)", flush=True)
    print(f"# load average at end {os.getloadavg()[0]:.1f}", flush=True)


def _row(r: dict) -> str:
    rec = r.get("recall")
    rec_s = f"{rec['recall']:.4f} ({rec['ci95'][0]:.3f}–{rec['ci95'][1]:.3f}, {rec['n']})" if rec else "exact"
    ov = r.get("overlap")
    pp = f"{r['p50']:,.0f}/{r['p90']:,.0f}" if "p50" in r else "-"
    coord = r.get("coordinated_flagged")
    return (f"{r['engine']:<6} {r['mode']:<6} {r['size']:>9,} {r['docs_per_s']:>9,.0f} {pp:>15} "
            f"{(r.get('ratio') or float('nan')):>7.2f}x {rec_s:>30} {'n/a' if ov is None else f'{ov:.4f}':>8} "
            f"{r['flags']:>6} {'-' if coord is None else f'{coord:.2f}':>5} {r['peak_rss_gib']:>7.2f}GiB")


if __name__ == "__main__":
    main()
