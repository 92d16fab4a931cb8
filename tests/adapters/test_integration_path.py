"""The integration path works as written (issue 26, bullet 7): the extras install every
distribution the adapters and examples import; the defaults need no LLM; nothing reads the shared
default ledger unless asked; the client checks the server and token before any work; the LangChain
embeddings reuse known vectors and encode only new texts."""
from __future__ import annotations

import ast
import importlib.metadata as md
import re
import tomllib
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]


def _extras() -> dict[str, set[str]]:
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())
    return {k: {re.split(r"[<>=\[ ;]", r, maxsplit=1)[0].lower() for r in v}
            for k, v in data["project"]["optional-dependencies"].items()}


def _imported_distributions(*files: Path) -> set[str]:
    mods: set[str] = set()
    for f in files:
        for node in ast.walk(ast.parse(f.read_text())):
            if isinstance(node, ast.Import):
                mods |= {a.name.split(".")[0] for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                mods.add(node.module.split(".")[0])
    dists = md.packages_distributions()
    out: set[str] = set()
    for m in mods:
        for d in dists.get(m, []):
            if d.lower() not in ("sieve-rag",):
                out.add(d.lower().replace("_", "-"))
    return out


@pytest.mark.parametrize("extra, files", [
    ("langchain", ["sieve/adapters/langchain.py", "examples/langchain_rag.py"]),
    ("llamaindex", ["sieve/adapters/llamaindex.py", "examples/llamaindex_rag.py"]),
])
def test_extras_install_what_the_adapters_and_examples_import(extra, files):
    base = {"numpy", "pydantic", "typing-extensions", "tqdm", "torch", "sentence-transformers", "transformers"}
    needed = _imported_distributions(*(ROOT / f for f in files)) - base
    frameworks = {d for d in needed if d.startswith(("langchain", "llama-index"))}
    assert frameworks, needed
    assert frameworks <= _extras()[extra], (frameworks, _extras()[extra])


def test_readme_names_the_distribution():
    text = (ROOT / "README.md").read_text()
    assert not re.search(r"install ['\"]sieve\[", text), "the package is sieve-rag"
    assert "SieveEmbeddings.from_index" in text and "InMemoryVectorStore" in text


def test_default_defense_needs_no_llm():
    from sieve.adapters import DEFAULT_DEFENSE, SieveClient
    from sieve.adapters.client import LocalSieve
    from sieve.registry import DEFENSES

    assert "llm" not in DEFENSES.entry(DEFAULT_DEFENSE).needs
    import inspect

    for fn in (SieveClient.filter, LocalSieve.filter):
        assert inspect.signature(fn).parameters["defense"].default == DEFAULT_DEFENSE


def test_from_dataset_reads_no_shared_ledger_unless_asked(tmp_path, monkeypatch):
    from sieve.adapters import LocalSieve
    from sieve.ledger import default_ledger_path
    from sieve.testing_models import tiny_resources

    monkeypatch.setenv("SIEVE_CACHE_DIR", str(tmp_path / "cache"))
    res = tiny_resources()
    res.config.cache_dir = str(tmp_path / "cache")
    local = LocalSieve.from_dataset(ROOT / "demo_data", res)
    assert local.filterer.ledger_path is None and local.filterer.quarantine == "none"
    asked = LocalSieve.from_dataset(ROOT / "demo_data", res, default_ledger=True)
    assert Path(asked.filterer.ledger_path) == default_ledger_path(res.config)
    with pytest.raises(ValueError):
        LocalSieve.from_dataset(ROOT / "demo_data", res, default_ledger=True, ledger_path=tmp_path / "l.sqlite")


def test_embeddings_reuse_known_vectors_and_encode_only_new_texts():
    from sieve.adapters.langchain import SieveEmbeddings

    calls: list[list[str]] = []

    class Fake:
        def encode(self, texts, kind="passage"):
            calls.append(list(texts))
            return np.ones((len(texts), 3), np.float32)

    emb = SieveEmbeddings(Fake(), known={"a": np.zeros(3)}, progress=False)
    out = emb.embed_documents(["a", "b", "b"])
    assert calls == [["b"]] and out[0] == [0.0, 0.0, 0.0] and out[1] == [1.0, 1.0, 1.0]


def test_client_check_names_a_missing_token_before_any_work():
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from sieve.adapters import SieveClient, SieveError

    class H(BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802
            self.send_response(401)
            self.send_header("content-type", "application/json")
            self.end_headers()
            self.wfile.write(b'{"detail": "missing or wrong bearer token"}')

        def log_message(self, *a):
            pass

    srv = ThreadingHTTPServer(("127.0.0.1", 0), H)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        with pytest.raises(SieveError, match="401.*SIEVE_API_TOKEN"):
            SieveClient(f"http://127.0.0.1:{srv.server_address[1]}", token="").check()
    finally:
        srv.shutdown()
