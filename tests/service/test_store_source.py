"""``sieve serve STORE`` (issue 25, bullets 1 and 4): a real embedded Chroma collection, filled by
the test with the demo corpus and one attack family, is the service's corpus; ``/v1/filter`` reads
the same quarantine ledger as ``sieve audit STORE`` and the adapters, so a confirmed alert excludes
its document at once. A store has no clean queries: ``--calibration DATASET`` supplies them, and
without it a defense that needs calibration is refused in one line (exit 2) at start, or with 422
naming its threshold at request time."""
from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

pytest.importorskip("chromadb")

from sieve.ledger import Flag, Ledger  # noqa: E402
from sieve.service import create_app  # noqa: E402
from sieve.service.__main__ import build_state, parser  # noqa: E402
from sieve.types import content_hash  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
DEMO = ROOT / "demo_data"
FAMILY = "script"


def _filled(scheme: str, where: Path) -> tuple[str, list]:
    """A real embedded store (Chroma persistent client, Qdrant local mode or LanceDB) holding the demo
    corpus + the script poisons with tiny-hashing vectors."""
    from sieve.corpus import load_dataset
    from sieve.models.tiny import HashingEmbedder
    from sieve.stores.fill import fill_store

    ds = load_dataset(DEMO)
    docs = list(ds.documents) + list(ds.attack_documents(FAMILY))
    vecs = HashingEmbedder(dim=64).encode([d.model_text() for d in docs])
    key = "table" if scheme == "lancedb" else "collection"
    src = f"{scheme}://{where}/{scheme}?{key}=demo"
    fill_store(src, docs, vecs, model="tiny-hashing")
    return src, docs


@pytest.fixture(scope="module")
def chroma_source(tmp_path_factory):
    return _filled("chroma", tmp_path_factory.mktemp("store"))


def _confirmed(led: Path, docs: list) -> tuple[Path, Any, Any]:
    poison = next(d for d in docs if d.poison)
    clean = docs[0]
    with Ledger(led) as ledger:
        ledger.add_flags([Flag(poison.id, content_hash(poison.text), 0.9, 0.5, {}, "mixed scripts"),
                          Flag(clean.id, content_hash(clean.text), 0.6, 0.5, {}, "false alarm")],
                         detector="rsg")
        by_doc = {a.doc_id: a for a in ledger.list()}
        ledger.confirm(by_doc[poison.id].alert_id, who="analyst", why="attacker answer")
        ledger.dismiss(by_doc[clean.id].alert_id, who="analyst", why="fine")
    return led, poison, clean


@pytest.fixture
def confirmed_ledger(tmp_path, chroma_source):
    """A ledger in which one poison's alert is confirmed and one clean document's alert dismissed."""
    return _confirmed(tmp_path / "ledger.sqlite", chroma_source[1])


def _body(docs, query: str, defense: str = "none") -> dict:
    return {"query": query, "defense": defense, "k_ctx": None,
            "documents": [{"id": d.id, "text": d.text, "title": d.title} for d in docs]}


@pytest.mark.parametrize("scheme", ["chroma", "qdrant", "lancedb"])
def test_filter_over_a_store_backed_service_excludes_a_confirmed_alert(scheme, tmp_path, monkeypatch):
    pytest.importorskip({"chroma": "chromadb", "qdrant": "qdrant_client", "lancedb": "lancedb"}[scheme])
    monkeypatch.setenv("SIEVE_CACHE_DIR", str(tmp_path / "cache"))
    src, docs = _filled(scheme, tmp_path / "store")
    led, poison, clean = _confirmed(tmp_path / "ledger.sqlite", docs)
    a = parser().parse_args([src, "--retriever", "tiny-hashing", "--store-model", "tiny-hashing", "--ledger", str(led),
                             "--preload", "tris_l2"])
    state, _, _ = build_state(a)
    assert state.experiment.dataset.name == f"{scheme}-demo"
    assert len(state.experiment.dataset.documents) == len(docs)
    c = TestClient(create_app(state))
    assert c.get("/healthz").json()["documents"] == len(docs)
    retrieved = [poison, clean] + [d for d in docs[1:6]]
    r = c.post("/v1/filter", json=_body(retrieved, "what does the passage say"))
    assert r.status_code == 200, r.text
    out = r.json()
    assert out["quarantined"] == [poison.id]
    status = {d["id"]: d["status"] for d in out["decisions"]}
    assert status[poison.id] == "quarantined"
    assert [d["id"] for d in out["context"]] == [d.id for d in retrieved if d.id != poison.id]   # dismissed stays
    # the triage takes effect at once: roll the confirmation back and the document is served again
    with Ledger(led) as ledger:
        aid = next(x.alert_id for x in ledger.list() if x.doc_id == poison.id)
        ledger.rollback(aid, who="analyst", why="was fine after all")
    r = c.post("/v1/filter", json=_body(retrieved, "what does the passage say"))
    assert r.json()["quarantined"] == [] and poison.id in [d["id"] for d in r.json()["context"]]


