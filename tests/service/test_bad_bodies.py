"""Every malformed body is a 4xx naming the field (issue 26, bullet 4): wrong types, missing and
extra fields, wrong nesting, huge values, unknown defenses and bad parameters, on every route that
takes a body. Validation problems are 422 (never 409); the ``loc`` points at the field and the
``msg`` says what is wrong with it."""
from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from sieve.ledger import Ledger
from sieve.service import Limits, ServiceState, create_app

DOC = {"id": "a", "text": "The Eiffel Tower is in Paris."}
GOOD = {"query": "where is the eiffel tower", "documents": [DOC], "defense": "none"}


def _with(**kw):
    return {**GOOD, **kw}


def _doc(**kw):
    return _with(documents=[{**DOC, **kw}])


def _raw(text: str) -> bytes:
    return text.encode()


FILTER_CASES = [
    # (name, body, expected loc; None = the body itself)
    ("not JSON", _raw("{not json"), ["body", 1]),
    ("array body", [GOOD], ["body"]),
    ("string body", "filter this", ["body"]),
    ("empty object", {}, ["body", "query"]),
    ("missing query", {"documents": [DOC]}, ["body", "query"]),
    ("missing documents", {"query": "q"}, ["body", "documents"]),
    ("query a number", _with(query=5), ["body", "query"]),
    ("query empty", _with(query=""), ["body", "query"]),
    ("query blank", _with(query="   \t"), ["body", "query"]),
    ("query huge", _with(query="x" * 5_000), ["body", "query"]),
    ("documents an object", _with(documents={"a": DOC}), ["body", "documents"]),
    ("documents a string", _with(documents="all of them"), ["body", "documents"]),
    ("document a string", _with(documents=["the text"]), ["body", "documents", 0]),
    ("documents nested one level too deep", _with(documents=[[DOC]]), ["body", "documents", 0]),
    ("document without id", _with(documents=[{"text": "t"}]), ["body", "documents", 0, "id"]),
    ("document without text", _with(documents=[{"id": "a"}]), ["body", "documents", 0, "text"]),
    ("document id a number", _doc(id=1), ["body", "documents", 0, "id"]),
    ("document id empty", _doc(id=""), ["body", "documents", 0, "id"]),
    ("document id huge", _doc(id="i" * 5_000), ["body", "documents", 0, "id"]),
    ("document text null", _doc(text=None), ["body", "documents", 0, "text"]),
    ("document text huge", _doc(text="x" * 30_000), ["body", "documents", 0, "text"]),
    ("document title a list", _doc(title=["t"]), ["body", "documents", 0, "title"]),
    ("document score a string", _doc(score="0.9"), ["body", "documents", 0, "score"]),
    ("document score NaN", _raw('{"query": "q", "defense": "none", "documents": [{"id": "a", "text": "t", '
                                '"score": NaN}]}'), ["body", "documents", 0, "score"]),
    ("document score infinite", _raw('{"query": "q", "defense": "none", "documents": [{"id": "a", "text": "t", '
                                     '"score": 1e999}]}'), ["body", "documents", 0, "score"]),
    ("document extra field", _doc(url="http://x"), ["body", "documents", 0, "url"]),
    ("too many documents", _with(documents=[{"id": str(i), "text": "t"} for i in range(31)]), ["body", "documents"]),
    ("duplicate ids", _with(documents=[DOC, DOC]), ["body", "documents", 1, "id"]),
    ("extra top-level field", _with(top_k=5), ["body", "top_k"]),
    ("defense a number", _with(defense=3), ["body", "defense"]),
    ("defense null", _with(defense=None), ["body", "defense"]),
    ("defense empty", _with(defense=""), ["body", "defense"]),
    ("unknown defense", _with(defense="magic"), ["body", "defense"]),
    ("unknown part of a serial spec", _with(defense="tris_l2+magic"), ["body", "defense"]),
    ("empty part of a serial spec", _with(defense="tris_l2+"), ["body", "defense"]),
    ("params a list", _with(params=["use_l2"]), ["body", "params"]),
    ("params null", _with(params=None), ["body", "params"]),
    ("unknown parameter", _with(defense="tris_l2", params={"bogus": 1}), ["body", "params", "bogus"]),
    ("parameters nested under the defense name", _with(defense="tris_l2", params={"tris_l2": {"prefix_token_count": 3}}),
     ["body", "params", "tris_l2"]),
    ("parameter for a defense without any", _with(params={"x": 1}), ["body", "params", "x"]),
    ("bool from a string", _with(defense="tris_l2", params={"use_l2": "false"}), ["body", "params", "use_l2"]),
    ("bool from an integer", _with(defense="tris_l2", params={"use_l1": 0}), ["body", "params", "use_l1"]),
    ("integer from a string", _with(defense="tris_l2", params={"prefix_token_count": "5"}),
     ["body", "params", "prefix_token_count"]),
    ("integer from a float", _with(defense="tris_l2", params={"prefix_token_count": 2.5}),
     ["body", "params", "prefix_token_count"]),
    ("negative integer", _with(defense="tris_l2", params={"prefix_token_count": -5}),
     ["body", "params", "prefix_token_count"]),
    ("huge integer", _with(defense="tris_l2", params={"prefix_token_count": 10 ** 30}),
     ["body", "params", "prefix_token_count"]),
    ("object for an integer", _with(defense="tris_l2", params={"prefix_token_count": {"value": 3}}),
     ["body", "params", "prefix_token_count"]),
    ("number from a string", _with(defense="tris_l2", params={"jaccard_threshold": "high"}),
     ["body", "params", "jaccard_threshold"]),
    ("choice not among the choices", _with(defense="tris", params={"l3_mode": "sometimes"}), ["body", "params", "l3_mode"]),
    ("integer below its minimum", _with(defense="tris", params={"cluster_count": 0}), ["body", "params", "cluster_count"]),
    ("sequence from an integer", _with(defense="fusion", params={"evidence": 3}), ["body", "params", "evidence"]),
    ("sequence of the wrong items", _with(defense="fusion", params={"evidence": [1, 2]}), ["body", "params", "evidence"]),
    ("sequence with an unknown name", _with(defense="fusion", params={"evidence": ["l2", "astrology"]}),
     ["body", "params", "evidence"]),
    ("fusion rounds below 1", _with(defense="fusion", params={"max_rounds": 0}), ["body", "params", "max_rounds"]),
    ("k_ctx zero", _with(k_ctx=0), ["body", "k_ctx"]),
    ("k_ctx negative", _with(k_ctx=-3), ["body", "k_ctx"]),
    ("k_ctx a string", _with(k_ctx="5"), ["body", "k_ctx"]),
    ("k_ctx a float", _with(k_ctx=2.5), ["body", "k_ctx"]),
    ("k_ctx huge", _with(k_ctx=10 ** 30), ["body", "k_ctx"]),
]

