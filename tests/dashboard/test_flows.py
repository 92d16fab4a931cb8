"""AppTest flows for the state bugs of issue 11 (each failed on the old pages): widget state keyed by
what it describes, counters that refresh after an action, a triage queue ordered by a continuous
priority, rollback that needs a reason and a confirmation, stale labels after a condition switch."""
from __future__ import annotations

from streamlit.testing.v1 import AppTest

from _dashdata import page

TIMEOUT = 180


def no_error(at: AppTest) -> None:
    assert not at.exception, [e.value for e in at.exception]
    assert not at.error, [e.value for e in at.error]


def _audited_alerts(fresh_ledger) -> AppTest:
    at = AppTest.from_file(page("6_alerts.py"), default_timeout=TIMEOUT).run()
    no_error(at)
    assert any("No alerts yet" in i.value for i in at.info)
    at.selectbox(key="al_cond").set_value("pr_b").run()
    at.button(key="al_audit").click().run()
    no_error(at)
    return at


def _metrics(at: AppTest) -> dict[str, str]:
    return {m.label: m.value for m in at.metric}


def test_audit_refreshes_counters_and_banner(fresh_ledger):
    at = _audited_alerts(fresh_ledger)
    from sieve.ledger import Ledger

    with Ledger(fresh_ledger) as led:
        n_open = led.counts().get("open", 0)
    assert n_open >= 2
    assert _metrics(at)["open"] == str(n_open), "the counter shows the alerts just recorded"
    assert not any("No alerts yet" in i.value for i in at.info), "the empty banner is gone"
    assert any(f"{n_open} new alerts" in s.value for s in at.success)


def test_queue_ordered_by_continuous_priority_with_plain_reasons(fresh_ledger):
    at = _audited_alerts(fresh_ledger)
    queue = at.dataframe[0].value
    prio = list(queue["priority"])
    assert prio == sorted(prio, reverse=True)
    assert len(set(prio)) > 1, "priorities differ (RSG's own score is 1.0 for every flag)"
    assert all(0.0 < p <= 1.0 for p in prio)
    for reason in queue["reason"]:
        assert reason and "RSG integrity flag" not in reason
        assert any(w in reason for w in ("near-identical neighbour", "script")), reason
    # the mixed-script trigger of the tiny dataset is explained in words
    assert any("Cyrillic" in r and "inside words" in r for r in queue["reason"])
    # evidence is a readable table with rounded values, not raw JSON
    assert not at.json
    ev = next(d.value for d in at.dataframe if "term" in d.value.columns)
    assert {"term", "value", "meaning"} <= set(ev.columns)
    for v in ev["value"]:
        if v.replace(".", "", 1).replace("-", "", 1).isdigit() and "." in v:
            assert len(v.split(".")[1]) <= 3, v


def _pick(at: AppTest):
    """The triage selector (keyed by its labels, so it is found by its label)."""
    return next(s for s in at.selectbox if s.label == "Alert")


def _queue_ids(at: AppTest) -> list[str]:
    return list(at.dataframe[0].value["alert"])


def test_reason_box_is_keyed_by_alert_and_selection_survives_confirm(fresh_ledger):
    at = _audited_alerts(fresh_ledger)
    ids = _queue_ids(at)
    docs = list(at.dataframe[0].value["doc_id"])
    assert len(ids) >= 2
    assert _pick(at).index == 0
    at.text_input(key=f"al_why_{ids[0]}").set_value("note about the first alert").run()
    _pick(at).select_index(1).run()
    no_error(at)
    assert at.text_input(key=f"al_why_{ids[1]}").value == "", "no text carried over from another alert"
    at.text_input(key=f"al_why_{ids[1]}").set_value("coordinated poison").run()
    at.button(key="al_do_confirmed").click().run()
    no_error(at)
    pick = _pick(at)
    assert pick.value == ids[1], "the selection stays on the alert just confirmed"
    assert pick.options[pick.index] == f"{docs[1]} · confirmed · priority {at.dataframe[0].value['priority'][1]:.2f}", \
        "the selector label shows the new state"
    assert _metrics(at)["confirmed"] == "1"
    assert any("open → confirmed" in s.value for s in at.success)


