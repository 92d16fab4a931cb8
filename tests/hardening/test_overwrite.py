"""Nothing lost (issue 14): no command writes over a dataset file, the ledger, or a file it did not
write (without --force); appends keep every record; writes are atomic."""
from __future__ import annotations

import json

import pytest

from hardening_helpers import one_line_error, sieve
from sieve.safe_io import UnsafeWriteError, atomic_write_text, check_output

TINY = ("--retriever", "tiny-hashing")


def _lines(p):
    return [json.loads(ln) for ln in p.read_text(encoding="utf-8").splitlines() if ln.strip()]


def test_attack_out_never_replaces_the_corpus(ds):
    before = (ds / "corpus.jsonl").read_bytes()
    for flags in ([], ["--force"]):
        err = one_line_error(sieve("attack", ds, "--attack", "pr_b", "--out", ds / "corpus.jsonl", "--limit", "1",
                                   "--no-progress", *flags))
        assert "corpus.jsonl" in err and "refusing" in err
    assert (ds / "corpus.jsonl").read_bytes() == before


def test_attack_out_replaces_only_its_own_family_file(ds, tmp_path):
    out = tmp_path / "mine.jsonl"
    res = sieve("attack", ds, "--attack", "pr_b", "--out", out, "--limit", "1", "--no-progress")
    assert res.exit_code == 0, res.output
    res = sieve("attack", ds, "--attack", "pr_b", "--out", out, "--limit", "2", "--no-progress")  # own file: ok
    assert res.exit_code == 0 and len(_lines(out)) == 2
    err = one_line_error(sieve("attack", ds, "--attack", "script", "--out", out, "--limit", "1", "--no-progress"))
    assert "--force" in err and len(_lines(out)) == 2   # another family's file is not replaced silently
    res = sieve("attack", ds, "--attack", "script", "--out", out, "--limit", "1", "--no-progress", "--force")
    assert res.exit_code == 0 and {r["attack"] for r in _lines(out)} == {"script"}


def test_append_with_limit_keeps_the_familys_other_targets(ds):
    path = ds / "attacks.jsonl"
    before = _lines(path)
    n_prb = sum(r["attack"] == "pr_b" for r in before)
    assert n_prb == 4 and len(before) == 8
    res = sieve("attack", ds, "--attack", "pr_b", "--append-to", path, "--limit", "1", "--no-progress")
    assert res.exit_code == 0, res.output
    after = _lines(path)
    assert len(after) == 8 and sum(r["attack"] == "pr_b" for r in after) == n_prb      # 4 lines stay 4
    assert [(r["attack"], r["query_id"]) for r in after] == [(r["attack"], r["query_id"]) for r in before]
    first_target = json.loads((ds / "targets.jsonl").read_text(encoding="utf-8").splitlines()[0])["query_id"]
    changed = [i for i, (a, b) in enumerate(zip(before, after)) if a != b]
    assert all((after[i]["attack"], after[i]["query_id"]) == ("pr_b", first_target) for i in changed)
    assert "replaced 1 earlier lines" in res.output and "kept 7 other lines" in res.output
    # a new family is appended after every existing line
    res = sieve("attack", ds, "--attack", "script", "--append-to", path, "--limit", "2", "--no-progress")
    assert res.exit_code == 0 and len(_lines(path)) == 10 and _lines(path)[:8] == after


def test_append_to_a_non_attacks_dataset_file_is_refused(ds):
    before = (ds / "queries.jsonl").read_bytes()
    one_line_error(sieve("attack", ds, "--attack", "pr_b", "--append-to", ds / "queries.jsonl", "--limit", "1",
                         "--no-progress"))
    assert (ds / "queries.jsonl").read_bytes() == before


def test_calibrate_out_guards(ds, tmp_path):
    before = (ds / "queries.jsonl").read_bytes()
    err = one_line_error(sieve("calibrate", ds, "--defense", "perplexity", "--out", ds / "queries.jsonl", *TINY))
    assert "queries.jsonl" in err
    assert (ds / "queries.jsonl").read_bytes() == before
    assert "is a directory" in one_line_error(sieve("calibrate", ds, "--defense", "perplexity", "--out", tmp_path, *TINY))
    foreign = tmp_path / "notes.yaml"
    foreign.write_text("shopping: [milk, eggs]\n", encoding="utf-8")
    assert "--force" in one_line_error(sieve("calibrate", ds, "--defense", "perplexity", "--out", foreign, *TINY))
    assert foreign.read_text(encoding="utf-8") == "shopping: [milk, eggs]\n"
    cal = tmp_path / "cal.yaml"
    assert sieve("calibrate", ds, "--defense", "perplexity", "--out", cal, *TINY).exit_code == 0
    assert sieve("calibrate", ds, "--defense", "rsq", "--out", cal, *TINY).exit_code == 0   # merged into its own file
    import yaml

    assert set(yaml.safe_load(cal.read_text(encoding="utf-8"))["defenses"]) == {"perplexity", "rsq"}


