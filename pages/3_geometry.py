"""Geometry: the query's top-k in TRIS judge space (K-Means clusters, poisons, kept majority) and the
corpus in retriever space coloured by RSG density contrast, with a document's neighbourhood."""
import pandas as pd
import streamlit as st

from sieve.dashboard import figures as F
from sieve.dashboard import geometry as G
from sieve.dashboard import session as S
from sieve.dashboard import state
from sieve.dashboard.safe import snippet

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
    default_method = "PCA" if S.tiny_mode() else "UMAP"
    method = c2.radio("Projection", ["UMAP", "PCA"], index=["UMAP", "PCA"].index(default_method), horizontal=True,
                      key="g_method", help="UMAP (cosine) as in the papers' figures; PCA is instant. The first UMAP "
                                           "in a process compiles its kernels (~30 s), later ones take seconds.")
    m = method.lower()

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
        with st.spinner("Ranking and clustering in the judge space…"):
            res = state.resources()
            ranking = state.experiment().rank(query, condition=cond, query_id=query_id, depth=k)
            tris = state.defense("tris_l1", cond).apply(ranking, res)
            emb = res.judge_embeddings([d.text for d in ranking.documents])
            from sieve.types import content_hash

            ckey = content_hash("|".join(d.hash for d in ranking.documents) + res.judge.model_id)
            xy = state.projection(ckey, m, emb, min(10, max(2, len(ranking.documents) - 1)))
            df = G.judge_geometry(ranking, res, tris, k, xy=xy)
        st.plotly_chart(F.judge_space(df), width="stretch")
        st.caption(f"TRIS L1: {tris.info.get('l1', {}).get('reason', '')} · ✕ = poison · green ring = kept majority")

    # -- corpus in retriever space -------------------------------------------------------------------
    st.subheader("Corpus in retriever space (RSG density contrast)")
    with st.spinner("Auditing and projecting the snapshot…"):
        view = state.view(cond).index
        audit = state.audit(cond).audit
        from sieve.corpus import corpus_hash

        ckey = corpus_hash(view.documents) + view.model_id
        xy = state.projection(ckey, m, view.vectors)
        cdf = G.corpus_geometry(view, audit, xy=xy)
    flagged_ids = sorted(audit.flagged_ids, key=lambda i: -float(audit.density[audit.index_of(i)]))
    ids = flagged_ids + [i for i in view.ids if i not in set(flagged_ids)]   # densest flagged first
    sel_key = "g_selected"
    if st.session_state.get(sel_key) not in view:
        st.session_state[sel_key] = ids[0]
    event = st.plotly_chart(F.corpus_density(cdf, st.session_state[sel_key], audit.row(st.session_state[sel_key])),
                            width="stretch", on_select="rerun", selection_mode="points", key="g_plot")
    try:
        pts = (event or {}).get("selection", {}).get("points", []) if isinstance(event, dict) else event.selection.points
    except AttributeError:
        pts = []
    for p in pts:
        cid = p.get("customdata")
        cid = cid[0] if isinstance(cid, list) else cid
        if cid in view and cid != st.session_state[sel_key]:
            st.session_state[sel_key] = cid
            st.rerun()
    chosen = st.selectbox("Document (or click a point)", ids, index=ids.index(st.session_state[sel_key]),
                          key="g_doc", format_func=lambda i: f"{i} {'(flagged)' if i in set(flagged_ids) else ''}")
    if chosen != st.session_state[sel_key]:
        st.session_state[sel_key] = chosen
        st.rerun()
    row = audit.row(st.session_state[sel_key])
    a = st.columns(5)
    a[0].metric("D (density contrast)", f"{row.local_density_contrast:.3f}")
    a[1].metric("floor b_i", f"{row.neighbourhood_floor:.3f}")
    a[2].metric("core mean μ_i", f"{row.core_mean:.3f}")
    a[3].metric("score", f"{row.score:.3f}")
    a[4].metric("flagged", row.branch or "no")
    nb = [{"neighbour": e["id"], "similarity": round(e["similarity"], 4), "jaccard": round(e["jaccard"], 3),
           "edge": "kept"} for e in row.kept] + \
         [{"neighbour": e["id"], "similarity": round(e["similarity"], 4), "jaccard": round(e["jaccard"], 3),
           "edge": "dropped (Jaccard > 0.60)"} for e in row.dropped]
    for r in nb:
        r["text"] = snippet(view.document(r["neighbour"]).text, 80)
    if nb:
        st.dataframe(pd.DataFrame(nb), hide_index=True, width="stretch")
    else:
        st.info("No eligible neighbours (none with similarity ≥ 0.85): D = 0 for this document.")
    st.caption("Eligible neighbours have similarity ≥ 0.85; the floor b_i is the 16th neighbour's similarity.")
    st.text(view.document(row.document_id).text)
