"""Every ``sieve`` command with bad arguments: exit code 2 and a one-line message, never a traceback
(issue 14). Runs in-process with the tiny in-process models (``--retriever tiny-hashing``)."""
from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from sieve.cli import app

runner = CliRunner()


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    root = tmp_path_factory.mktemp("badargs")
    ds = root / "ds"
    ds.mkdir()
    (ds / "corpus.jsonl").write_text("".join(json.dumps({"id": f"d{i}", "text": f"document {i} about rivers"}) + "\n"
                                             for i in range(30)), encoding="utf-8")
    (ds / "queries.jsonl").write_text(json.dumps({"id": "q1", "text": "rivers?"}) + "\n", encoding="utf-8")
    (root / "garbage.jsonl").write_bytes(b"\xff\xfe{not json\n")
    (root / "bad.yaml").write_text("llm: [unclosed\n", encoding="utf-8")
    (root / "list.yaml").write_text("- a\n- b\n", encoding="utf-8")
    (root / "file.txt").write_text("x", encoding="utf-8")
    (root / "empty").mkdir()
    (root / "notledger.sqlite").write_text("hello", encoding="utf-8")
    return root


T = ("--retriever", "tiny-hashing")

# (argv with {root} / {ds} placeholders, a fragment the one-line message must contain)
CASES = [
    (["index", "{root}/missing"], "missing"),
    (["index", "{root}/empty"], "empty"),
    (["index", "{root}/garbage.jsonl", *T], "garbage.jsonl"),
    (["index", "{ds}", "--config", "{root}/bad.yaml"], "bad.yaml"),
    (["index", "{ds}", "--config", "{root}/list.yaml"], "list.yaml"),
    (["index", "{ds}", "--retriever", "no-such-model"], "no-such-model"),
    (["search", "{root}/missing", "q"], "missing"),
    (["search", "{ds}", "   ", *T], "empty"),
    (["search", "{ds}", "q", "--quarantine", "all", *T], "--quarantine"),
    (["search", "{ds}", "q", "--attack", "nope", *T], "nope"),
    (["search", "{ds}", "q", "--ledger", "{root}/notledger.sqlite", *T], None),   # warns, still exit 0
    (["attack", "{ds}", "--attack", "pr_b"], "--out"),
    (["attack", "{ds}", "--attack", "nope", "--out", "{root}/a.jsonl"], "nope"),
    (["attack", "{ds}", "--attack", "pr_b", "--out", "{root}/a.jsonl", "--limit", "0"], "--limit"),
    (["attack", "{ds}", "--attack", "pr_b", "--out", "{root}/a.jsonl"], "targets"),
    (["attack", "{ds}", "--attack", "pr_b", "--out", "{root}/a.jsonl", "--iterations", "3"], "pr_w"),
    (["attack", "{ds}", "--attack", "pr_b", "--append-to", "{root}/garbage.jsonl"], "garbage.jsonl"),
    (["attack", "{ds}", "--attack", "pr_b", "--out", "{root}"], "directory"),
    (["audit", "{root}/missing", *T], "missing"),
    (["audit", "{ds}", "--mode", "fast", *T], "--mode"),
    (["audit", "{ds}", "--with-attack", "nope", *T], "nope"),
    (["audit", "{ds}", "--out", "{root}/file.txt", *T], "file.txt"),
    (["eval", "{root}/missing", "--out", "{root}/r"], "missing"),
    (["eval", "{ds}", "--out", "{root}/r1", "-d", "nope", *T], "nope"),
    (["eval", "{ds}", "--out", "{root}/r2", "--k-ctx", "0", *T], "--k-ctx"),
    (["eval", "{ds}", "--out", "{root}/r3", "--depth", "2", *T], "--depth"),
    (["eval", "{ds}", "--out", "{root}/r4", "--limit", "0", "-d", "none", *T], "--limit"),
    (["eval", "{ds}", "--out", "{root}/r5", "--calibration", "{root}/missing.yaml", *T], "missing.yaml"),
    (["eval", "{ds}", "--out", "{root}/r6", "--calibration", "{root}/bad.yaml", *T], "bad.yaml"),
    (["eval", "{ds}", "--out", "{root}/file.txt", "-d", "none", *T], "file.txt"),
    (["eval", "{ds}", "--out", "{root}/r7", "-a", "nope", "-d", "none", *T], "nope"),
    (["eval", "{ds}", "--out", "{root}/r8", "--generate", "--no-llm", *T], "--no-llm"),
    (["report", "{root}/missing"], "missing"),
    (["report", "{root}/empty"], "run directory"),
    (["report", "{root}/file.txt"], "file.txt"),
    (["calibrate", "{root}/missing", "--defense", "perplexity"], "missing"),
    (["calibrate", "{ds}", "--defense", "none", *T], "threshold"),
    (["calibrate", "{ds}", "--defense", "nope", *T], "nope"),
    (["calibrate", "{ds}", "--defense", "perplexity", "--clean-budget", "2", *T], "--clean-budget"),
    (["calibrate", "{ds}", "--defense", "perplexity", "--out", "{root}", *T], "directory"),
    (["calibrate", "{ds}", "--defense", "perplexity", "--out", "{ds}/corpus.jsonl", *T], "corpus.jsonl"),
    (["models", "--config", "{root}/bad.yaml"], "bad.yaml"),
    (["ledger", "list", "--ledger", "{root}/missing.sqlite"], "not found"),
    (["ledger", "list", "--ledger", "{root}/notledger.sqlite"], "not a quarantine ledger"),
    (["ledger", "list", "--ledger", "{root}/empty"], "directory"),
    (["ledger", "confirm", "A-nope", "--ledger", "{root}/l.sqlite"], None),
    (["ledger", "rollback", "A-nope", "--why", "x", "--ledger", "{root}/l.sqlite"], None),
    (["ledger", "dismiss", "A-nope", "--ledger", "{root}/l.sqlite"], None),
    (["ledger", "reopen", "A-nope", "--ledger", "{root}/l.sqlite"], None),
    (["ledger", "export", "{root}", "--ledger", "{root}/l.sqlite"], None),
    (["ledger", "export", "{root}/file.txt/x.csv", "--ledger", "{root}/l.sqlite"], None),
    (["ledger", "list", "--state", "gone", "--ledger", "{root}/l.sqlite"], None),
    (["ledger", "list", "--sort", "random", "--ledger", "{root}/l.sqlite"], None),
]

