"""Query explorer: ranked list with every selected defense's decision and distance to its threshold,
per-document evidence (RSQ components, surprisal trace, alignment curve, TRIS layers, anchor tokens),
undefended vs defended context and generated answers."""
import json

import pandas as pd
import streamlit as st

from sieve.dashboard import alerts as A
from sieve.dashboard import explorer as E
from sieve.dashboard import figures as F
from sieve.dashboard import glossary as Gl
from sieve.dashboard import session as S
from sieve.dashboard import state
from sieve.dashboard import tables as T
from sieve.dashboard.safe import anchor_words, highlight_segments, highlighted_html, md, snippet
from sieve.experiment.explain import TERMS, with_ledger_state
from sieve.runtime import configure_process_environment

configure_process_environment()   # also when this page runs on its own (AppTest, benches)

state.init_state()
state.sidebar_status()
st.title("Query explorer")

TRIS_SPECS = ("tris", "tris_l1", "tris_l2", "tris_full", "tris_l3")


def params_for(spec: str, knobs: dict) -> dict:
    """The knobs that apply to one defense spec (registered presets keep their own layer switches),
    plus a threshold the analyst set by hand for it (a corpus without clean questions)."""
    p: dict = dict(st.session_state["params"].get("_manual", {}).get(spec, {}))
    if spec in ("rsq", "rsg_rsq"):
        p["eta_q"] = knobs["eta_q"]
    if spec in TRIS_SPECS:
        p.update(cluster_count=knobs["cluster_count"], jaccard_threshold=knobs["jaccard_threshold"],
                 ngram_threshold=knobs["ngram_threshold"])
        if spec == "tris":
            p["l3_mode"] = knobs["l3_mode"]
    return p