OTHER_CASES = [
    ("/v1/audit", {"mode": "fast"}, ["body", "mode"]),
    ("/v1/audit", {"mode": 3}, ["body", "mode"]),
    ("/v1/audit", {"condition": "nope"}, ["body", "condition"]),
    ("/v1/audit", {"condition": ""}, ["body", "condition"]),
    ("/v1/audit", {"record": "yes"}, ["body", "record"]),
    ("/v1/audit", {"record": 1}, ["body", "record"]),
    ("/v1/audit", {"extra": True}, ["body", "extra"]),
    ("/v1/audit", [{"condition": "clean"}], ["body"]),
    ("/v1/quarantine", {"doc_id": "a", "text": "t"}, ["body", "who"]),
    ("/v1/quarantine", {"doc_id": "a", "text": "", "who": "ana"}, ["body", "text"]),
    ("/v1/quarantine", {"doc_id": "a", "text": "t", "who": "   "}, ["body", "who"]),
    ("/v1/quarantine", {"doc_id": "  ", "text": "t", "who": "ana"}, ["body", "doc_id"]),
    ("/v1/quarantine", {"doc_id": 7, "text": "t", "who": "ana"}, ["body", "doc_id"]),
    ("/v1/quarantine", {"doc_id": "a", "text": "x" * 3_000, "who": "ana"}, ["body", "text"]),
    ("/v1/quarantine", {"doc_id": "a", "text": "t", "who": "ana", "reason": "r" * 10_000}, ["body", "reason"]),
    ("/v1/quarantine", {"doc_id": "a", "text": "t", "who": "ana", "severity": "high"}, ["body", "severity"]),
    ("/v1/alerts/{aid}/confirm", {}, ["body", "who"]),
    ("/v1/alerts/{aid}/confirm", {"who": 3}, ["body", "who"]),
    ("/v1/alerts/{aid}/confirm", {"who": "  "}, ["body", "who"]),   # the ledger's own check, 409 before
    ("/v1/alerts/{aid}/dismiss", {"who": "ana", "why": ["no"]}, ["body", "why"]),
    ("/v1/alerts/{aid}/dismiss", {"who": "w" * 1_000}, ["body", "who"]),
    ("/v1/alerts/{aid}/rollback", {"who": "ana", "because": "x"}, ["body", "because"]),
]


