"""AppTest and unit checks of issue 24's remaining view items (tiny models, tiny dataset):

* item 5: Geometry marks quarantined (open / confirmed) and restored documents as the explorer does;
* item 6: no raw None / NaN drawn in the explorer's tables, the Decisions tab, the Overview run table,
  the Corpus audit table or Geometry's neighbour table;
* item 2: a TRIS result whose Layer 1 removed passages says so beside it, with the shipped run's number;
* item 10: audit-column help, whole-word anchors without function words, plots that name their
  document, the surprisal shading explained, the sidebar not one step behind, the fusion L2 help,
  no "Record these flags" with 0 flags;
* item 9: an uploaded corpus: typed queries only, a defense that cannot run says why in a visible
  error with the controls that fix it, answers without a gold answer are not called wrong.
"""
from __future__ import annotations

import json

import pytest
from streamlit.testing.v1 import AppTest

from _dashdata import ROOT, page, raw_missing_cells

TIMEOUT = 240


def no_error(at: AppTest) -> None:
    assert not at.exception, [e.value for e in at.exception]
    assert not at.error, [e.value for e in at.error]


def _figures(at: AppTest) -> list[dict]:
    return [json.loads(c.proto.spec) for c in at.get("plotly_chart")]


def _explorer(query_id: str = "q-coffee", cond: str = "pr_b") -> AppTest:
    at = AppTest.from_file(page("2_explorer.py"), default_timeout=TIMEOUT).run()
    at.selectbox(key="x_condition").set_value(cond).run()
    pick = at.selectbox(key="q_pick")
    pick.set_value(next(i for i, lab in enumerate(pick.options) if query_id in lab)).run()
    no_error(at)
    return at


def _doc_picker(at: AppTest):
    return next(s for s in at.selectbox if (s.key or "").startswith("x_doc_"))


# ---- item 6: tables ------------------------------------------------------------------------------
def test_tables_shown_keeps_numbers_and_draws_no_none():
    import numpy as np
    import pandas as pd

    from sieve.dashboard import tables as T

    df = pd.DataFrame({"id": ["a", "b", "c"], "margin": [0.5, None, -2.25], "layer": ["L1", None, "RSQ"],
                       "n": [1, 2, 3], "score": [np.inf, 1.0, np.nan]})
    sty = T.shown(df, "")
    data = sty.data
    assert data["margin"].dtype.kind == "f" and data["n"].dtype.kind == "i", "numbers stay numbers (sortable)"
    assert data.loc[1, "margin"] == T.MISSING and data.loc[1, "layer"] == ""
    back = T.as_missing(data)
    assert np.isnan(back.loc[1, "margin"]) and back.loc[0, "margin"] == 0.5 and np.isnan(back.loc[2, "score"])
    html = sty.to_html()
    assert "None" not in html and "nan" not in html and str(T.MISSING) not in html and "9e+15" not in html
    assert "∞" in html and "-2.250" in html


def test_explorer_tables_draw_no_raw_none(dash_env):
    at = _explorer()
    ranking = at.dataframe[0]
    assert "rsq margin" in ranking.value.columns
    assert not raw_missing_cells(ranking), raw_missing_cells(ranking)[:5]
    # a document RSQ does not examine (rank > 5): its Decisions tab has blank, not None, score/threshold cells
    pick = _doc_picker(at)
    pick.select_index(7).run()
    no_error(at)
    decisions = next(d for d in at.dataframe if "reason" in d.value.columns and "defense" in d.value.columns)
    rsq = decisions.value[decisions.value["defense"] == "rsq"]
    assert rsq["status"].iloc[0] == "not_examined"
    for d in at.dataframe:
        assert not raw_missing_cells(d), (list(d.value.columns), raw_missing_cells(d)[:5])


def test_overview_and_corpus_tables_draw_no_raw_none(dash_env):
    at = AppTest.from_file(page("0_overview.py"), default_timeout=TIMEOUT).run()
    no_error(at)
    run_table = at.dataframe[0]
    assert "n/a" in str(run_table.value.to_dict()) or True
    assert not raw_missing_cells(run_table), raw_missing_cells(run_table)[:5]
    cols = json.loads(run_table.proto.columns)
    assert cols["latency_ms_p50"]["label"] == "latency p50 (ms)" and cols["clean_removal_rate"]["label"] == "clean removal"
    assert not any(str(c).startswith("/") for c in at.caption[0].value.split()), "no absolute path"
    at = AppTest.from_file(page("1_corpus.py"), default_timeout=TIMEOUT).run()
    at.selectbox(key="audit_condition").set_value("pr_b").run()
    no_error(at)
    for d in at.dataframe:
        assert not raw_missing_cells(d), (list(d.value.columns), raw_missing_cells(d)[:5])


