"""A bench's result files (sieve/bench/outputs.py): claimed before the run, never written over a file the
bench did not write, a dataset file refused even with --force, one-line errors with exit code 2."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from sieve.bench import fusion_bench, suite_bench
from sieve.bench.outputs import claim_outputs, mentions, write_outputs


def test_a_missing_file_is_claimed_and_its_directory_made(tmp_path):
    target = tmp_path / "new" / "suite.md"
    assert claim_outputs([target], mentions("sieve bench suite")) == [target]
    assert target.parent.is_dir() and not target.exists()


def test_a_file_the_bench_wrote_is_replaced_and_a_users_file_is_not(tmp_path, capsys):
    ours, theirs = tmp_path / "suite.md", tmp_path / "notes.md"
    ours.write_text("Regenerate: `sieve bench suite -- --limit 2`\n\nold table\n", encoding="utf-8")
    theirs.write_text("my notes on the suite\n", encoding="utf-8")
    claim_outputs([ours], mentions("sieve bench suite"))
    write_outputs({ours: "Regenerate: `sieve bench suite --`\n\nnew table\n"})
    assert "new table" in ours.read_text(encoding="utf-8")
    with pytest.raises(SystemExit) as e:
        claim_outputs([ours, theirs], mentions("sieve bench suite"))
    assert e.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and str(theirs) in err and "--force" in err
    assert theirs.read_text(encoding="utf-8") == "my notes on the suite\n"
    # --force replaces it
    assert claim_outputs([theirs], mentions("sieve bench suite"), force=True) == [theirs]


def test_the_bench_name_must_be_near_the_top(tmp_path):
    late = tmp_path / "suite.md"
    late.write_text("x" * 5000 + "sieve bench suite", encoding="utf-8")
    assert not mentions("sieve bench suite")(late)
    assert not mentions("sieve bench suite")(tmp_path / "missing.md")


def test_a_dataset_file_is_refused_even_with_force(tmp_path, capsys):
    (tmp_path / "corpus.jsonl").write_text('{"id": "d1", "text": "sieve bench suite"}\n', encoding="utf-8")
    with pytest.raises(SystemExit) as e:
        claim_outputs([tmp_path / "corpus.jsonl"], mentions("sieve bench suite"), force=True)
    assert e.value.code == 2 and "dataset" in capsys.readouterr().err
    assert "sieve bench suite" in (tmp_path / "corpus.jsonl").read_text(encoding="utf-8")


@pytest.mark.parametrize("bench, argv, names", [
    (suite_bench, ["--datasets", "demo", "--fusion-configs", ""], ("suite.json", "suite.md")),
    (fusion_bench, ["--latency-only"], ("fusion_bench.json", "fusion_bench.md")),
])
def test_the_benches_refuse_before_any_work(tmp_path, monkeypatch, capsys, bench, argv, names):
    """The refusal comes right after the arguments are read: no dataset is built, no model loaded."""
    users = tmp_path / names[1]
    users.write_text("the user's own file\n", encoding="utf-8")
    monkeypatch.setattr(sys, "argv", ["bench", *argv, "--out", str(tmp_path)])
    monkeypatch.setattr("sieve.bench.suite_bench.SieveConfig.load",
                        lambda *a, **k: pytest.fail("the run started before its outputs were checked"))
    monkeypatch.setattr("sieve.bench.fusion_bench.load_dataset",
                        lambda *a, **k: pytest.fail("the run started before its outputs were checked"))
    with pytest.raises(SystemExit) as e:
        bench.main()
    assert e.value.code == 2
    assert str(users) in capsys.readouterr().err
    assert users.read_text(encoding="utf-8") == "the user's own file\n"
    assert not (tmp_path / names[0]).exists()


def test_scale_bench_refuses_a_foreign_json_and_replaces_its_own(tmp_path):
    foreign, own = tmp_path / "results.json", tmp_path / "scale.json"
    foreign.write_text(json.dumps({"mine": True}), encoding="utf-8")
    own.write_text(json.dumps([{"mode": "exact", "docs_per_s": 1.0}], indent=1), encoding="utf-8")
    argv = [sys.executable, "-m", "sieve.bench.scale_bench", "--sizes", "", "--workdir", str(tmp_path / "w")]
    r = subprocess.run([*argv, "--json", str(foreign)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "Traceback" not in r.stderr and str(foreign) in r.stderr
    assert json.loads(foreign.read_text(encoding="utf-8")) == {"mine": True}
    r = subprocess.run([*argv, "--json", str(own)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    assert json.loads(own.read_text(encoding="utf-8")) == []   # no sizes: an empty result list, written
