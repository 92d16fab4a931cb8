"""Nothing wrong-but-normal (issue 14): a damaged run config or quarantine ledger is detected and
reported; search keeps working without a corrupt ledger and says so."""
from __future__ import annotations

import json
import os
import sqlite3
import time

import pytest

from hardening_helpers import one_line_error, sieve
from sieve.evaluation.records import RunError, read_run_config, write_run_config
from sieve.ledger import Flag, Ledger, LedgerCorruptError, LedgerError

TINY = ("--retriever", "tiny-hashing")
EVAL = ("-d", "none", "-a", "pr_b", "--limit", "1", "--no-progress", *TINY)


@pytest.fixture
def run(ds, tmp_path):
    out = tmp_path / "run"
    res = sieve("eval", ds, "--out", out, *EVAL)
    assert res.exit_code == 0, res.output
    return out


def test_run_config_carries_a_checksum(run):
    cfg = json.loads((run / "config.json").read_text(encoding="utf-8"))
    assert len(cfg["sha256"]) == 64
    assert read_run_config(run / "config.json")["k_ctx"] == 5


def test_same_size_edit_of_the_run_config_is_detected(ds, run):
    p = run / "config.json"
    text = p.read_text(encoding="utf-8")
    damaged = text.replace('"k_ctx": 5', '"k_ctx": 9', 1)
    assert len(damaged) == len(text) and damaged != text
    p.write_text(damaged, encoding="utf-8")
    for res in (sieve("eval", ds, "--out", run, *EVAL), sieve("report", run)):
        assert "checksum mismatch" in one_line_error(res)
    with pytest.raises(RunError, match="checksum mismatch"):
        read_run_config(p)
    assert sieve("eval", ds, "--out", run, *EVAL, "--force").exit_code == 0      # --force starts over
    assert read_run_config(p)["k_ctx"] == 5


