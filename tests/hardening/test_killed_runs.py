"""A killed run loses nothing (issue 26, bullet 2): ``kill -9`` of ``sieve eval`` with a calibrated
defense, then a rerun, gives the results of an uninterrupted run; items that failed for a reason not
their own (an interrupted or failed calibration, a full disk) are retried and counted; a run whose
items all failed exits non-zero."""
from __future__ import annotations

import errno
import json
import subprocess
import sys
from pathlib import Path

import pytest

from hardening_helpers import sieve
from sieve.evaluation.runner import retry_reason

ARGS = ("-d", "none,fusion", "-a", "pr_b", "--limit", "3", "--no-progress", "--retriever", "tiny-hashing")
#: the run of ARGS writes 12 records: clean (3 queries × 2 defenses), then pr_b
KILLER = r'''
import os, signal, sys
from sieve.evaluation import records
n = [0]
kill_at = int(sys.argv[1])
orig = records.RecordWriter.write
def write(self, rec, decisions=None):
    n[0] += 1
    if n[0] == kill_at:
        os.kill(os.getpid(), signal.SIGKILL)      # kill -9: no finally, no flush beyond what was written
    return orig(self, rec, decisions)
records.RecordWriter.write = write
from sieve.cli import app
sys.argv = ["sieve", *sys.argv[2:]]
app()
'''


def _rows(run: Path) -> dict[tuple[str, str], dict]:
    s = json.loads((run / "summary.json").read_text())
    drop = ("latency_ms_p50", "latency_ms_p95")
    return {(r["defense"], r["attack"]): {k: v for k, v in r.items() if k not in drop} for r in s["results"]}


@pytest.fixture
def reference(ds, tmp_path):
    ref = tmp_path / "ref"
    res = sieve("eval", ds, "--out", ref, *ARGS)
    assert res.exit_code == 0, res.output
    return _rows(ref)


@pytest.mark.parametrize("kill_at", [2, 6, 7, 10])   # during clean, after clean, first attacked, mid-attack
def test_kill_9_and_resume_with_a_calibrated_defense(ds, tmp_path, reference, kill_at):
    run = tmp_path / "run"
    p = subprocess.run([sys.executable, "-c", KILLER, str(kill_at), "eval", str(ds), "--out", str(run), *ARGS],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == -9, (p.returncode, p.stderr[-2000:])
    res = sieve("eval", ds, "--out", run, *ARGS)
    assert res.exit_code == 0, res.output
    assert _rows(run) == reference
    s = json.loads((run / "summary.json").read_text())
    assert s["n_items_failed"] == 0 and s["n_items"] == 12


def test_items_failed_by_a_calibration_fault_are_retried_and_counted(ds, tmp_path, reference, monkeypatch):
    import sieve.defenses.base as base

    run = tmp_path / "run"
    real = base.Defense.calibrate

    def no_space(self, *a, **kw):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(base.Defense, "calibrate", no_space)
    res = sieve("eval", ds, "--out", run, *ARGS)
    assert res.exit_code == 0, res.output            # `none` still produced results
    s = json.loads((run / "summary.json").read_text())
    assert s["n_items_failed"] == 6 and s["n_retried"] == 0
    monkeypatch.setattr(base.Defense, "calibrate", real)
    res = sieve("eval", ds, "--out", run, *ARGS)
    assert res.exit_code == 0, res.output
    assert "retried 6 items" in res.output, res.output
    s = json.loads((run / "summary.json").read_text())
    assert s["n_retried"] == 6 and s["retried_reasons"] == {"not calibrated": 6} and s["n_items_failed"] == 0
    assert _rows(run) == reference
    res = sieve("eval", ds, "--out", run, *ARGS)      # nothing left to retry
    assert json.loads((run / "summary.json").read_text())["n_retried"] == 0


def test_an_items_own_failure_is_kept_and_a_run_that_all_failed_exits_non_zero(ds, tmp_path, monkeypatch):
    import sieve.defenses.base as base

    def broken(self, *a, **kw):
        raise ValueError("this ranking cannot be scored")

    monkeypatch.setattr(base.Defense, "apply", broken)
    run = tmp_path / "run"
    args = ("-d", "none", "-a", "pr_b", "--limit", "2", "--no-progress", "--retriever", "tiny-hashing")
    res = sieve("eval", ds, "--out", run, *args)
    assert res.exit_code == 1, res.output
    assert "error: every one of the 4 items failed" in res.output
    assert "Traceback" not in res.output
    res = sieve("eval", ds, "--out", run, *args)      # an item's own failure is not retried
    assert res.exit_code == 1 and "retried" not in res.output


def test_retry_reasons():
    assert retry_reason(None) is None
    assert retry_reason("ValueError: bad ranking") is None
    assert retry_reason("RuntimeError: fusion: not calibrated; pass threshold=...") == "not calibrated"
    assert retry_reason("fit: OSError: x") == "fit"
    assert retry_reason("retrieval: MemoryError: x") == "retrieval"
    assert retry_reason("generate: APIConnectionError: x") == "generate"
    assert retry_reason("OSError: [Errno 28] No space left on device") == "OSError"