with state.page_guard("Query explorer"):
    ds = state.dataset()
    conds = S.conditions(ds)
    targets = {t.query_id: t for t in ds.targets}
    questions = [(t.query_id, t.query) for t in ds.targets] + \
                [(q.id, q.text) for q in ds.queries if q.id not in targets]

    c1, c2 = st.columns([3, 1])
    PICK, TYPE = "Pick a question of the dataset", "Type a query"
    with c1:
        # a corpus without questions (an upload) offers typing only, and no demo question carries over
        mode = st.radio("Query", [PICK, TYPE] if questions else [TYPE], horizontal=True, key=f"q_mode_{bool(questions)}")
        if mode == PICK and questions:
            labels = [f"{qid} — {snippet(text, 90)}" for qid, text in questions]
            prev = st.session_state.get("query_id")
            idx = next((i for i, (qid, _) in enumerate(questions) if qid == prev), 0)
            pick = st.selectbox("Question", range(len(labels)), format_func=lambda i: labels[i], index=idx,
                                key="q_pick")
            query_id, query = questions[pick]
        else:
            query = st.text_input("Your query", value=st.session_state.get("query_text") or
                                  (questions[0][1] if questions else ""), key=f"q_text_{ds.content_hash()[:12]}",
                                  placeholder="Type a question your corpus should answer")
            query_id = next((qid for qid, t in questions if t.strip() == query.strip()), "")
    with c2:
        cond = st.selectbox("Attack condition", conds, key="x_condition",
                            index=conds.index(st.session_state["condition"]) if st.session_state["condition"] in conds else 0,
                            help="clean corpus, or clean corpus + every poison of one attack family")
    st.session_state["condition"] = cond
    st.session_state["query_text"], st.session_state["query_id"] = query, query_id

    from sieve.registry import DEFENSES

    all_specs = [n for n in DEFENSES.names() if n != "none"]
    chosen = st.multiselect("Defenses", all_specs, default=[d for d in st.session_state["defenses"] if d in all_specs],
                            key="x_defenses", help="LLM-based layers (tris_full, tris_l3, robustrag, trustrag) call the "
                                                   "generator and are slower on CPU.")
    st.session_state["defenses"] = chosen
    with st.expander("Thresholds and context size"):
        saved = st.session_state["params"].get("_knobs", {})
        k1, k2, k3, k4, k5 = st.columns(5)
        knobs = {
            "eta_q": k1.slider("RSQ η_Q", 0.1, 3.0, float(saved.get("eta_q", 1.0)), 0.05, key="k_eta"),
            "cluster_count": k2.slider("TRIS C (clusters)", 1, 5, int(saved.get("cluster_count", 2)), key="k_c"),
            "jaccard_threshold": k3.slider("TRIS L2 Jaccard", 0.1, 1.0, float(saved.get("jaccard_threshold", 0.8)), 0.05,
                                           key="k_jac"),
            "ngram_threshold": k4.slider("TRIS L2 n-gram", 0.1, 1.0, float(saved.get("ngram_threshold", 0.8)), 0.05,
                                         key="k_ng"),
            "l3_mode": k5.selectbox("TRIS L3 mode", ["off", "adaptive", "selective", "always"],
                                    index=["off", "adaptive", "selective", "always"].index(saved.get("l3_mode", "off")),
                                    key="k_l3", help="L3 asks the LLM about each surviving passage (seconds per "
                                                     "passage with the local model on CPU); off by default here."),
        }
        k_ctx = st.slider("k_ctx (context size)", 1, 10, int(st.session_state["k_ctx"]), key="k_ctx_slider")
        st.session_state["params"]["_knobs"] = knobs
        st.session_state["k_ctx"] = k_ctx

    # ---- defenses that cannot run on this corpus: said where it shows, with the controls to fix it ----
    failed: dict[str, tuple[str | None, Exception]] = {}
    for spec in chosen:
        try:
            with st.spinner(f"Preparing {md(spec)} (first time only; then cached)…"):
                state.defense(spec, cond, params_for(spec, knobs))
        except Exception as e:  # noqa: BLE001 - shown below, the other defenses still run
            failed[spec] = (S.calibration_fix(spec, e), e)
    if failed or state.clean_questions():
        for spec, (fix, err) in failed.items():
            if fix:
                st.error(md(fix))
            else:
                st.error(f"{md(spec)} could not be prepared: " + state.friendly(err))
        with st.container(border=True):
            st.write("**Calibrate on your own questions**")
            st.caption("Defenses learn their thresholds from clean questions (questions whose retrieved passages are "
                       "not attacked). This corpus has none of its own: type a few questions it answers, one per "
                       "line (5 or more give steadier thresholds).")
            typed = st.text_area("Clean questions (one per line)", value="\n".join(state.clean_questions()),
                                 key="x_calib_questions", height=120)
            if st.button("Calibrate", key="x_calibrate", type="primary"):
                state.set_clean_questions(typed.splitlines())
                st.session_state.pop("explore_cache", None)
                st.rerun()
            manual = st.session_state["params"].setdefault("_manual", {})
            for spec in failed:
                fix = S.manual_threshold(spec)
                if fix is None:
                    continue
                param, default = fix
                cur = manual.get(spec, {}).get(param)
                val = st.number_input(md(f"{spec} threshold ({param}), instead of calibrating"), value=float(
                    default if cur is None else cur), key=f"x_thr_{spec}", format="%.3f")
                if st.button(md(f"Use this threshold for {spec}"), key=f"x_thr_go_{spec}"):
                    manual[spec] = {param: float(val)}
                    st.session_state.pop("explore_cache", None)
                    st.rerun()
    chosen = [c for c in chosen if c not in failed]

    if not query.strip():
        st.info("Type a query" + (" or pick a question of the dataset." if questions else " above."))
        st.stop()

    snap = state.view(cond)
    if snap.excluded:
        n_pois = sum(1 for d in snap.index.documents if d.id in snap.excluded and d.poison) if hasattr(snap.index, "documents") else 0
        st.warning(f"Quarantine is active: {len(snap.excluded):d} document(s) with open or confirmed alerts are "
                   f"excluded from retrieval here ({n_pois:d} of them poisons of this condition), so fewer passages "
                   "— and fewer poisons — appear than in the raw corpus. [Review or roll them back on Alerts](/alerts).")
    key = json.dumps([ds.name, ds.content_hash()[:12], query, query_id, cond, chosen, knobs, k_ctx,
                      sorted(snap.excluded), state.clean_questions(), st.session_state["params"].get("_manual", {})],
                     sort_keys=True)
    cache = st.session_state.setdefault("explore_cache", {})
    if key not in cache:
        with st.status("Running retrieval and defenses…", expanded=False) as status:
            status.update(label="Loading models and index (first time only)…")
            defs = {spec: state.defense(spec, cond, params_for(spec, knobs)) for spec in chosen}   # prepared above
            base = {"none": state.defense("none", cond)}
            status.update(label="Ranking and applying defenses…")
            result = E.explore(state.experiment(), query, cond, {**base, **defs}, query_id, k_ctx)
            status.update(label=f"Done in {result.timings_ms['total']:.0f} ms", state="complete")
        cache.clear()
        cache[key] = result
    result = cache[key]
    ranking = result.ranking
    for name, err in result.errors.items():
        st.warning(f"{md(name)}: {md(err)}")
    for name, r in result.results.items():
        # a defense that could score nothing here says so where it shows, with what the analyst can do
        dead = bool(r.decisions) and all(d.status == "unavailable" for d in r.decisions)
        for w in r.warnings:
            if dead:
                st.warning(f"{md(name)} cannot score this query on this corpus: {md(snippet(w, 200))}. Its column "
                           "reads 'unavailable'. Deselect it under Defenses, or load a larger corpus on *Corpus & index*.")
            else:
                st.caption(f"Warning — {md(name)}: {md(snippet(w, 200))}")

    tgt = targets.get(query_id)
    if tgt is not None:
        st.caption(f"Correct answer: {md(', '.join(tgt.correct_answers))} · attack target answer: {md(tgt.target_answer)}")
    n_poison = sum(1 for d in ranking.documents[:20] if d.poison)
    st.caption(f"Top-20 holds {n_poison:d} poison(s) · explorer call {result.timings_ms['total']:.0f} ms "
               f"({md(', '.join(f'{k} {v:.0f}' for k, v in result.timings_ms.items() if k != 'total'))})")
    shown = [n for n in result.results if n != "none"]
    table = result.table(20)
    ledger_state = A.ledger_states(state.ledger())
    table["quarantine ledger"] = [A.LEDGER_WORDING.get(ledger_state.get(i, ""), "") for i in table["id"]]
    cols = ["rank", "id", "poison", "retriever score", "quarantine ledger"] + \
        [c for n in shown for c in (n, f"{n} margin")] + ["text"]
    cols = [c for c in cols if c in table.columns]
    col_help = Gl.ranking_column_help(cols, list(result.results))
    st.dataframe(T.shown(table[cols], "", 4), hide_index=True, width="stretch",
                 height=min(420, 38 + 35 * max(1, len(table))),   # no blank rows below a short ranking
                 column_config={**{c: st.column_config.Column(c, help=h, width=T.id_width(table[c].tolist())
                                                              if c in result.results else None)
                                   for c, h in col_help.items()},   # a decision reads in full: "removed (fusion)"
                                "id": T.id_column("id", table["id"].tolist(), help=col_help.get("id"))})
    st.caption("margin = score − threshold (positive = on the removal side); blank where the defense did not "
               "examine the passage or has no threshold (TRIS L1 removes a whole cluster).")
    for n, r in result.results.items():   # a paper's method that removes relevant passages by design
        cost, run_label = state.clean_cost(n) if E.l1_removals(r) else (None, "")
        note = E.l1_note(n, r, ranking, cost, run_label)
        if note:
            st.info(md(note))

    st.subheader("Document evidence")
    docs = ranking.documents[:20]
    di = st.selectbox("Document", range(len(docs)), key=f"x_doc_{cond}_{query_id or abs(hash(query))}",
                      format_func=lambda i: f"#{docs[i].rank} {docs[i].id}" + (" (poison)" if docs[i].poison else ""))
    doc = docs[di]
    if ledger_state.get(doc.id):
        st.caption(f"Quarantine ledger: **{md(A.LEDGER_WORDING[ledger_state[doc.id]])}**. "
                   + ("The analyst restored this document; a defense's own rule can still remove it (its reason "
                      "in the Decisions tab says so)." if ledger_state[doc.id] in ("dismissed", "rolled_back") else
                      "[Review it on Alerts](/alerts)."))
    ev = result.rsq_rows.get(doc.id)
    eta = knobs["eta_q"]
    tabs = st.tabs(["Text & anchors", "RSQ evidence", "Surprisal trace", "Alignment curve", "TRIS layers", "Decisions"])
    with tabs[0]:
        raw_anchors = (ev or {}).get("anchor", {}).get("anchors", []) if ev else []
        anchors = anchor_words(raw_anchors)
        if anchors:
            st.caption("Anchor tokens that drove E_a (shared by several top-5 passages, rare in ranks 6–20), "
                       "highlighted as whole words: " + md(", ".join(anchors))
                       + (" (function words such as 'are' or 'can' are counted by RSQ but not highlighted)"
                          if len(anchors) < len(raw_anchors) else ""))
            st.html(highlighted_html(highlight_segments(doc.text, anchors)))
        elif raw_anchors:
            st.caption("RSQ's anchor tokens for this passage are function words only (" + md(", ".join(raw_anchors))
                       + "): nothing to highlight.")
        st.caption("Document text (verbatim, never rendered as HTML or markdown):")
        st.text(doc.text)
    with tabs[1]:
        if result.rsq_rows:
            st.plotly_chart(F.rsq_components(result.rsq_rows, eta, [d.id for d in ranking.documents[:5]]),
                            width="stretch")
            if ev:
                terms = ("E_a", "E_i", "E_p", "E_s", "S", "p_a", "p_i", "J", "p_s")
                st.dataframe(T.shown(pd.DataFrame([{k: None if ev.get(k) is None else round(float(ev[k]), 3) for k in terms}])),
                             hide_index=True, column_config={k: st.column_config.NumberColumn(k, help=TERMS[k])
                                                             for k in terms})
                with st.expander("What do E_a, E_i, E_p, E_s, S, p_a, p_i, J and p_s mean?"):
                    st.dataframe(pd.DataFrame([{"term": k, "meaning": TERMS[k]} for k in terms]), hide_index=True,
                                 width="stretch")
            else:
                st.info("RSQ scores ranks 1–5 only; ranks 6–20 are the reference tail.")
        else:
            st.info("RSQ needs at least 20 retrieved documents.")
    with tabs[2]:
        if ev:
            st.plotly_chart(F.surprisal_trace(ev, doc=f"#{doc.rank} {doc.id}"), width="stretch")
            st.caption(F.SURPRISAL_HELP)
        else:
            st.info("Surprisal traces are shown for RSQ candidates (ranks 1–5).")
    with tabs[3]:
        if ev:
            st.plotly_chart(F.alignment_curve(ev, doc=f"#{doc.rank} {doc.id}"), width="stretch")
        else:
            st.info("Alignment curves are shown for RSQ candidates (ranks 1–5).")
    with tabs[4]:
        tris_names = [n for n in result.results if n.startswith("tris")]
        if not tris_names:
            st.info("Select a TRIS defense to see its layer verdicts.")
        for n in tris_names:
            st.write(f"**{md(n)}**")
            st.json(E.tris_layers(result.results[n].decision_for(doc.id)))
    with tabs[5]:
        rows = []
        for n, r in result.results.items():
            d = r.decision_for(doc.id)
            if d is not None:
                rows.append({"defense": n, "decision": E.decision_label(d), "layer": d.layer, "status": d.status,
                             "score": d.score, "threshold": d.threshold, "margin": d.margin(),
                             "reason": with_ledger_state(d.reason, d.removed, ledger_state.get(doc.id))})
        st.dataframe(T.shown(pd.DataFrame(rows)), hide_index=True, width="stretch",
                     column_config={"margin": st.column_config.NumberColumn("margin", help=TERMS["margin"]),
                                    "decision": st.column_config.Column("decision", help=Gl.DECISION_HELP),
                                    **{k: st.column_config.Column(k, help=h) for k, h in Gl.DECISION_COLUMN_HELP.items()}})
        fused = result.results["fusion"].decision_for(doc.id) if "fusion" in result.results else None
        if fused is not None and (fused.evidence or {}).get("values"):
            vals, ps = fused.evidence["values"], fused.evidence.get("p_values", {})
            st.caption("Fusion: each evidence value and its p-value against clean passages (lower p is more "
                       "suspicious); the reason above names those with p ≤ 0.05.")
            st.dataframe(T.shown(pd.DataFrame([{"evidence": k, "value": round(float(v), 3),
                                                "p": None if ps.get(k) is None else round(float(ps[k]), 3),
                                                "meaning": Gl.FUSION_HELP.get(k, "")} for k, v in vals.items()])),
                         hide_index=True, width="stretch",
                         column_config={"evidence": st.column_config.Column("evidence", help="Evidence name (see meaning)."),
                                        "value": st.column_config.NumberColumn("value", help="The evidence value, in "
                                                                               "the units given under meaning."),
                                        "p": st.column_config.NumberColumn("p", help=Gl.FUSION_HELP["p"]),
                                        "meaning": st.column_config.Column("meaning", help="What the evidence measures, "
                                                                           "its range and which direction is suspicious.")})

    st.subheader("Context handed to the generator")
    st.caption(Gl.CONTEXT_HELP)
    items = list(result.results.items())
    for start in range(0, len(items), 2):          # two per row: wide enough for the poison column and text
        for col, (n, r) in zip(st.columns(2), items[start : start + 2]):
            with col:
                n_p = sum(1 for d in r.context if d.poison)
                st.write(f"**{'undefended' if n == 'none' else md(n)}**" + (" (fallback)" if r.fallback_used else "")
                         + f" — {n_p:d} poison(s) in context")
                st.dataframe(pd.DataFrame([{"poison": "yes" if d.poison else "", "rank": d.rank, "id": d.id,
                                            "text": snippet(d.text, 120)} for d in r.context]),
                             hide_index=True, width="stretch",
                             column_config={"id": T.id_column("id", [d.id for d in r.context])})
    answers = st.session_state.setdefault("explore_answers", {})
    if st.button("Generate answers", key="x_generate",
                 help="Answers the query from each context with the configured generator (local Qwen by default)."):
        with st.spinner("Generating (the local model loads once; then a few seconds per answer)…"):
            try:
                res = state.resources()
                answers[key] = E.generate_answers(res, query, {n: [d.text for d in r.context]
                                                               for n, r in result.results.items()})
            except Exception as e:  # noqa: BLE001
                state.show_error("Generation failed", e)
    if key in answers:
        acols = st.columns(len(answers[key]))
        for col, (n, text) in zip(acols, answers[key].items()):
            with col:
                st.write(f"**{'undefended' if n == 'none' else md(n)}**")
                st.text(text)
                st.caption(E.answer_verdict(text, ranking.correct_answers, ranking.target_answer))
