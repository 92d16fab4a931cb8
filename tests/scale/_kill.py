"""Shared by the resume tests: a child that stops after a given number of shards, and the parent's
kill once the shard manifest records them — the kill lands mid-run however fast the machine is."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path


def shards_recorded(manifest: str | Path) -> int:
    """Shards ``manifest`` lists (0 while it is missing or being rewritten)."""
    try:
        return len(json.loads(Path(manifest).read_text())["shards"])
    except (FileNotFoundError, json.JSONDecodeError, KeyError):
        return 0


def hold_after_shards(manifest: str | Path, shards: int) -> None:
    """Called by the child before each embedding call: once ``manifest`` lists ``shards`` shards it
    waits there for :func:`kill_after_shards`, so the run cannot finish before the kill."""
    if shards_recorded(manifest) >= shards:
        time.sleep(600)


def kill_after_shards(proc: subprocess.Popen, manifest: Path, shards: int, timeout: float = 120) -> None:
    """SIGKILL ``proc`` as soon as ``manifest`` lists at least ``shards`` shards (or after ``timeout``
    seconds), then reap it: with the child held by :func:`hold_after_shards`, the interruption lands
    between two shard writes."""
    try:
        deadline = time.time() + timeout
        while time.time() < deadline:
            if shards_recorded(manifest) >= shards:
                break
            time.sleep(0.05)
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.wait(timeout=30)
