"""``sieve serve`` under load and bad configuration (issue 26, bullet 4): typed params (422 naming
the field), ``--ledger`` checked at start, an unreadable or vanished ledger answered 503 naming it
(never an empty quarantine), ``/healthz`` without the ledger path unless the token is given, a bounded
prepared-defense cache, a refused request for a model that was not loaded, and a real uvicorn process
under a concurrent burst: shed requests answered within 1 s with ``Retry-After``, SIGTERM honoured
within a few seconds."""
from __future__ import annotations

import concurrent.futures as cf
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
from fastapi.testclient import TestClient

from sieve.ledger import Ledger
from sieve.service import ServiceState, create_app
from sieve.service.limits import LRUDefenses
from tests.service.conftest import request_body

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def fresh_ledger(tiny_experiment):
    p = tiny_experiment.ledger_path
    for f in p.parent.glob(p.name + "*"):
        f.unlink()
    Ledger(p).close()
    return p


@pytest.fixture
def client(tiny_experiment, fresh_ledger):
    st = ServiceState.build(tiny_experiment, ledger_path=fresh_ledger, clean_limit=10, token="tok")
    return TestClient(create_app(st)), st


AUTH = {"Authorization": "Bearer tok"}


@pytest.mark.parametrize("params, field", [({"use_l2": "false"}, "use_l2"), ({"prefix_token_count": -5}, "prefix_token_count"),
                                           ({"prefix_token_count": 2.5}, "prefix_token_count"),
                                           ({"jaccard_threshold": "high"}, "jaccard_threshold"),
                                           ({"use_l1": 0}, "use_l1")])
def test_params_are_type_and_range_checked(client, pr_b_ranking, params, field):
    c, _ = client
    r = c.post("/v1/filter", json=request_body(pr_b_ranking, "tris_l2", params=params), headers=AUTH)
    assert r.status_code == 422, r.text
    d = r.json()["detail"][0]
    assert d["loc"] == ["body", "params", field] and field in d["msg"], d


def test_good_params_pass(client, pr_b_ranking):
    c, _ = client
    r = c.post("/v1/filter", json=request_body(pr_b_ranking, "tris_l2", params={"prefix_token_count": 10}),
               headers=AUTH)
    assert r.status_code == 200, r.text


def test_healthz_shows_the_ledger_path_only_with_the_token(client, fresh_ledger):
    c, _ = client
    assert c.get("/healthz").json()["ledger"] == ""
    assert str(fresh_ledger) not in c.get("/healthz", headers={"Authorization": "Bearer wrong"}).text
    assert c.get("/healthz", headers=AUTH).json()["ledger"] == str(fresh_ledger)


def test_a_ledger_corrupted_or_removed_while_serving_is_503_not_empty(client, fresh_ledger, pr_b_ranking):
    c, _ = client
    assert c.get("/v1/alerts", headers=AUTH).status_code == 200
    fresh_ledger.write_bytes(b"SQLite format 3\x00" + b"\xff" * 8000)   # damaged while the server runs
    for _ in range(2):   # the first answer moves it aside; the next must not start an empty quarantine
        for r in (c.get("/v1/alerts", headers=AUTH),
                  c.post("/v1/quarantine", json={"doc_id": "d", "text": "t", "who": "w"}, headers=AUTH),
                  c.post("/v1/filter", json=request_body(pr_b_ranking, "none"), headers=AUTH)):
            assert r.status_code == 503, r.text
            assert str(fresh_ledger) in r.json()["detail"][0]["msg"]
            assert r.headers.get("retry-after")
    assert not fresh_ledger.exists()


def test_a_non_ledger_path_is_refused_at_start(tmp_path):
    for bad in (ROOT / "demo_data" / "corpus.jsonl", tmp_path):
        p = subprocess.run([sys.executable, "-m", "sieve.service", str(ROOT / "demo_data"), "--retriever",
                            "tiny-hashing", "--ledger", str(bad), "--preload", "", "--port", "1"],
                           capture_output=True, text=True, timeout=300,
                           env={**os.environ, "SIEVE_CACHE_DIR": str(tmp_path / "cache")})
        assert p.returncode == 2, p.stderr[-1500:]
        errs = [ln for ln in p.stderr.splitlines() if ln.startswith("error:")]
        assert len(errs) == 1 and str(bad) in errs[0] and "Traceback" not in p.stderr, p.stderr[-1500:]


def test_prepared_defense_cache_is_bounded_lru():
    c = LRUDefenses(2, pinned={"p"})
    c["p"] = 0
    for k in "abc":
        c[k] = k
    assert set(c) == {"p", "b", "c"}
    c.get("b")
    c["d"] = "d"
    assert set(c) == {"p", "b", "d"}


def test_a_request_never_loads_a_model(tiny_experiment):
    st = ServiceState.__new__(ServiceState)
    res = SimpleNamespace(_retriever=object(), _judge=object(), _lm=None, _token_encoder=None,
                          config=tiny_experiment.resources.config)
    st.experiment = SimpleNamespace(resources=res)
    assert st.missing_models("perplexity") == ["causal_lm"]
    assert st.missing_models("tris_l2") == []


# -- a real uvicorn process ----------------------------------------------------------------------------

def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_burst_is_shed_fast_and_sigterm_is_honoured_under_load(tmp_path, demo_dataset, tiny_experiment):
    import httpx

    port = _free_port()
    env = {**os.environ, "SIEVE_CACHE_DIR": str(tmp_path / "cache")}
    env.pop("SIEVE_API_TOKEN", None)
    cmd = [sys.executable, "-m", "sieve.service", str(ROOT / "demo_data"), "--retriever", "tiny-hashing",
           "--port", str(port), "--ledger", str(tmp_path / "ledger.sqlite"), "--clean-limit", "10",
           "--preload", "fusion", "--workers", "1", "--queue", "4", "--deadline", "3", "--shutdown-timeout", "3"]
    log = open(tmp_path / "server.log", "w+")
    proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        t_end = time.monotonic() + 180
        while True:
            assert proc.poll() is None, (tmp_path / "server.log").read_text()[-2000:]
            try:
                if httpx.get(url + "/healthz", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < t_end, "server did not start"
            time.sleep(0.3)
        rec = next(r for r in demo_dataset.attack_records("pr_b"))
        ranking = tiny_experiment.rank(rec.query, condition="pr_b", query_id=rec.query_id, depth=40)
        body = request_body(ranking, "fusion")

        def one(_: int) -> tuple[int, float, str | None]:
            t0 = time.perf_counter()
            r = httpx.post(url + "/v1/filter", json=body, timeout=60)
            return r.status_code, time.perf_counter() - t0, r.headers.get("retry-after")

        with cf.ThreadPoolExecutor(40) as ex:
            results = list(ex.map(one, range(40)))
        codes = [c for c, _, _ in results]
        assert set(codes) <= {200, 503}, codes
        assert codes.count(200) >= 1
        shed = [(t, ra) for c, t, ra in results if c == 503]
        assert all(ra for _, ra in shed)
        # a request that found the queue full is answered at once
        fast = [t for t, _ in shed]
        assert not fast or min(fast) < 1.0, fast
        # SIGTERM during a second burst: the process exits within a few seconds
        with cf.ThreadPoolExecutor(20) as ex:
            futs = [ex.submit(one, i) for i in range(20)]
            time.sleep(0.3)
            t0 = time.monotonic()
            proc.send_signal(signal.SIGTERM)
            proc.wait(15)
            took = time.monotonic() - t0
            for f in futs:
                try:
                    f.result(timeout=20)
                except httpx.HTTPError:
                    pass
        assert took < 8.0, took
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
