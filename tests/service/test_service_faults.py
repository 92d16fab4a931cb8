"""``sieve serve`` under load and bad configuration (issue 26, bullet 4): typed params (422 naming
the field), ``--ledger`` checked at start, an unreadable or vanished ledger answered 503 naming it
(never an empty quarantine), ``/healthz`` without the ledger path unless the token is given, a bounded
prepared-defense cache, a refused request for a model that was not loaded, cancellation at the
endpoints' safe points, a default defense that needs no LLM, and a real uvicorn process under a
concurrent burst: every request answered (200, or 503 with ``Retry-After``, counted in /metrics) and
SIGTERM honoured. How fast is measured by ``sieve bench serve`` (sieve/bench/serve_bench.py), not
asserted here: no test depends on timing or load."""
from __future__ import annotations

import concurrent.futures as cf
import os
import re
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
from sieve.service import Limits, ServiceState, create_app
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


def _metric(text: str, name: str, labels: str) -> float:
    m = re.search(rf"^{name}\{{{labels}\}} (\S+)$", text, re.M)
    return float(m.group(1)) if m else 0.0


def test_an_abandoned_request_stops_at_a_safe_point_and_does_nothing(tiny_experiment, fresh_ledger, pr_b_ranking):
    # a run deadline every request has passed by its first safe point: nothing is filtered, nothing recorded
    st = ServiceState.build(tiny_experiment, ledger_path=fresh_ledger, clean_limit=10,
                            limits=Limits(run_deadline_s=1e-9))
    c = TestClient(create_app(st))
    r = c.post("/v1/filter", json=request_body(pr_b_ranking, "tris_l2"))
    assert r.status_code == 503 and r.headers.get("retry-after"), r.text
    assert "run deadline" in r.json()["detail"][0]["msg"]
    r = c.post("/v1/audit", json={"condition": "script"})
    assert r.status_code == 503, r.text
    with Ledger(fresh_ledger) as led:
        assert led.counts().get("open", 0) == 0             # the cancelled audit recorded no flag
    text = c.get("/metrics").text
    assert _metric(text, "sieve_admission_total", 'outcome="cancelled"') == 2
    assert _metric(text, "sieve_documents_total", 'defense="tris_l2"') == 0   # the defense never ran


def test_the_default_defense_and_preload_need_no_llm(tiny_experiment, fresh_ledger, pr_b_ranking):
    from sieve.adapters.client import DEFAULT_DEFENSE
    from sieve.registry import DEFENSES
    from sieve.resources import _UNSET
    from sieve.service.__main__ import DEFAULT_PRELOAD, parser
    from sieve.service.schemas import FilterRequest

    preload = DEFAULT_PRELOAD.split(",")
    request_default = FilterRequest.model_fields["defense"].default
    assert parser().parse_args(["d"]).preload == DEFAULT_PRELOAD
    assert request_default == DEFAULT_DEFENSE and request_default in preload and "fusion" in preload
    for spec in preload:
        assert "llm" not in DEFENSES.entry(spec).needs, spec
    res = tiny_experiment.resources
    was = getattr(res, "_llm", _UNSET)
    try:
        res._llm = _UNSET                                 # as a fresh server: no LLM loaded
        st = ServiceState.build(tiny_experiment, ledger_path=fresh_ledger, clean_limit=10)
        st.warm(preload)
        body = request_body(pr_b_ranking, "x")
        del body["defense"]                               # the request default
        r = TestClient(create_app(st)).post("/v1/filter", json=body)
        assert r.status_code == 200 and r.json()["defense"] == "tris_l2", r.text
        assert r.json()["removed"]                        # pr_b's poisons repeat the query: L2 removes them
        assert getattr(res, "_llm", _UNSET) is _UNSET     # preparing and serving never loaded the LLM
    finally:
        res._llm = was


# -- a real uvicorn process ----------------------------------------------------------------------------

def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_cold_burst_is_answered_and_sigterm_is_honoured_under_load(tmp_path, demo_dataset, tiny_experiment):
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

        # a cold burst of 40 on a fresh server (1 worker, 4 queued): every request is answered — none
        # hits the client's 60 s hang guard — either 200 or 503 with Retry-After
        with cf.ThreadPoolExecutor(40) as ex:
            results = list(ex.map(one, range(40)))
        codes = [c for c, _, _ in results]
        assert set(codes) <= {200, 503}, codes
        # how many are shed depends on how fast the requests arrive and run (the machine's load), so it
        # is not asserted here; the admission tests drive the shedding rules deterministically
        assert codes.count(200) >= 1, codes
        assert all(ra and int(ra) >= 1 for c, _, ra in results if c == 503)
        text = httpx.get(url + "/metrics", timeout=60).text
        assert _metric(text, "sieve_admission_total", 'outcome="shed"') == codes.count(503)
        assert _metric(text, "sieve_requests_total", 'method="POST",route="/v1/filter",status="200"') == codes.count(200)
        # SIGTERM during a second burst: the process exits (the 60 s wait is a hang guard only)
        with cf.ThreadPoolExecutor(20) as ex:
            futs = [ex.submit(one, i) for i in range(20)]
            time.sleep(0.3)
            proc.send_signal(signal.SIGTERM)
            proc.wait(60)
            for f in futs:
                try:
                    f.result(timeout=60)
                except httpx.HTTPError:
                    pass
        # uvicorn re-raises the signal after its graceful shutdown: the process ends by SIGTERM (or exits 0)
        assert proc.returncode in (0, -signal.SIGTERM), (tmp_path / "server.log").read_text()[-2000:]
        assert "Traceback" not in (tmp_path / "server.log").read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