def test_rollback_needs_reason_and_confirmation(fresh_ledger):
    at = _audited_alerts(fresh_ledger)
    aid = _queue_ids(at)[0]
    at.text_input(key=f"al_why_{aid}").set_value("poison").run()
    at.button(key="al_do_confirmed").click().run()
    no_error(at)
    assert at.button(key="al_do_rolled_back").disabled, "no reason and no confirmation: disabled"
    at.text_input(key=f"al_why_{aid}").set_value("").run()
    at.checkbox(key=f"al_rb_ok_{aid}").check().run()
    assert at.button(key="al_do_rolled_back").disabled, "a confirmation without a reason is not enough"
    at.text_input(key=f"al_why_{aid}").set_value("clean page after review").run()
    assert not at.button(key="al_do_rolled_back").disabled
    at.button(key="al_do_rolled_back").click().run()
    no_error(at)
    from sieve.ledger import Ledger

    with Ledger(fresh_ledger) as led:
        assert led.get(aid).state == "rolled_back"
        assert led.history(aid)[-1].why == "clean page after review"


def test_bulk_dismiss_needs_reason_and_confirmation(fresh_ledger):
    at = _audited_alerts(fresh_ledger)
    n = len(at.dataframe[0].value)
    at.selectbox(key="al_bulk_to").set_value("dismissed").run()
    assert at.button(key="al_bulk_go").disabled
    at.text_input(key="al_bulk_why").set_value("reviewed: clean").run()
    at.checkbox(key="al_bulk_ok").check().run()
    at.button(key="al_bulk_go").click().run()
    no_error(at)
    assert _metrics(at)["dismissed"] == str(n) and _metrics(at)["open"] == "0"


# ---- Geometry: one selected document per condition, no rerun loop ----------------------------------
def test_geometry_picker_and_metrics_agree_and_condition_switch_keeps_a_valid_pick(dash_env):
    at = AppTest.from_file(page("3_geometry.py"), default_timeout=TIMEOUT).run()
    no_error(at)
    assert at.radio(key="g_method").value == "PCA", "the instant projection is the default"
    pick = at.selectbox(key="g_doc_clean")
    flagged_label = pick.options[0]
    assert "(flagged" in flagged_label, "flagged documents first, marked (with their ledger state, if any)"
    assert {m.label: m.value for m in at.metric}["flagged"].startswith("yes"), "label and metric agree"
    unflagged = next(i for i, o in enumerate(pick.options) if "(flagged" not in o)
    pick.select_index(unflagged).run()
    no_error(at)
    assert {m.label: m.value for m in at.metric}["flagged"] == "no"
    assert at.selectbox(key="g_doc_clean").index == unflagged
    at.selectbox(key="g_condition").set_value("pr_b").run()
    no_error(at)
    pb = at.selectbox(key="g_doc_pr_b")
    shown = {m.label: m.value for m in at.metric}
    assert shown["flagged"].startswith("yes") == ("(flagged" in pb.options[pb.index])


# ---- Attack lab: class mode, checked questions, custom target answer, contexts ----------------------
def test_attack_lab_class_mode_custom_target_and_contexts(dash_env):
    at = AppTest.from_file(page("5_attack-lab.py"), default_timeout=TIMEOUT).run()
    no_error(at)
    labels = at.selectbox(key="lab_target").options
    assert all(lab.endswith(("✓ clean answer correct", "✗ clean answer wrong", "not checked")) for lab in labels)
    if at.toggle(key="lab_only_good").value:
        assert all(lab.endswith("✓ clean answer correct") for lab in labels), "only questions answered correctly"
    at.toggle(key="lab_class").set_value(True).run()
    no_error(at)
    qid = at.selectbox(key="lab_target_class").value
    at.text_input(key=f"lab_custom_{qid}").set_value("Atlantis").run()
    no_error(at)
    poisons = at.dataframe[0].value
    assert len(poisons) == 5 and all(i.startswith("lab:attack:pr_b:") for i in poisons["id"])
    assert all("Atlantis" in t for t in poisons["text"]), "the poisons assert the custom target answer"
    assert any("**Atlantis**" in c.value for c in at.caption)
    responses = next(d.value for d in at.dataframe if "poisons removed" in d.value.columns)
    assert list(responses["defense"]) == ["undefended", "tris_l2"]
    assert [t.label for t in at.tabs] == ["undefended", "tris\\_l2"]
    # each defense's context: the undefended one holds poisons, TRIS L2 removed the question-prefixed ones
    ctx = [d.value for d in at.dataframe if list(d.value.columns)[:2] == ["poison", "rank"]]
    assert len(ctx) == 2 and (ctx[0]["poison"] == "yes").sum() >= 1 and (ctx[1]["poison"] == "yes").sum() == 0
    at.button(key="lab_answers").click().run()
    no_error(at)
    verdicts = [c.value for c in at.caption if c.value in ("correct", "neither correct nor the target")
                or c.value.startswith("attack succeeded")]
    assert len(verdicts) == 3
    # clean index, poisoned undefended, poisoned + tris_l2: the tiny reader repeats the top passage
    assert verdicts[1] == "attack succeeded (asserts the target answer)", verdicts
    assert not verdicts[2].startswith("attack succeeded"), verdicts


