"""``sieve audit SOURCE --since meta:FIELD>=VALUE`` (issue 25 item 3): the documents whose metadata
matches are the batch, audited against the whole current store (a real embedded Chroma); bad
expressions and unknown fields are one ``error:`` line, exit 2."""
from __future__ import annotations

import json
from dataclasses import replace

import pytest
from typer.testing import CliRunner

from sieve.cli import app
from sieve.ledger import Ledger
from sieve.stores.filters import FilterError, is_snapshot_id, parse_filter, select
from sieve.types import Document
from tests.stores.conftest import fill

runner = CliRunner()
FIRST = 560
DAY1, DAY2 = "2026-11-29T08:00:00", "2026-11-30T09:15:00"


def run(*args):
    return runner.invoke(app, [str(a) for a in args])


def audit(src, tmp_path, tag, *extra):
    res = run("audit", src, "--store-model", "tiny-hashing", "--retriever", "tiny-hashing",
              "--out", tmp_path / f"out-{tag}", "--force", *extra)
    assert res.exit_code == 0, res.output
    return res, json.loads((tmp_path / f"out-{tag}" / "rsg_audit.json").read_text())


def stamped(docs, when):
    return [replace(d, metadata={**d.metadata, "ingested_at": when}) for d in docs]


@pytest.fixture
def two_batches(tmp_path, demo_attacked):
    """A Chroma collection filled in two ingestion batches, each stamped with its ``ingested_at``."""
    docs, vecs = demo_attacked
    src = fill("chroma", tmp_path, stamped(docs[:FIRST], DAY1), vecs[:FIRST])
    return src, docs, vecs


def test_filter_audits_the_matching_batch_against_the_whole_store(tmp_path, cache_env, two_batches):
    src, docs, vecs = two_batches
    led = tmp_path / "ledger.sqlite"
    _, first = audit(src, tmp_path, "first", "--ledger", led)
    with Ledger(led) as ledger:
        old = {a.alert_id: a.evidence["batch"] for a in ledger.list()}
    assert old
    fill("chroma", tmp_path, stamped(docs[FIRST:], DAY2), vecs[FIRST:])

    res, inc = audit(src, tmp_path, "inc", "--ledger", led, "--since", "meta:ingested_at>=2026-11-30T00:00")
    new_ids = {d.id for d in docs[FIRST:]}
    info = inc["incremental"]
    assert info["filter"] and info["matched"] == len(new_ids) and info["base"] == first["snapshot_id"]
    assert info["searched"] < len(docs) // 2                       # the earlier snapshot's lists were merged
    assert f"{len(new_ids)} documents match meta:ingested_at>=2026-11-30T00:00" in res.output
    # the flags of the batch equal those of a full re-audit (fresh ledger) of the same store
    full_led = tmp_path / "full.sqlite"
    _, full = audit(src, tmp_path, "full", "--ledger", full_led)
    assert full["corpus_hash"] == inc["corpus_hash"]
    with Ledger(full_led) as ledger:
        full_new = {a.doc_id for a in ledger.list() if a.doc_id in new_ids}
    with Ledger(led) as ledger:
        alerts = ledger.list()
        batch = {a.doc_id for a in alerts if a.evidence["batch"] == inc["snapshot_id"]}
        snap = ledger.snapshot(inc["snapshot_id"])
        kept = {a.alert_id: a.evidence["batch"] for a in alerts if a.alert_id in old}
    assert batch == full_new and batch <= new_ids                  # alerts for the matching documents only
    assert {d.id for d in docs if d.poison} & batch                # the poisons of the batch are caught
    assert kept == old                                             # the earlier alerts stay as they were
    assert snap["parent"] == first["snapshot_id"] and snap["new_docs"] == len(new_ids)


def test_filter_without_an_earlier_snapshot_audits_the_whole_store(tmp_path, cache_env, two_batches):
    src, docs, vecs = two_batches
    fill("chroma", tmp_path, stamped(docs[FIRST:], DAY2), vecs[FIRST:])
    led = tmp_path / "ledger.sqlite"
    res, inc = audit(src, tmp_path, "f", "--ledger", led, "--since", f"ingested_at<{DAY2}")   # no prefix
    assert inc["incremental"]["base"] is None and inc["incremental"]["matched"] == FIRST
    assert "no earlier snapshot of this store" in res.output
    flagged = {r["document_id"] for r in inc["flagged"]}
    with Ledger(led) as ledger:
        recorded = {a.doc_id for a in ledger.list()}
    first_ids = {d.id for d in docs[:FIRST]}
    assert recorded == flagged & first_ids and recorded            # only the matching documents' flags


@pytest.mark.parametrize("expr, words", [
    ("meta:>=2026", "neither a snapshot id"),
    ("meta:ingested_at>=", "no value after '>='"),
    ("meta:ingest_time>=2026-11-30", "no document has the metadata field 'ingest_time'"),
    ("meta:ingested_at>=5", "which is not a number"),
    ("meta:ingested_at>true", "booleans compare with = or != only"),
    ("meta:ingested_at>=2026-13-45", "is not a valid date/time"),
])
def test_bad_filters_are_one_error_line(expr, words, tmp_path, cache_env, two_batches):
    src, _, _ = two_batches
    res = run("audit", src, "--retriever", "tiny-hashing", "--store-model", "tiny-hashing",
              "--ledger", tmp_path / "l.sqlite", "--out", tmp_path / "o", "--since", expr)
    assert res.exit_code == 2, res.output
    lines = [x for x in res.output.splitlines() if x.strip()]
    errors = [x for x in lines if x.startswith("error:")]
    assert len(errors) == 1 and words in errors[0], res.output
    assert "Traceback" not in res.output


def test_filter_kinds():
    docs = [Document("a", "x", metadata={"t": 1764460800, "n": "7", "ok": True, "src": "crawl"}),   # 2025-11-30 UTC
            Document("b", "y", metadata={"t": "2026-11-30T10:00:00+01:00", "n": 12, "ok": False, "src": "drive"}),
            Document("c", "z", metadata={"src": "crawl"})]
    assert select(docs, parse_filter("meta:t>=2026-11-30T08:59Z")) == [1]        # 09:00 UTC, epoch and ISO
    assert select(docs, parse_filter("meta:t<2026-01-01")) == [0]
    assert select(docs, parse_filter("meta:n>7")) == [1] and select(docs, parse_filter("n==7")) == [0]
    assert select(docs, parse_filter("meta:ok=false")) == [1]
    assert select(docs, parse_filter("meta:src!=crawl")) == [1]
    assert select(docs, parse_filter('meta:src="crawl"')) == [0, 2]
    assert is_snapshot_id("S-0123456789ab") and not is_snapshot_id("meta:x>=1") and not is_snapshot_id("S>=1")
    with pytest.raises(FilterError, match="document 'a' has src='crawl', which is not a number"):
        select(docs, parse_filter("meta:src>=3"))
