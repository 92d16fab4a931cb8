"""Alerts: the quarantine ledger as a triage queue — ordered by a continuous priority, each flag with
a plain reason, likely-false-positive hints and a readable evidence table; confirm / dismiss / roll
back (reason + confirmation) one alert or in bulk; export CSV. Widget state is keyed by alert id."""
import pandas as pd
import streamlit as st

from sieve.dashboard import alerts as A
from sieve.dashboard import session as S
from sieve.dashboard import state
from sieve.dashboard.safe import md
from sieve.runtime import configure_process_environment

configure_process_environment()   # also when this page runs on its own (AppTest, benches)

state.init_state()
state.sidebar_status()
st.title("Alerts — quarantine ledger")

ACTIONS = {"confirmed": "Confirm (keep quarantined)", "dismissed": "Dismiss (false alarm)",
           "rolled_back": "Roll back (restore to retrieval)", "open": "Reopen"}
STATE_HELP = {
    "open": "Flagged and not reviewed yet. Open alerts keep their document out of retrieval.",
    "confirmed": "An analyst confirmed the poison: the document stays out of retrieval.",
    "dismissed": "An analyst judged it a false alarm: the document is back in retrieval.",
    "rolled_back": "A confirmed quarantine was undone: the document is back in retrieval.",
}
SEL = "al_selected"          # the selected alert id (survives label changes and reruns)
FLASH = "al_flash"           # message shown once after an action
NEXT = "al_next"             # where the selection goes when the acted-on alert leaves the filtered list
CLEAR = "al_clear"           # widget keys to empty before they are drawn again (after a decision)