# ---- Explorer: quarantine visible outside collapsed boxes, one wording per ledger state --------------
def test_explorer_shows_quarantine_and_ledger_state(fresh_ledger):
    _audited_alerts(fresh_ledger)             # open alerts for the two mixed-script poisons (chess:1, whales:2)
    at = AppTest.from_file(page("2_explorer.py"), default_timeout=TIMEOUT).run()
    at.selectbox(key="x_condition").set_value("pr_b").run()
    chess = next(i for i, lab in enumerate(at.selectbox(key="q_pick").options) if "q-chess" in lab)
    at.selectbox(key="q_pick").set_value(chess).run()
    no_error(at)
    banner = [w.value for w in at.warning if "Quarantine is active" in w.value]
    assert banner and "(/alerts)" in banner[0], "the quarantine notice is a visible warning with a link"
    table = at.dataframe[0].value
    assert "attack:pr_b:q-chess:1" not in set(table["id"]), "the open alert keeps the poison out of retrieval"
    from sieve.ledger import Ledger

    with Ledger(fresh_ledger) as led:
        a = next(x for x in led.alerts() if x.doc_id == "attack:pr_b:q-chess:1")
        led.transition(a.alert_id, "confirmed", "t", "poison")
        led.transition(a.alert_id, "rolled_back", "t", "restored for the test")
    at = AppTest.from_file(page("2_explorer.py"), default_timeout=TIMEOUT).run()
    at.selectbox(key="x_condition").set_value("pr_b").run()
    at.selectbox(key="q_pick").set_value(chess).run()
    no_error(at)
    table = at.dataframe[0].value
    row = table[table["id"] == "attack:pr_b:q-chess:1"]
    assert len(row) == 1 and row["quarantine ledger"].iloc[0] == "restored (quarantine rolled back)"
    # the Decisions tab: rsg_rsq's reason for the rolled-back document uses the ledger's words, never
    # "quarantined" (only the ledger quarantines; RSG's own removal is a flag)
    pick = next(s for s in at.selectbox if (s.key or "").startswith("x_doc_pr_b_"))
    pick.select_index(next(i for i, o in enumerate(pick.options) if o.endswith("attack:pr_b:q-chess:1 (poison)"))).run()
    no_error(at)
    decisions = next(d.value for d in at.dataframe if "reason" in d.value.columns and "defense" in d.value.columns)
    reason = decisions[decisions["defense"] == "rsg_rsq"]["reason"].iloc[0]
    assert "ledger: restored (quarantine rolled back)" in reason, reason
    assert "quarantined" not in reason, reason


# ---- issue 24 item 3: label, reason box, expander, export --------------------------------------
def test_empty_ledger_opens_the_audit_expander(fresh_ledger):
    at = AppTest.from_file(page("6_alerts.py"), default_timeout=TIMEOUT).run()
    no_error(at)
    exp = next(e for e in at.expander if "Add alerts from an RSG audit" in e.label)
    assert exp.proto.expanded, "an empty ledger (counts() is a dict of zeros) opens the audit box"


