"""AppTest for every dashboard page (tiny in-process models via SIEVE_DASHBOARD_TINY), plus one
page on the real demo with the real packaged models."""
from __future__ import annotations

import pytest
from streamlit.testing.v1 import AppTest

from _dashdata import INJECTION, ROOT, page
from sieve.dashboard.safe import md_escape

TIMEOUT = 180


def run_page(name: str) -> AppTest:
    at = AppTest.from_file(page(name), default_timeout=TIMEOUT).run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def texts(at: AppTest) -> list[str]:
    return [t.value for t in at.text]


def no_error(at: AppTest) -> None:
    assert not at.exception, [e.value for e in at.exception]
    assert not at.error, [e.value for e in at.error]


@pytest.mark.parametrize("name", ["0_overview.py", "1_corpus.py", "2_explorer.py", "3_geometry.py", "4_tradeoffs.py",
                                  "5_attack-lab.py", "6_alerts.py"])
def test_every_page_renders(dash_env, name):
    at = run_page(name)
    no_error(at)
    assert at.title, "every page has a title"


def test_app_router_renders_default_page(dash_env):
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=TIMEOUT).run()
    no_error(at)
    assert any("Sieve" in t.value for t in at.title)


def test_overview_shows_run_table(dash_env):
    at = run_page("0_overview.py")
    assert [m.value for m in at.metric][:2] == ["30", "3"]          # 30 documents, 3 questions
    df = at.dataframe[0].value
    assert set(df["defense"]) == {"tris", "rsq"} and "pr_b" in set(df["attack"])


def test_corpus_page_widgets_audit_and_bad_path(dash_env, tmp_path, monkeypatch):
    import os

    monkeypatch.setenv("SIEVE_DASHBOARD_ROOTS", os.pathsep.join([dash_env["SIEVE_DASHBOARD_DATASET"], str(tmp_path)]))
    at = run_page("1_corpus.py")
    assert at.radio(key="corpus_source").options[1] == "Dataset directory or file path"
    assert at.selectbox(key="audit_condition").options == ["clean", "pr_b"]
    at.selectbox(key="audit_condition").set_value("pr_b").run()
    no_error(at)
    assert any(m.label == "poisons flagged" for m in at.metric)
    # a missing path and paths outside the allowed folders get the same message (nothing about existence)
    at.radio(key="corpus_source").set_value("Dataset directory or file path").run()
    messages = []
    for bad_path in (str(tmp_path / "nope"), "/etc", str(tmp_path / ".." / ".."), "/nonexistent/x"):
        at.text_input(key="path_input").set_value(bad_path).run()
        at.button(key="load_path").click().run()
        assert not at.exception
        errs = [e.value for e in at.error]
        assert len(errs) == 1 and "no dataset the dashboard may open there" in errs[0]
        messages.append(errs[0].replace(md_escape(bad_path), "<path>"))
    assert len(set(messages)) == 1, messages
    # a malformed corpus inside an allowed folder: file / line / field are listed
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "corpus.jsonl").write_text('{"id": "a", "text": "ok"}\n{"id": "b"}\n', encoding="utf-8")
    at.text_input(key="path_input").set_value(str(bad)).run()
    at.button(key="load_path").click().run()
    assert not at.exception
    problems = next(d.value for d in at.dataframe if "problem" in d.value.columns)
    assert list(problems["line"]) == [2] and list(problems["field"]) == ["text"]


def test_upload_is_loaded_and_its_temp_dir_removed(dash_env, tmp_path):
    from sieve.dashboard.session import dataset_from_upload

    before = set(tmp_path.iterdir())
    ds = dataset_from_upload("my corpus.jsonl", b'{"id": "a", "text": "alpha"}\n{"id": "b", "text": "beta"}\n',
                             directory=tmp_path)
    assert [d.id for d in ds.documents] == ["a", "b"]
    assert set(tmp_path.iterdir()) == before, "the upload's temporary directory is removed"


def test_dataset_roots_resolve_symlinks(dash_env, tmp_path, monkeypatch):
    from sieve.dashboard.session import allowed_path

    root = tmp_path / "root"
    root.mkdir()
    (root / "ok").mkdir()
    (root / "escape").symlink_to("/etc")
    monkeypatch.setenv("SIEVE_DASHBOARD_ROOTS", str(root))
    assert allowed_path(root / "ok") == (root / "ok").resolve()
    assert allowed_path(root / "escape") is None
    assert allowed_path(root / "ok" / ".." / ".." ) is None
    assert allowed_path(root / "missing") is None


