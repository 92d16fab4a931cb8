"""Helpers of the hardening tests (issue 14): a small slice of demo_data, the CLI runner, and a
real local HTTP server posing as a failing OpenAI-compatible endpoint."""
from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from typer.testing import CliRunner

from sieve.cli import app

DEMO = Path(__file__).resolve().parents[2] / "demo_data"
TOPICS = ("amazon-river", "american-civil-war", "ancient-egypt", "andes")


def _keep(rec_id: str) -> bool:
    return any(t in rec_id for t in TOPICS)


def write_slice(dest: Path, families: tuple[str, ...] = ("pr_b", "diverse")) -> Path:
    """Corpus, queries, qrels, targets and two attack families of four demo topics (about 40 documents)."""
    dest.mkdir(parents=True)
    for name, key in (("corpus.jsonl", "id"), ("queries.jsonl", "id"), ("qrels.jsonl", "query_id"),
                      ("targets.jsonl", "query_id")):
        lines = [ln for ln in (DEMO / name).read_text(encoding="utf-8").splitlines()
                 if ln.strip() and _keep(json.loads(ln)[key])]
        (dest / name).write_text("\n".join(lines) + "\n", encoding="utf-8")
    lines = [ln for ln in (DEMO / "attacks.jsonl").read_text(encoding="utf-8").splitlines()
             if ln.strip() and _keep(json.loads(ln)["query_id"]) and json.loads(ln)["attack"] in families]
    (dest / "attacks.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return dest


_runner = CliRunner()


def sieve(*args):
    """Run the ``sieve`` command in-process; returns the click Result."""
    return _runner.invoke(app, [str(a) for a in args])


def one_line_error(res) -> str:
    """The command failed as a user error: exit 2, no traceback, one ``error:`` line."""
    assert res.exit_code == 2, (res.exit_code, res.output)
    assert "Traceback" not in res.output, res.output
    assert res.exception is None or isinstance(res.exception, SystemExit), repr(res.exception)
    errs = [ln for ln in res.output.splitlines() if ln.startswith("error:")]
    assert len(errs) == 1, res.output
    return errs[0]


class ChaosEndpoint:
    """``/v1/chat/completions`` on 127.0.0.1 that always fails in one way: ``500`` (HTTP 500),
    ``malformed`` (HTTP 200 with a body that is not JSON) or ``stall`` (no reply for ``stall_s``)."""

    def __init__(self, mode: str, stall_s: float = 20.0):
        self.mode, self.hits = mode, 0
        self._stop = threading.Event()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a):  # quiet
                pass

            def do_POST(self):
                self.rfile.read(int(self.headers.get("Content-Length", 0)))
                outer.hits += 1
                if outer.mode == "stall":
                    outer._stop.wait(stall_s)
                    return
                body, status = ((b'{"error": {"message": "boom"}}', 500) if outer.mode == "500"
                                else (b'{"choices": [ this is not json', 200))
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                except (BrokenPipeError, ConnectionResetError):
                    pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self):
        self._stop.set()
        time.sleep(0.05)
        self.httpd.shutdown()
        self.httpd.server_close()
