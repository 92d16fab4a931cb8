"""Quarantine ledger: idempotent flags, validated transitions, rollback, exclusion, concurrent writers."""
import csv
import multiprocessing as mp

import pytest

from sieve.ledger import Flag, Ledger, LedgerError, alert_id_for, flags_from_decisions
from sieve.types import Decision


def _flags(n, prefix="d", score=1.0):
    return [Flag(f"{prefix}{i}", f"h-{prefix}{i}", score + i / 100, 0.5, {"D": 0.9, "i": i}, "topology")
            for i in range(n)]


@pytest.fixture
def ledger(tmp_path):
    with Ledger(tmp_path / "ledger.sqlite") as led:
        yield led


def test_add_is_idempotent_per_hash_detector_corpus_version(ledger):
    ids = ledger.add_flags(_flags(3), detector="rsg", corpus_id="demo", corpus_hash="c1", index_version="v1")
    again = ledger.add_flags(_flags(3), detector="rsg", corpus_id="demo", corpus_hash="c1", index_version="v1")
    assert ids == again and len(ledger.list()) == 3
    ledger.add_flags(_flags(1), detector="rsg", corpus_hash="c2", index_version="v1")   # new corpus version
    ledger.add_flags(_flags(1), detector="rsq", corpus_hash="c1", index_version="v1")   # other detector
    assert len(ledger.list()) == 5
    a = ledger.get(ids[0])
    assert a.state == "open" and a.evidence == {"D": 0.9, "i": 0} and a.corpus_id == "demo"
    assert a.alert_id == alert_id_for("h-d0", "rsg", "c1", "v1")
    assert [h.to_state for h in ledger.history(ids[0])] == ["open"]


def test_transitions_history_and_rollback_restores(ledger):
    (aid,) = ledger.add_flags(_flags(1), detector="rsg", corpus_hash="c1")
    assert ledger.excluded_ids() == {"d0"}
    assert ledger.excluded_ids("confirmed_only") == set()
    ledger.confirm(aid, "alice", "payload asserts a false answer")
    assert ledger.excluded_ids("confirmed_only") == {"d0"}
    ledger.rollback(aid, "bob", "false positive after review")
    assert ledger.get(aid).state == "rolled_back"
    assert ledger.excluded_ids() == set() and ledger.excluded_ids("confirmed_only") == set()
    hist = ledger.history(aid)
    assert [(h.from_state, h.to_state, h.who) for h in hist] == [
        (None, "open", "sieve"), ("open", "confirmed", "alice"), ("confirmed", "rolled_back", "bob")]
    assert hist[2].why == "false positive after review"
    ledger.reopen(aid, "carol")
    assert ledger.get(aid).state == "open"


@pytest.mark.parametrize("path,bad", [([], "rolled_back"), (["dismissed"], "confirmed"),
                                      (["confirmed"], "dismissed"), (["confirmed"], "open")])
def test_invalid_transitions_are_clear_errors(ledger, path, bad):
    (aid,) = ledger.add_flags(_flags(1), detector="rsg")
    for s in path:
        ledger.transition(aid, s, "alice")
    with pytest.raises(LedgerError, match="cannot go from"):
        ledger.transition(aid, bad, "alice")


def test_rollback_needs_a_reason(ledger):
    (aid,) = ledger.add_flags(_flags(1), detector="rsg")
    ledger.confirm(aid, "alice")
    for why in ("", "   ", None):
        with pytest.raises(LedgerError, match="needs a reason"):
            ledger.transition(aid, "rolled_back", "bob", why)
    assert ledger.get(aid).state == "confirmed" and len(ledger.history(aid)) == 2   # nothing recorded
    assert ledger.rollback(aid, "bob", "restored after review").state == "rolled_back"


def test_unknown_alert_state_and_policy(ledger):
    with pytest.raises(LedgerError, match="no alert"):
        ledger.confirm("A-nope", "alice")
    (aid,) = ledger.add_flags(_flags(1), detector="rsg")
    with pytest.raises(LedgerError, match="unknown state"):
        ledger.transition(aid, "deleted", "alice")
    with pytest.raises(LedgerError, match="who"):
        ledger.transition(aid, "confirmed", " ")
    with pytest.raises(LedgerError, match="policy"):
        ledger.excluded_ids("all")
    assert ledger.excluded_ids("none") == set()


