"""``sieve bench serve``: latency, load shedding and shutdown of ``POST /v1/filter`` against a
running ``sieve serve`` process, each against a baseline measured in the same run
(docs/service.md "Benchmark"; issue 26).

    sieve bench serve [--tiny] [--defenses fusion,tris_l2] [--sizes 20] [--requests 20] [--queries 8]
                      [--concurrency 8] [--load-requests 200] [--burst 40] [--server-args '--workers 2']

1. Starts ``sieve serve demo_data`` (packaged local models; ``--tiny``: tiny models) on a free
   localhost port with a temporary ledger, ``--preload`` = the benchmarked defenses, and waits for
   ``/healthz``. Builds pr_b rankings of the demo's attack targets in this process with the same
   models.
2. **Cold burst**: ``--burst`` requests (the first defense × first size) sent at once to the fresh
   server before any other work request: how many were answered and how many shed (503 with
   ``Retry-After``), and how long the shed answers took (p50, max). Baseline: ``/healthz`` round
   trips of the idle server.
3. **Sequential**: for each defense × size, ``--requests`` requests from one client (one warm-up
   each), timed in-process (``Defense.apply`` on the same ranking: the library baseline) and over
   HTTP; p50/p95, the HTTP/in-process ratio, requests per second, removals per request.
4. **Load**: ``--load-requests`` requests from ``--concurrency`` clients (first defense × first
   size): p50/p95 against the sequential HTTP p50/p95 of step 3, throughput, shed and failed counts.
5. **Shutdown**: SIGTERM while ``--concurrency`` clients keep sending; time until the process
   exited and what the in-flight requests got. Baseline: SIGTERM to a second, idle server started
   the same way (skipped with ``--no-idle-baseline``).

No client timeout is hit by design: the bounded queue sheds what it cannot serve in time (client
timeout here: 300 s, counted as "other"). The machine is shared: read the ratios, not the absolute
milliseconds. Nothing is asserted (tests/service/ checks the behaviour, never the timing).
"""
from __future__ import annotations

import argparse
import concurrent.futures as cf
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

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


