"""The Attack lab's shipped answers (demo_data/answers/lab_answers.json, issue 11): questions the clean
pipeline answers correctly are checked and shown, class mode answers from the shipped file without
loading the generator, and the file is ignored (with the reason) for another corpus or model."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from _dashdata import page


def _tiny_shipped(ds_path: str, out: Path, replies_prefix: str = "SHIPPED") -> dict:
    """A shipped-answers file for the tiny dashboard dataset, made with the lab's own calls; every
    reply is marked so a test can tell a shipped answer from a generated one."""
    from sieve.dashboard import lab as L
    from sieve.dashboard import session as S
    from sieve.evaluation.answers import AnswerCache, Generator
    from sieve.models.tiny import ScriptedLLM

    ds = S.load_dataset(ds_path)
    res = S.make_resources(tiny=True, corpus_texts=[d.text for d in ds.documents])
    exp = S.make_experiment(ds, res)
    replies, questions = {}, {}
    for t in ds.targets:
        clean, _, results = L.class_mode_run(exp, t, L.dataset_poisons(ds, "pr_b", t, 5), 5)
        ctxs = L.answer_contexts(clean, results, 5)
        for name, texts in ctxs.items():
            # "clean index" answers say the gold answer; the undefended one the target answer
            text = (f"{replies_prefix} {t.target_answer}" if name == "poisoned, undefended"
                    else f"{replies_prefix} {t.correct_answers[0]}")
            gen = Generator(ScriptedLLM(lambda p, s, _x=text: _x, model_id="tiny-echo"), AnswerCache())
            replies[gen.answer(t.query, texts).prompt_hash] = text
        questions[t.query_id] = {"question": t.query, "correct_answers": list(t.correct_answers),
                                 "clean_answer": f"{replies_prefix} {t.correct_answers[0]}",
                                 "correct": t.query_id != "q-coffee", "class_mode_attack_succeeds": t.query_id == "q-chess"}
    body = {"format": 1, "corpus_sha256": ds.content_hash(), "retriever": res.config.models.retriever,
            "llm_local_model": L.expected_llm(res.config), "llm_model_id": "tiny-echo",
            "questions": questions, "replies": replies}
    L.write_shipped_answers(out, body)
    return body


@pytest.fixture
def shipped_file(dash_env, tmp_path, monkeypatch):
    from sieve.dashboard import lab as L

    out = tmp_path / "answers" / "lab_answers.json"
    _tiny_shipped(dash_env["SIEVE_DASHBOARD_DATASET"], out)
    monkeypatch.setattr(L, "SHIPPED_ANSWERS", out)
    monkeypatch.setenv("SIEVE_DASHBOARD_LEDGER", str(tmp_path / "ledger.sqlite"))
    return out


def test_load_checks_checksum_corpus_and_generator(shipped_file, dash_env):
    from sieve.config import SieveConfig
    from sieve.dashboard import lab as L
    from sieve.dashboard import session as S

    ds = S.load_dataset(dash_env["SIEVE_DASHBOARD_DATASET"])
    cfg = SieveConfig()
    ok = L.load_shipped_answers(ds, cfg, shipped_file)
    assert ok.usable and ok.model_id == "tiny-echo" and set(ok.questions) == {t.query_id for t in ds.targets}
    assert len(ok.replies) >= len(ds.targets) * 2
    # another generator: unusable, says why
    other = SieveConfig()
    other.llm.local_model = "smollm2-135m"
    r = L.load_shipped_answers(ds, other, shipped_file)
    assert not r.usable and "another generator" in r.reason and not r.replies and not r.questions
    # a damaged file: the checksum no longer matches
    doc = json.loads(shipped_file.read_text(encoding="utf-8"))
    doc["questions"]["q-coffee"]["correct"] = True
    bad = shipped_file.with_name("bad.json")
    bad.write_text(json.dumps(doc), encoding="utf-8")
    r = L.load_shipped_answers(ds, cfg, bad)
    assert not r.usable and "checksum" in r.reason
    # another corpus
    body = {k: v for k, v in json.loads(shipped_file.read_text(encoding="utf-8")).items() if k != "sha256"}
    body["corpus_sha256"] = "0" * 64
    L.write_shipped_answers(bad, body)
    r = L.load_shipped_answers(ds, cfg, bad)
    assert not r.usable and "another corpus" in r.reason
    # a question whose text changed is not vouched for
    body["corpus_sha256"] = ds.content_hash()
    body["questions"]["q-chess"]["question"] = "Which piece moves diagonally?"
    L.write_shipped_answers(bad, body)
    r = L.load_shipped_answers(ds, cfg, bad)
    assert r.usable and "q-chess" not in r.questions and "q-whales" in r.questions


def test_lazy_generator_is_loaded_only_for_a_new_context(shipped_file, dash_env):
    from sieve.config import SieveConfig
    from sieve.dashboard import explorer as E
    from sieve.dashboard import lab as L
    from sieve.dashboard import session as S
    from sieve.models.errors import LLMError

    ds = S.load_dataset(dash_env["SIEVE_DASHBOARD_DATASET"])
    shipped = L.load_shipped_answers(ds, SieveConfig(), shipped_file)
    res = S.make_resources(tiny=True, corpus_texts=[d.text for d in ds.documents])
    exp = S.make_experiment(ds, res)
    t = ds.targets_by_query["q-chess"]
    clean, _, results = L.class_mode_run(exp, t, L.dataset_poisons(ds, "pr_b", t, 5), 5)
    ctxs = L.answer_contexts(clean, results, 5)
    n_calls = len(res.llm.calls)
    out = E.generate_answers(res, t.query, ctxs, shipped=shipped)
    assert all(a.startswith("SHIPPED") for a in out.values()) and len(res.llm.calls) == n_calls
    assert out["poisoned, undefended"] == f"SHIPPED {t.target_answer}"
    # a context nobody answered: the generator runs (the tiny reader echoes the first passage)
    out = E.generate_answers(res, t.query, {"mine": ["The knight moves in an L shape."]}, shipped=shipped)
    assert out["mine"] == "The knight moves in an L shape." and len(res.llm.calls) == n_calls + 1
    # the loaded generator is not the one the answers were shipped for: an error, not a wrong answer
    wrong = L.ShippedAnswers("local:other", shipped.replies, shipped.questions, True)
    with pytest.raises(LLMError, match="shipped answers are for local:other"):
        E.generate_answers(res, t.query, {"x": ["Another context."]}, shipped=wrong)


def test_lab_picker_and_class_mode_use_shipped_answers(shipped_file):
    at = AppTest.from_file(page("5_attack-lab.py"), default_timeout=180).run()
    assert not at.exception and not at.error, [e.value for e in at.exception]
    only = at.toggle(key="lab_only_good")
    assert only.value and "2 of 3 checked correct" in only.label
    labels = at.selectbox(key="lab_target").options
    assert len(labels) == 2 and all(lab.endswith("✓ clean answer correct") for lab in labels)
    assert not any("coffee" in lab.lower() for lab in labels), "the wrongly answered question is hidden"
    at.toggle(key="lab_class").set_value(True).run()
    assert not at.exception and not at.error
    # class mode lists the question whose attack flips first, and says so
    assert at.selectbox(key="lab_target_class").value == "q-chess"
    assert any("flips to the target" in c.value for c in at.caption)
    at.button(key="lab_answers").click().run()
    assert not at.exception and not at.error
    shown = [t.value for t in at.text if t.value.startswith("SHIPPED")]
    assert shown == ["SHIPPED knight", "SHIPPED bishop", "SHIPPED knight"], shown
    verdicts = [c.value for c in at.caption if c.value in ("correct", "neither correct nor the target")
                or c.value.startswith("attack succeeded")]
    assert verdicts == ["correct", "attack succeeded (asserts the target answer)", "correct"]


def test_lab_without_usable_shipped_answers_says_why(dash_env, tmp_path, monkeypatch):
    from sieve.dashboard import lab as L

    monkeypatch.setattr(L, "SHIPPED_ANSWERS", tmp_path / "none" / "lab_answers.json")
    at = AppTest.from_file(page("5_attack-lab.py"), default_timeout=180).run()
    assert not at.exception and not at.error
    assert any("Shipped answers not used: no shipped answers" in c.value for c in at.caption)


# ---- the demo's shipped file ---------------------------------------------------------------------
def test_demo_shipped_answers_match_the_demo_and_verify_at_least_24_questions():
    from sieve.config import SieveConfig
    from sieve.dashboard import lab as L
    from sieve.dashboard import session as S
    from sieve.evaluation.metrics import clean_correct

    ds = S.load_dataset(S.DEMO_DIR)
    shipped = L.load_shipped_answers(ds, SieveConfig())
    assert shipped.usable, shipped.reason + " — rebuild: nice -n 10 .venv/bin/python scripts/build_lab_answers.py"
    assert set(shipped.questions) == {t.query_id for t in ds.targets}
    good = [q for q in shipped.questions.values() if q["correct"]]
    assert len(good) >= 24
    for qid, q in shipped.questions.items():      # the stored verdict is the §9.1 rule on the stored answer
        assert q["correct"] == clean_correct(q["clean_answer"], ds.targets_by_query[qid].correct_answers), qid
    assert any(q["class_mode_attack_succeeds"] for q in good), "at least one verified question flips in class mode"


@pytest.mark.realmodel
def test_demo_class_mode_contexts_are_all_shipped(real_config):
    """With the real retriever, the class-mode contexts of demo questions hash to shipped replies:
    the lab answers them without loading the generator (class mode needs no other model)."""
    from sieve.dashboard import lab as L
    from sieve.dashboard import session as S
    from sieve.evaluation.answers import AnswerCache, Generator
    from sieve.resources import Resources

    real_resources = Resources(real_config)   # lazy roles, as the dashboard has them: the shipped demo vectors are reused

    ds = S.load_dataset(S.DEMO_DIR)
    shipped = L.load_shipped_answers(ds, real_resources.config)
    assert shipped.usable, shipped.reason
    exp = S.make_experiment(ds, real_resources, quarantine="none")

    class NoModel:
        @property
        def llm(self):
            raise AssertionError("the generator was loaded: a class-mode context is not shipped")

    for t in ds.targets[:2]:
        clean, _, results = L.class_mode_run(exp, t, L.dataset_poisons(ds, "pr_b", t, 5), 5, S.run_calibration())
        gen = Generator(L.LazyLLM(NoModel(), shipped.model_id), L.ShippedFirstCache(AnswerCache(), shipped))
        answers = {n: gen.answer(t.query, texts).text for n, texts in L.answer_contexts(clean, results, 5).items()}
        assert gen.calls == 0
        assert answers["clean index"] == shipped.questions[t.query_id]["clean_answer"]
