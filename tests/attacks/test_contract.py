"""One contract test over every registered attack (garak discipline): schema, determinism,
unique ids, poison flags, metadata, injection volume, JSON round trip through sieve.corpus."""
from __future__ import annotations

import json

import pytest

from sieve.attacks import AttackError, generate_attack, write_attacks
from sieve.registry import ATTACKS

ALL = ATTACKS.names()
CONTRACT_NAMES = ["pr_b", "pr_w", "paraphrase", "diverse", "payload_only", "script", "forced_top",
                  "single_trigger", "single_fluent", "near_duplicate", "judge_aware"]
#: Families whose poison j is not payload j verbatim (docs/algorithms.md §7.6, §7.7).
REORDERED = {"single_fluent"}     # poison j = the payload of retriever-similarity rank j
NOT_PAYLOAD = {"near_duplicate"}  # poison = an edited gold passage, not a payload
WHITE_BOX = {"pr_w", "judge_aware"}


@pytest.fixture
def params_for(attack_dataset):
    def params(name: str) -> dict:
        if name == "pr_w":
            return {"iterations": 3, "candidates": 8}
        if name == "judge_aware":
            return {"iterations": 2, "candidates": 4, "data": str(attack_dataset)}
        if name == "near_duplicate":
            return {"data": str(attack_dataset)}
        if name == "paraphrase":
            return {"cache_path": ""}
        return {}
    return params


@pytest.fixture
def resources_for(tiny_resources, whitebox_resources):
    return lambda name: whitebox_resources if name in WHITE_BOX else tiny_resources


def test_registry_names_are_the_contract():
    assert sorted(ALL) == sorted(CONTRACT_NAMES)
    for e in ATTACKS.entries():
        assert e.summary and e.paper, e.name
        assert set(e.needs) <= {"retriever", "judge", "causal_lm", "token_encoder", "llm"}, e.name


@pytest.mark.parametrize("name", ALL)
def test_unknown_parameters_are_rejected_by_name(name):
    attack = ATTACKS.create(name)
    with pytest.raises(ValueError, match=rf"^{name}: unknown parameter 'bogus'; valid parameters: "):
        attack.set_params(bogus=1)
    with pytest.raises(ValueError, match=rf"^{name}: unknown parameter 'bogus'"):
        ATTACKS.create(name, bogus=1)
    assert attack.get_params() == {k: getattr(attack, k) for k in type(attack).param_names()}


@pytest.mark.parametrize("name", ALL)
def test_output_schema_and_determinism(name, targets, resources_for, params_for):
    res = resources_for(name)
    out = generate_attack(name, targets, res, seed=3, volume=5, **params_for(name))
    again = generate_attack(name, targets, res, seed=3, volume=5, **params_for(name))
    assert out.attack == name and not out.skipped
    assert [r.query_id for r in out.records] == ["q1", "q2"]
    ids = [d.id for d in out.documents]
    assert len(ids) == len(set(ids)) == 10
    for rec, tgt in zip(out.records, targets):
        assert rec.attack == name and rec.query == tgt.query and rec.target_answer == tgt.target_answer
        assert rec.correct_answers == tgt.correct_answers
        for j, d in enumerate(rec.documents):
            assert d.id == f"attack:{name}:{tgt.query_id}:{j}"
            assert d.poison is True and d.title == ""
            assert d.metadata["query_id"] == tgt.query_id
            assert d.metadata["attack"] == name
            assert d.metadata["target_answer"] == tgt.target_answer
            p = d.metadata["payload_index"]
            assert p == j or (name in REORDERED and d.metadata["similarity_rank"] == j)
            assert d.metadata["voice"] == tgt.voices[p]
            if name not in NOT_PAYLOAD:
                assert tgt.payloads[p] in d.text       # the payload is never altered
        assert sorted(d.metadata["payload_index"] for d in rec.documents) == list(range(5))
    assert [d.text for d in out.documents] == [d.text for d in again.documents]


@pytest.mark.parametrize("name", ALL)
@pytest.mark.parametrize("volume", [1, 12])
def test_injection_volume(name, volume, targets, resources_for, params_for):
    out = generate_attack(name, targets[:1], resources_for(name), seed=0, volume=volume, **params_for(name))
    docs = out.records[0].documents
    assert len(docs) == volume and len({d.id for d in docs}) == volume
    slot = "similarity_rank" if name in REORDERED else "payload_index"
    assert [d.metadata[slot] for d in docs] == [j % 5 for j in range(volume)]
    if volume == 12:   # beyond 5: the same passages repeated with distinct ids
        assert docs[5].text == docs[0].text and docs[11].text == docs[1].text