class Server:
    """A ``sieve serve`` process of this benchmark (stderr to a file: a full pipe must never block it)."""

    def __init__(self, args: argparse.Namespace, defenses: list[str], sizes: list[int], tmp: Path, tag: str) -> None:
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        cmd = [sys.executable, "-c", "from sieve.cli import app; app()", "serve", str(DEMO_DATA),
               "--port", str(self.port), "--ledger", str(tmp / f"ledger-{tag}.sqlite"), "--preload", ",".join(defenses),
               "--clean-limit", str(args.clean_limit), "--max-documents", str(max(sizes))]
        if args.tiny:
            cmd += ["--retriever", "tiny-hashing"]
        cmd += args.server_args.split()
        env = {k: v for k, v in os.environ.items() if k != "SIEVE_API_TOKEN"}
        self.log_path = tmp / f"server-{tag}.log"
        self.log = open(self.log_path, "w+")
        self.t0 = time.perf_counter()
        self.proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=self.log, text=True)

    def wait_ready(self) -> float:
        import httpx

        while True:
            if self.proc.poll() is not None:
                sys.exit(f"sieve serve exited {self.proc.returncode}: {self.log_path.read_text()[-2000:]}")
            try:
                if httpx.get(self.url + "/healthz", timeout=2).status_code == 200:
                    return time.perf_counter() - self.t0
            except httpx.HTTPError:
                pass
            time.sleep(0.5)

    def sigterm_exit_s(self, limit: float = 120.0) -> float | None:
        """Send SIGTERM; seconds until the process exited (``None``: not within ``limit``, then killed)."""
        t0 = time.perf_counter()
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(limit)
            return time.perf_counter() - t0
        except subprocess.TimeoutExpired:
            self.stop()
            return None

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(30)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tiny", action="store_true", help="tiny in-process models (smoke run)")
    ap.add_argument("--requests", type=int, default=20, help="timed sequential requests per defense and size")
    ap.add_argument("--queries", type=int, default=8, help="distinct pr_b queries cycled through")
    ap.add_argument("--defenses", default="fusion,tris_l2", help="benchmarked defenses (the first one takes the load)")
    ap.add_argument("--sizes", default="20", help="documents per request (the first one takes the load)")
    ap.add_argument("--clean-limit", type=int, default=40, help="clean queries calibrating unset thresholds")
    ap.add_argument("--concurrency", type=int, default=8, help="concurrent clients of the load phase (0: skip)")
    ap.add_argument("--load-requests", type=int, default=200, help="requests of the load phase")
    ap.add_argument("--burst", type=int, default=40, help="requests sent at once to the fresh server (0: skip)")
    ap.add_argument("--no-idle-baseline", action="store_true", help="skip the idle server of the shutdown baseline")
    ap.add_argument("--server-args", default="", help="extra sieve serve options, e.g. '--workers 2 --queue 8'")
    args = ap.parse_args()
    defenses = [d for d in args.defenses.split(",") if d]
    sizes = [int(s) for s in args.sizes.split(",") if s]

    import httpx

    from sieve.corpus import load_dataset
    from sieve.experiment import Experiment, prepare_defense

    ds = load_dataset(DEMO_DATA)
    tmp = Path(tempfile.mkdtemp(prefix="sieve-bench-serve-"))
    print(f"starting sieve serve demo_data ({'tiny' if args.tiny else 'packaged'} models; preload "
          f"{','.join(defenses)}; server options: {args.server_args or 'defaults'})…", flush=True)
    server = Server(args, defenses, sizes, tmp, "main")
    out: list[str] = []
    try:
        startup = server.wait_ready()
        rss0, _ = _rss_mb(server.proc.pid)
        print(f"server ready in {startup:.1f} s (models loaded, {', '.join(defenses)} prepared); RSS {rss0:.0f} MiB",
              flush=True)

        # the same models in this process: the in-process baseline, and the request bodies
        if args.tiny:
            from sieve.testing_models import tiny_resources

            res = tiny_resources(corpus_texts=[d.text for d in ds.documents])
        else:
            from sieve.resources import Resources

            res = Resources()
        exp = Experiment(ds, res, persist=not args.tiny)
        records = [r for r in ds.attack_records("pr_b")][: args.queries]
        rankings = [exp.rank(r.query, condition="pr_b", query_id=r.query_id, depth=max(sizes)) for r in records]

        def bodies_of(spec: str, n: int) -> list[tuple[Any, dict[str, Any]]]:
            got = []
            for rk in rankings:
                sub = rk.__class__(rk.query, rk.documents[:n], rk.query_id, rk.condition)
                got.append((sub, {"query": rk.query, "defense": spec, "k_ctx": 5,
                                  "documents": [{"id": d.id, "text": d.text, "title": d.title, "score": d.score}
                                                for d in sub.documents]}))
            return got

        load_bodies = [b for _, b in bodies_of(defenses[0], sizes[0])]
        http = httpx.Client(base_url=server.url, timeout=300)

        # 2. cold burst on the fresh server, with the idle /healthz round trip as the baseline
        idle_ms = []
        for _ in range(20):
            t0 = time.perf_counter()
            http.get("/healthz").raise_for_status()
            idle_ms.append((time.perf_counter() - t0) * 1000)
        if args.burst:
            res_b = _concurrent(server.url, load_bodies, args.burst, args.burst)
            ok = [t for c, t in res_b if c == 200]
            shed = [t for c, t in res_b if c == 503]
            out += ["", f"cold burst: {args.burst} requests at once to the fresh server ({defenses[0]} × {sizes[0]} "
                        "documents)",
                    f"  answered {len(ok)} (p50 {_pct(ok, 50):.0f} ms, max {max(ok) if ok else float('nan'):.0f} ms); "
                    f"shed {len(shed)} with 503 + Retry-After (answered in p50 {_pct(shed, 50):.0f} ms, max "
                    f"{max(shed) if shed else float('nan'):.0f} ms); other {sum(1 for c, _ in res_b if c not in (200, 503))}",
                    f"  baseline: idle GET /healthz round trip p50 {_pct(idle_ms, 50):.1f} ms, max {max(idle_ms):.1f} ms"]
            print("  cold burst: done", flush=True)

        # 3. sequential: in-process vs HTTP
        prepared = {d: prepare_defense(exp, d, clean_limit=args.clean_limit) for d in defenses}
        rows = []
        seq: dict[tuple[str, int], list[float]] = {}
        for spec in defenses:
            for n in sizes:
                local_ms: list[float] = []
                http_ms: list[float] = []
                removed = 0
                bodies = bodies_of(spec, n)
                for sub, body in bodies:   # warm-up (per-document artifact caches on both sides)
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
                seq[(spec, n)] = http_ms
                rows.append((spec, n, len(http_ms), _pct(local_ms, 50), _pct(local_ms, 95), _pct(http_ms, 50),
                             _pct(http_ms, 95), len(http_ms) / wall, removed / len(http_ms)))
                print(f"  sequential {spec} × {n} documents: done", flush=True)
        rss, peak = _rss_mb(server.proc.pid)

        # 4. load at concurrency C against the sequential baseline
        if args.concurrency:
            base = seq[(defenses[0], sizes[0])]
            t0 = time.perf_counter()
            res_l = _concurrent(server.url, load_bodies, args.load_requests, args.concurrency)
            wall = time.perf_counter() - t0
            ok = [t for c, t in res_l if c == 200]
            shed = [t for c, t in res_l if c == 503]
            seq_rps = len(base) / (sum(base) / 1000)
            out += ["", f"load: {args.load_requests} requests from {args.concurrency} concurrent clients "
                        f"({defenses[0]} × {sizes[0]} documents)",
                    f"  answered {len(ok)}: p50 {_pct(ok, 50):.0f} ms, p95 {_pct(ok, 95):.0f} ms "
                    f"({_pct(ok, 50) / _pct(base, 50):.1f}x / {_pct(ok, 95) / _pct(base, 95):.1f}x the sequential "
                    f"p50/p95); {len(ok) / wall:.2f} req/s; shed {len(shed)} (503 + Retry-After); "
                    f"other {sum(1 for c, _ in res_l if c not in (200, 503))}",
                    f"  baseline: sequential (1 client, n={len(base)}) p50 {_pct(base, 50):.0f} ms, p95 "
                    f"{_pct(base, 95):.0f} ms, {seq_rps:.2f} req/s"]
            print("  load: done", flush=True)

        # 5. shutdown under load, against an idle server's
        took, inflight = _shutdown_under_load(server, load_bodies, max(args.concurrency, 1))
        idle_took: float | None = None
        if not args.no_idle_baseline:
            idle = Server(args, defenses, sizes, tmp, "idle")
            try:
                idle.wait_ready()
                idle_took = idle.sigterm_exit_s()
            finally:
                idle.stop()
        out += ["", f"shutdown: SIGTERM while {max(args.concurrency, 1)} clients keep sending",
                f"  exited in {fmt(took)}; in flight: {inflight.get(200, 0)} answered, {inflight.get(503, 0)} shed "
                f"(503), {sum(v for k, v in inflight.items() if k not in (200, 503))} cut off (connection closed)",
                ("  baseline: skipped (--no-idle-baseline)" if args.no_idle_baseline
                 else f"  baseline: idle server (same options) exited in {fmt(idle_took)}")]
    finally:
        server.stop()
        import shutil

        shutil.rmtree(tmp, ignore_errors=True)   # ledgers and server logs of this run

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
    print(f"\nserver memory: RSS {rss:.0f} MiB after the sequential runs (peak {peak:.0f} MiB; {rss0:.0f} MiB when "
          f"ready); startup {startup:.1f} s")
    for line in out:
        print(line)


