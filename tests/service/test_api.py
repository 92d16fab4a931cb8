"""The HTTP API through its ASGI app (real FastAPI + Starlette TestClient, tiny models): decisions
equal the library's, ledger exclusion, audit and alert transitions, limits, auth, metrics."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from sieve.ledger import Flag, Ledger
from sieve.service import Limits, ServiceState, create_app
from tests.service.conftest import request_body

OPENAPI = Path(__file__).resolve().parents[2] / "docs" / "openapi.json"
TOKEN = "s3cret-token"


@pytest.fixture(scope="module")
def state(tiny_experiment):
    return ServiceState.build(tiny_experiment, ledger_path=tiny_experiment.ledger_path, clean_limit=20,
                              limits=Limits(max_body_bytes=200_000, max_documents=30, max_text_chars=3_000))


@pytest.fixture(scope="module")
def client(state):
    return TestClient(create_app(state))


@pytest.fixture(autouse=True)
def empty_ledger(tiny_experiment):
    p = tiny_experiment.ledger_path
    for f in p.parent.glob(p.name + "*"):
        f.unlink()
    Ledger(p).close()   # a fresh empty ledger (a missing one is refused by the service: issue 26)
    yield


def test_filter_decisions_equal_the_library_path(client, tiny_experiment, pr_b_ranking):
    from sieve.experiment import prepare_defense

    r = client.post("/v1/filter", json=request_body(pr_b_ranking, "rsq", k_ctx=5))
    assert r.status_code == 200, r.text
    out = r.json()
    # the same defense prepared by the library on the same clean queries decides the same
    d = prepare_defense(tiny_experiment, "rsq", clean_limit=20)
    ref = d.apply(pr_b_ranking, tiny_experiment.resources, 5)
    assert [x["id"] for x in out["decisions"]] == [doc.id for doc in pr_b_ranking.documents]
    assert out["removed"] == ref.removed_ids
    assert [c["id"] for c in out["context"]] == [c.id for c in ref.context]
    by_id = {x["id"]: x for x in out["decisions"]}
    for dec in ref.decisions:
        got = by_id[dec.doc_id]
        assert got["status"] == dec.status and got["removed"] == dec.removed and got["layer"] == dec.layer
        if dec.score is not None:
            assert got["score"] == pytest.approx(dec.score, abs=1e-4)
            assert got["threshold"] == pytest.approx(dec.threshold, abs=1e-4)
    # the pr_b poisons on top are removed and the context is refilled with clean documents
    poisons = {doc.id for doc in pr_b_ranking.documents if doc.poison and pr_b_ranking.query_id in doc.id}
    assert len(poisons) == 5 and poisons <= set(out["removed"])
    assert len(out["context"]) == 5 and not poisons & {c["id"] for c in out["context"]}
    assert all(x["in_context"] == (x["id"] in {c["id"] for c in out["context"]}) for x in out["decisions"])
    # compact evidence: rounded scalars only, no traces
    ev = by_id[sorted(poisons)[0]]["evidence"]
    assert ev and all(not isinstance(v, (list, dict)) or len(v) <= 8 for v in ev.values())
    assert all(len(str(v).split(".")[-1]) <= 4 for v in ev.values() if isinstance(v, float))


def test_quarantined_documents_are_excluded_via_api_and_via_ledger(client, tiny_experiment, pr_b_ranking):
    docs = pr_b_ranking.documents
    clean = [d for d in docs if not d.poison]
    # through the API
    a = client.post("/v1/quarantine", json={"doc_id": clean[0].id, "text": clean[0].text, "who": "ana", "reason": "odd"})
    assert a.status_code == 201 and a.json()["state"] == "open" and a.json()["detector"] == "manual"
    # through the ledger directly (what the dashboard's Alerts page does), confirmed
    with Ledger(tiny_experiment.ledger_path) as led:
        led.add_flags([Flag(clean[1].id, clean[1].hash, 0.9, 0.5, {}, "rsg flag")], detector="rsg")
        aid = led.alerts(detector="rsg")[0].alert_id
        led.confirm(aid, "bo")
    out = client.post("/v1/filter", json=request_body(pr_b_ranking, "tris_l1", k_ctx=None)).json()
    assert out["quarantined"] == sorted([clean[0].id, clean[1].id])
    q = {x["id"]: x for x in out["decisions"]}
    assert q[clean[0].id]["status"] == "quarantined" and q[clean[0].id]["removed"] is True
    assert q[clean[0].id]["layer"] == "ledger" and not q[clean[0].id]["in_context"]
    assert clean[1].id not in {c["id"] for c in out["context"]}
    assert any("quarantine ledger" in w for w in out["warnings"])
    # same id, edited text: the old flag does not exclude it
    body = request_body(pr_b_ranking, "tris_l1", k_ctx=None)
    body["documents"][[d["id"] for d in body["documents"]].index(clean[0].id)]["text"] += " (edited)"
    assert clean[0].id not in client.post("/v1/filter", json=body).json()["quarantined"]
    # dismissing the API alert brings the document back
    r = client.post(f"/v1/alerts/{a.json()['alert_id']}/dismiss", json={"who": "ana", "why": "fine"})
    assert r.status_code == 200 and r.json()["state"] == "dismissed"
    out = client.post("/v1/filter", json=request_body(pr_b_ranking, "tris_l1", k_ctx=None)).json()
    assert out["quarantined"] == [clean[1].id]


def test_audit_records_flags_and_alert_transitions(client):
    r = client.post("/v1/audit", json={"condition": "pr_b"})
    assert r.status_code == 200, r.text
    out = r.json()
    assert out["summary"]["condition"] == "pr_b" and out["summary"]["injected"] > 0
    assert out["recorded"] == len(out["flags"]) > 0
    again = client.post("/v1/audit", json={"condition": "pr_b"}).json()
    assert again["recorded"] == 0  # not added twice
    assert out["batch"].startswith("S-") and again["batch"] == out["batch"]   # one batch per audited snapshot
    alerts = client.get("/v1/alerts", params={"state": "open", "detector": "rsg"}).json()
    assert {a["evidence"]["batch"] for a in alerts["alerts"]} == {out["batch"]}   # every alert names it
    assert alerts["counts"]["open"] == len(out["flags"]) == len(alerts["alerts"])
    assert {a["doc_id"] for a in alerts["alerts"]} == {f["id"] for f in out["flags"]}
    aid = alerts["alerts"][0]["alert_id"]
    assert client.post(f"/v1/alerts/{aid}/rollback", json={"who": "ana", "why": "x"}).status_code == 409
    assert client.post(f"/v1/alerts/{aid}/confirm", json={"who": "ana"}).json()["state"] == "confirmed"
    r = client.post(f"/v1/alerts/{aid}/rollback", json={"who": "ana"})
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", "why"]
    r = client.post(f"/v1/alerts/{aid}/rollback", json={"who": "ana", "why": "false positive"})
    assert r.status_code == 200 and r.json()["state"] == "rolled_back"
    assert client.post("/v1/alerts/A-nope/confirm", json={"who": "ana"}).status_code == 404
    assert client.get("/v1/alerts", params={"state": "bogus"}).status_code == 422
    r = client.post("/v1/audit", json={"condition": "nope"})
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", "condition"]


def _loc(r):
    return r.json()["detail"][0]["loc"]


@pytest.mark.parametrize("mutate, status, loc", [
    (lambda b: b.pop("query"), 422, ["body", "query"]),
    (lambda b: b.update(k_ctx="five"), 422, ["body", "k_ctx"]),
    (lambda b: b.update(k_ctx=0), 422, ["body", "k_ctx"]),
    (lambda b: b["documents"][2].pop("text"), 422, ["body", "documents", 2, "text"]),
    (lambda b: b["documents"][1].update(score="high"), 422, ["body", "documents", 1, "score"]),
    (lambda b: b.update(documents="all of them"), 422, ["body", "documents"]),
    (lambda b: b.update(defense="nope"), 422, ["body", "defense"]),
    (lambda b: b.update(defense="rsq+nope"), 422, ["body", "defense"]),
    (lambda b: b.update(params={"no_such_param": 1}), 422, ["body", "params", "no_such_param"]),
    (lambda b: b.update(extra_field=1), 422, ["body", "extra_field"]),
    (lambda b: b["documents"].extend(b["documents"][:11]), 422, ["body", "documents"]),  # 31 > 30
    (lambda b: b["documents"][3].update(text="x" * 3_001), 422, ["body", "documents", 3, "text"]),
    (lambda b: b["documents"][4].update(id=b["documents"][0]["id"]), 422, ["body", "documents", 4, "id"]),
    (lambda b: b.update(query="   "), 422, ["body", "query"]),
])
def test_bad_requests_get_a_clear_4xx_naming_the_field(client, pr_b_ranking, mutate, status, loc):
    body = request_body(pr_b_ranking, "rsq")
    mutate(body)
    r = client.post("/v1/filter", json=body)
    assert r.status_code == status, r.text
    assert _loc(r) == loc
    assert r.json()["detail"][0]["msg"]


def test_oversize_body_is_413(client, pr_b_ranking):
    body = request_body(pr_b_ranking, "rsq")
    body["documents"][0]["text"] = "x" * 250_000
    r = client.post("/v1/filter", json=body)
    assert r.status_code == 413 and _loc(r) == ["body"] and "200000" in r.json()["detail"][0]["msg"]

    def chunks():  # no Content-Length: counted while streaming
        for _ in range(30):
            yield b"x" * 10_000

    r = client.post("/v1/filter", content=chunks(), headers={"content-type": "application/json"})
    assert r.status_code == 413
    assert client.post("/v1/filter", content=b"{not json", headers={"content-type": "application/json"}).status_code == 422


def test_bearer_token(tiny_experiment, pr_b_ranking):
    st = ServiceState.build(tiny_experiment, ledger_path=tiny_experiment.ledger_path, token=TOKEN, clean_limit=20)
    c = TestClient(create_app(st))
    body = request_body(pr_b_ranking, "tris_l1")
    assert c.post("/v1/filter", json=body).status_code == 401
    r = c.post("/v1/filter", json=body, headers={"Authorization": "Bearer wrong"})
    assert r.status_code == 401 and r.headers["www-authenticate"] == "Bearer" and "bearer token" in r.json()["detail"]
    assert c.get("/metrics", headers={"Authorization": "Basic " + TOKEN}).status_code == 401
    assert c.get("/v1/alerts").status_code == 401
    assert c.get("/healthz").status_code == 200  # liveness needs no token
    assert c.post("/v1/filter", json=body, headers={"Authorization": f"Bearer {TOKEN}"}).status_code == 200


def _sample(text: str, name: str, labels: str) -> float:
    m = re.search(rf"^{name}\{{{labels}\}} (\S+)$", text, re.M)
    return float(m.group(1)) if m else 0.0


def test_metrics_count_requests_latency_and_removals(tiny_experiment, pr_b_ranking):
    st = ServiceState.build(tiny_experiment, ledger_path=tiny_experiment.ledger_path, clean_limit=20)
    c = TestClient(create_app(st))
    removed = 0
    for _ in range(3):
        removed += len(c.post("/v1/filter", json=request_body(pr_b_ranking, "rsq")).json()["removed"])
    c.post("/v1/filter", json={"query": "q"})  # 422
    text = c.get("/metrics").text
    assert _sample(text, "sieve_requests_total", 'method="POST",route="/v1/filter",status="200"') == 3
    assert _sample(text, "sieve_requests_total", 'method="POST",route="/v1/filter",status="422"') == 1
    assert _sample(text, "sieve_request_seconds_count", 'route="/v1/filter"') == 4
    assert _sample(text, "sieve_request_seconds_bucket", 'le="\\+Inf",route="/v1/filter"') == 4
    assert removed > 0 and _sample(text, "sieve_removals_total", 'defense="rsq"') == removed
    assert _sample(text, "sieve_documents_total", 'defense="rsq"') == 3 * len(pr_b_ranking.documents)


def test_healthz_and_defenses(client):
    h = client.get("/healthz").json()
    assert h["status"] == "ok" and h["documents"] == 640 and h["retriever"].startswith("tiny")
    names = {d["name"] for d in client.get("/v1/defenses").json()["defenses"]}
    assert {"tris", "rsq", "rsg"} <= names


def test_served_openapi_equals_the_committed_schema(client):
    served = client.get("/openapi.json").json()
    committed = json.loads(OPENAPI.read_text(encoding="utf-8"))
    assert served == committed, "regenerate docs/openapi.json: python -m sieve.service.openapi > docs/openapi.json"