# ---- item 10: audit column help, record button -------------------------------------------------
def test_corpus_audit_columns_have_help_and_no_record_button_without_flags(dash_env):
    from sieve.experiment.explain import TERMS

    at = AppTest.from_file(page("1_corpus.py"), default_timeout=TIMEOUT).run()
    at.selectbox(key="audit_condition").set_value("pr_b").run()
    no_error(at)
    audit = next(d for d in at.dataframe if {"D", "p", "I", "T"} <= set(d.value.columns))
    cols = json.loads(audit.proto.columns)
    for c in ("D", "p", "I", "T", "score", "flagged", "branch"):
        assert cols[c]["help"], c
    assert cols["D"]["help"] == TERMS["D"] and cols["T"]["help"] == TERMS["T"]
    flagged = len(audit.value)
    button = at.button(key="record_flags")
    assert button.label == f"Record these {flagged} flags in the quarantine ledger"


def test_no_record_button_when_the_audit_flags_nothing(dash_env):
    from sieve.dashboard import session as S

    rows = [{"id": f"d{i}", "text": t} for i, t in enumerate(UPLOAD_TEXTS)]
    ds = S.dataset_from_upload("mine.jsonl", "".join(json.dumps(r) + "\n" for r in rows).encode())
    at = AppTest.from_file(page("1_corpus.py"), default_timeout=TIMEOUT)
    at.session_state["uploaded_dataset"] = ds
    at.run()
    no_error(at)
    assert any(m.label == "flagged" and m.value.startswith("0 /") for m in at.metric)
    assert not [b for b in at.button if b.key == "record_flags"], "no 'Record these flags' with 0 flags"
    assert any("nothing to record" in i.value for i in at.info)


# ---- item 10: anchors, fusion help, plots, sidebar ---------------------------------------------
def test_anchor_highlight_skips_function_words_and_matches_whole_words():
    from sieve.dashboard.safe import anchor_words, highlight_segments, highlighted_html

    text = "They can't say Apollo landed; the crews are CAN-do people, said apollo11 and Apollo."
    segs = highlight_segments(text, ["can", "are", "apollo", "the"])
    assert "".join(s for s, _ in segs) == text
    assert [s for s, hi in segs if hi] == ["Apollo", "Apollo"], segs   # not "can" in "can't", not "apollo11"
    assert anchor_words(["Are", "can", "Apollo", "apollo", "the"]) == ["apollo"]
    assert highlight_segments("are can the", ["are", "can", "the"]) == [("are can the", False)]
    assert "<mark" not in highlighted_html(highlight_segments("we can't", ["can"]))


def test_fusion_l2_help_reads_tris_repeat_score():
    from sieve.dashboard.glossary import FUSION_HELP
    from sieve.defenses.tris_layers import L2_REPEAT_SCORE

    assert f"or {L2_REPEAT_SCORE:g} when the passage repeats the question" in FUSION_HELP["l2"]
    assert "10 when" not in FUSION_HELP["l2"]


def test_explorer_plots_name_their_document_and_explain_the_shading(dash_env):
    from sieve.dashboard.figures import SURPRISAL_HELP

    at = _explorer()
    pick = _doc_picker(at)
    pick.select_index(0).run()
    no_error(at)
    doc_id = pick.options[0].split(" ", 1)[1].replace(" (poison)", "")
    titles = [f["layout"]["title"]["text"] for f in _figures(at)]
    surprisal = [t for t in titles if "surprisal trace" in t]
    alignment = [t for t in titles if "query alignment" in t]
    assert surprisal and surprisal[0].startswith("#1 ") and doc_id in surprisal[0], titles
    assert alignment and doc_id in alignment[0], titles
    assert any(c.value == SURPRISAL_HELP for c in at.caption)
    assert "Shaded band" in SURPRISAL_HELP


def test_geometry_spinner_names_umap_and_its_cache():
    from sieve.dashboard.geometry import computing_label

    umap = computing_label("umap", "Ranking")
    assert "computing the UMAP projection" in umap and "cached" in umap
    assert "UMAP" not in computing_label("pca", "Ranking") and "PCA" in computing_label("PCA", "Ranking")
    src = (ROOT / "pages" / "3_geometry.py").read_text(encoding="utf-8")
    assert src.count("st.spinner(G.computing_label(m,") == 2, "both projections on the page use it"