def test_a_defense_that_needs_calibration_is_422_naming_its_threshold(chroma_source, tmp_path, monkeypatch):
    monkeypatch.setenv("SIEVE_CACHE_DIR", str(tmp_path / "cache"))
    src, docs = chroma_source
    a = parser().parse_args([src, "--retriever", "tiny-hashing", "--ledger", str(tmp_path / "l.sqlite"),
                             "--preload", ""])
    state, _, _ = build_state(a)
    c = TestClient(create_app(state))
    r = c.post("/v1/filter", json=_body(docs[:5], "a question", "perplexity"))
    assert r.status_code == 422, r.text
    d = r.json()["detail"][0]
    assert d["loc"] == ["body", "params", "threshold"] and "--calibration" in d["msg"], d
    r = c.post("/v1/filter", json={**_body(docs[:5], "a question", "perplexity"), "params": {"threshold": 50.0}})
    assert r.status_code == 200, r.text                   # a threshold given: nothing to calibrate


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_sieve_serve_a_store_with_calibration_under_uvicorn(chroma_source, confirmed_ledger, tmp_path):
    import httpx

    src, docs = chroma_source
    led, poison, _ = confirmed_ledger
    port = _free_port()
    env = {**os.environ, "SIEVE_CACHE_DIR": str(tmp_path / "cache")}
    env.pop("SIEVE_API_TOKEN", None)
    cmd = [sys.executable, "-c", "from sieve.cli import app; app()", "serve", src, "--retriever", "tiny-hashing",
           "--store-model", "tiny-hashing", "--calibration", str(DEMO), "--clean-limit", "10", "--port", str(port),
           "--ledger", str(led)]                          # default --preload: fusion,tris_l2 (fusion calibrates)
    log = open(tmp_path / "server.log", "w+")
    proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT)
    url = f"http://127.0.0.1:{port}"
    try:
        t_end = time.monotonic() + 300                     # hang guard
        while True:
            assert proc.poll() is None, (tmp_path / "server.log").read_text()[-3000:]
            try:
                if httpx.get(url + "/healthz", timeout=5).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < t_end, "server did not start"
            time.sleep(0.3)
        health = httpx.get(url + "/healthz", timeout=30).json()
        assert health["dataset"] == "chroma-demo" and health["documents"] == len(docs)
        prepared = httpx.get(url + "/v1/defenses", timeout=30).json()["prepared"]
        assert "fusion" in prepared and "tris_l2" in prepared
        retrieved = [poison] + docs[:9]
        r = httpx.post(url + "/v1/filter", json=_body(retrieved, "what does the passage say", "fusion"), timeout=120)
        assert r.status_code == 200, r.text
        assert r.json()["quarantined"] == [poison.id]
        assert poison.id not in [d["id"] for d in r.json()["context"]]
    finally:
        proc.terminate()
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


def _run(*args: str, env_cache: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "SIEVE_CACHE_DIR": str(env_cache)}
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=300, cwd=ROOT, env=env)