def fmt(s: float | None) -> str:
    return "over 120 s (killed)" if s is None else f"{s:.1f} s"


def _concurrent(url: str, bodies: list[dict[str, Any]], n: int, clients: int) -> list[tuple[int, float]]:
    """``n`` POST /v1/filter from ``clients`` threads: (status, ms) each; a 503 without Retry-After is
    -503, a client error or timeout -1."""
    import httpx

    payloads = [json.dumps(b).encode() for b in bodies]   # encoded once: the clients share these cores
    client = httpx.Client(timeout=300, limits=httpx.Limits(max_connections=clients, max_keepalive_connections=clients))
    start = threading.Barrier(min(n, clients))

    def one(i: int) -> tuple[int, float]:
        if i < clients:
            try:
                start.wait(30)        # the first wave leaves together (a real burst)
            except threading.BrokenBarrierError:
                pass
        t0 = time.perf_counter()
        try:
            r = client.post(url + "/v1/filter", content=payloads[i % len(payloads)],
                            headers={"content-type": "application/json"})
            code = r.status_code if (r.status_code != 503 or r.headers.get("retry-after")) else -503
        except httpx.HTTPError:
            code = -1
        return code, (time.perf_counter() - t0) * 1000

    with cf.ThreadPoolExecutor(clients) as ex:
        got = list(ex.map(one, range(n)))
    client.close()
    return got


def _shutdown_under_load(server: Server, bodies: list[dict[str, Any]], clients: int) -> tuple[float | None, dict[int, int]]:
    """SIGTERM while ``clients`` threads keep posting; (seconds to exit, status counts of what they got after it)."""
    import httpx

    payloads = [json.dumps(b).encode() for b in bodies]
    stop = threading.Event()
    after: dict[int, int] = {}
    lock = threading.Lock()
    signalled = threading.Event()

    def loop(k: int) -> None:
        with httpx.Client(timeout=300) as c:
            i = k
            while not stop.is_set():
                try:
                    code = c.post(server.url + "/v1/filter", content=payloads[i % len(payloads)],
                                  headers={"content-type": "application/json"}).status_code
                except httpx.HTTPError:
                    code = -1
                if signalled.is_set():
                    with lock:
                        after[code] = after.get(code, 0) + 1
                    if code == -1:
                        return            # the server is gone
                i += clients

    threads = [threading.Thread(target=loop, args=(k,), daemon=True) for k in range(clients)]
    for t in threads:
        t.start()
    time.sleep(2.0)                       # the queue fills
    signalled.set()
    took = server.sigterm_exit_s()
    stop.set()
    for t in threads:
        t.join(30)
    return took, after


if __name__ == "__main__":
    main()