with state.page_guard("Alerts"):
    from sieve.experiment.explain import TERMS, alert_explanation, evidence_table, neighbour_table
    from sieve.ledger import STATES, TRANSITIONS, LedgerError

    led = state.ledger()
    ds = state.dataset()
    conds = S.conditions(ds)
    flash = st.session_state.pop(FLASH, None)
    if flash:
        st.success(md(flash))

    for k in st.session_state.pop(CLEAR, ()):   # the last decision's reason never carries over to the next
        st.session_state[k] = False if k.startswith("al_rb_ok_") or k.endswith("_ok") else ""
    with st.expander("Add alerts from an RSG audit", expanded=not sum(led.counts().values())):
        cond = st.selectbox("Snapshot", conds, key="al_cond", index=conds.index(conds[1]) if len(conds) > 1 else 0,
                            help="clean corpus, or clean corpus + every poison of one attack family")
        if st.button("Audit and record flags", key="al_audit"):
            report = state.audit(cond, progress=True)
            n, added = A.record_audit_flags(report, ds.name, led)
            st.session_state[FLASH] = (f"RSG audit of {cond}: {n} flags, {added} new alerts "
                                       f"({n - added} were already in the ledger).")
            st.rerun()

    counts = led.counts()
    m = st.columns(len(STATES))
    for col, s in zip(m, STATES):
        col.metric(md(s.replace("_", " ")), counts.get(s, 0), help=STATE_HELP[s])
    st.caption("Ledger: " + md(led.path))
    if sum(counts.values()) == 0:
        st.info("No alerts yet. Run the RSG audit above and record its flags (also on *Corpus & index*).")
        st.stop()

    f1, f2, f3, f4, f5 = st.columns(5)
    everything = led.alerts()
    detectors = sorted({a.detector for a in everything})
    det = f1.selectbox("Detector", ["all", *detectors], key="al_det")
    stt = f2.selectbox("State", ["all", *STATES], key="al_state")
    batch = f3.selectbox("Batch", ["all", *A.batches(everything)], key="al_batch",
                         help="The audit an alert came from: an incremental store audit (`sieve audit SOURCE "
                              "--since …`) names its snapshot; any other audit its detector, snapshot and time.")
    min_prio = f4.number_input("Min priority", min_value=0.0, max_value=1.0, value=0.0, step=0.05, key="al_min",
                               help=TERMS["priority"])
    sort = f5.selectbox("Order", list(A.SORTS), key="al_sort", help=TERMS["priority"])
    filters = {"detector": None if det == "all" else det, "state": None if stt == "all" else stt}
    alerts = [a for a in A.sorted_alerts(led.alerts(**filters), A.SORTS[sort]) if A.priority(a) >= min_prio
              and (batch == "all" or A.batch_label(a) == batch)]
    if alerts:
        st.dataframe(A.alerts_frame(alerts), hide_index=True, width="stretch", height=300,
                     column_config={"priority": st.column_config.NumberColumn("priority", help=TERMS["priority"],
                                                                              format="%.3f"),
                                    "false-positive hints": st.column_config.NumberColumn(
                                        "false-positive hints", help="How many signs suggest a clean passage "
                                                                     "(each lowers the priority by 30 %)")})
    else:
        st.caption("No alerts match these filters.")
    st.download_button("Export CSV", A.triage_csv(alerts), file_name="sieve-alerts.csv", mime="text/csv",
                       key="al_csv", on_click="ignore",   # no rerun: a message shown above stays
                       help="The alerts listed above, in their order: id, document, state, priority (as listed), "
                            "the detector and its own score, the plain reason, the audit batch and the times.")
    if not alerts:
        st.stop()

    with st.expander(f"Bulk action on the {len(alerts)} alerts listed above"):
        b1, b2 = st.columns([1, 2])
        bulk_to = b1.selectbox("Move to", ["confirmed", "dismissed"], key="al_bulk_to",
                               format_func=lambda s: ACTIONS[s])
        bulk_why = b2.text_input("Reason (required, recorded for every alert)", key="al_bulk_why")
        movable = [a.alert_id for a in alerts if bulk_to in TRANSITIONS[a.state]]
        bulk_ok = st.checkbox(f"Yes, move {len(movable)} alert(s) to {md(bulk_to)}", key="al_bulk_ok")
        if st.button("Apply to all listed", key="al_bulk_go", disabled=not (bulk_ok and bulk_why.strip() and movable)):
            n, errs = A.bulk_transition(led, movable, bulk_to, st.session_state.get("analyst", "analyst"), bulk_why)
            st.session_state[FLASH] = f"{n} alert(s) moved to {bulk_to}." + (f" {len(errs)} skipped." if errs else "")
            st.session_state[CLEAR] = ["al_bulk_why", "al_bulk_ok"]
            st.rerun()

    st.subheader("Triage")
    ids = [a.alert_id for a in alerts]
    by_id = {a.alert_id: a for a in alerts}
    if st.session_state.get(SEL) not in by_id:
        nxt = st.session_state.get(NEXT)
        st.session_state[SEL] = nxt if nxt in by_id else ids[0]
    pick_labels = {i: f"{by_id[i].doc_id} · {by_id[i].state} · priority {A.priority(by_id[i]):.2f}" for i in ids}
    # keyed by its labels: a keyed selectbox keeps showing the label it was drawn with, so a state change
    # ("open" → "confirmed") draws a new one, positioned on the selected alert
    pick_key = "al_pick_" + A.labels_key(pick_labels.values())
    aid = st.selectbox("Alert", ids, index=ids.index(st.session_state[SEL]), key=pick_key,
                       format_func=pick_labels.__getitem__)
    if aid != st.session_state[SEL]:
        st.session_state[SEL] = aid
    alert = led.get(aid)
    ex = alert_explanation(alert.evidence or {})
    c1, c2 = st.columns([3, 2])
    with c1:
        st.caption(f"Document {md(alert.doc_id)} · detector {md(alert.detector)} · state {md(alert.state)} · "
                   f"priority {ex.priority:.2f}")
        st.caption("Why it was flagged:")
        st.text(ex.reason if ex.priority > 0 else alert.reason)
        if ex.hints:
            st.warning("Possibly a false positive:\n\n" + "\n".join(f"- {md(h)}" for h in ex.hints))
        st.caption("Document text (verbatim):")
        doc_text = A.find_document_text(ds, alert.doc_id)
        st.text(doc_text if doc_text is not None else "(document not in the current dataset)")
        st.caption("Evidence")
        ev = dict(alert.evidence or {})
        st.dataframe(pd.DataFrame(evidence_table(ev)), hide_index=True, width="stretch",
                     column_config={"meaning": st.column_config.TextColumn("meaning", width="large")})
        nb = neighbour_table(ev)
        if nb:
            st.caption("Neighbours (similarity and word overlap rounded to 3 decimals)")
            st.dataframe(pd.DataFrame(nb), hide_index=True, width="stretch",
                         column_config={"similarity": st.column_config.NumberColumn(help=TERMS["similarity"]),
                                        "jaccard": st.column_config.NumberColumn(help=TERMS["jaccard"])})
    with c2:
        allowed = sorted(TRANSITIONS[alert.state])
        who = st.text_input("Analyst", value=st.session_state.get("analyst", "analyst"), key="al_who")
        st.session_state["analyst"] = who
        why = st.text_input("Reason for the decision", key=f"al_why_{aid}",
                            help="Recorded in the alert's history. Required to roll back a confirmed quarantine.")
        for new in allowed:
            needs_confirm = new == "rolled_back"
            ok = True
            if needs_confirm:
                ok = st.checkbox("I confirm: restore this document to retrieval", key=f"al_rb_ok_{aid}")
                ok = ok and bool(why.strip())
                if not why.strip():
                    st.caption("Rolling back needs a reason and the confirmation above.")
            if st.button(md(ACTIONS.get(new, new)), key=f"al_do_{new}", disabled=not ok):
                try:
                    led.transition(aid, new, who, why)
                except LedgerError as e:
                    st.error(md(e))
                else:
                    st.session_state[FLASH] = f"{alert.doc_id}: {alert.state} → {new}."
                    st.session_state[CLEAR] = [f"al_why_{aid}", f"al_rb_ok_{aid}"]
                    st.session_state[SEL] = aid
                    pos = ids.index(aid)
                    st.session_state[NEXT] = ids[pos + 1] if pos + 1 < len(ids) else (ids[pos - 1] if pos else None)
                    st.rerun()
        st.caption("History")
        st.dataframe(pd.DataFrame([{"from": h.from_state or "(new alert)", "to": h.to_state, "who": h.who,
                                    "why": h.why or "",
                                    "at": pd.to_datetime(h.at, unit="s").strftime("%Y-%m-%d %H:%M")}
                                   for h in led.history(aid)]), hide_index=True, width="stretch")