def _one_error(r: subprocess.CompletedProcess, *needles: str) -> None:
    assert r.returncode == 2, (r.returncode, r.stderr[-2000:])
    errs = [ln for ln in r.stderr.splitlines() if ln.startswith("error:")]
    assert len(errs) == 1 and "Traceback" not in r.stderr, r.stderr[-2000:]
    for n in needles:
        assert n in errs[0], errs[0]


def test_a_store_without_calibration_refuses_a_calibrated_preload_in_one_line(chroma_source, tmp_path):
    src, _ = chroma_source
    r = _run("-m", "sieve.service", src, "--retriever", "tiny-hashing", "--ledger", str(tmp_path / "l.sqlite"),
             "--port", "1", env_cache=tmp_path / "cache")      # default preload: fusion needs calibration
    _one_error(r, "fusion", "--calibration", "tris_l2")
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr   # refused before the store was read


@pytest.mark.parametrize("args, needles", [
    (("chroma:///no/such/dir?collection=demo",), ("/no/such/dir",)),
    (("chroma:///tmp",), ("collection",)),
    (("nosuch:///x?collection=a",), ("nosuch",)),
    (("demo_data", "--calibration", "demo_data"), ("--calibration",)),
    (("demo_data", "--store-model", "tiny-hashing"), ("--store-model",)),
])
def test_bad_store_sources_and_store_options_are_one_line(args, needles, tmp_path):
    r = _run("-c", "from sieve.cli import app; app()", "serve", *args, "--retriever", "tiny-hashing", "--preload", "",
             "--port", "1", env_cache=tmp_path / "cache")
    _one_error(r, *needles)


def test_calibration_without_queries_is_one_line(chroma_source, tmp_path):
    src, _ = chroma_source
    empty = tmp_path / "noq"
    empty.mkdir()
    (empty / "corpus.jsonl").write_text('{"id": "a", "text": "some text"}\n', encoding="utf-8")
    r = _run("-m", "sieve.service", src, "--retriever", "tiny-hashing", "--calibration", str(empty),
             "--ledger", str(tmp_path / "l.sqlite"), "--port", "1", env_cache=tmp_path / "cache")
    _one_error(r, "--calibration", "queries")


def test_filter_over_a_chroma_http_server_source(tmp_path, monkeypatch):
    """The collection served by ``chroma run`` on 127.0.0.1 (read through chromadb's HttpClient) as
    the service's corpus: the same ledger exclusion."""
    import shutil

    exe = shutil.which("chroma") or str(Path(sys.executable).with_name("chroma"))
    if not Path(exe).exists():
        pytest.skip("chroma's server command is not installed")
    monkeypatch.setenv("SIEVE_CACHE_DIR", str(tmp_path / "cache"))
    _, docs = _filled("chroma", tmp_path)
    led, poison, clean = _confirmed(tmp_path / "ledger.sqlite", docs)
    port = _free_port()
    proc = subprocess.Popen([exe, "run", "--path", str(tmp_path / "chroma"), "--host", "127.0.0.1", "--port", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        import chromadb

        t_end = time.monotonic() + 120                     # hang guard
        while True:
            try:
                chromadb.HttpClient(host="127.0.0.1", port=port).heartbeat()
                break
            except Exception:  # noqa: BLE001 - not up yet
                assert time.monotonic() < t_end and proc.poll() is None, "chroma run did not start"
                time.sleep(0.5)
        a = parser().parse_args([f"chroma://127.0.0.1:{port}?collection=demo", "--retriever", "tiny-hashing",
                                 "--store-model", "tiny-hashing", "--ledger", str(led), "--preload", "rsg"])
        state, _, _ = build_state(a)                     # rsg is fitted on the collection read over HTTP
        assert len(state.experiment.dataset.documents) == len(docs) and "rsg" in state.filter.prepared()
        c = TestClient(create_app(state))
        retrieved = [poison, clean] + docs[1:4]
        r = c.post("/v1/filter", json=_body(retrieved, "what does the passage say"))
        assert r.status_code == 200, r.text
        assert r.json()["quarantined"] == [poison.id]
        assert [d["id"] for d in r.json()["context"]] == [d.id for d in retrieved if d.id != poison.id]
    finally:
        proc.terminate()
        proc.wait(timeout=30)