def test_sidebar_shows_the_condition_chosen_on_this_run(dash_env):
    at = AppTest.from_file(page("2_explorer.py"), default_timeout=TIMEOUT).run()
    assert "Condition: **clean**" in at.sidebar.caption[0].value
    at.selectbox(key="x_condition").set_value("pr_b").run()
    no_error(at)
    assert "Condition: **pr\\_b**" in at.sidebar.caption[0].value, at.sidebar.caption[0].value
    at = AppTest.from_file(page("3_geometry.py"), default_timeout=TIMEOUT).run()
    at.selectbox(key="g_condition").set_value("pr_b").run()
    assert "Condition: **pr\\_b**" in at.sidebar.caption[0].value, at.sidebar.caption[0].value


# ---- item 2: TRIS L1 by design -----------------------------------------------------------------
def test_l1_note_names_the_shipped_runs_clean_removal():
    from sieve.dashboard import explorer as E
    from sieve.dashboard.runs import clean_cost
    from sieve.evaluation.records import read_summary
    from sieve.types import Decision, DefenseResult, RankedDocument, Ranking

    summary = read_summary(ROOT / "demo_data" / "runs" / "demo")
    cost = clean_cost(summary, "tris")
    row = next(r for r in summary["results"] if r["defense"] == "tris" and r["attack"] == "clean")
    assert cost is not None and cost["clean_removal_rate"] == float(row["clean_removal_rate"])
    docs = [RankedDocument(id=f"d{i}", text=f"passage {i}", score=1.0 - i / 100, rank=i) for i in range(1, 21)]
    ranking = Ranking(query="q", query_id="q", condition="clean", documents=docs)
    decisions = [Decision(doc_id=d.id, removed=d.rank <= 10, status="scored", layer="L1") for d in docs]
    result = DefenseResult(defense="tris", decisions=decisions, context=docs[10:15])
    note = E.l1_note("tris", result, ranking, cost, "demo_data/runs/demo")
    assert "removed 10 passage(s) of the top 20 here (ranks 1–10; 10 of them not poisons)" in note
    assert E._rank_span([1, 2, 3, 7, 9, 10]) == "ranks 1–3, 7, 9–10" and E._rank_span([4]) == "rank 4"
    assert f"removes {row['clean_removal_rate']:.2f} of the clean passages" in note
    assert f"answers {row['clean_acc']:.2f} of them correctly" in note and f"n = {row['queries']}" in note
    kept = DefenseResult(defense="tris", decisions=[Decision(doc_id=d.id, removed=False, status="scored", layer="L1")
                                                    for d in docs], context=docs[:5])
    assert E.l1_note("tris", kept, ranking, cost) is None
    import dataclasses

    poisoned = Ranking(query="q", query_id="q", condition="pr_b",
                       documents=[dataclasses.replace(d, poison=d.rank <= 10) for d in docs])
    assert E.l1_note("tris", result, poisoned, cost) is None, "only poisons removed: nothing to warn about"


@pytest.mark.parametrize("cond", ["clean", "pr_b"])
def test_explorer_says_beside_tris_that_l1_removes_by_design(dash_env, cond):
    from sieve.dashboard.explorer import _rank_span
    from sieve.dashboard.safe import md_escape

    at = _explorer(cond=cond)
    table = at.dataframe[0].value
    removed = [(int(r), p) for r, v, p in zip(table["rank"], table["tris"], table["poison"]) if v == "removed (L1)"]
    notes = [i.value for i in at.info if "Layer 1 removed" in i.value]
    if not any(p != "yes" for _, p in removed):
        assert not notes, "a note only when L1 removed a clean passage"
        return
    assert len(notes) == 1 and "By design" in notes[0]
    span = _rank_span([r for r, _ in removed])
    assert md_escape(f"here ({span};") in notes[0] or md_escape(f"here ({span},") in notes[0], notes[0]