def test_decision_refreshes_label_and_empties_reason_box(fresh_ledger):
    at = _audited_alerts(fresh_ledger)
    aid = _queue_ids(at)[0]
    doc = at.dataframe[0].value["doc_id"][0]
    old_key = _pick(at).key
    at.text_input(key=f"al_why_{aid}").set_value("poison, checked by hand").run()
    at.button(key="al_do_confirmed").click().run()
    no_error(at)
    pick = _pick(at)
    assert pick.value == aid and pick.key != old_key, "a new selector is drawn when its label changes"
    label = pick.options[pick.index]
    assert label.startswith(f"{doc} · confirmed ·") and "open" not in label
    assert at.text_input(key=f"al_why_{aid}").value == "", "the confirm reason does not carry over to a rollback"
    assert not at.checkbox(key=f"al_rb_ok_{aid}").value
    assert at.button(key="al_do_rolled_back").disabled, "a rollback needs its own reason"
    at.text_input(key=f"al_why_{aid}").set_value("clean after all").run()
    at.checkbox(key=f"al_rb_ok_{aid}").check().run()
    at.button(key="al_do_rolled_back").click().run()
    no_error(at)
    from sieve.ledger import Ledger

    with Ledger(fresh_ledger) as led:
        assert [h.why for h in led.history(aid)][-2:] == ["poison, checked by hand", "clean after all"]
    assert _pick(at).options[_pick(at).index].startswith(f"{doc} · rolled_back ·")
    hist = next(d.value for d in at.dataframe if {"from", "to", "why"} <= set(d.value.columns))
    assert "None" not in hist.astype(str).to_numpy().ravel().tolist()
    assert hist["from"].iloc[0] == "(new alert)"


def test_export_carries_what_the_list_shows(fresh_ledger):
    import csv
    import io

    at = _audited_alerts(fresh_ledger)
    queue = at.dataframe[0].value
    dl = at.get("download_button")[0]
    assert dl.proto.label == "Export CSV"
    from sieve.dashboard import alerts as A
    from sieve.ledger import Ledger

    with Ledger(fresh_ledger) as led:
        data = A.triage_csv(A.sorted_alerts(led.alerts(), "-priority"))
    rows = list(csv.DictReader(io.StringIO(data.decode("utf-8"))))
    assert {"alert_id", "doc_id", "state", "priority", "detector_score", "reason", "batch"} <= set(rows[0])
    assert [r["alert_id"] for r in rows] == list(queue["alert"])
    assert [float(r["priority"]) for r in rows] == [round(p, 3) for p in queue["priority"]], "the score as listed"
    assert [r["reason"] for r in rows] == list(queue["reason"])
    # one audit, one batch: its snapshot id, the detector and the audited corpus
    assert len({r["batch"] for r in rows}) == 1
    assert all(r["batch"].startswith("batch S-") and r["batch"].split(" · ")[1].startswith("rsg on ")
               and r["batch"].split(" · ")[1].endswith(":pr_b") for r in rows)
    assert at.success, "the audit's message is shown"


# ---- issue 24 item 7: lab defaults, selections across class mode, verdict lines, cached preparation ----
def test_attack_lab_selection_survives_class_mode_and_verdicts_per_defense(dash_env):
    at = AppTest.from_file(page("5_attack-lab.py"), default_timeout=TIMEOUT).run()
    no_error(at)
    at.button(key="lab_load").click().run()
    no_error(at)
    assert at.multiselect(key="lab_defs").value == ["fusion", "tris", "rsq", "rsg_rsq"], "fusion + the papers' methods"
    at.multiselect(key="lab_defs").set_value(["tris_l2", "rsq"]).run()
    at.toggle(key="lab_class").set_value(True).run()
    no_error(at)
    at.toggle(key="lab_class").set_value(False).run()
    no_error(at)
    at.button(key="lab_load").click().run()
    assert at.multiselect(key="lab_defs").value == ["tris_l2", "rsq"], "the selection survives a class-mode round trip"
    at.button(key="lab_answers").click().run()
    no_error(at)
    lines = [m.value for m in [*at.success, *at.warning] if m.value.startswith("**poisoned")]
    assert len(lines) == 2, lines
    assert any(w in " ".join(lines) for w in ("answer restored", "still poisoned", "answer lost", "attack failed"))
    assert any("prepared in" in c.value for c in at.caption), "a timing per defense step"
    at.multiselect(key="lab_defs").set_value(["tris_l2"]).run()
    no_error(at)
    names = [m.value for m in [*at.success, *at.warning] if m.value.startswith("**poisoned")]
    assert len(names) == 1 and "tris" in names[0], "answers of deselected defenses are not shown"


