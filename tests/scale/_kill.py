"""Shared by the resume tests: kill a subprocess once its shard manifest records enough shards."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path


def kill_after_shards(proc: subprocess.Popen, manifest: Path, shards: int, timeout: float = 120) -> None:
    """SIGKILL ``proc`` as soon as ``manifest`` lists at least ``shards`` shards (or after ``timeout``
    seconds), then reap it: the interruption lands mid-way, between two shard writes or inside one."""
    try:
        deadline = time.time() + timeout
        while time.time() < deadline:
            try:
                if len(json.loads(manifest.read_text())["shards"]) >= shards:
                    break
            except (FileNotFoundError, json.JSONDecodeError):
                pass
            time.sleep(0.05)
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.wait(timeout=30)