def _explorer_on_injection(at: AppTest) -> AppTest:
    at.selectbox(key="x_condition").set_value("pr_b").run()
    labels = at.selectbox(key="q_pick").options
    coffee = next(i for i, lab in enumerate(labels) if "q-coffee" in lab)
    at.selectbox(key="q_pick").set_value(coffee).run()
    no_error(at)
    doc_opts = at.selectbox(key="x_doc_pr_b_q-coffee").options
    inj = next(i for i, lab in enumerate(doc_opts) if "attack:pr_b:q-coffee:0" in lab)
    at.selectbox(key="x_doc_pr_b_q-coffee").set_value(inj).run()
    no_error(at)
    return at


def test_explorer_ranked_list_decisions_and_margins(dash_env):
    at = run_page("2_explorer.py")
    at = _explorer_on_injection(at)
    from sieve.dashboard.tables import as_missing

    table = as_missing(at.dataframe[0].value)   # a missing number is stored as tables.MISSING (shown blank)
    assert len(table) == 20 and list(table["rank"]) == list(range(1, 21))
    for name in ("tris", "rsq", "rsg_rsq"):
        assert name in table.columns and f"{name} margin" in table.columns
    # RSQ scores ranks 1-5 only: margins exist there and are S − η_Q
    assert table["rsq margin"].iloc[:5].notna().all() and table["rsq margin"].iloc[5:].isna().all()
    assert set(table["rsq"].iloc[5:]) == {"not examined"}
    assert (table["poison"] == "yes").sum() >= 3


def test_explorer_renders_injection_text_literally(dash_env):
    at = _explorer_on_injection(run_page("2_explorer.py"))
    assert INJECTION in " ".join(texts(at)), "the poison text must appear verbatim in an st.text element"
    for md in at.markdown:
        assert "<img" not in md.value and "<script" not in md.value and "![x]" not in md.value
    for el in at.get("html"):
        body = el.proto.body
        assert "<img" not in body and "<script" not in body


def test_explorer_generate_answers_side_by_side(dash_env):
    at = _explorer_on_injection(run_page("2_explorer.py"))
    at.button(key="x_generate").click().run()
    no_error(at)
    verdicts = [c.value for c in at.caption if c.value in ("correct", "neither correct nor the target")
                or c.value.startswith("attack succeeded")]
    # undefended, fusion, tris, rsq, rsg_rsq in that order: the tiny generator repeats the top context, which
    # is the poison without a defense and a clean coffee passage once the defenses removed the poisons
    assert len(verdicts) == 5
    assert verdicts[0] == "attack succeeded (asserts the target answer)"
    assert verdicts[2:] == ["correct", "correct", "correct"]


def test_explorer_and_lab_default_to_fusion_and_the_papers_methods(dash_env):
    """Issue 24 item 2: Sieve's recommended detector first, then TRIS, RSQ and RSG→RSQ."""
    at = run_page("2_explorer.py")
    assert at.multiselect(key="x_defenses").value == ["fusion", "tris", "rsq", "rsg_rsq"]
    from sieve.dashboard.session import DEFAULT_DEFENSES, LIVE_DEFENSES

    assert DEFAULT_DEFENSES[0] == "fusion" and "fusion" in LIVE_DEFENSES


def test_tradeoffs_threshold_moves_metric(dash_env):
    at = run_page("4_tradeoffs.py")
    at.selectbox(key="t_def").set_value("rsq").run()
    before = {m.label.split(" · ")[0]: m.value for m in at.metric}
    slider = at.slider(key="t_rsq:threshold")
    slider.set_value(slider.min).run()       # η_Q at the smallest recorded score: everything scored is removed
    no_error(at)
    after = {m.label.split(" · ")[0]: m.value for m in at.metric}
    assert after["clean removal"] != before["clean removal"]
    assert float(after["clean removal"]) == 1.0


