"""End-to-end ``sieve eval`` benchmark (issue 15): a baseline checkout against the current tree,
measured in the same run on the same dataset and defenses.

    sieve bench eval -- --baseline /tmp/base15 --limit 12 [--rounds 1] [--dataset demo_data] [--current DIR]
    .venv/bin/python -m sieve.bench.eval_bench --compare RUN_A RUN_B      # only compare two run dirs

Each side runs ``sieve eval DATASET --no-llm --limit N`` in a fresh subprocess (each with its own
source tree first on ``sys.path``: the baseline's, and this checkout's or ``--current``'s, e.g.
``git archive HEAD`` unpacked, so edits made while it runs are not measured; same interpreter, same
model caches), alternating
baseline/current for ``--rounds`` rounds. Printed per side (median over rounds) and as ratios
baseline/current: wall-clock, CPU seconds (user + system of the child), peak RSS of the child, the
bytes of the run's record files (``records.jsonl`` plus the side files of format 2) and bytes per
record. The load average is printed before and after (the machine is shared; ratios measured in
one run are what counts). Finally the two runs' ``summary.json`` rows are compared with every
latency field left out: decisions must not change when only speed or format changed.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from sieve.bench import DEMO_DATA, ROOT

RECORD_FILES = ("records.jsonl", "rankings.jsonl", "decisions.jsonl.gz")
CHILD = ("import sys; sys.path.insert(0, sys.argv.pop(1)); from sieve.cli import app; "
         "sys.argv = ['sieve'] + sys.argv[1:]; app()")


def registered_defenses(tree: Path) -> list[str]:
    out = subprocess.run([sys.executable, "-c", "import sys; sys.path.insert(0, sys.argv[1]); "
                          "from sieve.registry import DEFENSES; print(','.join(DEFENSES.names()))", str(tree)],
                         cwd=tree, capture_output=True, text=True, check=True)
    return out.stdout.strip().splitlines()[-1].split(",")


def run_once(tree: Path, dataset: Path, out: Path, limit: int, defenses: list[str]) -> dict[str, float]:
    if out.exists():
        shutil.rmtree(out)
    cmd = [sys.executable, "-c", CHILD, str(tree), "eval", str(dataset), "--no-llm", "--limit", str(limit),
           "--out", str(out), "--no-progress", "-d", ",".join(defenses)]
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=tree, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    _, status, ru = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    err = proc.stderr.read() if proc.stderr else ""
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise SystemExit(f"eval in {tree} failed (exit {proc.returncode}):\n{err[-2000:]}")
    files = {n: (out / n).stat().st_size for n in RECORD_FILES if (out / n).exists()}
    n_records = sum(1 for ln in (out / "records.jsonl").read_text(encoding="utf-8").splitlines() if ln.strip())
    total = sum(files.values())
    return {"wall_s": wall, "cpu_s": ru.ru_utime + ru.ru_stime, "peak_rss_mb": ru.ru_maxrss / 1024,
            "record_bytes": total, "bytes_per_record": total / max(1, n_records), "records": n_records,
            **{f"bytes:{n}": b for n, b in files.items()}}


def summary_rows(run: Path) -> dict[tuple[str, str], dict]:
    rows = json.loads((run / "summary.json").read_text(encoding="utf-8"))["results"]
    return {(r["defense"], r["attack"]): {k: v for k, v in r.items() if not k.startswith("latency")} for r in rows}


def compare(a: Path, b: Path) -> int:
    """Print how many summary rows (latency fields left out) are identical; return the differing count."""
    ra, rb = summary_rows(a), summary_rows(b)
    keys = sorted(set(ra) | set(rb))
    diff = [k for k in keys if ra.get(k) != rb.get(k)]
    print(f"summary rows identical (latency fields excluded): {len(keys) - len(diff)}/{len(keys)}")
    for k in diff[:20]:
        x, y = ra.get(k) or {}, rb.get(k) or {}
        fields = sorted(f for f in set(x) | set(y) if x.get(f) != y.get(f))
        print(f"  differs: {k[0]} × {k[1]}: " + "; ".join(f"{f}: {x.get(f)!r} → {y.get(f)!r}" for f in fields[:5]))
    return len(diff)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--baseline", type=Path, help="a checkout of the baseline (e.g. git worktree add /tmp/base HEAD)")
    ap.add_argument("--current", type=Path, default=ROOT,
                    help="the tree measured against the baseline (default: this checkout; a frozen copy keeps "
                         "edits made while the benchmark runs out of it)")
    ap.add_argument("--dataset", type=Path, default=DEMO_DATA)
    ap.add_argument("--limit", type=int, default=12, help="queries per condition (sieve eval --limit)")
    ap.add_argument("--rounds", type=int, default=1, help="alternating baseline/current rounds (medians printed)")
    ap.add_argument("--defenses", default=None, help="comma-separated; default: the baseline's registered defenses")
    ap.add_argument("--keep", type=Path, default=None, help="keep the run directories here")
    ap.add_argument("--compare", nargs=2, type=Path, metavar=("RUN_A", "RUN_B"), help="only compare two run dirs")
    args = ap.parse_args()
    if args.compare:
        raise SystemExit(1 if compare(*args.compare) else 0)
    if args.baseline is None or not (args.baseline / "sieve").is_dir():
        raise SystemExit("--baseline must be a source checkout (a directory with sieve/)")
    if not (args.current / "sieve").is_dir():
        raise SystemExit("--current must be a source checkout (a directory with sieve/)")
    base, cur = args.baseline.resolve(), args.current.resolve()
    dataset = args.dataset.resolve()
    defenses = args.defenses.split(",") if args.defenses else registered_defenses(base)
    work = args.keep or Path(tempfile.mkdtemp(prefix="sieve-eval-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    load0 = os.getloadavg()
    print(f"sieve eval {dataset.name} --no-llm --limit {args.limit}; {len(defenses)} defenses; "
          f"{args.rounds} round(s); {os.cpu_count()} CPUs; load average {load0[0]:.2f} {load0[1]:.2f} {load0[2]:.2f}")
    results: dict[str, list[dict[str, float]]] = {"baseline": [], "current": []}
    for r in range(args.rounds):
        for side, tree in (("baseline", base), ("current", cur)):
            res = run_once(tree, dataset, work / f"{side}", args.limit, defenses)
            results[side].append(res)
            print(f"  round {r + 1} {side:8s} wall {res['wall_s']:7.1f} s  CPU {res['cpu_s']:7.1f} s  "
                  f"peak RSS {res['peak_rss_mb']:6.0f} MB  records {res['record_bytes'] / 1e6:7.2f} MB", flush=True)
    load1 = os.getloadavg()
    med = {s: {k: statistics.median(x[k] for x in v) for k in v[0] if not k.startswith("bytes:")}
           for s, v in results.items()}
    print(f"\n{'metric':22s} {'baseline':>14s} {'current':>14s} {'baseline/current':>17s}")
    for key, label, fmt in (("wall_s", "wall-clock (s)", "{:.1f}"), ("cpu_s", "CPU (s)", "{:.1f}"),
                            ("peak_rss_mb", "peak RSS (MB)", "{:.0f}"), ("record_bytes", "records total (bytes)", "{:.0f}"),
                            ("bytes_per_record", "bytes / record", "{:.0f}"), ("records", "records (n)", "{:.0f}")):
        b, c = med["baseline"][key], med["current"][key]
        ratio = f"{b / c:.2f}x" if c else "—"
        print(f"{label:22s} {fmt.format(b):>14s} {fmt.format(c):>14s} {ratio:>17s}")
    for side, v in results.items():
        files = {k.split(":", 1)[1]: x for k, x in v[-1].items() if k.startswith("bytes:")}
        print(f"{side} record files: " + ", ".join(f"{n} {b:,} B" for n, b in files.items()))
    print(f"load average after: {load1[0]:.2f} {load1[1]:.2f} {load1[2]:.2f}")
    n_diff = compare(work / "baseline", work / "current")
    if args.keep is None:
        shutil.rmtree(work, ignore_errors=True)
    if n_diff:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
