"""Fixtures of the HTTP service tests: the demo dataset with tiny models, one app per test module."""
from __future__ import annotations

from pathlib import Path

import pytest

DEMO = Path(__file__).resolve().parents[2] / "demo_data"


@pytest.fixture(scope="module")
def demo_dataset():
    from sieve.corpus import load_dataset

    return load_dataset(DEMO)


@pytest.fixture(scope="module")
def tiny_experiment(demo_dataset, tmp_path_factory):
    from sieve.experiment import Experiment
    from sieve.testing_models import tiny_resources

    ledger = tmp_path_factory.mktemp("ledger") / "ledger.sqlite"
    res = tiny_resources(corpus_texts=[d.text for d in demo_dataset.documents])
    return Experiment(demo_dataset, res, ledger_path=ledger, quarantine="open_and_confirmed")


@pytest.fixture(scope="module")
def pr_b_ranking(tiny_experiment):
    """The pr_b ranking (depth 20) of the first attack target: its five poisons on top."""
    ds = tiny_experiment.dataset
    rec = next(r for r in ds.attack_records("pr_b"))
    return tiny_experiment.rank(rec.query, condition="pr_b", query_id=rec.query_id, depth=20)


def request_body(ranking, defense: str = "rsq", **kw):
    return {"query": ranking.query, "defense": defense,
            "documents": [{"id": d.id, "text": d.text, "title": d.title, "score": d.score} for d in ranking.documents],
            **kw}
