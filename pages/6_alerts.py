"""Alerts: the quarantine ledger as a triage queue — filter, inspect evidence, confirm / dismiss /
roll back with a reason, export CSV."""
import pandas as pd
import streamlit as st

from sieve.dashboard import alerts as A
from sieve.dashboard import session as S
from sieve.dashboard import state

state.init_state()
state.sidebar_status()
st.title("Alerts — quarantine ledger")

ACTIONS = {"confirmed": "Confirm (keep quarantined)", "dismissed": "Dismiss (false alarm)",
           "rolled_back": "Roll back (restore to retrieval)", "open": "Reopen"}

with state.page_guard("Alerts"):
    from sieve.ledger import STATES, TRANSITIONS, LedgerError

    led = state.ledger()
    counts = led.counts()
    m = st.columns(len(STATES))
    for col, s in zip(m, STATES):
        col.metric(s.replace("_", " "), counts.get(s, 0))
    st.caption(f"Ledger: {led.path}")
    if sum(counts.values()) == 0:
        st.info("No alerts yet. Run the RSG audit and record its flags (also on *Corpus & index*).")
    ds = state.dataset()
    conds = S.conditions(ds)
    with st.expander("Add alerts from an RSG audit", expanded=sum(counts.values()) == 0):
        cond = st.selectbox("Snapshot", conds, key="al_cond",
                            index=conds.index(conds[1]) if len(conds) > 1 else 0)
        if st.button("Audit and record flags", key="al_audit"):
            with st.spinner("Auditing…"):
                n, added = A.record_audit_flags(state.audit(cond), ds.name, led)
            st.success(f"{n} flags, {added} new alerts.")
            counts = led.counts()

    f1, f2, f3, f4 = st.columns(4)
    detectors = sorted({a.detector for a in led.alerts()})
    det = f1.selectbox("Detector", ["all", *detectors], key="al_det")
    stt = f2.selectbox("State", ["all", *STATES], key="al_state")
    min_score = f3.number_input("Min score", value=0.0, step=0.1, key="al_min")
    sort = f4.selectbox("Sort", ["-score", "score", "-created", "created", "doc"], key="al_sort")
    filters = {"detector": None if det == "all" else det, "state": None if stt == "all" else stt,
               "min_score": min_score if min_score > 0 else None, "sort": sort}
    alerts = led.alerts(**filters)
    if alerts:
        st.dataframe(A.alerts_frame(alerts), hide_index=True, width="stretch", height=300)
    else:
        st.caption("No alerts match these filters.")
    st.download_button("Export CSV", A.alerts_csv(led, **filters), file_name="sieve-alerts.csv", mime="text/csv",
                       key="al_csv")
    if not alerts:
        st.stop()

    st.subheader("Triage")
    ids = [a.alert_id for a in alerts]
    aid = st.selectbox("Alert", ids, key="al_pick",
                       format_func=lambda i: next(f"{a.alert_id} · {a.doc_id} · {a.state}" for a in alerts if a.alert_id == i))
    alert = led.get(aid)
    c1, c2 = st.columns([3, 2])
    with c1:
        st.write(f"**{alert.doc_id}** — {alert.detector}, score {alert.score if alert.score is None else round(alert.score, 4)}"
                 f" (threshold {alert.threshold}), state **{alert.state}**")
        st.caption("Reason:")
        st.text(alert.reason)
        doc_text = None
        try:
            doc_text = ds.doc_by_id(alert.doc_id).text
        except KeyError:
            for fam in ds.attack_families():
                hit = next((d for d in ds.attack_documents(fam) if d.id == alert.doc_id), None)
                if hit is not None:
                    doc_text = hit.text
                    break
        st.caption("Document text (verbatim):")
        st.text(doc_text if doc_text is not None else "(document not in the current dataset)")
        with st.expander("Evidence"):
            ev = dict(alert.evidence)
            st.json({k: v for k, v in ev.items() if k not in ("kept", "dropped")})
            for part in ("kept", "dropped"):
                if ev.get(part):
                    st.write(f"{part} neighbours")
                    st.dataframe(pd.DataFrame(ev[part]), hide_index=True)
    with c2:
        allowed = sorted(TRANSITIONS[alert.state])
        who = st.text_input("Analyst", value=st.session_state.get("analyst", "analyst"), key="al_who")
        st.session_state["analyst"] = who
        why = st.text_input("Reason for the decision", key="al_why")
        for new in allowed:
            if st.button(ACTIONS.get(new, new), key=f"al_do_{new}"):
                try:
                    led.transition(aid, new, who, why)
                    st.success(f"{aid} → {new}")
                    st.rerun()
                except LedgerError as e:
                    st.error(str(e))
        st.caption("History")
        st.dataframe(pd.DataFrame([{"from": h.from_state, "to": h.to_state, "who": h.who, "why": h.why,
                                    "at": pd.to_datetime(h.at, unit="s").strftime("%Y-%m-%d %H:%M")}
                                   for h in led.history(aid)]), hide_index=True, width="stretch")
