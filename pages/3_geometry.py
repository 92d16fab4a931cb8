"""Geometry: the query's top-k in TRIS judge space (K-Means clusters, poisons, kept majority) and the
corpus in retriever space coloured by RSG density contrast, with a document's neighbourhood."""
import pandas as pd
import streamlit as st

from sieve.dashboard import alerts as A
from sieve.dashboard import figures as F
from sieve.dashboard import geometry as G
from sieve.dashboard import session as S
from sieve.dashboard import state
from sieve.dashboard import tables as T
from sieve.dashboard.safe import md, snippet
from sieve.experiment.explain import TERMS, explain_audit
from sieve.runtime import configure_process_environment

configure_process_environment()   # also when this page runs on its own (AppTest, benches)

state.init_state()
state.sidebar_status()
st.title("Geometry")

with state.page_guard("Geometry"):
    ds = state.dataset()
    conds = S.conditions(ds)
    c1, c2 = st.columns([1, 1])
    cond = c1.selectbox("Attack condition", conds, key="g_condition",
                        index=conds.index(st.session_state["condition"]) if st.session_state["condition"] in conds else 0)
    st.session_state["condition"] = cond
    method = c2.radio("Projection", ["PCA", "UMAP"], index=0, horizontal=True, key="g_method",
                      help="PCA is instant and the default. UMAP (cosine) draws the papers' figures but the first "
                           "UMAP in a process compiles its kernels (about 45 s on 2 cores), later ones take seconds.")
    m = method.lower()
    # the quarantine ledger, read as the Query explorer reads it: open / confirmed alerts are excluded from
    # retrieval (so never in a query's top-k), dismissed / rolled-back documents are restored
    ledger_state = A.ledger_states(state.ledger())
    snap = state.view(cond)

    # -- judge space of one query ------------------------------------------------------------------
    st.subheader("Top-k of a query in the TRIS judge space")
    query = st.session_state.get("query_text") or (ds.targets[0].query if ds.targets else
                                                    (ds.queries[0].text if ds.queries else ""))
    query_id = st.session_state.get("query_id") or (ds.targets[0].query_id if ds.targets and not
                                                    st.session_state.get("query_text") else "")
    query = st.text_input("Query (shared with the Query explorer)", value=query, key="g_query")
    if query != st.session_state.get("query_text"):
        query_id = next((q.id for q in ds.queries if q.text.strip() == query.strip()), "")
    k = st.slider("top-k", 10, 50, 50, 5, key="g_k")
    if query.strip():
        with st.spinner(G.computing_label(m, "Ranking and clustering in the judge space")):
            res = state.resources()
            ranking = state.experiment().rank(query, condition=cond, query_id=query_id, depth=k)
            tris = state.defense("tris_l1", cond).apply(ranking, res)
            import numpy as np

            # the query is embedded and projected with its top-k, so the map shows where it sits
            emb = np.vstack([np.asarray(res.judge_embeddings([d.text for d in ranking.documents])),
                             np.asarray(res.judge_embeddings([query]))])
            from sieve.types import content_hash

            ckey = content_hash("|".join(d.hash for d in ranking.documents) + "|query:" + query + res.judge.model_id)
            xy = state.projection(ckey, m, emb, min(10, max(2, len(ranking.documents))))
            df = G.judge_geometry(ranking, res, tris, k, xy=xy[:-1], ledger=ledger_state)
        st.plotly_chart(F.judge_space(df, query, query_xy=(float(xy[-1][0]), float(xy[-1][1]))), width="stretch")
        st.caption("TRIS L1: " + md(tris.info.get("l1", {}).get("reason", "")) + " · ✕ = poison · green ring = kept majority"
                   " · ★ = the query · diamond = restored by an analyst (documents the ledger excludes are not retrieved)")
        if snap.excluded:
            st.warning(f"Quarantine is active: {len(snap.excluded):d} document(s) with open or confirmed alerts are "
                       "excluded from retrieval, so they are not in this top-k (as on the Query explorer). They are "
                       "marked with squares in the corpus map below. [Review or roll them back on Alerts](/alerts).")

    # -- corpus in retriever space -------------------------------------------------------------------
    st.subheader("Corpus in retriever space (RSG density contrast)")
    with st.spinner(G.computing_label(m, "Auditing the snapshot (RSG)")):
        view = state.view(cond).index
        audit = state.audit(cond).audit
        from sieve.corpus import corpus_hash

        ckey = corpus_hash(view.documents) + view.model_id
        xy = state.projection(ckey, m, view.vectors)
        cdf = G.corpus_geometry(view, audit, xy=xy, ledger=ledger_state)
    flagged_set = set(audit.flagged_ids)
    flagged_ids = sorted(flagged_set, key=lambda i: -float(audit.density[audit.index_of(i)]))
    ids = flagged_ids + [i for i in view.ids if i not in flagged_set]   # densest flagged first
    # One source of truth for the selected document, per condition: the map and the picker both write it
    # in their callbacks (no st.rerun in the page body, so a click can never start a rerun loop).
    sel_key, pick_key, plot_key = f"g_selected_{cond}", f"g_doc_{cond}", f"g_plot_{cond}"
    if st.session_state.get(sel_key) not in view:
        st.session_state[sel_key] = ids[0]
    if st.session_state.get(pick_key) != st.session_state[sel_key]:
        st.session_state[pick_key] = st.session_state[sel_key]

    def _on_click() -> None:
        ev = st.session_state.get(plot_key) or {}
        try:
            pts = ev["selection"]["points"]
        except (KeyError, TypeError):
            pts = []
        for p in pts:
            cid = p.get("customdata")
            cid = cid[0] if isinstance(cid, (list, tuple)) else cid
            if cid in view:
                st.session_state[sel_key] = cid
                st.session_state[pick_key] = cid
                return

    def _on_pick() -> None:
        st.session_state[sel_key] = st.session_state[pick_key]

    selected = st.session_state[sel_key]
    st.plotly_chart(F.corpus_density(cdf, selected, audit.row(selected)), width="stretch", on_select=_on_click,
                    selection_mode="points", key=plot_key)
    n_excl = int(cdf["ledger"].str.startswith("excluded").sum())
    n_rest = int(cdf["ledger"].str.startswith("restored").sum())
    st.caption("Colour = density contrast D (help on the metric below) · red ring = flagged by RSG · red ✕ = poison "
               "(attack document of this condition) · ★ = selected · black square = excluded from retrieval by the "
               f"quarantine ledger ({n_excl:d} here) · blue diamond = restored by an analyst ({n_rest:d} here). "
               "Click a point to select it.")

    def _label(i: str) -> str:
        extra = [w for w in ("flagged" if i in flagged_set else "", A.LEDGER_WORDING.get(ledger_state.get(i, ""), "")) if w]
        return f"{i} ({'; '.join(extra)})" if extra else str(i)

    st.selectbox("Document (or click a point)", ids, key=pick_key, on_change=_on_pick, format_func=_label)
    row = audit.row(selected)
    if ledger_state.get(selected):
        st.caption(f"Quarantine ledger: **{md(A.LEDGER_WORDING[ledger_state[selected]])}** — "
                   + ("it is not retrieved for any query." if ledger_state[selected] in ("open", "confirmed") else
                      "it is back in retrieval.") + " [Review it on Alerts](/alerts).")
    a = st.columns(5)
    a[0].metric("D (density contrast)", f"{row.local_density_contrast:.3f}", help=TERMS["D"])
    a[1].metric("floor b_i", f"{row.neighbourhood_floor:.3f}", help=TERMS["floor"])
    a[2].metric("core mean μ_i", f"{row.core_mean:.3f}", help=TERMS["core_mean"])
    a[3].metric("score", f"{row.score:.3f}", help=TERMS["score"])
    a[4].metric("flagged", f"yes ({row.branch})" if row.flagged else "no",
                help="Whether RSG flags this document, and by which branch (topology = density, integrity = scripts).")
    if row.flagged:
        ex = explain_audit(audit, row.document_id)
        st.caption("Why RSG flags it:")
        st.text(ex.reason)
        for h in ex.hints:
            st.caption("Possibly a false positive: " + md(h))
    nb = [{"neighbour": e["id"], "similarity": round(e["similarity"], 4), "jaccard": round(e["jaccard"], 3),
           "edge": "kept"} for e in row.kept] + \
         [{"neighbour": e["id"], "similarity": round(e["similarity"], 4), "jaccard": round(e["jaccard"], 3),
           "edge": "dropped (Jaccard > 0.60)"} for e in row.dropped]
    for r in nb:
        r["quarantine ledger"] = A.LEDGER_WORDING.get(ledger_state.get(r["neighbour"], ""), "")
        r["text"] = snippet(view.document(r["neighbour"]).text, 80)
    if nb:
        from sieve.dashboard.glossary import RANKING_HELP

        st.dataframe(T.shown(pd.DataFrame(nb), "", 4), hide_index=True, width="stretch",
                     column_config={"similarity": st.column_config.NumberColumn(help=TERMS["similarity"]),
                                    "jaccard": st.column_config.NumberColumn(help=TERMS["jaccard"]),
                                    "quarantine ledger": st.column_config.Column(
                                        "quarantine ledger", help=RANKING_HELP["quarantine ledger"]),
                                    "neighbour": T.id_column("neighbour", [r["neighbour"] for r in nb])})
    else:
        st.info("No eligible neighbours (none with similarity ≥ 0.85): D = 0 for this document.")
    st.caption("Eligible neighbours have similarity ≥ 0.85; the floor b_i is the 16th neighbour's similarity.")
    st.text(view.document(row.document_id).text)
