"""Trade-offs: move thresholds / switch layers and see poison-in-context, ASR, clean removal and
clean accuracy recomputed live from the cached raw scores of a run directory (no model re-runs)."""
import math

import pandas as pd
import streamlit as st

from sieve.dashboard import figures as F
from sieve.dashboard import runs as R
from sieve.dashboard import session as S
from sieve.dashboard import state
from sieve.dashboard import tables as T
from sieve.dashboard.safe import md
from sieve.runtime import configure_process_environment

configure_process_environment()   # also when this page runs on its own (AppTest, benches)

state.init_state()
state.sidebar_status()
st.title("Trade-offs")

METRICS = ["poison_in_context_rate", "asr", "poison_removal_rate", "clean_removal_rate", "clean_acc", "auroc"]
#: Below this many queries (answered queries for ASR / clean accuracy) a change is not shown as a delta:
#: one query moves a rate by ≥ 0.2, and the Wilson 95 % interval spans most of [0, 1].
MIN_N_DELTA = 5


def reset_knobs() -> None:
    """Back to the run's recorded thresholds and k_ctx (runs before the page draws its widgets)."""
    for k in [k for k in st.session_state if isinstance(k, str) and (k.startswith(("t_on_", "t_")) and k not in
                                                                       ("t_run_dir", "t_def", "t_att", "t_roc_att", "t_reset",
                                                                        "t_roc_full", "t_metric"))]:
        del st.session_state[k]


def fmt(v) -> str:
    return "n/a" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{float(v):.3f}"


