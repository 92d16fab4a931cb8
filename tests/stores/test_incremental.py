"""``sieve audit SOURCE --since SNAPSHOT`` (issue 25): only the new batch is audited, against the whole
current store; its flags equal a full re-audit's for the new documents; the old alerts stay."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from sieve.cli import app
from sieve.ledger import Ledger
from tests.stores.conftest import STORES, fill

runner = CliRunner()
FIRST = 560     # the first batch: most of the demo corpus; the second: the rest plus the poisons


def run(*args):
    return runner.invoke(app, [str(a) for a in args])


def audit(src, tmp_path, tag, *extra):
    res = run("audit", src, "--store-model", "tiny-hashing", "--retriever", "tiny-hashing",
              "--out", tmp_path / f"out-{tag}", "--force", *extra)
    assert res.exit_code == 0, res.output
    return res, json.loads((tmp_path / f"out-{tag}" / "rsg_audit.json").read_text())


@pytest.mark.parametrize("scheme", STORES)
def test_since_audits_only_the_new_batch_and_keeps_old_alerts(scheme, tmp_path, cache_env, demo_attacked):
    docs, vecs = demo_attacked
    led = tmp_path / "ledger.sqlite"
    src = fill(scheme, tmp_path, docs[:FIRST], vecs[:FIRST])
    _, first = audit(src, tmp_path, "first", "--ledger", led)
    s1 = first["snapshot_id"]
    with Ledger(led) as ledger:
        old = {a.alert_id: a.doc_id for a in ledger.list()}
    assert old                                                    # the first batch raised alerts

    fill(scheme, tmp_path, docs[FIRST:], vecs[FIRST:], start=FIRST)   # the next ingestion batch
    res, inc = audit(src, tmp_path, "inc", "--ledger", led, "--since", s1)
    new_ids = {d.id for d in docs[FIRST:]}
    assert inc["incremental"]["new"] == len(new_ids) and inc["incremental"]["since"] == s1
    assert inc["incremental"]["searched"] < len(docs) // 2          # most kNN lists were merged, not searched
    assert f"{len(new_ids)} new since {s1}" in res.output
    s2 = inc["snapshot_id"]
    assert s2 != s1

    # a full re-audit of the same store, in a fresh ledger: the same flags for the new documents
    full_led = tmp_path / "full.sqlite"
    _, full = audit(src, tmp_path, "full", "--ledger", full_led)
    assert full["corpus_hash"] == inc["corpus_hash"]
    rows_full = {r["document_id"] for r in full["flagged"]}
    rows_inc = {r["document_id"] for r in inc["flagged"]}
    assert rows_inc == rows_full                                    # the whole snapshot's decision agrees too
    csv_full = (tmp_path / "out-full" / "rsg_audit.csv").read_text().splitlines()
    csv_inc = (tmp_path / "out-inc" / "rsg_audit.csv").read_text().splitlines()
    assert csv_full == csv_inc                                       # D, p, T, score of every document
    with Ledger(full_led) as ledger:
        full_new = {a.doc_id for a in ledger.list() if a.doc_id in new_ids}
    with Ledger(led) as ledger:
        alerts = ledger.list()
        batches = {a.alert_id: a.evidence["batch"] for a in alerts}
        inc_new = {a.doc_id for a in alerts if a.evidence["batch"] == s2}
        assert ledger.snapshot(s2)["parent"] == s1 and ledger.snapshot(s2)["new_docs"] == len(new_ids)
    assert inc_new == full_new and inc_new                           # alerts for the new documents only
    assert inc_new <= new_ids
    assert all(batches[a] == s1 for a in old)                        # the old alerts are kept as they were
    poisons = {d.id for d in docs if d.poison}
    assert poisons & inc_new


def test_since_refuses_unknown_or_foreign_snapshots(tmp_path, cache_env, demo_attacked):
    docs, vecs = demo_attacked
    led = tmp_path / "ledger.sqlite"
    a = fill("lancedb", tmp_path, docs[:100], vecs[:100])
    b = fill("lancedb", tmp_path, docs[100:200], vecs[100:200], name="other")
    _, first = audit(a, tmp_path, "a", "--ledger", led)
    res = run("audit", a, "--retriever", "tiny-hashing", "--ledger", led, "--since", "S-nothere")
    assert res.exit_code == 2 and "no snapshot 'S-nothere'" in res.output and first["snapshot_id"] in res.output
    res = run("audit", b, "--retriever", "tiny-hashing", "--store-model", "tiny-hashing", "--ledger", led,
              "--since", first["snapshot_id"])
    assert res.exit_code == 2 and "is of lancedb://" in res.output
    res = run("audit", a, "--retriever", "tiny-hashing", "--no-ledger", "--since", first["snapshot_id"])
    assert res.exit_code == 2 and "drop --no-ledger" in res.output


def test_incremental_neighbours_equal_exact_search():
    from sieve.experiment.stores import incremental_neighbours
    from sieve.index.knn import exact_rows, unit_matrix

    rng = np.random.default_rng(0)
    x = unit_matrix(rng.standard_normal((300, 16)).astype(np.float32))
    ids = [f"d{i}" for i in range(300)]
    hashes = [f"{i:032x}" for i in range(300)]
    k = 8
    old_i, old_s = exact_rows(x[:250], np.arange(250), k)
    prev = {"ids": ids[:250], "hashes": hashes[:250], "nb_ids": old_i, "nb_sims": old_s}
    hashes[10] = "f" * 32                                  # one old document changed since
    nb_i, nb_s, new_rows, changed, counts = incremental_neighbours(x, ids, hashes, prev, k)
    ref_i, ref_s = exact_rows(x, np.arange(300), k)
    assert np.array_equal(nb_i, ref_i) and np.allclose(nb_s, ref_s, atol=1e-6)
    assert counts["new"] == 51 and 10 in new_rows.tolist()
    assert changed[new_rows].all() and not changed.all()


def test_since_an_approximate_snapshot_says_its_lists_stay_approximate(tmp_path, cache_env, demo_attacked):
    """An earlier IVF audit's neighbour lists are merged as they are: the incremental report and
    the new snapshot's state say ``ivf``, not exact."""
    from sieve.experiment.stores import load_state

    docs, vecs = demo_attacked
    led = tmp_path / "ledger.sqlite"
    src = fill("chroma", tmp_path, docs[:FIRST], vecs[:FIRST])
    _, first = audit(src, tmp_path, "first", "--ledger", led, "--mode", "ivf")
    assert first["knn"]["mode"] == "ivf"
    fill("chroma", tmp_path, docs[FIRST:], vecs[FIRST:], start=FIRST)
    res, inc = audit(src, tmp_path, "inc", "--ledger", led, "--since", first["snapshot_id"])
    assert inc["knn"]["mode"] == "ivf" and first["snapshot_id"] in inc["knn"]["note"]
    assert "rsg        ivf kNN" in res.output
    with Ledger(led) as ledger:
        state = load_state(Path(ledger.snapshot(inc["snapshot_id"])["state_path"]))
    assert state["mode"] == "ivf"