# Usage errors (click): exit 2 with a usage line and one "Error"/"Invalid" message
USAGE = [["eval", "{ds}"], ["attack", "{ds}"], ["search", "{ds}"], ["ledger", "rollback", "A-1"],
         ["search", "{ds}", "q", "-k", "0"], ["eval", "{ds}", "--out", "x", "--depth", "many"], ["nope"],
         ["ledger", "nope"], ["list", "--bogus"]]


def _argv(args, env):
    return [a.replace("{root}", str(env)).replace("{ds}", str(env / "ds")) for a in args]


@pytest.fixture(scope="module")
def ledger_file(env):
    from sieve.ledger import Ledger

    Ledger(env / "l.sqlite").close()
    return env / "l.sqlite"


@pytest.mark.parametrize("args,fragment", CASES, ids=[" ".join(a[:2]) + f"-{i}" for i, (a, _) in enumerate(CASES)])
def test_bad_arguments_give_one_line_and_exit_2(env, ledger_file, args, fragment, monkeypatch):
    monkeypatch.setenv("SIEVE_CACHE_DIR", str(env / "cache"))
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    res = runner.invoke(app, _argv(args, env))
    assert "Traceback" not in res.output, res.output
    assert res.exception is None or isinstance(res.exception, SystemExit), repr(res.exception)
    if args[:2] == ["search", "{ds}"] and "--ledger" in args:
        assert res.exit_code == 0 and "warning:" in res.output          # degraded, and says so
        return
    assert res.exit_code == 2, (res.exit_code, res.output)
    errs = [ln for ln in res.output.splitlines() if ln.startswith("error:")]
    assert len(errs) == 1, res.output
    if fragment:
        assert fragment in errs[0], errs[0]


@pytest.mark.parametrize("args", USAGE, ids=[" ".join(a) for a in USAGE])
def test_usage_errors_exit_2_without_traceback(env, args):
    res = runner.invoke(app, _argv(args, env))
    assert res.exit_code == 2, res.output
    assert "Traceback" not in res.output and isinstance(res.exception, SystemExit)
