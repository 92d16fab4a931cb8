"""Trade-offs: move thresholds / switch layers and see poison-in-context, ASR, clean removal and
clean accuracy recomputed live from the cached raw scores of a run directory (no model re-runs)."""
import math

import pandas as pd
import streamlit as st

from sieve.dashboard import figures as F
from sieve.dashboard import runs as R
from sieve.dashboard import session as S
from sieve.dashboard import state

state.init_state()
state.sidebar_status()
st.title("Trade-offs")

METRICS = ["poison_in_context_rate", "asr", "poison_removal_rate", "clean_removal_rate", "clean_acc", "auroc"]


def fmt(v) -> str:  # noqa: ANN001
    return "n/a" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{float(v):.3f}"


with state.page_guard("Trade-offs"):
    run_dir = st.text_input("Run directory (written by `sieve eval … --out DIR`)", value=st.session_state["run_dir"],
                            key="t_run_dir")
    st.session_state["run_dir"] = run_dir
    try:
        run = state.run(run_dir)
    except Exception as e:  # noqa: BLE001
        st.warning(f"{state.friendly(e)}\n\nCreate a run with `sieve eval demo_data --out demo_data/runs/demo` "
                   "(add `--generate` for answers and ASR) and enter its directory above.")
        st.stop()
    st.caption(f"{len(run.records)} records · defenses {', '.join(run.defenses)} · conditions "
               f"{', '.join(run.conditions)} · answers {'yes' if run.has_answers else 'no (ASR needs --generate)'}")

    st.subheader("Knobs")
    k_ctx = st.slider("k_ctx (context size)", 1, 10, run.k_ctx, key="t_kctx")
    values: dict = {}
    knobs_all: list = []
    for name in run.defenses:
        knobs = R.threshold_knobs(run, name)
        if not knobs:
            continue
        with st.expander(f"{name}", expanded=name == run.defenses[0] or len(run.defenses) <= 3):
            cols = st.columns(max(1, len(knobs)))
            for col, k in zip(cols, knobs):
                on = col.toggle(f"{k['label']} on", value=True, key=f"t_on_{k['key']}")
                lo, hi = float(k["lo"]), float(k["hi"])
                step = max((hi - lo) / 200.0, 1e-4)
                v = col.slider(k["label"], lo, hi, float(k["value"]), step, key=f"t_{k['key']}", disabled=not on,
                               format="%.3f")
                values[k["key"]] = v if on else float("inf")
            knobs_all += knobs
    if any(k["layer"] == "L2" for k in knobs_all):
        st.caption("TRIS: L1 (clustering), C, and L3 need a rerun; switching L2 off keeps documents L1 did not remove "
                   "(L3 never saw them, so it fails open).")
    overrides = R.overrides_from_knobs(values, knobs_all)
    rows = R.tradeoff_rows(run, overrides, k_ctx)
    base = R.tradeoff_rows(run, {}, run.k_ctx)

    st.subheader("Metrics (live)")
    attacks = [c for c in run.conditions if c != S.CLEAN] or [S.CLEAN]
    c1, c2 = st.columns(2)
    focus_def = c1.selectbox("Defense", run.defenses, key="t_def")
    focus_att = c2.selectbox("Attack", attacks, key="t_att")

    def cell(df: pd.DataFrame, d: str, a: str, key: str):  # noqa: ANN202
        sub = df[(df["defense"] == d) & (df["attack"] == a)]
        return None if sub.empty or key not in sub.columns else sub.iloc[0][key]

    mcols = st.columns(4)
    for col, (label, key, cond) in zip(mcols, [("poison in context", "poison_in_context_rate", focus_att),
                                               ("ASR", "asr", focus_att),
                                               ("clean removal", "clean_removal_rate", S.CLEAN),
                                               ("clean accuracy", "clean_acc", S.CLEAN)]):
        now, was = cell(rows, focus_def, cond, key), cell(base, focus_def, cond, key)
        delta = None
        if now is not None and was is not None and not pd.isna(now) and not pd.isna(was):
            delta = f"{float(now) - float(was):+.3f}"
        col.metric(label, fmt(now), delta, delta_color="inverse" if key != "clean_acc" else "normal")
    stale = int(rows.get("n_stale_answers", pd.Series([0])).fillna(0).sum()) if "n_stale_answers" in rows else 0
    if stale:
        st.caption(f"{stale} answers belong to contexts that changed and are left out of ASR / accuracy "
                   "(rerun with --generate for exact numbers).")
    show = ["defense", "attack", "queries"] + [m for m in METRICS if m in rows.columns]
    st.dataframe(rows[show], hide_index=True, width="stretch")

    st.subheader("ROC curves")
    curves, points = {}, {}
    for name in run.defenses:
        rd = R.roc_data(run, name, focus_att)
        if rd is None:
            continue
        curves[name] = rd
        knob = next((k for k in knobs_all if k["key"].startswith(f"{name}:") and k["layer"] in (None, "RSQ", "L2")), None)
        if knob is not None:
            points[name] = R.operating_point(rd["pos"], rd["neg"], values.get(knob["key"], knob["value"]))
    if curves:
        st.plotly_chart(F.roc_figure(curves, points), width="stretch")
    else:
        st.info("No scored poisons and clean negatives for this attack in the run.")

    c1, c2 = st.columns(2)
    with c1:
        st.plotly_chart(F.asr_utility(rows, run.has_answers), width="stretch")
    with c2:
        metric = st.selectbox("Per-attack metric", [m for m in METRICS if m in rows.columns], key="t_metric")
        st.plotly_chart(F.per_attack(rows, metric), width="stretch")