def test_lab_defense_verdicts():
    from sieve.dashboard.lab import defense_verdicts

    base = {"clean index": "Ethiopia", "poisoned, undefended": "Greenland"}
    v = defense_verdicts({**base, "poisoned + a": "Ethiopia", "poisoned + b": "Greenland", "poisoned + c": "Peru"},
                         ["Ethiopia"], "Greenland")
    assert v["poisoned + a"][1].startswith("answer restored") and v["poisoned + b"][1].startswith("still poisoned")
    assert v["poisoned + c"][1].startswith("answer lost")
    v = defense_verdicts({"clean index": "Ethiopia", "poisoned, undefended": "Ethiopia", "poisoned + a": "Peru"},
                         ["Ethiopia"], "Greenland")
    assert v["poisoned + a"] == ("lost", "attack failed, but this defense lost the correct answer (answer lost)")
    assert defense_verdicts({"poisoned, undefended": "x", "poisoned + a": "y"}, [], "x")["poisoned + a"][0] == "lost"


# ---- issue 25 item 3: the Alerts page shows which batch an alert came from and filters by it ----
def test_alerts_show_their_batch_and_filter_by_it(fresh_ledger):
    from sieve.dashboard import alerts as A
    from sieve.ledger import Flag, Ledger

    def flag(doc, batch=None):
        ev = {"branch": "topology", "local_density_contrast": 0.9}
        if batch:
            ev["batch"] = batch
        return Flag(doc, f"h-{doc}", 1.0, 0.5, ev, f"dense tail ({doc})")

    with Ledger(fresh_ledger) as led:
        led.add_flags([flag("old-1"), flag("old-2")], detector="rsg", corpus_id="chroma:///kb?collection=docs",
                      corpus_hash="c1", index_version="v")
        led.add_flags([flag("new-1", "S-7f3a"), flag("new-2", "S-7f3a"), flag("new-3", "S-7f3a")], detector="rsg",
                      corpus_id="chroma:///kb?collection=docs", corpus_hash="c2", index_version="v")
        labels = A.batches(led.alerts())
    assert len(labels) == 2 and labels[0].startswith("batch S-7f3a · rsg"), labels   # newest first
    at = AppTest.from_file(page("6_alerts.py"), default_timeout=TIMEOUT).run()
    no_error(at)
    queue = at.dataframe[0].value
    assert len(queue) == 5 and set(queue["batch"]) == set(labels)
    at.selectbox(key="al_batch").set_value(labels[0]).run()
    no_error(at)
    queue = at.dataframe[0].value
    assert sorted(queue["doc_id"]) == ["new-1", "new-2", "new-3"] and set(queue["batch"]) == {labels[0]}
    at.selectbox(key="al_batch").set_value(labels[1]).run()
    assert sorted(at.dataframe[0].value["doc_id"]) == ["old-1", "old-2"]


# ---- issue 25 item 1: the dashboard's corpus picker opens a vector store (real embedded Chroma) ----
def test_corpus_picker_opens_a_chroma_store_and_every_page_switches_to_it(dash_env, tmp_path):
    import numpy as np

    from sieve.stores.fill import fill_store
    from sieve.types import Document

    docs = [Document(f"kb-{i}", f"Knowledge base passage {i} about pumps, valves and seals.") for i in range(12)]
    uri = f"chroma://{tmp_path / 'kb'}?collection=docs"
    fill_store(uri, docs, np.random.default_rng(0).normal(size=(len(docs), 16)).astype(np.float32))
    at = AppTest.from_file(page("1_corpus.py"), default_timeout=TIMEOUT).run()
    no_error(at)
    at.radio(key="corpus_source").set_value("Vector store").run()
    at.text_input(key="store_input").set_value(uri).run()
    at.button(key="load_store").click().run()
    no_error(at)
    assert any("Opened " in s.value and f"{len(docs)} documents" in s.value for s in at.success), [s.value for s in at.success]
    up = at.session_state["uploaded_dataset"]
    assert [d.id for d in up.documents] == [d.id for d in docs] and not up.queries
    assert at.metric[0].value == str(len(docs))
    # a bad source is one visible line, not a traceback
    at.text_input(key="store_input").set_value(f"chroma://{tmp_path / 'kb'}?collection=nope").run()
    at.button(key="load_store").click().run()
    assert not at.exception and at.error and "nope" in at.error[0].value
