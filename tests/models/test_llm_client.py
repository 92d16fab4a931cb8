"""The OpenAI-compatible client against a real local HTTP server, and the local LLM wrapper."""
from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from sieve.config import LLMConfig, SieveConfig
from sieve.models import load_llm
from sieve.models.errors import LLMError, ModelError
from sieve.models.llm import LocalLLM, OpenAIChatClient
from sieve.models.tiny import UnigramLM

SECRET = "sk-test-SECRET-0123456789"


def _completion(content):
    return {"id": "c1", "object": "chat.completion", "created": 0, "model": "m",
            "choices": [{"index": 0, "finish_reason": "stop",
                         "message": {"role": "assistant", "content": content}}]}


class FakeServer:
    """/v1/chat/completions on 127.0.0.1; each request pops the next scripted behaviour."""

    def __init__(self):
        self.requests: list[dict] = []
        self.script: list = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a):  # quiet
                pass

            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                outer.requests.append({"path": self.path, "auth": self.headers.get("Authorization"),
                                       "body": json.loads(body)})
                kind, arg = outer.script.pop(0) if outer.script else ("ok", "default reply")
                if kind == "sleep":
                    time.sleep(arg)
                    kind, arg = "ok", "late"
                if kind == "ok":
                    payload, status = json.dumps(_completion(arg)).encode(), 200
                elif kind == "raw":
                    payload, status = arg.encode(), 200
                else:   # ("status", code): echo the auth header back, as a careless proxy might
                    payload = json.dumps({"error": {"message": f"boom; you sent {self.headers.get('Authorization')}"}}).encode()
                    status = arg
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(payload)))
                    self.end_headers()
                    self.wfile.write(payload)
                except (BrokenPipeError, ConnectionResetError):
                    pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def server():
    s = FakeServer()
    yield s
    s.close()


def _client(server, **kw) -> OpenAIChatClient:
    opts = {"api_key": SECRET, "timeout_s": 5.0, "retries": 2, "backoff_s": 0.01}
    opts.update(kw)
    return OpenAIChatClient(server.url, "test-model", **opts)


def test_normal_reply_and_request_shape(server):
    server.script = [("ok", "Canberra")]
    reply = _client(server).generate("Capital of Australia?", system="Be brief.", max_tokens=16)
    assert reply == "Canberra"
    (req,) = server.requests
    assert req["path"] == "/v1/chat/completions"
    assert req["auth"] == f"Bearer {SECRET}"
    body = req["body"]
    assert body["model"] == "test-model" and body["max_tokens"] == 16 and body["temperature"] == 0.0
    assert body["messages"] == [{"role": "system", "content": "Be brief."},
                                {"role": "user", "content": "Capital of Australia?"}]
    assert "response_format" not in body


def test_json_mode_sends_response_format(server):
    server.script = [("ok", '{"verdict": "compatible"}')]
    reply = _client(server).generate("judge", json_mode=True)
    assert json.loads(reply) == {"verdict": "compatible"}
    assert server.requests[0]["body"]["response_format"] == {"type": "json_object"}
    assert "system" not in [m["role"] for m in server.requests[0]["body"]["messages"]]


def test_http_500_is_retried_then_llm_error(server):
    server.script = [("status", 500)] * 3
    client = _client(server, retries=2)
    with pytest.raises(LLMError, match="failed after 3 attempt\\(s\\): HTTP 500") as e:
        client.generate("q")
    assert len(server.requests) == 3
    assert SECRET not in str(e.value)


def test_http_500_then_success(server):
    server.script = [("status", 503), ("ok", "fine")]
    assert _client(server).generate("q") == "fine"
    assert len(server.requests) == 2


def test_client_error_is_not_retried_and_key_never_leaks(server):
    server.script = [("status", 401)]
    client = _client(server)
    with pytest.raises(LLMError, match="HTTP 401") as e:
        client.generate("q")
    assert len(server.requests) == 1
    assert SECRET not in str(e.value) and SECRET not in repr(e.value)
    assert SECRET not in repr(client) and SECRET not in str(client)


def test_timeout_is_llm_error(server):
    server.script = [("sleep", 1.5)]
    with pytest.raises(LLMError, match="timed out after 0.3 s"):
        _client(server, timeout_s=0.3, retries=0).generate("q")


@pytest.mark.parametrize("raw", ["this is not json", json.dumps({"choices": []}),
                                 json.dumps(_completion("   ")), json.dumps(_completion(None))])
def test_malformed_or_empty_body_is_llm_error(server, raw):
    server.script = [("raw", raw)]
    with pytest.raises(LLMError):
        _client(server, retries=0).generate("q")