def test_report_html_guards(ds, tmp_path):
    run = tmp_path / "run"
    assert sieve("eval", ds, "--out", run, "-d", "none", "-a", "pr_b", "--limit", "1", "--no-progress",
                 *TINY).exit_code == 0
    before = (ds / "corpus.jsonl").read_bytes()
    cfg = json.loads((run / "config.json").read_text(encoding="utf-8"))
    assert cfg["dataset"]["path"] == str(ds.resolve())
    for target in (ds / "corpus.jsonl", run / "records.jsonl"):
        one_line_error(sieve("report", run, "--html", target, "--force"))
    assert (ds / "corpus.jsonl").read_bytes() == before
    assert "is a directory" in one_line_error(sieve("report", run, "--html", tmp_path))
    foreign = tmp_path / "page.html"
    foreign.write_text("<p>mine</p>", encoding="utf-8")
    one_line_error(sieve("report", run, "--html", foreign))
    assert foreign.read_text(encoding="utf-8") == "<p>mine</p>"
    assert sieve("report", run, "--html", foreign, "--force").exit_code == 0
    assert sieve("report", run, "--html", foreign).exit_code == 0          # now an earlier report: replaced


def test_eval_out_guards(ds, tmp_path):
    assert "is a file" in one_line_error(sieve("eval", ds, "--out", ds / "corpus.jsonl", "-d", "none", "--limit", "1",
                                               "--no-progress", *TINY))
    assert "dataset directory" in one_line_error(sieve("eval", ds, "--out", ds, "-d", "none", "--limit", "1",
                                                       "--no-progress", *TINY))
    other = tmp_path / "project"
    other.mkdir()
    (other / "config.json").write_text('{"my": "settings"}', encoding="utf-8")
    err = one_line_error(sieve("eval", ds, "--out", other, "-d", "none", "--limit", "1", "--no-progress", *TINY))
    assert "not written by `sieve eval`" in err
    assert (other / "config.json").read_text(encoding="utf-8") == '{"my": "settings"}'


def test_ledger_export_onto_itself_keeps_the_ledger(ds, tmp_path):
    from sieve.ledger import Flag, Ledger

    led = tmp_path / "ledger.sqlite"
    with Ledger(led) as ledger:
        (aid,) = ledger.add_flags([Flag("d1", "h1", 0.9, 0.5, reason="r")], detector="rsg")
        ledger.confirm(aid, "alice", "payload")
    for flags in ([], ["--force"]):
        err = one_line_error(sieve("ledger", "export", led, "--ledger", led, *flags))
        assert "refusing" in err
    with Ledger(led) as ledger:
        assert ledger.get(aid).state == "confirmed" and len(ledger.history(aid)) == 2
    err = one_line_error(sieve("ledger", "export", ds / "corpus.jsonl", "--ledger", led, "--force"))
    assert "never replaced" in err
    out = tmp_path / "missing" / "dir" / "alerts.csv"           # a missing directory is created
    assert sieve("ledger", "export", out, "--ledger", led).exit_code == 0
    assert sieve("ledger", "export", out, "--ledger", led).exit_code == 0   # an earlier export is replaced
    (tmp_path / "f").write_text("x", encoding="utf-8")
    assert "is a file" in one_line_error(sieve("ledger", "export", tmp_path / "f" / "a.csv", "--ledger", led))


def test_atomic_write_keeps_the_old_file_on_failure(tmp_path):
    p = tmp_path / "a.txt"
    atomic_write_text(p, "old")

    class Boom(Exception):
        pass

    from sieve.safe_io import atomic_open

    with pytest.raises(Boom):
        with atomic_open(p) as fh:
            fh.write("half of the new")
            raise Boom
    assert p.read_text() == "old" and [x.name for x in tmp_path.iterdir()] == ["a.txt"]


def test_check_output_rules(tmp_path):
    (tmp_path / "corpus.jsonl").write_text("{}\n")
    (tmp_path / "other.txt").write_text("x")
    with pytest.raises(UnsafeWriteError, match="never replaced"):
        check_output(tmp_path / "corpus.jsonl", force=True)
    with pytest.raises(UnsafeWriteError, match="--force"):
        check_output(tmp_path / "other.txt")
    assert check_output(tmp_path / "other.txt", force=True) == tmp_path / "other.txt"
    assert check_output(tmp_path / "other.txt", own=lambda p: p.read_text() == "x") == tmp_path / "other.txt"
    with pytest.raises(UnsafeWriteError, match="part of the dataset or ledger"):
        check_output(tmp_path / "x" / ".." / "other.txt", force=True, protected=[tmp_path / "other.txt"])
