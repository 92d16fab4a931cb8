"""Fixtures of the evaluation tests (data in evaldata.py)."""
from __future__ import annotations

from pathlib import Path

import pytest

from evaldata import write_dataset


@pytest.fixture
def tiny_dataset(tmp_path: Path) -> Path:
    return write_dataset(tmp_path / "tinyds")


@pytest.fixture
def eval_resources(tiny_resources, tmp_path: Path):
    """Tiny models with the index workspace under tmp (never the user cache)."""
    tiny_resources.config.workspace = tmp_path / "ws"
    return tiny_resources