@pytest.mark.parametrize("name", ALL)
def test_attacks_jsonl_round_trip(name, targets, resources_for, params_for, tmp_path):
    from sieve.corpus import load_attacks

    out = generate_attack(name, targets, resources_for(name), seed=0, volume=2, **params_for(name))
    path = tmp_path / "attacks.jsonl"
    assert write_attacks(path, out.records) == 2
    back = load_attacks(path)
    assert [d.id for r in back for d in r.documents] == [d.id for d in out.documents]
    assert [d.text for r in back for d in r.documents] == [d.text for d in out.documents]
    assert all(d.poison for r in back for d in r.documents)
    line = json.loads(path.read_text(encoding="utf-8").splitlines()[0])
    assert set(line) >= {"query_id", "query", "correct_answers", "target_answer", "attack", "documents"}


@pytest.mark.parametrize("volume", [0, 21, -1, 2.5, True])
def test_volume_out_of_range_is_an_error(volume, targets, tiny_resources):
    with pytest.raises(AttackError, match="1..20"):
        generate_attack("pr_b", targets, tiny_resources, volume=volume)


def test_unknown_attack_lists_names():
    with pytest.raises(KeyError) as e:
        ATTACKS.create("pr_x")
    assert "pr_b" in str(e.value) and "forced_top" in str(e.value)


def test_bad_targets_are_skipped_with_reasons(targets, tiny_resources):
    from sieve.types import Target

    bad = [
        Target("q3", "who painted the mona lisa", ("Leonardo",), "Michelangelo", ()),
        Target("q4", "who painted the mona lisa", ("Leonardo",), "Michelangelo", ("ok payload", "  ")),
        Target("q5", "   ", ("x",), "y", ("p",)),
    ]
    out = generate_attack("pr_b", targets + bad, tiny_resources)
    assert [r.query_id for r in out.records] == ["q1", "q2"]
    reasons = dict(out.skipped)
    assert reasons["q3"] == "target has no payloads"
    assert reasons["q4"] == "target has empty payload(s) at index [1]"
    assert reasons["q5"] == "target has an empty query"
    assert out.stats["skipped"] == 3 and out.stats["generated"] == 2


# ---- the `sieve attack` command ------------------------------------------------------------------
def _dataset(tmp_path, targets):
    d = tmp_path / "ds"
    d.mkdir()
    (d / "corpus.jsonl").write_text(json.dumps({"id": "c1", "text": "Jane Austen wrote Pride and Prejudice."}) + "\n")
    (d / "queries.jsonl").write_text("".join(json.dumps({"id": t.query_id, "text": t.query}) + "\n" for t in targets))
    (d / "targets.jsonl").write_text("".join(json.dumps({
        "query_id": t.query_id, "query": t.query, "correct_answers": list(t.correct_answers),
        "target_answer": t.target_answer, "payloads": list(t.payloads), "voices": list(t.voices)}) + "\n"
        for t in targets))
    return d


def _run(*args):
    from typer.testing import CliRunner

    from sieve.cli import app

    return CliRunner().invoke(app, ["attack", *map(str, args)])


def test_cli_writes_and_merges_families(tmp_path, targets):
    from sieve.corpus import load_dataset

    d = _dataset(tmp_path, targets)
    att = d / "attacks.jsonl"
    r = _run(d, "--attack", "pr_b", "--append-to", att, "--no-progress")
    assert r.exit_code == 0, r.output
    r = _run(d, "--attack", "diverse", "--append-to", att, "--volume", "2", "--no-progress", "--out", tmp_path / "x.jsonl")
    assert r.exit_code == 0, r.output
    r = _run(d, "--attack", "pr_b", "--append-to", att, "--volume", "3", "--limit", "1", "--no-progress")
    assert r.exit_code == 0, r.output
    ds = load_dataset(d)                                            # the merged file is a valid dataset
    assert ds.attack_families() == ["pr_b", "diverse"]
    # --limit 1 replaces only the first pr_b target in place; its other target and diverse are kept (issue 14)
    assert [(r.attack, len(r.documents)) for r in ds.attacks] == [("pr_b", 3), ("pr_b", 5), ("diverse", 2), ("diverse", 2)]
    assert len((tmp_path / "x.jsonl").read_text().splitlines()) == 2


def test_cli_bad_input_is_one_clear_line(tmp_path, targets):
    d = _dataset(tmp_path, targets)
    r = _run(d, "--attack", "pr_x", "--out", tmp_path / "a.jsonl")
    assert r.exit_code == 2 and "unknown attack 'pr_x'" in r.output and "pr_w" in r.output
    r = _run(d, "--attack", "pr_b", "--out", tmp_path / "a.jsonl", "--volume", "21")
    assert r.exit_code == 2 and "1..20" in r.output and "Traceback" not in r.output
    r = _run(d, "--attack", "pr_b")
    assert r.exit_code == 2 and "--out" in r.output
    r = _run(d, "--attack", "pr_b", "--out", tmp_path / "a.jsonl", "--iterations", "3")
    assert r.exit_code == 2 and "pr_w only" in r.output
    (d / "targets.jsonl").write_text('{"query_id": "q1", "query": "x"}\n')
    r = _run(d, "--attack", "pr_b", "--out", tmp_path / "a.jsonl")
    assert r.exit_code == 2 and "targets.jsonl" in r.output and "Traceback" not in r.output
    assert not (tmp_path / "a.jsonl").exists()
