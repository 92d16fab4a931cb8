"""``sieve bench serve``: throughput and latency of ``POST /v1/filter`` against a running
``sieve serve`` process, with the in-process library path measured in the same run as the baseline.

    sieve bench serve [--tiny] [--requests 20] [--queries 8] [--defenses tris,rsq] [--sizes 20,50]

1. Starts ``sieve serve demo_data`` (packaged local models; ``--tiny``: tiny in-process models) on a
   free localhost port with a temporary ledger, ``--preload`` = the benchmarked defenses, and waits
   for ``/healthz``.
2. Builds pr_b rankings of the demo's attack targets (depth 50) in this process with the same models.
3. For each defense × document count: ``--requests`` sequential requests (one warm-up first), each
   timed (a) in-process, ``Defense.apply`` on the same ranking (the baseline), and (b) over HTTP
   (JSON encode, request, server-side filter + ledger check, JSON decode).
4. Prints p50/p95 of both, the HTTP/in-process ratio, requests per second over HTTP (sequential,
   one client) and the server's resident memory (RSS now and peak, from /proc).
5. ``--concurrency C --load-requests N``: N requests from C concurrent clients (p50, p95, shed = 503
   with Retry-After); ``--burst B``: B requests at once (answered, shed, slowest shed answer); then
   SIGTERM during a second burst and the time until the process exited. No client timeout is hit:
   shed requests are answered at once by the server's bounded queue (``--workers``/``--queue``).

The machine is shared: read the ratios, not the absolute milliseconds. Nothing is asserted.
"""
from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from sieve.bench import DEMO_DATA


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _rss_mb(pid: int) -> tuple[float, float]:
    """(current RSS, peak RSS) of ``pid`` in MiB, from /proc/<pid>/status."""
    now = peak = float("nan")
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                now = int(line.split()[1]) / 1024
            elif line.startswith("VmHWM:"):
                peak = int(line.split()[1]) / 1024
    except OSError:
        pass
    return now, peak


def _pct(xs: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(xs), q)) if xs else float("nan")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tiny", action="store_true", help="tiny in-process models (smoke run)")
    ap.add_argument("--requests", type=int, default=20, help="timed requests per defense and size")
    ap.add_argument("--queries", type=int, default=8, help="distinct pr_b queries cycled through")
    ap.add_argument("--defenses", default="tris,rsq")
    ap.add_argument("--sizes", default="20,50", help="documents per request")
    ap.add_argument("--clean-limit", type=int, default=40, help="clean queries calibrating unset thresholds")
    ap.add_argument("--concurrency", type=int, default=0, help="concurrent clients of the load phase (0: none)")
    ap.add_argument("--load-requests", type=int, default=200, help="requests of the load phase")
    ap.add_argument("--burst", type=int, default=0, help="requests sent at once in the burst phase (0: none)")
    ap.add_argument("--server-args", default="", help="extra sieve serve options, e.g. '--workers 2 --queue 8'")
    args = ap.parse_args()
    defenses = [d for d in args.defenses.split(",") if d]
    sizes = [int(s) for s in args.sizes.split(",") if s]

    import httpx

    from sieve.corpus import load_dataset
    from sieve.experiment import Experiment, prepare_defense

    ds = load_dataset(DEMO_DATA)
    tmp = Path(tempfile.mkdtemp(prefix="sieve-bench-serve-"))
    port = _free_port()
    cmd = [sys.executable, "-c", "from sieve.cli import app; app()", "serve", str(DEMO_DATA),
           "--port", str(port), "--ledger", str(tmp / "ledger.sqlite"), "--preload", ",".join(defenses),
           "--clean-limit", str(args.clean_limit), "--max-documents", str(max(sizes))]
    if args.tiny:
        cmd += ["--retriever", "tiny-hashing"]
    cmd += args.server_args.split()
    env = {k: v for k, v in os.environ.items() if k != "SIEVE_API_TOKEN"}
    print(f"starting sieve serve on 127.0.0.1:{port} ({'tiny' if args.tiny else 'packaged'} models)…", flush=True)
    t_start = time.perf_counter()
    log = open(tmp / "server.log", "w+")  # a file, not a pipe: progress bars must never block the server
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=log, text=True)
    url = f"http://127.0.0.1:{port}"
    try:
        while True:
            if proc.poll() is not None:
                log.seek(0)
                sys.exit(f"sieve serve exited {proc.returncode}: {log.read()[-2000:]}")
            try:
                if httpx.get(url + "/healthz", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.5)
        startup = time.perf_counter() - t_start
        rss0, _ = _rss_mb(proc.pid)
        print(f"server ready in {startup:.1f} s (models loaded, {', '.join(defenses)} prepared); RSS {rss0:.0f} MiB")

        # the same models in this process: the in-process baseline
        if args.tiny:
            from sieve.testing_models import tiny_resources

            res = tiny_resources(corpus_texts=[d.text for d in ds.documents])
        else:
            from sieve.resources import Resources

            res = Resources()
        exp = Experiment(ds, res, persist=not args.tiny)
        records = [r for r in ds.attack_records("pr_b")][: args.queries]
        rankings = [exp.rank(r.query, condition="pr_b", query_id=r.query_id, depth=max(sizes)) for r in records]
        prepared = {d: prepare_defense(exp, d, clean_limit=args.clean_limit) for d in defenses}

        http = httpx.Client(base_url=url, timeout=300)
        rows = []
        for spec in defenses:
            for n in sizes:
                local_ms: list[float] = []
                http_ms: list[float] = []
                removed = 0
                bodies = []
                for rk in rankings:
                    sub = rk.__class__(rk.query, rk.documents[:n], rk.query_id, rk.condition)
                    body = {"query": rk.query, "defense": spec, "k_ctx": 5,
                            "documents": [{"id": d.id, "text": d.text, "title": d.title, "score": d.score}
                                          for d in sub.documents]}
                    bodies.append((sub, body))
                # warm-up (caches of per-document artifacts on both sides)
                for sub, body in bodies:
                    prepared[spec].apply(sub, res, 5)
                    http.post("/v1/filter", json=body).raise_for_status()
                wall = 0.0
                for i in range(args.requests):
                    sub, body = bodies[i % len(bodies)]
                    t0 = time.perf_counter()
                    prepared[spec].apply(sub, res, 5)
                    local_ms.append((time.perf_counter() - t0) * 1000)
                    t0 = time.perf_counter()
                    r = http.post("/v1/filter", json=body)
                    dt = time.perf_counter() - t0
                    r.raise_for_status()
                    wall += dt
                    http_ms.append(dt * 1000)
                    removed += len(r.json()["removed"])
                rows.append((spec, n, len(http_ms), _pct(local_ms, 50), _pct(local_ms, 95), _pct(http_ms, 50),
                             _pct(http_ms, 95), len(http_ms) / wall, removed / len(http_ms)))
                print(f"  {spec} × {n} documents: done", flush=True)
        rss, peak = _rss_mb(proc.pid)
        load = _load_phases(url, [b for _, b in bodies], args, proc) if (args.concurrency or args.burst) else []
    finally:
        proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()

    print()
    print(f"POST /v1/filter, demo_data pr_b rankings ({len(rankings)} queries cycled), k_ctx 5, sequential client; "
          f"baseline = in-process Defense.apply on the same ranking, same run")
    hdr = (f"{'defense':<8} {'docs':>4} {'n':>4} {'inproc p50':>11} {'inproc p95':>11} {'http p50':>9} "
           f"{'http p95':>9} {'ratio p50':>9} {'req/s':>7} {'removed/req':>11}")
    print(hdr)
    print("-" * len(hdr))
    for spec, n, cnt, lp50, lp95, hp50, hp95, rps, rem in rows:
        print(f"{spec:<8} {n:>4} {cnt:>4} {lp50:>9.1f}ms {lp95:>9.1f}ms {hp50:>7.1f}ms {hp95:>7.1f}ms "
              f"{hp50 / lp50 if lp50 > 0 else float('nan'):>8.2f}x {rps:>7.2f} {rem:>11.1f}")
    print(f"\nserver memory: RSS {rss:.0f} MiB after the run (peak {peak:.0f} MiB; {rss0:.0f} MiB when ready); "
          f"startup {startup:.1f} s")
    for line in load:
        print(line)


