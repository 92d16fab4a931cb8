"""Trade-offs: move thresholds / switch layers and see poison-in-context, ASR, clean removal and
clean accuracy recomputed live from the cached raw scores of a run directory (no model re-runs)."""
import math

import pandas as pd
import streamlit as st

from sieve.dashboard import figures as F
from sieve.dashboard import runs as R
from sieve.dashboard import session as S
from sieve.dashboard import state
from sieve.dashboard.safe import md
from sieve.runtime import configure_process_environment

configure_process_environment()   # also when this page runs on its own (AppTest, benches)

state.init_state()
state.sidebar_status()
st.title("Trade-offs")

METRICS = ["poison_in_context_rate", "asr", "poison_removal_rate", "clean_removal_rate", "clean_acc", "auroc"]


def fmt(v) -> str:
    return "n/a" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{float(v):.3f}"


with state.page_guard("Trade-offs"):
    run_dir = st.text_input("Run directory (written by `sieve eval … --out DIR`)", value=st.session_state["run_dir"],
                            key="t_run_dir", help="The answers run: ASR and clean accuracy come from its generated "
                                                  "answers. The shipped demo run has n = 6 queries per condition.")
    st.session_state["run_dir"] = run_dir
    try:
        run = state.run(run_dir)
    except Exception as e:  # noqa: BLE001
        st.warning(state.friendly(e) + "\n\nCreate a run with `sieve eval demo_data --out demo_data/runs/demo` "
                   "(add `--generate` for answers and ASR) and enter its directory above.")
        st.stop()
    n_per = {c: sum(1 for r in run.records if r["condition"] == c and r["defense"] == run.defenses[0])
             for c in run.conditions}
    st.caption(f"{len(run.records)} records · defenses {md(', '.join(run.defenses))} · n per condition: "
               + md(", ".join(f"{c} {n}" for c, n in n_per.items()))
               + f" · answers {'yes' if run.has_answers else 'no (ASR needs --generate)'}")

    st.subheader("Knobs")
    k_ctx = st.slider("k_ctx (context size)", 1, 10, run.k_ctx, key="t_kctx",
                      help="Passages handed to the generator after filtering and refill. Every metric is recomputed "
                           "for the new size from the stored rankings and decisions.")
    values: dict = {}
    knobs_all: list = []
    for name in run.defenses:
        knobs = R.threshold_knobs(run, name)
        if not knobs:
            continue
        with st.expander(md(name), expanded=name == run.defenses[0] or len(run.defenses) <= 3):
            cols = st.columns(max(1, len(knobs)))
            for col, k in zip(cols, knobs):
                on = col.toggle(f"{md(k['label'])} on", value=True, key=f"t_on_{k['key']}",
                                help="Off = this threshold removes nothing (set to +∞).")
                lo, hi = float(k["lo"]), float(k["hi"])
                step = max((hi - lo) / 200.0, 1e-4)
                v = col.slider(f"{md(k['label'])} — removes a passage when its score ≥ this value", lo, hi,
                               float(k["value"]), step, key=f"t_{k['key']}", disabled=not on, format="%.3f",
                               help="Direction: raise it to remove fewer passages (fewer false alarms, more poisons "
                                    "kept); lower it to remove more. The range spans the recorded scores.")
                values[k["key"]] = v if on else float("inf")
            knobs_all += knobs
    if any(k["layer"] == "L2" for k in knobs_all):
        st.caption("TRIS: L1 (clustering), C, and L3 need a rerun; switching L2 off keeps documents L1 did not remove "
                   "(L3 never saw them, so it fails open).")
    overrides = R.overrides_from_knobs(values, knobs_all)
    rows = R.tradeoff_rows(run, overrides, k_ctx)
    base = R.tradeoff_rows(run, {}, run.k_ctx)
    note = R.answers_status(rows, k_ctx, run.k_ctx, run.has_answers)
    if note:
        st.warning(md(note))

    st.subheader("Metrics (live)")
    attacks = [c for c in run.conditions if c != S.CLEAN] or [S.CLEAN]
    c1, c2 = st.columns(2)
    focus_def = c1.selectbox("Defense", run.defenses, key="t_def")
    focus_att = c2.selectbox("Attack", attacks, key="t_att")

    def cell(df: pd.DataFrame, d: str, a: str, key: str):
        sub = df[(df["defense"] == d) & (df["attack"] == a)]
        return None if sub.empty or key not in sub.columns else sub.iloc[0][key]

    mcols = st.columns(4)
    for col, (label, key, cond) in zip(mcols, [("poison in context", "poison_in_context_rate", focus_att),
                                               ("ASR", "asr", focus_att),
                                               ("clean removal", "clean_removal_rate", S.CLEAN),
                                               ("clean accuracy", "clean_acc", S.CLEAN)]):
        now, was = cell(rows, focus_def, cond, key), cell(base, focus_def, cond, key)
        delta = None
        if now is not None and was is not None and not pd.isna(now) and not pd.isna(was) \
                and abs(float(now) - float(was)) >= 5e-4:
            delta = f"{float(now) - float(was):+.3f}"
        n = cell(rows, focus_def, cond, "queries")
        col.metric(md(label), fmt(now), delta, delta_color="inverse" if key != "clean_acc" else "normal",
                   help=R.METRIC_HELP[key] + f" This cell: n = {int(n or 0)} queries ({md(cond)}); the arrow compares "
                                             "with the recorded thresholds and k_ctx.")
    show = R.display_frame(rows)
    st.dataframe(show, hide_index=True, width="stretch",
                 column_config={c: st.column_config.Column(c, help=R.METRIC_HELP[c]) for c in show.columns})
    st.caption("Intervals are Wilson 95 % intervals over the row's n queries; with n = 6 they are wide — read the "
               "detection run below for tighter numbers.")

    st.subheader("ROC curves")
    roc_dir = R.default_roc_run()
    roc_run = run
    if roc_dir is not None and st.toggle("Use the shipped detection run for ROC (all targets, no LLM)", value=True,
                                         key="t_roc_full"):
        roc_run = state.run(str(roc_dir))
    roc_atts = [c for c in roc_run.conditions if c != S.CLEAN] or [S.CLEAN]
    roc_att = st.selectbox("Attack family for the ROC", roc_atts, key="t_roc_att",
                           index=roc_atts.index(focus_att) if focus_att in roc_atts else 0)
    curves, points = {}, {}
    roc_knobs = knobs_all if roc_run is run else [k for d in roc_run.defenses for k in R.threshold_knobs(roc_run, d)]
    for name in roc_run.defenses:
        rd = R.roc_data(roc_run, name, roc_att)
        if rd is None:
            continue
        curves[name] = rd
        knob = next((k for k in roc_knobs if k["key"].startswith(f"{name}:") and k["layer"] in (None, "RSQ", "L2")), None)
        if knob is not None:
            points[name] = R.operating_point(rd["pos"], rd["neg"], values.get(knob["key"], knob["value"]))
    n_q = sum(1 for r in roc_run.records if r["condition"] == roc_att and r["defense"] == roc_run.defenses[0])
    st.caption(f"Run {md(roc_run.path.name)}: {n_q:d} attacked queries of {md(roc_att)}; positives = that family's "
               "poisons each defense scored, negatives = the scores it gave clean passages in the clean condition. "
               "Defenses that do not score (none, or a fixed rule) have no curve. ◆ = the current threshold.")
    if curves:
        st.plotly_chart(F.roc_figure(curves, points), width="stretch")
    else:
        st.info("No scored poisons and clean negatives for this attack in the run.")

    c1, c2 = st.columns(2)
    with c1:
        st.plotly_chart(F.asr_utility(rows, run.has_answers and k_ctx == run.k_ctx), width="stretch")
        st.caption("Each point is one defense: the mean over attack families of the table's values, with the "
                   "Wilson intervals as error bars.")
    with c2:
        cols_ = [m for m in METRICS if m in rows.columns]
        metric = st.selectbox("Per-attack metric", cols_, key="t_metric", help=R.METRIC_HELP["attack"])
        st.plotly_chart(F.per_attack(rows, metric), width="stretch")
        st.caption(md(R.METRIC_HELP[metric]))
