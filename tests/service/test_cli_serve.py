"""``sieve serve`` / ``python -m sieve.service`` on bad input: one line naming the problem, exit 2."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=120, cwd=ROOT)


@pytest.mark.parametrize("args, needle", [
    (("serve", "no/such/dir"), "no/such/dir"),
    (("serve", "demo_data", "--quarantine", "sometimes"), "--quarantine"),
    (("serve", "demo_data", "--max-documents", "0"), "--max-documents"),
])
def test_sieve_serve_rejects_bad_options_in_one_line(args, needle):
    r = _run("-c", "from sieve.cli import app; app()", *args)
    assert r.returncode == 2
    assert needle in r.stderr and "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


def test_service_program_rejects_a_broken_dataset(tmp_path):
    (tmp_path / "corpus.jsonl").write_text('{"id": "a", "text": "ok"}\n{"id": "b", "text": \n', encoding="utf-8")
    r = _run("-m", "sieve.service", str(tmp_path), "--retriever", "tiny-hashing", "--preload", "")
    assert r.returncode == 2
    assert "corpus.jsonl" in r.stderr and "Traceback" not in r.stderr
    assert r.stderr.strip().splitlines()[-1].startswith("error:")
