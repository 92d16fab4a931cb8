"""Nothing lost under faults (issue 26, bullet 1): a full disk, a read-only file system or an
immutable file never moves a healthy ledger aside nor lifts its quarantine; every write path turns
an OS error into one ``error:`` line naming the path and leaves no partial file.

Real faults where the machine allows them (a small tmpfs this test mounts itself, needs root; an
immutable file via ``chattr +i``), else — and always, for the boundary itself — an ``OSError`` /
``sqlite3`` shim."""
from __future__ import annotations

import errno
import os
import shutil
import sqlite3
import subprocess
from pathlib import Path

import pytest

from hardening_helpers import one_line_error, sieve
from sieve.ledger import Flag, Ledger, LedgerCorruptError, LedgerIOError, alert_id_for, is_corruption
from sieve.safe_io import WriteFailedError, atomic_write_text

TINY = ("--retriever", "tiny-hashing")
AID = alert_id_for("h1", "rsg", "", "")


def _seed_ledger(path: Path) -> None:
    with Ledger(path) as led:
        led.add_flags([Flag("d1", "h1", 0.9, 0.5)], detector="rsg")


def _fill(directory: Path) -> None:
    """Fill the file system of ``directory`` (a small tmpfs) to the last byte."""
    with open(directory / "fill", "wb", buffering=0) as fh:
        for size in (65536, 4096, 512, 1):
            try:
                while True:
                    fh.write(b"\0" * size)
            except OSError as e:
                assert e.errno == errno.ENOSPC


@pytest.fixture
def tmpfs(tmp_path):
    """A 2 MiB tmpfs mounted for this test (root only; skipped elsewhere — the shim tests still run)."""
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("mounting a tmpfs needs root")
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mnt)], capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {r.stderr.strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], capture_output=True)


def _no_tmp_files(d: Path) -> None:
    left = [p.name for p in d.rglob(".*.tmp")]
    assert not left, left


# -- the ledger -------------------------------------------------------------------------------------

def test_full_disk_never_moves_the_ledger_and_keeps_its_quarantine(tmpfs):
    led = tmpfs / "ledger.sqlite"
    _seed_ledger(led)
    before = led.read_bytes()
    _fill(tmpfs)
    err = one_line_error(sieve("ledger", "confirm", AID, "--ledger", led, "--who", "t"))
    assert str(led) in err and "not moved" in err and "full" in err, err
    assert led.read_bytes() == before
    assert not list(tmpfs.glob("*.corrupt-*"))
    res = sieve("ledger", "list", "--ledger", led)            # reading still works on a full disk
    assert res.exit_code == 0 and AID in res.output, res.output
    with Ledger(led) as lg:                                   # ... and so does the quarantine
        assert lg.read_only
        assert lg.excluded_ids() == {"d1"}
        with pytest.raises(LedgerIOError):
            lg.confirm(AID, "t")


def test_read_only_file_system_is_not_corruption(tmpfs):
    led = tmpfs / "ledger.sqlite"
    _seed_ledger(led)
    subprocess.run(["mount", "-o", "remount,ro", str(tmpfs)], check=True)
    err = one_line_error(sieve("ledger", "dismiss", AID, "--ledger", led, "--who", "t"))
    assert str(led) in err and "corrupt" not in err, err
    res = sieve("ledger", "list", "--ledger", led)
    assert res.exit_code == 0 and AID in res.output, res.output
    assert sorted(p.name for p in tmpfs.iterdir()) == ["ledger.sqlite"]


def test_immutable_ledger_is_one_line_not_a_traceback(tmp_path):
    led = tmp_path / "ledger.sqlite"
    _seed_ledger(led)
    if shutil.which("chattr") is None or subprocess.run(["chattr", "+i", str(led)], capture_output=True).returncode:
        pytest.skip("chattr +i is not available on this file system")
    try:
        err = one_line_error(sieve("ledger", "confirm", AID, "--ledger", led, "--who", "t"))
        assert "immutable" in err and "not moved" in err, err
        assert sieve("ledger", "list", "--ledger", led).exit_code == 0
        assert not list(tmp_path.glob("*.corrupt-*"))
    finally:
        subprocess.run(["chattr", "-i", str(led)], capture_output=True)


@pytest.mark.parametrize("message, code", [("disk I/O error", 10), ("database or disk is full", 13),
                                           ("attempt to write a readonly database", 8),
                                           ("unable to open database file", 14)])
