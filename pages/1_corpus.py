"""Corpus & index: choose a dataset, see validation errors and statistics, build/reuse the index,
run the RSG corpus audit and record its flags in the quarantine ledger."""
import pandas as pd
import streamlit as st

from sieve.dashboard import alerts as A
from sieve.dashboard import figures as F
from sieve.dashboard import session as S
from sieve.dashboard import state
from sieve.dashboard import tables as T
from sieve.dashboard.safe import md, md_escape
from sieve.runtime import configure_process_environment

configure_process_environment()   # also when this page runs on its own (AppTest, benches)

state.init_state()
state.sidebar_status()
st.title("Corpus & index")


def _dataset_errors(e) -> None:
    first = e.errors[0]
    st.error(f"The dataset could not be loaded ({len(e.errors)} problem(s); nothing was loaded). First: "
             + md_escape(f"{first.location()}: {first.message}") + ". Fix the problems listed below and load again.")
    st.dataframe(pd.DataFrame([{"file": x.file, "line": x.line, "field": x.field or "", "problem": x.message}
                               for x in e.errors]), hide_index=True, width="stretch")


with state.page_guard("Corpus & index"):
    from sieve.corpus import DatasetError

    def _switched(message: str) -> None:
        """A new dataset: no demo question, condition or cached result carries over to it."""
        st.session_state["condition"] = S.CLEAN
        st.session_state["query_text"], st.session_state["query_id"] = "", ""
        st.session_state.pop("explore_cache", None)
        st.session_state["corpus_flash"] = message

    source = st.radio("Dataset", ["Bundled demo", "Dataset directory or file path", "Upload a corpus file",
                                  "Vector store"], horizontal=True, key="corpus_source")
    if source == "Bundled demo":
        if st.button("Use the bundled demo", key="use_demo"):
            st.session_state["uploaded_dataset"] = None
            st.session_state["dataset_path"] = str(S.default_dataset_path())
            _switched("Switched to the bundled demo.")
    elif source == "Dataset directory or file path":
        path = st.text_input("Path", value=st.session_state["dataset_path"], key="path_input",
                             help="A Sieve dataset directory (corpus.jsonl, queries.jsonl, …), a BEIR directory, "
                                  "or a single .jsonl/.csv/.parquet corpus file.")
        if st.button("Load", key="load_path"):
            try:
                S.load_dataset(path)
            except DatasetError as e:
                _dataset_errors(e)
            else:
                st.session_state["uploaded_dataset"] = None
                st.session_state["dataset_path"] = path
                _switched(f"Loaded {path}: every page now works on it.")
    elif source == "Vector store":
        uri = st.text_input("Store source", key="store_input", placeholder="chroma:///path/to/dir?collection=NAME",
                            help="An embedded Chroma directory (chroma:///dir?collection=NAME, or chroma://host:port"
                                 "?collection=NAME for a server), Qdrant local mode (qdrant:///path?collection=NAME) "
                                 "or LanceDB (lancedb:///path?table=NAME); README \"Audit a vector store\". Read "
                                 "only: nothing is written to the store. Sieve embeds the documents with its own "
                                 "retriever here; `sieve audit SOURCE` can use the stored vectors.")
        if uri and st.button("Open store", key="load_store"):
            from sieve.stores.uri import StoreError

            try:
                with st.spinner("Reading the store (documents, ids, metadata)…"):
                    loaded = S.dataset_from_store(uri)
            except StoreError as e:
                st.error(md(str(e)))
            else:
                st.session_state["uploaded_dataset"] = loaded
                _switched(f"Opened {uri}: {len(loaded.documents)} documents. A store holds no questions: type "
                          "your own queries on the Query explorer, and calibrate on clean questions you type.")
    else:
        up = st.file_uploader("Corpus file (.jsonl with id/text[/title], .csv, .parquet)",
                              type=["jsonl", "csv", "parquet"], key="upload")
        if up is not None and st.button("Load upload", key="load_upload"):
            try:
                loaded = S.dataset_from_upload(up.name, up.getvalue())
            except DatasetError as e:
                _dataset_errors(e)
            else:
                st.session_state["uploaded_dataset"] = loaded
                _switched(f"Loaded {up.name}: {len(loaded.documents)} documents, {len(loaded.queries)} questions. "
                          "Every page now works on it: type your own queries on the Query explorer.")

    try:
        ds = state.dataset()
    except DatasetError as e:
        _dataset_errors(e)
        st.info("Choose another dataset above (the bundled demo always works).")
        st.stop()

    flash = st.session_state.pop("corpus_flash", None)
    if flash:
        st.success(md(flash))
    stats = S.corpus_stats(ds)
    st.subheader(md(ds.name))
    st.caption(md(stats["summary"]))
    m = st.columns(5)
    m[0].metric("documents", stats["documents"])
    m[1].metric("questions", stats["queries"])
    m[2].metric("median words", f"{stats['words_median']:.0f}")
    m[3].metric("attack targets", stats["targets"])
    m[4].metric("corpus version", stats["content_hash"], help="First characters of the corpus content hash.")
    c1, c2 = st.columns([2, 1])
    c1.plotly_chart(F.lengths_histogram(stats["lengths"]), width="stretch")
    fam = stats["attack_families"]
    c2.write("**Attack families** (attacks.jsonl)")
    if fam:
        c2.dataframe(pd.DataFrame({"family": list(fam), "poison documents": list(fam.values())}),
                     hide_index=True, width="stretch")
    else:
        c2.info("No attacks.jsonl: only the clean condition. Generate poisons in the *Attack lab* "
                "or with `sieve attack`.")
    with st.expander("Browse documents (text shown verbatim)"):
        st.dataframe(pd.DataFrame([{"id": d.id, "title": d.title, "text": d.text} for d in ds.documents[:500]]),
                     hide_index=True, width="stretch", height=300,
                     column_config={"id": T.id_column("id", [d.id for d in ds.documents[:500]])})

    st.subheader("Index")
    with st.status("Opening the retriever index (built once, then reused)…", expanded=False) as status:
        idx = state.index()
        rep = idx.build_report
        status.update(label=f"Index ready: {len(idx)} documents, {idx.dim:d}-d vectors ({md(idx.model_id)})",
                      state="complete")
    if rep is not None:
        st.caption(f"Index {md(rep.action)}: {md(rep.reason)} — {rep.n_embedded:d} documents embedded in {rep.seconds:.1f} s")

    st.subheader("RSG corpus audit")
    st.caption("RAGSieve RSG (§4): a kNN graph over retriever vectors; documents in unusually dense, lexically "
               "diverse neighbourhoods (coordinated poisons) or with mixed writing systems are flagged for "
               "quarantine. Quarantine is never deletion.")
    conds = S.conditions(ds)
    cond = st.selectbox("Snapshot", conds, index=conds.index(st.session_state["condition"])
                        if st.session_state["condition"] in conds else 0, key="audit_condition",
                        help="clean corpus, or clean corpus + all documents of one attack family")
    if st.toggle("Run the RSG audit", value=True, key="run_audit"):
        report, ms = S.timed(state.audit, cond, progress=True)
        audit = report.audit
        table = A.audit_table(report)
        flagged = table[table["flagged"] == 1]
        a = st.columns(4)
        a[0].metric("flagged", f"{len(flagged)} / {len(table)}")
        a[1].metric("f_I (integrity)", f"{audit.f_I:.3f}")
        a[2].metric("f_T (topology budget)", f"{audit.f_T:.3f}")
        if cond != S.CLEAN:
            pois = table[table["poison"] == 1]
            a[3].metric("poisons flagged", f"{int(pois['flagged'].sum())} / {len(pois)}")
        else:
            a[3].metric("audit time", f"{ms:.0f} ms")
        if len(flagged):
            st.dataframe(T.shown(flagged.sort_values("score", ascending=False)), hide_index=True, width="stretch",
                         column_config={**{c: st.column_config.Column(c, help=h) for c, h in A.AUDIT_COLUMN_HELP.items()
                                           if c in flagged.columns},
                                        "id": T.id_column("id", flagged["id"].tolist())})
            if st.button(f"Record these {len(flagged)} flags in the quarantine ledger", key="record_flags"):
                n, added = A.record_audit_flags(report, ds.name, state.ledger())
                st.success(f"{n:d} flags, {added:d} new open alerts — triage them on the *Alerts* page.")
        else:
            st.info("RSG flags no document of this snapshot: nothing to record in the quarantine ledger.")