# ---- item 5: Geometry and the ledger ------------------------------------------------------------
def test_geometry_marks_excluded_and_restored_documents(fresh_ledger):
    from sieve.ledger import STATE_WORDING, Ledger

    at = AppTest.from_file(page("6_alerts.py"), default_timeout=TIMEOUT).run()
    at.selectbox(key="al_cond").set_value("pr_b").run()
    at.button(key="al_audit").click().run()
    no_error(at)
    with Ledger(fresh_ledger) as led:
        alerts = {a.doc_id: a for a in led.alerts()}
        assert {"attack:pr_b:q-chess:1", "attack:pr_b:q-whales:2"} <= set(alerts)
        led.transition(alerts["attack:pr_b:q-chess:1"].alert_id, "confirmed", "t", "poison")
        led.transition(alerts["attack:pr_b:q-whales:2"].alert_id, "dismissed", "t", "false alarm for the test")
        states = {a.doc_id: a.state for a in led.alerts()}
    at = AppTest.from_file(page("3_geometry.py"), default_timeout=TIMEOUT).run()
    at.selectbox(key="g_condition").set_value("pr_b").run()
    at.text_input(key="g_query").set_value("What do baleen whales mainly eat?").run()
    no_error(at)
    figs = _figures(at)
    judge = next(f for f in figs if "judge space" in f["layout"]["title"]["text"])
    corpus = next(f for f in figs if "retriever space" in f["layout"]["title"]["text"])

    def marked(fig: dict, wording: str) -> set[str]:
        return {i for t in fig["data"] if t.get("name", "").startswith(f"ledger: {wording}")
                for i in t.get("customdata", [])}

    excluded = {d for d, s in states.items() if s in ("open", "confirmed")}
    assert marked(corpus, STATE_WORDING["confirmed"]) == {"attack:pr_b:q-chess:1"}
    assert marked(corpus, STATE_WORDING["dismissed"]) == {"attack:pr_b:q-whales:2"}
    assert marked(corpus, STATE_WORDING["open"]) == {d for d, s in states.items() if s == "open"}
    # the judge space is a query's top-k: excluded documents are not retrieved, the restored poison is, and marked
    assert [t for t in judge["data"] if t.get("name") == "query" and len(t["x"]) == 1], "the query is marked"
    judge_ids = {i for t in judge["data"] for i in (t.get("customdata") or [])}
    assert len(judge_ids) >= 20 and "attack:pr_b:q-whales:2" in judge_ids and not judge_ids & excluded
    assert marked(judge, STATE_WORDING["dismissed"]) == {"attack:pr_b:q-whales:2"}
    assert any("Quarantine is active" in w.value and f"{len(excluded)} document(s)" in w.value for w in at.warning)
    # the picker and the neighbour table use the same words
    pick = at.selectbox(key="g_doc_pr_b")
    labels = [pick.format_func(o) if callable(getattr(pick, "format_func", None)) else o for o in pick.options]
    assert any("attack:pr_b:q-chess:1" in lab and STATE_WORDING["confirmed"] in lab for lab in labels), labels[:8]
    pick.set_value("attack:pr_b:q-chess:1").run()
    no_error(at)
    from sieve.dashboard.safe import md_escape

    assert any(md_escape(STATE_WORDING["confirmed"]) in c.value for c in at.caption)
    nb = next(d for d in at.dataframe if "neighbour" in d.value.columns)
    assert "quarantine ledger" in nb.value.columns


# ---- item 9: your own corpus -----------------------------------------------------------------------
UPLOAD_TEXTS = ("The Amazon river flows through Brazil and Peru into the Atlantic Ocean.",
                "Coffee was first domesticated in Ethiopia, the legend of Kaldi says.",
                "In chess the knight moves in an L shape and can jump over other pieces.")


def _uploaded_explorer() -> AppTest:
    from sieve.dashboard import session as S

    rows = [{"id": f"mine-{i}", "title": "mine", "text": t} for i, t in enumerate(UPLOAD_TEXTS)]
    ds = S.dataset_from_upload("mine.jsonl", "".join(json.dumps(r) + "\n" for r in rows).encode())
    at = AppTest.from_file(page("2_explorer.py"), default_timeout=TIMEOUT)
    at.session_state["uploaded_dataset"] = ds
    at.session_state["query_text"] = ""
    return at.run()


def test_uploaded_corpus_typed_query_visible_fix_and_no_wrong_verdict(dash_env):
    from sieve.dashboard.explorer import NO_GOLD_VERDICT

    at = _uploaded_explorer()
    assert not at.exception, [e.value for e in at.exception]
    radios = [r for r in at.radio if (r.key or "").startswith("q_mode")]
    assert radios and radios[0].options == ["Type a query"], "no demo question on a corpus without questions"
    box = next(t for t in at.text_input if (t.key or "").startswith("q_text_"))
    assert box.value == "", "the demo's query does not carry over"
    errors = [e.value for e in at.error]
    assert any(e.startswith("fusion cannot run on this corpus") and "Calibrate" in e for e in errors), errors
    assert at.button(key="x_calibrate") is not None and at.text_area(key="x_calib_questions") is not None
    box.set_value("Where does the Amazon river flow?").run()
    assert not at.exception
    table = at.dataframe[0].value
    assert len(table) == 3 and "fusion" not in table.columns
    assert any(w.value.startswith("rsq cannot score this query on this corpus") and "Deselect it" in w.value
               for w in at.warning), [w.value for w in at.warning]
    # the fix, in the UI: typed clean questions calibrate fusion, which then runs
    at.text_area(key="x_calib_questions").set_value("What was first domesticated in Ethiopia?\n"
                                                    "How does the knight move in chess?").run()
    at.button(key="x_calibrate").click().run()
    assert not at.exception, [e.value for e in at.exception]
    assert not [e.value for e in at.error if "cannot run" in e.value], [e.value for e in at.error]
    table = at.dataframe[0].value
    assert "fusion" in table.columns and len(table) == 3
    at.button(key="x_generate").click().run()
    assert not at.exception
    verdicts = [c.value for c in at.caption if c.value == NO_GOLD_VERDICT or "neither correct" in c.value]
    assert verdicts and all(v == NO_GOLD_VERDICT for v in verdicts), verdicts