with state.page_guard("Trade-offs"):
    run_dir = st.text_input("Run directory (written by `sieve eval … --out DIR`)", value=st.session_state["run_dir"],
                            key="t_run_dir", help="The answers run: ASR and clean accuracy come from its generated "
                                                  "answers. The shipped demo run has n = 6 queries per condition.")
    st.session_state["run_dir"] = run_dir
    if R.allowed_run_dir(run_dir) is None:   # only run directories under the allowed roots (issue 26)
        st.warning(md(R.run_dir_refusal(run_dir)))
        st.stop()
    try:
        run = state.run(run_dir)
    except Exception as e:  # noqa: BLE001
        st.warning(state.friendly(e) + "\n\nCreate a run with `sieve eval demo_data --out demo_data/runs/demo` "
                   "(add `--generate` for answers and ASR) and enter its directory above.")
        st.stop()
    other = state.run_corpus_note(run)
    if other:
        st.info(md(other))
    n_per = {c: sum(1 for r in run.records if r["condition"] == c and r["defense"] == run.defenses[0])
             for c in run.conditions}
    st.caption(f"{len(run.records)} records · defenses {md(', '.join(run.defenses))} · n per condition: "
               + md(", ".join(f"{c} {n}" for c, n in n_per.items()))
               + f" · answers {'yes' if run.has_answers else 'no (ASR needs --generate)'}")

    h1, h2 = st.columns([4, 1])
    h1.subheader("Knobs")
    h2.button("Reset to the run's thresholds", key="t_reset", on_click=reset_knobs,
              help="Every threshold, layer switch and k_ctx back to what the run recorded.")
    k_ctx = st.slider("k_ctx (context size)", 1, 10, run.k_ctx, key="t_kctx",
                      help="Passages handed to the generator after filtering and refill. Every metric is recomputed "
                           "for the new size from the stored rankings and decisions.")
    values: dict = {}
    knobs_all: list = []
    run_knobs = state.run_knobs(run_dir)
    tunable = [n for n in run.defenses if any(k["key"].startswith(f"{n}:") for k in run_knobs)]
    for name in run.defenses:
        knobs = [k for k in run_knobs if k["key"].split(":", 1)[0] == name]
        if not knobs:
            continue
        # the first defense with thresholds is open (the first defense of a run is usually `none`)
        with st.expander(md(name), expanded=name == tunable[0] or len(tunable) <= 3):
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
    rows = state.tradeoff_rows(run_dir, overrides, k_ctx)
    base = state.tradeoff_rows(run_dir, {}, run.k_ctx)
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

    def n_behind(df: pd.DataFrame, key: str, cond: str) -> tuple[int, int]:
        """(queries behind the value, queries of the cell): answered queries for the answer metrics."""
        n = int(cell(df, focus_def, cond, "queries") or 0)
        if key in ("asr", "clean_acc"):
            stale = cell(df, focus_def, cond, "n_stale_answers")
            return max(0, n - int(0 if stale is None or pd.isna(stale) else stale)), n
        return n, n

    mcols = st.columns(4)
    too_few: list[str] = []
    for col, (label, key, cond) in zip(mcols, [("poison in context", "poison_in_context_rate", focus_att),
                                               ("ASR", "asr", focus_att),
                                               ("clean removal", "clean_removal_rate", S.CLEAN),
                                               ("clean accuracy", "clean_acc", S.CLEAN)]):
        now, was = cell(rows, focus_def, cond, key), cell(base, focus_def, cond, key)
        (n, n_all), (n_was, _) = n_behind(rows, key, cond), n_behind(base, key, cond)
        delta = None
        if now is not None and was is not None and not pd.isna(now) and not pd.isna(was) \
                and abs(float(now) - float(was)) >= 5e-4:
            if min(n, n_was) >= MIN_N_DELTA:
                delta = f"{float(now) - float(was):+.3f}"
            else:
                too_few.append(f"{label} (n = {min(n, n_was)})")
        n_text = f"n = {n} of {n_all} answered" if key in ("asr", "clean_acc") and n != n_all else f"n = {n}"
        col.metric(f"{md(label)} · {md(n_text)}", fmt(now) if n else "n/a", delta,
                   delta_color="inverse" if key != "clean_acc" else "normal",
                   help=R.METRIC_HELP[key] + f" This cell: {md(n_text)} queries ({md(cond)}); the arrow compares "
                                             f"with the recorded thresholds and k_ctx, shown from n = {MIN_N_DELTA}.")
    if too_few:
        st.caption("No change shown for " + md(", ".join(too_few)) + f": fewer than {MIN_N_DELTA} queries behind "
                   "the value, too few to say whether it moved (read the detection run's ROC below instead).")
    show = R.display_frame(rows)
    st.dataframe(T.shown(show, "n/a"), hide_index=True, width="stretch",
                 column_config={c: st.column_config.Column(c, help=R.METRIC_HELP[c]) for c in show.columns})
    st.caption("Intervals are Wilson 95 % intervals over the row's n queries; with n = 6 they are wide — read the "
               "detection run below for tighter numbers.")

    st.subheader("ROC curves")

    @st.fragment
    def roc_section(values: dict, knobs_all: list, focus_att: str) -> None:
        """Reruns alone when its own toggle / attack changes (the curves are cached per run and attack)."""
        roc_dir = R.default_roc_run()
        roc_run = run
        if roc_dir is not None and st.toggle("Use the shipped detection run for ROC (all targets, no LLM)", value=True,
                                             key="t_roc_full"):
            roc_run = state.run(str(roc_dir))
        roc_path = str(roc_run.path)
        roc_atts = [c for c in roc_run.conditions if c != S.CLEAN] or [S.CLEAN]
        roc_att = st.selectbox("Attack family for the ROC", roc_atts, key="t_roc_att",
                               index=roc_atts.index(focus_att) if focus_att in roc_atts else 0)
        curves, points = {}, {}
        roc_knobs = knobs_all if roc_run is run else state.run_knobs(roc_path)
        for name, rd in state.roc_curves(roc_path, roc_att).items():
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

    roc_section(values, knobs_all, focus_att)

    c1, c2 = st.columns(2)
    with c1:
        use_asr = run.has_answers and k_ctx == run.k_ctx
        axes_note = None
        if run.has_answers and not use_asr:
            axes_note = (f"k_ctx {k_ctx} ≠ the run's {run.k_ctx}: no answers at this size, so poison-in-context "
                         "vs. 1 − clean removal (not ASR vs. accuracy)")
        st.plotly_chart(F.asr_utility(rows, use_asr, axes_note), width="stretch")
        st.caption("Each point is one defense: the mean over attack families of the table's values, with the "
                   "Wilson intervals as error bars.")
    with c2:
        cols_ = [m for m in METRICS if m in rows.columns]
        metric = st.selectbox("Per-attack metric", cols_, key="t_metric", help=R.METRIC_HELP["attack"])
        st.plotly_chart(F.per_attack(rows, metric), width="stretch")
        st.caption(md(R.METRIC_HELP[metric]))