def test_connection_refused_is_llm_error():
    client = OpenAIChatClient("http://127.0.0.1:9/v1", "m", timeout_s=1, retries=1, backoff_s=0.01)
    with pytest.raises(LLMError, match="failed after 2 attempt"):
        client.generate("q")
    assert not client.supports_nll
    with pytest.raises(LLMError, match="cannot score"):
        client.nll("a", "b")


def test_load_llm_picks_endpoint_from_config(server, monkeypatch):
    monkeypatch.setenv("MY_KEY", SECRET)
    cfg = SieveConfig(llm=LLMConfig(base_url=server.url, model="test-model", api_key_env="MY_KEY",
                                    timeout_s=4, retries=1))
    client = load_llm(cfg)
    assert isinstance(client, OpenAIChatClient) and client.retries == 1 and client.timeout_s == 4
    assert client.model_id == f"openai:test-model@{server.url}"
    server.script = [("ok", "hi")]
    assert client.generate("hello") == "hi"
    assert server.requests[0]["auth"] == f"Bearer {SECRET}"


def test_load_llm_env_base_url_needs_model(monkeypatch, server):
    monkeypatch.setenv("OPENAI_BASE_URL", server.url)
    monkeypatch.delenv("OPENAI_MODEL", raising=False)
    with pytest.raises(ModelError, match="OPENAI_MODEL"):
        load_llm(SieveConfig())
    monkeypatch.setenv("OPENAI_MODEL", "env-model")
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    client = load_llm(SieveConfig())
    assert client.model == "env-model"
    server.script = [("ok", "x")]
    client.generate("q")
    assert server.requests[0]["auth"] == "Bearer unused"


def test_load_llm_unknown_local_model(monkeypatch):
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    with pytest.raises(ModelError, match="smollm2-135m, qwen2.5-coder-0.5b"):
        load_llm(SieveConfig(llm=LLMConfig(local_model="llama-70b")))


def test_local_llm_wraps_a_causal_lm():
    lm = UnigramLM(["paris is the capital of france"], reply=lambda p: f"echo:{p}")
    llm = LocalLLM(lm, "tiny")
    assert llm.model_id == "local:tiny" and llm.supports_nll
    assert llm.generate("hello", max_tokens=8) == "echo:hello"
    assert llm.nll("paris", "the capital is paris") == pytest.approx(0.05)

    class Broken:
        def generate(self, *a, **k):
            raise RuntimeError("out of memory")

        def answer_nll(self, *a):
            raise RuntimeError("bad tensor")

    broken = LocalLLM(Broken(), "broken")
    with pytest.raises(LLMError, match="out of memory"):
        broken.generate("q")
    with pytest.raises(LLMError, match="bad tensor"):
        broken.nll("a", "b")


def test_circuit_breaker_opens_after_consecutive_failures_and_probes_after_cooldown(server):
    server.script = [("status", 500)] * 3
    client = _client(server, retries=5, breaker_failures=3, breaker_cooldown_s=0.3)
    with pytest.raises(LLMError, match="failed after 3 attempt"):   # stops retrying once the breaker opens
        client.generate("q")
    assert len(server.requests) == 3 and client.circuit_open
    with pytest.raises(LLMError, match="circuit breaker open after 3 consecutive failures.*HTTP 500"):
        client.generate("q")
    assert len(server.requests) == 3                                 # refused without calling the endpoint
    assert client.health() == {"calls": 2, "errors": 2, "short_circuited": 1, "circuit_open": True,
                               "last_error": f"LLM endpoint {server.url} failed after 3 attempt(s): HTTP 500"}
    time.sleep(0.35)
    server.script = [("ok", "back")]                                 # after the cooldown one probe decides
    assert client.generate("q") == "back" and not client.circuit_open and client.consecutive_failures == 0
    assert client.health()["calls"] == 3 and client.health()["errors"] == 2


def test_breaker_counts_malformed_replies_but_not_client_errors(server):
    server.script = [("raw", "not json"), ("status", 400), ("raw", "not json"), ("raw", "not json")]
    client = _client(server, retries=0, breaker_failures=2, breaker_cooldown_s=60)
    for _ in range(3):
        with pytest.raises(LLMError):
            client.generate("q")
    assert not client.circuit_open            # 400 means the endpoint answered: the streak restarts
    with pytest.raises(LLMError):
        client.generate("q")
    assert client.circuit_open and len(server.requests) == 4 and client.n_errors == 4
    with pytest.raises(ValueError, match="breaker_failures"):
        _client(server, breaker_failures=0)


def test_local_llm_counts_failures():
    lm = UnigramLM(["a b"], reply=lambda p: "ok")
    llm = LocalLLM(lm, "tiny")
    llm.generate("x")

    class Broken:
        def generate(self, *a, **k):
            raise RuntimeError("oom")

    llm.lm = Broken()
    with pytest.raises(LLMError):
        llm.generate("x")
    assert (llm.n_calls, llm.n_errors) == (2, 1) and "oom" in llm.last_error