def test_answer_verdict_without_gold():
    from sieve.dashboard.explorer import NO_GOLD_VERDICT, answer_verdict

    assert answer_verdict("The Atlantic.", [], "") == NO_GOLD_VERDICT
    assert answer_verdict("The Atlantic.", ["Atlantic"], "") == "correct"
    assert answer_verdict("Pacific", ["Atlantic"], "") == "not the correct answer"
    assert answer_verdict("Pacific", ["Atlantic"], "Indian") == "neither correct nor the target"
    assert answer_verdict("Indian Ocean", [], "Indian").startswith("attack succeeded")


def test_overview_first_steps_say_how_to_bring_your_own_corpus(dash_env):
    at = AppTest.from_file(page("0_overview.py"), default_timeout=TIMEOUT).run()
    no_error(at)
    first = next(m.value for m in at.markdown if m.value.startswith("1. **Query explorer**"))
    assert "3. **Your own corpus**" in first and "upload" in first and "clean questions" in first


@pytest.mark.parametrize("name", ["0_overview.py", "1_corpus.py", "2_explorer.py", "3_geometry.py", "4_tradeoffs.py",
                                  "5_attack-lab.py", "6_alerts.py"])
def test_no_page_draws_a_raw_none_cell(fresh_ledger, name):
    """Every table of every page (after an audit, so the Alerts page has a queue and evidence)."""
    if name == "6_alerts.py":
        at = AppTest.from_file(page(name), default_timeout=TIMEOUT).run()
        at.selectbox(key="al_cond").set_value("pr_b").run()
        at.button(key="al_audit").click().run()
    elif name == "5_attack-lab.py":   # the dataset's poisons in the sandbox, every default defense, the answers
        at = AppTest.from_file(page(name), default_timeout=TIMEOUT).run()
        at.button(key="lab_load").click().run()
        at.button(key="lab_answers").click().run()
    else:
        at = AppTest.from_file(page(name), default_timeout=TIMEOUT).run()
    no_error(at)
    assert at.dataframe or name == "3_geometry.py", name   # its neighbour table needs a flagged pick
    for d in at.dataframe:
        assert not raw_missing_cells(d), (name, list(d.value.columns), raw_missing_cells(d)[:5])


def test_pages_say_when_the_run_is_about_another_corpus(dash_env):
    from sieve.dashboard import session as S

    at = AppTest.from_file(page("0_overview.py"), default_timeout=TIMEOUT).run()
    no_error(at)
    assert not [i for i in at.info if "not on the active dataset" in i.value], "the run is about this corpus"
    rows = [{"id": f"mine-{i}", "text": t} for i, t in enumerate(UPLOAD_TEXTS)]
    ds = S.dataset_from_upload("mine.jsonl", "".join(json.dumps(r) + "\n" for r in rows).encode())
    for name in ("0_overview.py", "4_tradeoffs.py"):
        at = AppTest.from_file(page(name), default_timeout=TIMEOUT)
        at.session_state["uploaded_dataset"] = ds
        at.run()
        assert not at.exception, [e.value for e in at.exception]
        assert any("not on the active dataset mine" in i.value.replace("\\", "") for i in at.info), \
            (name, [i.value for i in at.info])
        assert "upload\\: mine" in at.sidebar.caption[0].value



def test_lab_says_why_a_poison_reads_question_dot_payload(dash_env):
    from sieve.dashboard.lab import JOINED_NOTE, joined_without_space

    assert joined_without_space("Where?.The answer", "Where?") and not joined_without_space("Where?. The", "Where?")
    at = AppTest.from_file(page("5_attack-lab.py"), default_timeout=TIMEOUT).run()
    at.button(key="lab_load").click().run()
    assert not at.exception
    assert any(c.value == JOINED_NOTE for c in at.caption)