@pytest.fixture(scope="module")
def app_client(tiny_experiment, tmp_path_factory):
    led = tmp_path_factory.mktemp("bad-bodies") / "ledger.sqlite"
    Ledger(led).close()
    st = ServiceState.build(tiny_experiment, ledger_path=led, clean_limit=10,
                            limits=Limits(max_documents=30, max_text_chars=2_000))
    c = TestClient(create_app(st))
    aid = c.post("/v1/quarantine", json={"doc_id": "x", "text": "some text", "who": "ana"}).json()["alert_id"]
    return c, aid


def _post(c: TestClient, path: str, body):
    if isinstance(body, bytes):
        return c.post(path, content=body, headers={"content-type": "application/json"})
    return c.post(path, json=body)


def _check(r, loc):
    assert r.status_code == 422, (r.status_code, r.text[:500])
    detail = r.json()["detail"]
    assert isinstance(detail, list) and detail, detail
    first = detail[0]
    assert first["loc"] == loc, first
    assert first["msg"].strip(), first
    assert "Traceback" not in r.text


def test_the_suite_is_large():
    assert len(FILTER_CASES) + len(OTHER_CASES) >= 60


@pytest.mark.parametrize("name, body, loc", FILTER_CASES, ids=[c[0] for c in FILTER_CASES])
def test_a_bad_filter_body_is_422_naming_the_field(app_client, name, body, loc):
    c, _ = app_client
    _check(_post(c, "/v1/filter", body), loc)


@pytest.mark.parametrize("path, body, loc", OTHER_CASES, ids=[f"{p} {sorted(b) if isinstance(b, dict) else b}"[:60]
                                                              for p, b, _ in OTHER_CASES])
def test_a_bad_body_on_the_other_routes_is_422_naming_the_field(app_client, path, body, loc):
    c, aid = app_client
    _check(_post(c, path.format(aid=aid), body), loc)


def test_a_field_message_says_what_is_wrong(app_client):
    c, _ = app_client
    r = _post(c, "/v1/filter", _with(defense="tris_l2", params={"use_l2": "false"}))
    assert "JSON boolean" in r.json()["detail"][0]["msg"]
    r = _post(c, "/v1/filter", _with(defense="tris_l2", params={"bogus": 1}))
    assert "prefix_token_count" in r.json()["detail"][0]["msg"]   # the valid names are listed
    r = _post(c, "/v1/filter", _with(defense="magic"))
    assert "tris_l2" in r.json()["detail"][0]["msg"]               # the available defenses are listed


def test_the_good_body_passes(app_client):
    c, _ = app_client
    r = _post(c, "/v1/filter", GOOD)
    assert r.status_code == 200, r.text
    assert [d["id"] for d in r.json()["context"]] == ["a"]


def test_a_state_conflict_is_409_not_a_validation_error(app_client):
    c, aid = app_client
    r = _post(c, f"/v1/alerts/{aid}/rollback", {"who": "ana", "why": "x"})   # open → rolled_back is not allowed
    assert r.status_code == 409 and r.json()["detail"][0]["loc"] == ["path", "alert_id"]