def _load_phases(url: str, bodies: list[dict], args: argparse.Namespace, proc: subprocess.Popen) -> list[str]:
    """Concurrent load, a burst, and SIGTERM under load (see the module docstring, step 5)."""
    import concurrent.futures as cf
    import signal

    import httpx

    n = max(args.concurrency, args.burst, 1)
    client = httpx.Client(timeout=300, limits=httpx.Limits(max_connections=n, max_keepalive_connections=n))
    payloads = [json.dumps(b).encode() for b in bodies]   # encoded once: the clients share these 2 cores

    def one(i: int) -> tuple[int, float]:
        t0 = time.perf_counter()
        try:
            r = client.post(url + "/v1/filter", content=payloads[i % len(payloads)],
                            headers={"content-type": "application/json"})
            code = r.status_code if (r.status_code != 503 or r.headers.get("retry-after")) else -503
        except httpx.HTTPError:
            code = -1
        return code, (time.perf_counter() - t0) * 1000

    out = ["", "load (POST /v1/filter, the last defense × size above):"]
    if args.concurrency:
        with cf.ThreadPoolExecutor(args.concurrency) as ex:
            res = list(ex.map(one, range(args.load_requests)))
        ok = [t for c, t in res if c == 200]
        shed = [t for c, t in res if c == 503]
        out.append(f"  {args.load_requests} requests at concurrency {args.concurrency}: {len(ok)} answered "
                   f"(p50 {_pct(ok, 50):.0f} ms, p95 {_pct(ok, 95):.0f} ms), {len(shed)} shed (503 + Retry-After"
                   f"{f', slowest {max(shed):.0f} ms' if shed else ''}), {sum(1 for c, _ in res if c not in (200, 503))} "
                   "other (client timeouts, errors)")
    if args.burst:
        with cf.ThreadPoolExecutor(args.burst) as ex:
            res = list(ex.map(one, range(args.burst)))
        ok = [t for c, t in res if c == 200]
        shed = [t for c, t in res if c == 503]
        out.append(f"  burst of {args.burst}: {len(ok)} answered (p95 {_pct(ok, 95):.0f} ms), {len(shed)} shed "
                   f"(slowest shed answer {max(shed) if shed else 0:.0f} ms), "
                   f"{sum(1 for c, _ in res if c not in (200, 503))} other")
        with cf.ThreadPoolExecutor(args.burst) as ex:
            futs = [ex.submit(one, i) for i in range(args.burst)]
            time.sleep(0.5)
            t0 = time.perf_counter()
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(120)
                took = f"{time.perf_counter() - t0:.1f} s"
            except subprocess.TimeoutExpired:
                took = "over 120 s"
            codes = [f.result()[0] for f in futs]
        out.append(f"  SIGTERM during a burst of {args.burst}: exited in {took}; {codes.count(200)} answered, "
                   f"{codes.count(503)} shed, {sum(1 for c in codes if c not in (200, 503))} cut off")
    return out


if __name__ == "__main__":
    main()