def test_tradeoffs_n_beside_every_metric_no_delta_when_too_few_and_reset(dash_env):
    """Issue 24 item 4: n next to each metric; with n < 5 (the tiny run has 1–3 queries per condition)
    a change shows no delta and the page says why; the reset button restores the run's thresholds."""
    at = run_page("4_tradeoffs.py")
    at.selectbox(key="t_def").set_value("rsq").run()
    assert all(" · n " in m.label and "= " in m.label for m in at.metric), [m.label for m in at.metric]
    expanders = [e for e in at.expander if e.label in ("tris", "rsq")]
    assert expanders and expanders[0].proto.expanded, "the first defense with thresholds is open"
    slider = at.slider(key="t_rsq:threshold")
    recorded = slider.value
    slider.set_value(slider.min).run()
    no_error(at)
    assert all(m.proto.delta == "" for m in at.metric), "no delta from a handful of queries"
    assert any("too few to say whether it moved" in c.value for c in at.caption)
    at.button(key="t_reset").click().run()
    no_error(at)
    assert at.slider(key="t_rsq:threshold").value == recorded
    assert not any("too few to say whether it moved" in c.value for c in at.caption)


def test_tradeoffs_plot_explains_a_k_ctx_change(dash_env):
    at = run_page("4_tradeoffs.py")
    at.slider(key="t_kctx").set_value(3).run()
    no_error(at)
    import json

    figs = [json.loads(c.proto.spec) for c in at.get("plotly_chart")]
    fig = next(f for f in figs if "Attack success vs. utility" in json.dumps(f["layout"].get("title", "")))
    notes = [a["text"] for a in fig["layout"].get("annotations", [])]
    assert any("k_ctx 3" in t and "not ASR" in t for t in notes), notes
    assert fig["layout"]["xaxis"]["range"] == [-0.02, 1.05] and fig["layout"]["yaxis"]["range"] == [-0.02, 1.05]


def test_geometry_page_neighbourhood(dash_env):
    at = run_page("3_geometry.py")
    no_error(at)
    assert at.radio(key="g_method").value == "PCA"
    labels = [m.label for m in at.metric]
    assert "D (density contrast)" in labels and "floor b_i" in labels


def test_attack_lab_generates_into_sandbox(dash_env):
    from sieve.dashboard.session import default_dataset_path

    before = (default_dataset_path() / "corpus.jsonl").read_bytes()
    at = run_page("5_attack-lab.py")
    at.selectbox(key="lab_family").set_value("pr_b").run()
    at.slider(key="lab_volume").set_value(3).run()
    at.button(key="lab_generate").click().run()
    no_error(at)
    poisons = at.dataframe[0].value
    assert len(poisons) == 3 and all(i.startswith("lab:attack:pr_b:") for i in poisons["id"])
    responses = at.dataframe[1].value
    assert "undefended" in set(responses["defense"])
    at.button(key="lab_answers").click().run()
    no_error(at)
    assert (default_dataset_path() / "corpus.jsonl").read_bytes() == before   # demo files untouched


def test_alerts_triage_flow(dash_env):
    at = run_page("6_alerts.py")
    at.selectbox(key="al_cond").set_value("pr_b").run()
    at.button(key="al_audit").click().run()
    no_error(at)
    assert len(at.dataframe[0].value) >= 1
    aid = at.dataframe[0].value["alert"][0]
    at.text_input(key=f"al_why_{aid}").set_value("coordinated poison").run()
    at.button(key="al_do_confirmed").click().run()
    no_error(at)
    from sieve.ledger import Ledger

    with Ledger(dash_env["SIEVE_DASHBOARD_LEDGER"]) as led:
        confirmed = led.alerts(state="confirmed")
        assert confirmed and led.history(confirmed[0].alert_id)[-1].why == "coordinated poison"
    assert at.get("download_button"), "CSV export button"


@pytest.mark.realmodel
def test_explorer_on_real_demo_with_real_models(monkeypatch):
    """The real demo dataset and the packaged models (loaded once; several seconds)."""
    from sieve.dashboard.session import DEMO_DIR

    if not (DEMO_DIR / "corpus.jsonl").exists():
        pytest.skip("demo_data/corpus.jsonl not built")
    for k in ("SIEVE_DASHBOARD_TINY", "SIEVE_DASHBOARD_DATASET", "SIEVE_DASHBOARD_RUN", "SIEVE_DASHBOARD_LEDGER"):
        monkeypatch.delenv(k, raising=False)
    at = AppTest.from_file(page("2_explorer.py"), default_timeout=600).run()
    no_error(at)
    from sieve.dashboard.tables import as_missing

    table = as_missing(at.dataframe[0].value)
    assert len(table) == 20 and "rsq margin" in table.columns
    assert table["rsq margin"].iloc[:5].notna().all()
