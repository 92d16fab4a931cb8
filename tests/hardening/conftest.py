"""Fixtures of the hardening tests (issue 14); helpers in tests/hardening/hardening_helpers.py."""
from __future__ import annotations

from pathlib import Path

import pytest

from hardening_helpers import write_slice


@pytest.fixture
def ds(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("SIEVE_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    return write_slice(tmp_path / "ds")