def test_io_errors_at_the_sqlite_boundary_are_never_corruption(tmp_path, monkeypatch, message, code):
    led = tmp_path / "ledger.sqlite"
    _seed_ledger(led)
    real = sqlite3.connect

    def failing(*a, **kw):
        if "mode=ro" in str(a[0] if a else ""):
            return real(*a, **kw)             # the read-only fallback may open
        e = sqlite3.OperationalError(message)
        e.sqlite_errorcode = code
        raise e

    monkeypatch.setattr("sieve.ledger.sqlite3.connect", failing)
    with Ledger(led) as lg:                   # opened read-only: quarantine in force
        assert lg.read_only and lg.excluded_ids() == {"d1"}
        with pytest.raises(LedgerIOError, match="not moved"):
            lg.dismiss(AID, "t")
    assert led.exists() and not list(tmp_path.glob("*.corrupt-*"))


def test_only_sqlite_corruption_codes_count_as_corruption():
    for code, corrupt in ((11, True), (26, True), (10, False), (13, False), (8, False), (14, False), (266, False)):
        e = sqlite3.DatabaseError("x")
        e.sqlite_errorcode = code
        assert is_corruption(e) is corrupt, code


def test_corruption_still_moves_the_ledger_aside(tmp_path):
    led = tmp_path / "ledger.sqlite"
    _seed_ledger(led)
    data = bytearray(led.read_bytes())
    data[4096:8192] = b"\xff" * 4096
    led.write_bytes(bytes(data))
    with pytest.raises(LedgerCorruptError) as ei:
        Ledger(led)
    assert ei.value.side_file is not None and ei.value.side_file.exists()


def test_a_service_ledger_that_disappears_is_refused_not_recreated(tmp_path):
    led = tmp_path / "ledger.sqlite"
    with pytest.raises(LedgerIOError, match="missing"):
        Ledger(led, must_exist=True)
    assert not led.exists()


# -- every write path -------------------------------------------------------------------------------

def test_atomic_write_on_enospc_leaves_the_old_file_and_no_temporary(tmp_path, monkeypatch):
    target = tmp_path / "out.json"
    target.write_text("old")

    def no_space(fd):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr("sieve.safe_io.os.fsync", no_space)
    with pytest.raises(WriteFailedError, match="out.json: No space left on device"):
        atomic_write_text(target, "new")
    assert target.read_text() == "old"
    _no_tmp_files(tmp_path)


def test_every_write_path_on_a_full_disk_is_one_line(ds, tmpfs):
    run0 = tmpfs / "run0"
    assert sieve("eval", ds, "--out", run0, "-d", "none", "-a", "pr_b", "--limit", "1", "--no-progress",
                 *TINY).exit_code == 0
    led = tmpfs / "l.sqlite"
    _seed_ledger(led)
    report_before = (run0 / "summary.json").read_bytes()
    _fill(tmpfs)
    cases = {
        "run": ("eval", ds, "--out", tmpfs / "run1", "-d", "none", "-a", "pr_b", "--limit", "1", "--no-progress", *TINY),
        "report": ("report", run0, "--force"),
        "export": ("ledger", "export", tmpfs / "exp.csv", "--ledger", led),
        "attack": ("attack", ds, "--attack", "pr_b", "--out", tmpfs / "att.jsonl", *TINY),
        "calibration": ("calibrate", ds, "--defense", "perplexity", "--out", tmpfs / "cal.yaml", *TINY),
    }
    for what, args in cases.items():
        err = one_line_error(sieve(*args))
        assert "No space left on device" in err and str(tmpfs) in err, (what, err)
    assert (run0 / "summary.json").read_bytes() == report_before
    for name in ("exp.csv", "att.jsonl", "cal.yaml"):
        assert not (tmpfs / name).exists(), name
    _no_tmp_files(tmpfs)
    assert not list(tmpfs.glob("*.corrupt-*"))


def test_artifact_cache_on_a_full_disk_is_one_line(ds, tmpfs, monkeypatch):
    monkeypatch.setenv("SIEVE_CACHE_DIR", str(tmpfs / "cache"))
    _fill(tmpfs)
    for args in (("index", ds, *TINY), ("search", ds, "amazon river", *TINY)):
        err = one_line_error(sieve(*args))
        assert str(tmpfs) in err and ("full" in err or "No space" in err), err