def test_list_filters_sort_and_export(ledger, tmp_path):
    ledger.add_flags(_flags(4), detector="rsg")
    ledger.add_flags(_flags(2, prefix="q", score=2.0), detector="rsq")
    assert [a.doc_id for a in ledger.list(detector="rsg", sort="-score")] == ["d3", "d2", "d1", "d0"]
    assert [a.doc_id for a in ledger.list(min_score=1.02, sort="score")] == ["d2", "d3", "q0", "q1"]
    first = ledger.list(detector="rsg")[0]
    ledger.dismiss(first.alert_id, "alice")
    assert len(ledger.list(state="open")) == 5 and ledger.counts()["dismissed"] == 1
    n = ledger.export_csv(tmp_path / "out" / "alerts.csv", detector="rsq")
    rows = list(csv.DictReader(open(tmp_path / "out" / "alerts.csv", encoding="utf-8")))
    assert n == 2 and {r["doc_id"] for r in rows} == {"q0", "q1"} and rows[0]["state"] == "open"
    with pytest.raises(LedgerError, match="sort"):
        ledger.list(sort="random")


def test_flags_from_decisions():
    ds = [Decision("a", True, "scored", 0.9, 0.5, {"x": 1}, "quarantined"), Decision("b", False, "scored", 0.1, 0.5)]
    (f,) = flags_from_decisions(ds, {"a": "ha", "b": "hb"})
    assert (f.doc_id, f.content_hash, f.score, f.evidence) == ("a", "ha", 0.9, {"x": 1})


def _writer(path, prefix, n):
    led = Ledger(path)
    for i in range(n):
        (aid,) = led.add_flags([Flag(f"{prefix}{i}", f"h{prefix}{i}", 0.7, 0.5, {"i": i})], detector="rsg")
        if i % 2 == 0:
            led.confirm(aid, prefix, "batch")
        # a repeat of an earlier flag must stay a no-op under contention
        led.add_flags([Flag(f"{prefix}0", f"h{prefix}0", 0.7, 0.5)], detector="rsg")
    led.close()


def test_two_concurrent_writer_processes(tmp_path):
    path = tmp_path / "shared.sqlite"
    Ledger(path).close()
    ctx = mp.get_context("spawn")
    procs = [ctx.Process(target=_writer, args=(path, p, 150)) for p in ("x", "y")]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
        assert p.exitcode == 0
    with Ledger(path) as led:
        assert led.integrity_check() == "ok"
        assert len(led.list()) == 300
        assert led.counts() == {"open": 150, "confirmed": 150, "dismissed": 0, "rolled_back": 0}
        n_hist = led._conn.execute("SELECT COUNT(*) FROM history").fetchone()[0]
        assert n_hist == 300 + 150


def test_split_modules_keep_every_name_importable_from_sieve_ledger(tmp_path):
    """sieve.ledger is the public contract: the names moved to sieve/ledger_errors.py and
    sieve/ledger_snapshots.py are the same objects there, and the snapshots table still works."""
    import sieve.ledger as ledger
    import sieve.ledger_errors as errors
    import sieve.ledger_snapshots as snapshots

    for name in ("LedgerError", "LedgerCorruptError", "LedgerIOError", "is_corruption", "_io_error", "_cause",
                 "_disk_full", "_IntegrityFailure", "_looks_damaged_sqlite", "_file_stamp", "_VERIFIED"):
        assert getattr(ledger, name) is getattr(errors, name)
    assert issubclass(ledger.Ledger, snapshots.SnapshotTable) and issubclass(ledger.LedgerIOError, ledger.LedgerError)
    import sieve.ledger_export as export

    for name in ("EXPORT_COLUMNS", "is_ledger_export", "_json_default"):
        assert getattr(ledger, name) is getattr(export, name)
    for name in ("STATES", "STATE_WORDING", "DETECTOR_FLAG", "TRANSITIONS", "EXCLUSION_POLICIES", "Flag", "Alert",
                 "HistoryEntry", "alert_id_for", "default_ledger_path", "is_ledger_export", "flags_from_decisions",
                 "EXPORT_COLUMNS"):
        assert hasattr(ledger, name)
    with Ledger(tmp_path / "l.sqlite") as led:
        led.add_snapshot("S-1", source="chroma:///x?collection=a", corpus_hash="c1", index_version="v", n_docs=10,
                         new_docs=10)
        led.add_snapshot("S-2", source="chroma:///x?collection=a", corpus_hash="c2", index_version="v", n_docs=12,
                         new_docs=2, parent="S-1")
        assert led.snapshot("S-2")["parent"] == "S-1" and led.snapshot("S-3") is None
        assert [s["snapshot_id"] for s in led.snapshots(source="chroma:///x?collection=a")] == ["S-2", "S-1"]
