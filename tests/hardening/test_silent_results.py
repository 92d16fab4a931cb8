"""No silent wrong results (issue 26, bullet 5): model weights damaged in place with their file
time restored are caught by checksum on the first open in a process; a NaN or infinite embedding
is an error, not an empty result; the Trade-offs page opens run directories only under the allowed
roots and says the same for a missing and a forbidden path."""
from __future__ import annotations

import os

import numpy as np
import pytest

from sieve.models import cache as C
from sieve.models.embedders import _normalise
from sieve.models.errors import ModelError


def test_weights_damaged_in_place_with_time_restored_are_caught_in_a_new_process(tmp_path):
    entry = tmp_path / "entry"
    entry.mkdir()
    weights = entry / "model.safetensors"
    weights.write_bytes(os.urandom(1024) * (C.ALWAYS_HASH_BYTES // 1024 + 8))   # above the always-hash size
    (entry / "config.json").write_text("{}")
    C.write_manifest(entry)
    assert C.cache_problem(entry) is None          # first open: hashed, stamp recorded
    assert C.cache_problem(entry) is None          # same process: stamp matches, not re-read
    st = weights.stat()
    with open(weights, "r+b") as fh:               # damage in place: same size, same inode
        fh.seek(st.st_size // 2)
        fh.write(b"\x00" * 4096)
    os.utime(weights, ns=(st.st_atime_ns, st.st_mtime_ns))   # file time restored
    assert weights.stat().st_mtime_ns == st.st_mtime_ns and weights.stat().st_ino == st.st_ino
    C._HASHED_THIS_PROCESS.clear()                 # a new process: every file is hashed once
    assert "fails its checksum" in (C.cache_problem(entry) or "")


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_a_non_finite_embedding_is_an_error(bad):
    x = np.ones((3, 4), np.float32)
    x[1, 2] = bad
    with pytest.raises(ModelError, match=r"all-mpnet.*NaN or infinite values for 1 of 3 texts"):
        _normalise(x, "all-mpnet-base-v2")
    assert _normalise(np.ones((2, 4))).shape == (2, 4)


def test_tradeoffs_run_box_opens_only_run_directories_under_the_allowed_roots(tmp_path, monkeypatch):
    from sieve.dashboard import runs as R

    root = tmp_path / "root"
    (root / "runs" / "r1").mkdir(parents=True)
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (root / "runs" / "escape").symlink_to(outside)
    monkeypatch.setenv("SIEVE_DASHBOARD_ROOTS", str(root))
    monkeypatch.delenv("SIEVE_DASHBOARD_RUN", raising=False)
    monkeypatch.delenv("SIEVE_DASHBOARD_DATASET", raising=False)
    assert R.allowed_run_dir(root / "runs" / "r1") == (root / "runs" / "r1").resolve()
    for bad in (outside, root / "runs" / "escape", root / "runs" / ".." / ".." / "elsewhere", "/etc",
                root / "runs" / "missing", ""):
        assert R.allowed_run_dir(bad) is None, bad
    assert "allowed folder" in R.run_dir_refusal("/etc") and "/etc" not in R.run_dir_refusal("/etc").split(":")[0]
    monkeypatch.setenv("SIEVE_DASHBOARD_RUN", str(outside))   # the operator's own run is always allowed
    assert R.allowed_run_dir(outside) == outside.resolve()
