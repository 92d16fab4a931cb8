"""First Query-explorer call in a fresh process (issue 15: ≤ 2 s on the demo, ≥ 15× the landed code).

    .venv/bin/python -m sieve.bench.first_query_bench [--baseline /tmp/landed] [--queries 5] [--tiny]

Each measured code tree runs in its own fresh Python process with an EMPTY artifact cache and
workspace (``SIEVE_CACHE_DIR`` = a new temporary directory whose ``models/`` links to the built
model caches, so weights are not rebuilt): what a newcomer gets from a fresh clone. The child
does what the dashboard does — load the demo, open the index, prepare the explorer's default
defenses (none, tris with L3 off, rsq, rsg_rsq) on the first attack family — then times the first
``explore`` call, then ``--queries`` further first-time queries and their warm repeats. Peak
resident memory (``ru_maxrss``) of the child is reported.

``--eval N`` instead runs ``sieve eval demo_data --no-llm --limit N`` (default defenses: all
registered) end to end in a fresh process and empty cache per tree, and reports wall-clock, peak
RSS (``/usr/bin/time``) and the size of the run's record files (``records.jsonl`` and, from
format 2, its side files); ``sieve bench eval`` is the warm-cache comparison with CPU seconds.

``--baseline DIR`` is a checkout of the landed code (``git worktree add /tmp/landed 6f6e11b``),
measured in the same run, alternating with this tree, so the ratio holds on a busy machine. The
1-minute load average is printed with every run.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from sieve.bench import ROOT

CHILD = r'''
import json, os, resource, statistics, sys, time
t_start = time.perf_counter()
root = sys.argv[1]; n_q = int(sys.argv[2]); tiny = sys.argv[3] == "1"
sys.path.insert(0, root)
out = {}
try:
    from sieve.dashboard import session as S
    from sieve.dashboard import explorer as E
    new_api = True
except ImportError:
    from sieve.dashboard import service as S
    new_api = False
ds = S.load_dataset(os.path.join(root, "demo_data"))
res = S.make_resources(tiny=tiny, corpus_texts=[d.text for d in ds.documents])
cond = ds.attack_families()[0]
calib = S.run_calibration()
if new_api:
    exp = S.make_experiment(ds, res)
    defs = {"none": S.prepare(exp, "none", cond)}
    for spec in S.DEFAULT_DEFENSES:
        defs[spec] = S.prepare(exp, spec, cond, {"l3_mode": "off"} if spec == "tris" else {}, calib)
    explore = lambda q, qid: E.explore(exp, q, cond, defs, qid)
else:
    index = S.open_dataset_index(ds, res)
    view = S.condition_view(index, ds, cond)
    defs = {"none": S.build_defense("none")}
    for spec in S.DEFAULT_DEFENSES:
        defs[spec] = S.prepare_defense(spec, {"l3_mode": "off"} if spec == "tris" else {}, view, ds, res, index, calib)
    explore = lambda q, qid: S.explore(view, ds, res, q, cond, defs, qid)
out["setup_s"] = time.perf_counter() - t_start
recs = ds.attack_records(cond)[: n_q + 1]
t = time.perf_counter(); r = explore(recs[0].query, recs[0].query_id)
out["first_ms"] = (time.perf_counter() - t) * 1000
out["errors"] = sorted(getattr(r, "errors", {}) or {})
nxt, warm = [], []
for rec in recs[1:]:
    t = time.perf_counter(); explore(rec.query, rec.query_id); nxt.append((time.perf_counter() - t) * 1000)
for rec in recs[1:]:
    t = time.perf_counter(); explore(rec.query, rec.query_id); warm.append((time.perf_counter() - t) * 1000)
out["next_p50_ms"] = statistics.median(nxt) if nxt else float("nan")
out["warm_p50_ms"] = statistics.median(warm) if warm else float("nan")
out["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
out["total_s"] = time.perf_counter() - t_start
out["condition"] = cond
print("RESULT " + json.dumps(out))
'''


def fresh_cache(base: Path) -> Path:
    """A new empty cache dir whose models/ links to the built model caches of ``base``."""
    d = Path(tempfile.mkdtemp(prefix="sieve-firstq-"))
    models = base / "models"
    if models.is_dir():
        (d / "models").symlink_to(models)
    return d


def run(root: Path, n_q: int, tiny: bool) -> dict:
    from sieve.config import default_cache_dir

    cache = fresh_cache(default_cache_dir())
    env = {**os.environ, "SIEVE_CACHE_DIR": str(cache), "PYTHONPATH": str(root)}
    env.pop("SIEVE_CONFIG", None)
    load = os.getloadavg()[0]
    t = time.perf_counter()
    p = subprocess.run([sys.executable, "-c", CHILD, str(root), str(n_q), "1" if tiny else "0"], env=env,
                       capture_output=True, text=True, cwd=str(root))
    wall = time.perf_counter() - t
    line = next((x for x in p.stdout.splitlines() if x.startswith("RESULT ")), None)
    if line is None:
        raise SystemExit(f"child failed for {root}:\n{p.stderr[-3000:]}")
    out = json.loads(line[7:])
    out.update(wall_s=wall, load=load)
    return out


def run_eval(root: Path, limit: int, defenses: str | None) -> dict:
    from sieve.config import default_cache_dir

    cache = fresh_cache(default_cache_dir())
    out = Path(tempfile.mkdtemp(prefix="sieve-evalbench-")) / "run"
    env = {**os.environ, "SIEVE_CACHE_DIR": str(cache), "PYTHONPATH": str(root)}
    env.pop("SIEVE_CONFIG", None)
    cmd = ["/usr/bin/time", "-f", "MAXRSS %M", sys.executable, "-c", "from sieve.cli import app; app()", "eval",
           str(root / "demo_data"), "--out", str(out), "--no-llm", "--no-progress", "--limit", str(limit)]
    if defenses:
        cmd += ["--defenses", defenses]
    load = os.getloadavg()[0]
    t = time.perf_counter()
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, cwd=str(root))
    wall = time.perf_counter() - t
    if p.returncode != 0:
        raise SystemExit(f"eval failed for {root} (exit {p.returncode}):\n{p.stderr[-3000:]}")
    rss = next((int(x.split()[1]) for x in p.stderr.splitlines() if x.startswith("MAXRSS ")), 0) / 1024
    rec = out / "records.jsonl"
    files = [out / n for n in ("records.jsonl", "rankings.jsonl", "decisions.jsonl.gz") if (out / n).exists()]
    return {"wall_s": wall, "peak_rss_mb": rss, "records_mb": sum(f.stat().st_size for f in files) / 1e6,
            "n_records": sum(1 for _ in rec.open(encoding="utf-8")), "load": load}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--baseline", type=Path, default=None, help="checkout of the landed code to compare against")
    ap.add_argument("--queries", type=int, default=5)
    ap.add_argument("--repeats", type=int, default=1, help="alternating runs per tree")
    ap.add_argument("--tiny", action="store_true", help="tiny in-process models (plumbing check only)")
    ap.add_argument("--eval", type=int, default=0, metavar="N",
                    help="time `sieve eval demo_data --no-llm --limit N` instead of the explorer")
    ap.add_argument("--defenses", default=None, help="with --eval: comma-separated defenses (default: all)")
    args = ap.parse_args()
    trees = ([("landed", args.baseline.resolve())] if args.baseline else []) + [("this", ROOT)]
    if args.eval:
        ev: dict[str, dict] = {}
        for name, root in trees:
            ev[name] = r = run_eval(root, args.eval, args.defenses)
            print(f"{name:7s} load {r['load']:4.1f}  sieve eval --no-llm --limit {args.eval}: {r['wall_s']:7.1f} s  "
                  f"peak RSS {r['peak_rss_mb']:6.0f} MB  records.jsonl {r['records_mb']:8.2f} MB "
                  f"({r['n_records']} records)", flush=True)
        if args.baseline:
            a, b = ev["landed"], ev["this"]
            print(f"ratio landed/this: wall-clock {a['wall_s'] / b['wall_s']:.2f}x faster, records "
                  f"{a['records_mb'] / max(b['records_mb'], 1e-9):.1f}x smaller")
        return 0
    results: dict[str, list[dict]] = {name: [] for name, _ in trees}
    for _ in range(args.repeats):
        for name, root in trees:
            r = run(root, args.queries, args.tiny)
            results[name].append(r)
            print(f"{name:7s} load {r['load']:4.1f}  setup {r['setup_s']:6.1f} s  first explorer call "
                  f"{r['first_ms']:8.0f} ms  next first-time queries p50 {r['next_p50_ms']:7.0f} ms  "
                  f"warm p50 {r['warm_p50_ms']:6.0f} ms  peak RSS {r['peak_rss_mb']:6.0f} MB  "
                  f"errors {r['errors'] or 'none'}", flush=True)
    if args.baseline:
        def med(name: str, key: str) -> float:
            xs = sorted(r[key] for r in results[name])
            return xs[len(xs) // 2]

        print("\nratio landed/this (higher = faster now):")
        for key in ("setup_s", "first_ms", "next_p50_ms", "warm_p50_ms"):
            print(f"  {key:12s} {med('landed', key):9.1f} -> {med('this', key):9.1f}   "
                  f"{med('landed', key) / max(med('this', key), 1e-9):6.1f}x")
        print(f"  peak RSS MB  {med('landed', 'peak_rss_mb'):9.0f} -> {med('this', 'peak_rss_mb'):9.0f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
