"""Fixtures of the adapter tests: the demo corpus with the pr_b documents of one target, tiny models."""
from __future__ import annotations

from pathlib import Path

import pytest

DEMO = Path(__file__).resolve().parents[2] / "demo_data"


@pytest.fixture(scope="module")
def demo_dataset():
    from sieve.corpus import load_dataset

    return load_dataset(DEMO)


@pytest.fixture(scope="module")
def target(demo_dataset):
    """The first pr_b attack record: (query, its five poison documents)."""
    rec = next(r for r in demo_dataset.attack_records("pr_b"))
    return rec.query, list(rec.documents)


@pytest.fixture(scope="module")
def knowledge_base(demo_dataset, target):
    """The clean demo corpus plus the five pr_b poisons of the target (an attacked knowledge base)."""
    return list(demo_dataset.documents) + target[1]


@pytest.fixture(scope="module")
def tiny_res(demo_dataset):
    from sieve.testing_models import tiny_resources

    return tiny_resources(corpus_texts=[d.text for d in demo_dataset.documents])


@pytest.fixture
def local_backend(demo_dataset, tiny_res, tmp_path):
    from sieve.adapters import LocalSieve
    from sieve.experiment import Experiment

    ledger = tmp_path / "ledger.sqlite"
    return LocalSieve(Experiment(demo_dataset, tiny_res, ledger_path=ledger), ledger_path=ledger, clean_limit=20)