@pytest.mark.parametrize("damage", ["zeros", "truncate", "not-object"])
def test_garbage_run_config_is_a_one_line_error(ds, run, damage):
    p = run / "config.json"
    raw = bytearray(p.read_bytes())
    if damage == "zeros":
        raw[50:90] = b"\x00" * 40
    elif damage == "truncate":
        raw = raw[: len(raw) // 2]
    else:
        raw = bytearray(b"[1, 2, 3]")
    p.write_bytes(bytes(raw))
    for res in (sieve("eval", ds, "--out", run, *EVAL), sieve("report", run)):
        err = one_line_error(res)
        assert "config.json" in err and ("damaged" in err or "not valid JSON" in err)


def test_run_config_without_checksum_is_read_as_before(tmp_path):
    p = tmp_path / "config.json"
    p.write_text(json.dumps({"k_ctx": 5}), encoding="utf-8")
    assert read_run_config(p) == {"k_ctx": 5}
    write_run_config(p, {"k_ctx": 5})
    assert read_run_config(p)["k_ctx"] == 5


def _ledger_with_alerts(path, n=300):
    with Ledger(path) as led:
        for i in range(n):
            led.add_flags([Flag(f"d{i}", f"h{i}", 1.0, 0.5, reason="x" * 200)], detector="rsg")
    assert not os.path.exists(f"{path}-wal") or os.path.getsize(f"{path}-wal") == 0
    return path


def _same_size_damage(path):
    raw = bytearray(path.read_bytes())
    mid = len(raw) // 2
    raw[mid:mid + 8192] = b"\xff" * 8192
    path.write_bytes(bytes(raw))


def test_corrupt_ledger_is_quarantined_and_reported(tmp_path):
    p = _ledger_with_alerts(tmp_path / "ledger.sqlite")
    size = p.stat().st_size
    _same_size_damage(p)
    assert p.stat().st_size == size
    with pytest.raises(LedgerCorruptError) as e:
        Ledger(p)
    side = e.value.side_file
    assert side is not None and side.exists() and side.name.startswith("ledger.sqlite.corrupt-")
    assert side.stat().st_size == size and not p.exists()              # moved aside, byte for byte
    with Ledger(p) as led:                                             # next use: a fresh, empty ledger
        assert led.counts()["open"] == 0 and led.integrity_check() == "ok"


def test_truncated_ledger_cli_is_one_line_error(tmp_path):
    p = _ledger_with_alerts(tmp_path / "ledger.sqlite")
    with open(p, "r+b") as fh:
        fh.truncate(p.stat().st_size // 3)
    err = one_line_error(sieve("ledger", "list", "--ledger", p))
    assert "is corrupt" in err and "moved to" in err
    assert any(x.name.startswith("ledger.sqlite.corrupt-") for x in tmp_path.iterdir())


def test_search_keeps_working_without_a_corrupt_default_ledger(ds, tmp_path):
    default = tmp_path / "cache" / "ledger.sqlite"
    default.parent.mkdir(parents=True, exist_ok=True)
    _ledger_with_alerts(default)
    _same_size_damage(default)
    res = sieve("search", ds, "Who was the first European to navigate the Amazon River?", "-k", "3", *TINY)
    assert res.exit_code == 0, res.output
    assert "is corrupt" in res.output and "WITHOUT quarantine exclusions" in res.output
    assert res.output.count(" of ") >= 1 and "amazon" in res.output
    res = sieve("search", ds, "Who was the first European to navigate the Amazon River?", "-k", "3", *TINY)
    assert res.exit_code == 0 and "corrupt" not in res.output                   # the fresh ledger is fine


def test_a_non_ledger_file_is_never_moved_or_changed(ds):
    corpus = ds / "corpus.jsonl"
    before = corpus.read_bytes()
    with pytest.raises(LedgerError, match="not a quarantine ledger") as e:
        Ledger(corpus)
    assert not isinstance(e.value, LedgerCorruptError)
    err = one_line_error(sieve("ledger", "list", "--ledger", corpus))
    assert "not a quarantine ledger" in err
    res = sieve("search", ds, "amazon river", "-k", "2", "--ledger", corpus, *TINY)
    assert res.exit_code == 0 and "WITHOUT quarantine exclusions" in res.output
    assert corpus.read_bytes() == before


def test_integrity_check_runs_on_open(tmp_path, monkeypatch):
    p = _ledger_with_alerts(tmp_path / "ledger.sqlite", n=3)
    calls = []
    real = Ledger.integrity_check

    def spy(self):
        calls.append(1)
        return real(self)

    monkeypatch.setattr(Ledger, "integrity_check", spy)
    Ledger(p).close()
    assert calls == [1]                     # just written: its timestamps are too fresh to trust
    old = time.time_ns() - 10_000_000_000
    os.utime(p, ns=(old, old))
    Ledger(p).close()
    assert calls == [1, 1]
    Ledger(p).close()                       # unchanged since it was verified: not scanned again
    assert calls == [1, 1]
    os.utime(p, ns=(old + 1000, old + 1000))   # changed by someone else
    Ledger(p).close()
    assert len(calls) == 3
    con = sqlite3.connect(p)
    assert con.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    con.close()


def test_ledger_with_a_damaged_header_is_quarantined(tmp_path):
    p = _ledger_with_alerts(tmp_path / "ledger.sqlite", n=5)
    raw = bytearray(p.read_bytes())
    raw[:16] = b"\x00" * 16                 # the SQLite magic is gone; the rest is still a database page
    p.write_bytes(bytes(raw))
    err = one_line_error(sieve("ledger", "list", "--ledger", p))
    assert "is corrupt" in err and not p.exists()


def test_audit_checks_the_ledger_before_auditing(ds, tmp_path):
    p = _ledger_with_alerts(tmp_path / "audit-ledger.sqlite")
    _same_size_damage(p)
    out = tmp_path / "audit-out"
    err = one_line_error(sieve("audit", ds, "--ledger", p, "--out", out, *TINY))
    assert "is corrupt" in err and "moved to" in err
    assert not out.exists()                              # refused before any audit work or report


def test_a_damaged_checksum_key_is_not_read_as_an_old_unchecked_run(tmp_path):
    # found by the hypothesis property test: one byte in the key name ("sha256" -> " ha256") used to make the
    # damaged file look like a run written before checksums existed
    p = tmp_path / "config.json"
    write_run_config(p, {"k_ctx": 5, "depth": 50})
    raw = p.read_text(encoding="utf-8")
    assert raw.count('"sha256"') == 1
    p.write_text(raw.replace('"sha256"', '" ha256"'), encoding="utf-8")
    with pytest.raises(RunError, match="checksum is missing"):
        read_run_config(p)
    old = tmp_path / "old.json"                          # a run config from before checksums: still read
    old.write_text(json.dumps({"k_ctx": 5}), encoding="utf-8")
    assert read_run_config(old) == {"k_ctx": 5}
