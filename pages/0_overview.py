"""Overview: what Sieve does and the headline numbers of the shipped demo run (loads in seconds)."""
import pandas as pd
import streamlit as st

from sieve.dashboard import session as S
from sieve.dashboard import state
from sieve.dashboard.safe import md
from sieve.runtime import configure_process_environment

configure_process_environment()   # also when this page runs on its own (AppTest, benches)

state.init_state()
state.sidebar_status()
st.title("Sieve — knowledge-poisoning defense for RAG")

with state.page_guard("Overview"):
    st.markdown(
        "Retrieval-augmented generation answers questions from retrieved passages. **Knowledge poisoning** "
        "(PoisonedRAG) slips a few crafted passages into the corpus so that the retriever ranks them first "
        "and the generator repeats a false *target answer*. Sieve implements two defenses side by side — "
        "**TRIS** (judge-space clustering, structural prefix filter, LLM consistency check) and **RAGSieve** "
        "(RSQ query-local contrast, RSG corpus graph audit) — with baselines, attacks and evaluation."
    )
    st.subheader("First steps")
    st.markdown(
        "1. **Query explorer** — pick a demo question and an attack condition: each defense's decision per "
        "passage, and the context the generator would read (Sieve's `fusion` first, then the papers' methods).\n"
        "2. **Attack lab** — poison one question in a sandbox and watch the answer flip and each defense respond "
        "(*Class mode* runs the whole demo in under a minute).\n"
        "3. **Your own corpus** — on *Corpus & index*, upload a `.jsonl` (one `{\"id\", \"text\", \"title\"}` "
        "per line), `.csv` or `.parquet` file, or open a dataset folder (`corpus.jsonl`, optional `queries.jsonl`); "
        "every page then works on it: type your own queries on the *Query explorer*, and give it a few clean "
        "questions your corpus answers to calibrate the defenses that learn a threshold (a corpus without "
        "`queries.jsonl` has none of its own). From the command line: `sieve index DATASET --precompute`."
    )
    c1, c2, c3 = st.columns(3)
    c1.info("**Analysts** — start at *Alerts* (quarantine queue) and *Query explorer* (why was a passage removed?).")
    c2.info("**Researchers** — *Trade-offs*: move thresholds and watch poison-in-context, clean removal and ASR.")
    c3.info("**Teachers** — *Attack lab*: poison a question live and watch the answer flip and the defenses respond.")

    ds = state.dataset()
    stats = S.corpus_stats(ds)
    st.subheader("Dataset")
    m = st.columns(4)
    m[0].metric("documents", stats["documents"])
    m[1].metric("questions", stats["queries"])
    m[2].metric("attack targets", stats["targets"])
    m[3].metric("attack families", len(stats["attack_families"]))

    st.subheader("Demo evaluation run")
    run_dir = st.session_state["run_dir"]
    try:
        run = state.run(run_dir)
    except Exception as e:  # noqa: BLE001
        st.info("No evaluation run to show yet: " + state.friendly(e) + ". Create one with "
                   "`sieve eval demo_data --out demo_data/runs/demo`, or choose a run directory on *Trade-offs*.")
    else:
        other = state.run_corpus_note(run)
        if other:
            st.info(md(other))
        df = pd.DataFrame(run.summary.get("results", []))
        cols = [c for c in ("defense", "attack", "queries", "poison_in_context_rate", "poison_removal_rate",
                            "clean_removal_rate", "auroc", "asr", "clean_acc", "latency_ms_p50") if c in df.columns]
        st.caption(f"Run {md(S.display_path(run.path))} — {len(run.records)} records, defenses: "
                   f"{md(', '.join(run.defenses))}. Sieve's recommended `fusion` is measured in the detection run "
                   "(all targets, no answers; README \"What the demo evaluation shows\", *Trade-offs* ROC curves); "
                   "its rows follow the table on the demo.")
        from sieve.dashboard import tables as T
        from sieve.dashboard.runs import METRIC_HELP

        labels = {"queries": "n (queries)", "poison_in_context_rate": "poison in context",
                  "poison_removal_rate": "poison removal", "clean_removal_rate": "clean removal", "auroc": "AUROC",
                  "asr": "ASR", "clean_acc": "clean accuracy", "latency_ms_p50": "latency p50 (ms)"}
        config = {c: st.column_config.Column(labels.get(c, c), help=METRIC_HELP.get(c, "")) for c in cols}
        st.dataframe(T.shown(df[cols], "n/a"), hide_index=True, width="stretch", column_config=config)
        from sieve.dashboard.runs import default_roc_run

        roc = default_roc_run()
        if "fusion" not in set(df.get("defense", [])) and roc is not None and S.is_demo_dataset(ds):
            det = pd.DataFrame([r for r in state.run_summary(str(roc)).get("results", []) if r.get("defense") == "fusion"])
            if not det.empty:
                st.caption(f"Sieve's recommended fusion, from the detection run {md(S.display_path(roc))} (every "
                           "attack target, no generated answers, so ASR and clean accuracy are n/a):")
                dcols = [c for c in cols if c in det.columns]
                st.dataframe(T.shown(det[dcols], "n/a"), hide_index=True, width="stretch",
                             column_config={c: config[c] for c in dcols})
    with st.expander("About the methods"):
        from sieve.dashboard.glossary import methods_table

        st.markdown("Each defense follows a published method; the paper and the section of the project's "
                    "algorithm notes (`docs/algorithms.md` in the repository) that describe it are listed "
                    "here. Attack families are described on the *Attack lab* page.")
        st.dataframe(pd.DataFrame(methods_table()), hide_index=True, width="stretch",
                     column_config={"what it does": st.column_config.TextColumn(width="large")})
    st.caption("Models load on first use of a page that needs them (a spinner shows progress); "
               "afterwards they stay in memory for the whole session.")
