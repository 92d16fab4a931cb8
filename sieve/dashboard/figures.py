"""Plotly figure builders for the dashboard. Inputs are library outputs (evidence dicts, data frames);
document text only ever reaches a figure as escaped hover text (:func:`safe.hover_text`), and every id
or name shown as a label, tick, legend entry or hover goes through :func:`sieve.escape.plotly_label`."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Sequence

import numpy as np
import plotly.graph_objects as go

from sieve.dashboard.safe import hover_text
from sieve.escape import plotly_label

if TYPE_CHECKING:
    import pandas as pd

COMPONENT_COLORS = {"E_a": "#d62728", "E_i": "#9467bd", "E_p": "#ff7f0e", "E_s": "#1f77b4"}
COMPONENT_NAMES = {"E_a": "E_a answer-anchor", "E_i": "E_i script integrity", "E_p": "E_p surprisal",
                   "E_s": "E_s alignment jump"}
_LAYOUT = dict(margin=dict(l=40, r=20, t=90, b=40), height=340, template="plotly_white",
               legend=dict(orientation="h", yanchor="bottom", y=1.0, xanchor="left", x=0))


def _fig(title: str, **kw: Any) -> go.Figure:
    fig = go.Figure()
    fig.update_layout(title=dict(text=title, font=dict(size=14), y=0.98, yanchor="top"), **{**_LAYOUT, **kw})
    return fig


def rsq_components(rows: dict[str, dict[str, Any]], eta_q: float = 1.0, ids: Sequence[str] | None = None) -> go.Figure:
    """Stacked bar of E_a, E_i, E_p, E_s per candidate with the decision threshold η_Q (§3.6)."""
    order = list(ids) if ids is not None else list(rows)
    order = [i for i in order if i in rows]
    labels = [plotly_label(f"#{rows[i].get('rank', '?')} {i[:24]}") for i in order]   # ids are untrusted
    fig = _fig("RSQ evidence S = E_a + E_i + E_p + E_s (top-5 vs ranks 6–20)", barmode="stack")
    for comp in ("E_a", "E_i", "E_p", "E_s"):
        fig.add_bar(x=labels, y=[float(rows[i].get(comp, 0.0)) for i in order], name=COMPONENT_NAMES[comp],
                    marker_color=COMPONENT_COLORS[comp])
    fig.add_hline(y=eta_q, line_dash="dash", line_color="black", annotation_text=f"η_Q = {eta_q:g}",
                  annotation_position="top left")
    fig.update_yaxes(title="evidence")
    return fig


def _rolling(x: np.ndarray, w: int) -> np.ndarray:
    if x.size < w:
        return np.array([x.mean()]) if x.size else np.zeros(0)
    c = np.concatenate(([0.0], np.cumsum(x)))
    return (c[w:] - c[:-w]) / w


#: What the surprisal plot's marks mean (shown under it on the explorer).
SURPRISAL_HELP = ("Grey: the small language model's surprisal of each token (negative log-likelihood, nats). Coloured "
                  "lines: its rolling mean over windows of 8 and 16 tokens. Shaded band: the burst window, where the "
                  "rolling mean peaks (a stitched trigger + payload often reads as a burst of unusual text). Dotted "
                  "line: the gate, the median rolling mean + τ_w; a peak above it is surprisal evidence (E_p > 0). "
                  "Dashed vertical line: the change point, the boundary with the largest jump in mean surprisal.")


def _doc_title(title: str, doc: str | None) -> str:
    """A figure title that names the document it shows (the id escaped for plotly)."""
    return f"{plotly_label(doc)} — {title}" if doc else title


def surprisal_trace(ev: dict[str, Any], doc: str | None = None) -> go.Figure:
    """Per-token NLL with the rolling means of each window, the burst window (shaded), the change
    point and the gate (lower median + τ_w) marked (§3.4); ``doc`` names the document in the title."""
    s = ev.get("surprisal") or {}
    nll = np.asarray(s.get("nll") or [], float)
    tokens = s.get("tokens")
    fig = _fig(_doc_title(f"surprisal trace (R = {float(s.get('ratio', 0.0)):.2f}, "
                          f"E_p = {float(ev.get('E_p', 0.0)):.3f})", doc))
    if nll.size == 0:
        fig.add_annotation(text="no trace", showarrow=False)
        return fig
    hover = [hover_text(t, 30) for t in tokens] if tokens and len(tokens) == nll.size else None
    fig.add_scatter(x=np.arange(nll.size), y=nll, mode="lines", name="token NLL (nats)", line=dict(color="#999", width=1),
                    hovertext=hover, hoverinfo="x+y+text" if hover else "x+y")
    colors = {8: "#ff7f0e", 16: "#d62728"}
    for w in s.get("windows") or []:
        width = int(w["w"])
        means = _rolling(nll, width)
        xs = np.arange(means.size) + (width - 1) / 2.0
        col = colors.get(width, "#1f77b4")
        fig.add_scatter(x=xs, y=means, mode="lines", name=f"rolling mean w={width}", line=dict(color=col, width=2))
        if means.size > 1:
            gate = float(means.max()) - float(w.get("burst", 0.0)) + float(w["tau"])
            fig.add_scatter(x=[0, nll.size - 1], y=[gate, gate], mode="lines", name=f"gate w={width} (median + τ)",
                            line=dict(color=col, dash="dot", width=1))
        if w.get("burst_start") is not None:
            b = int(w["burst_start"])
            fig.add_vrect(x0=b, x1=b + width - 1, fillcolor=col, opacity=0.12, line_width=0)
            fig.add_scatter(x=[None], y=[None], mode="markers", name=f"shaded: burst window w={width}",
                            marker=dict(symbol="square", size=12, color=col, opacity=0.3), hoverinfo="skip")
        if w.get("change_at") is not None:
            fig.add_vline(x=int(w["change_at"]), line_dash="dash", line_color=col)
    fig.update_xaxes(title="token position")
    fig.update_yaxes(title="NLL (nats)")
    return fig


def alignment_curve(ev: dict[str, Any], doc: str | None = None) -> go.Figure:
    """BERTScore-F1 of the query against each 32-token window, largest jump highlighted (§3.5);
    ``doc`` names the document in the title."""
    a = ev.get("alignment") or {}
    f1 = np.asarray(a.get("f1") or [], float)
    fig = _fig(_doc_title(f"query alignment by window (J = {float(ev.get('J', 0.0)):.3f}, "
                          f"p_s = {float(ev.get('p_s', 1.0)):.3f})", doc))
    if f1.size == 0:
        fig.add_annotation(text="no windows", showarrow=False)
        return fig
    starts = a.get("window_starts") or list(range(f1.size))
    xs = list(starts)[: f1.size] if len(starts) >= f1.size else list(range(f1.size))
    fig.add_scatter(x=xs, y=f1, mode="lines+markers", name="window F1", line=dict(color="#1f77b4"))
    j = a.get("jump_index")
    if j is not None and 0 < int(j) < f1.size:
        j = int(j)
        fig.add_scatter(x=[xs[j - 1], xs[j]], y=[f1[j - 1], f1[j]], mode="lines+markers", name="largest jump",
                        line=dict(color="#d62728", width=4))
    fig.update_xaxes(title="window start (token)")
    fig.update_yaxes(title="BERTScore F1")
    return fig


#: How the Geometry plots mark a document's quarantine-ledger state (the explorer's wording): excluded
#: documents (open / confirmed alerts) in black squares, restored ones (dismissed / rolled back) in blue.
LEDGER_MARKS = {"excluded (open alert)": ("square-open", "#444444"),
                "excluded (confirmed poison)": ("square-open", "#000000"),
                "restored (dismissed as a false alarm)": ("diamond-open", "#1f77b4"),
                "restored (quarantine rolled back)": ("diamond-open", "#17becf")}


def _ledger_marks(fig: go.Figure, df: "pd.DataFrame") -> None:
    """One legend entry per quarantine-ledger state present in ``df`` (column ``ledger``)."""
    if "ledger" not in df:
        return
    for wording, (symbol, color) in LEDGER_MARKS.items():
        part = df[df["ledger"] == wording]
        if part.empty:
            continue
        fig.add_scatter(x=part["x"], y=part["y"], mode="markers", name=f"ledger: {wording} ({len(part)})",
                        marker=dict(symbol=symbol, size=19, color=color, line=dict(width=2.5)),
                        hovertext=[f"{hover_text(i, 40)} · {wording}" for i in part["id"]], hoverinfo="text",
                        customdata=part["id"])   # a click on the mark selects the document (Geometry)


def judge_space(df: "pd.DataFrame", query: str | None = None,
                query_xy: tuple[float, float] | None = None) -> go.Figure:
    """Top-k in TRIS judge space: colour = K-Means cluster, ✕ = poison, ring = kept majority, square /
    diamond = the document's quarantine-ledger state; ``query`` names the query in the title and
    ``query_xy`` (the query projected with its top-k) marks it with a star."""
    fig = _fig("Top-k in the TRIS judge space (K-Means clusters)"
               + (f" for: {hover_text(query, 70)}" if query else ""), height=420)
    if df.empty:
        return fig
    palette = ["#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b"]
    for i, (cl, sub) in enumerate(df.groupby("cluster", sort=True)):
        for poison, marker in ((False, "circle"), (True, "x")):
            part = sub[sub["poison"] == poison]
            if part.empty:
                continue
            fig.add_scatter(
                x=part["x"], y=part["y"], mode="markers", name=f"cluster {cl}" + (" · poison" if poison else ""),
                marker=dict(symbol=marker, size=11 if poison else 9, color=palette[i % len(palette)],
                            line=dict(width=2 if poison else 0, color="black")),
                hovertext=[f"#{r} {hover_text(i_, 40)}<br>{hover_text(t)}" for r, i_, t in
                           zip(part["rank"], part["id"], part["text"])], hoverinfo="text", customdata=part["id"])
    maj = df[df["in_majority"]]
    if not maj.empty:
        fig.add_scatter(x=maj["x"], y=maj["y"], mode="markers", name="kept majority",
                        marker=dict(symbol="circle-open", size=17, color="#2ca02c", line=dict(width=2)), hoverinfo="skip")
    _ledger_marks(fig, df)
    if query_xy is not None:
        fig.add_scatter(x=[query_xy[0]], y=[query_xy[1]], mode="markers", name="query",
                        marker=dict(symbol="star", size=18, color="#000"),
                        hovertext=[f"query: {hover_text(query or '', 120)}"], hoverinfo="text")
    return fig


def corpus_density(df: "pd.DataFrame", selected: str | None = None, row: Any = None) -> go.Figure:
    """The snapshot in retriever space coloured by RSG density contrast D_i; flagged documents ringed;
    the selected document's kept (green) and dropped (grey, Jaccard > ceiling) edges drawn."""
    fig = _fig("Corpus in retriever space, coloured by RSG density contrast D"
               + (f" · ★ = {plotly_label(selected)}" if selected else ""), height=520)
    if df.empty:
        return fig
    pos = {i: (x, y) for i, x, y in zip(df["id"], df["x"], df["y"])}
    if selected is not None and row is not None and selected in pos:
        x0, y0 = pos[selected]
        for edges, color, name in ((row.kept, "#2ca02c", "kept edge"), (row.dropped, "#aaaaaa", "dropped edge (Jaccard)")):
            xs: list[Any] = []
            ys: list[Any] = []
            for e in edges:
                if e["id"] in pos:
                    x1, y1 = pos[e["id"]]
                    xs += [x0, x1, None]
                    ys += [y0, y1, None]
            if xs:
                fig.add_scatter(x=xs, y=ys, mode="lines", name=name, line=dict(color=color, width=2), hoverinfo="skip")
    fig.add_scatter(
        x=df["x"], y=df["y"], mode="markers", name="documents",
        marker=dict(size=7, color=df["D"], colorscale="Viridis", cmin=0, cmax=max(0.05, float(df["D"].max())),
                    colorbar=dict(title="D"), symbol=["x" if p else "circle" for p in df["poison"]]),
        hovertext=[f"{hover_text(i, 40)} · D={d:.3f}" + (f" · {w}" if w else "") + f"<br>{hover_text(t)}"
                   for i, d, t, w in zip(df["id"], df["D"], df["text"],
                                         df["ledger"] if "ledger" in df else [""] * len(df))],
        hoverinfo="text", customdata=df["id"],
    )
    po = df[df["poison"]]
    if not po.empty:
        fig.add_scatter(x=po["x"], y=po["y"], mode="markers", name="poison (attack document)",
                        marker=dict(symbol="x-thin-open", size=12, color="#d62728", line=dict(width=2)),
                        hoverinfo="skip")
    fl = df[df["flagged"]]
    if not fl.empty:
        fig.add_scatter(x=fl["x"], y=fl["y"], mode="markers", name="RSG flagged",
                        marker=dict(symbol="circle-open", size=14, color="#d62728", line=dict(width=2)), hoverinfo="skip")
    _ledger_marks(fig, df)
    if selected is not None and selected in pos:
        fig.add_scatter(x=[pos[selected][0]], y=[pos[selected][1]], mode="markers", name="selected",
                        marker=dict(symbol="star", size=18, color="#000"), hoverinfo="skip")
    return fig


def _esc(name: Any) -> str:
    """A defense / attack-family name as plotly legend or axis text (plotly reads a subset of HTML there)."""
    return plotly_label(name)


def _num(v: Any) -> float:
    """A metric value as float; None / NaN → NaN (0.0 stays 0.0 — a zero is a value, not a gap)."""
    try:
        f = float(v)
    except (TypeError, ValueError):
        return float("nan")
    return f


PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22",
           "#17becf", "#393b79", "#637939")


def roc_figure(curves: dict[str, dict[str, Any]], points: dict[str, tuple[float, float]] | None = None) -> go.Figure:
    """One legend entry per defense (curve and operating point share it); the entry names AUROC and
    the numbers of poisons (positives) and clean documents (negatives) the curve is drawn from."""
    fig = _fig("ROC (own poisons vs. clean-condition scores)", height=420)
    fig.add_scatter(x=[0, 1], y=[0, 1], mode="lines", line=dict(dash="dot", color="#bbb"), name="chance",
                    showlegend=False, hoverinfo="skip")
    for j, (name, c) in enumerate(curves.items()):
        au = c.get("auroc")
        color = PALETTE[j % len(PALETTE)]
        n_pos, n_neg = len(c.get("pos", [])), len(c.get("neg", []))
        label = f"{_esc(name)}: AUROC {au:.3f} (n = {n_pos} poisons, {n_neg} clean)" if au is not None else _esc(name)
        fig.add_scatter(x=c["fpr"], y=c["tpr"], mode="lines", name=label, legendgroup=_esc(name), line=dict(color=color),
                        hovertemplate="FPR %{x:.3f} · TPR %{y:.3f}<extra>" + hover_text(name, 40) + "</extra>")
        if points and name in points:
            fx, ty = points[name]
            fig.add_scatter(x=[fx], y=[ty], mode="markers", marker=dict(size=12, symbol="diamond", color=color),
                            name=f"{_esc(name)} operating point", legendgroup=_esc(name), showlegend=False,
                            hovertemplate="operating point: FPR %{x:.3f} · TPR %{y:.3f}<extra></extra>")
    fig.update_xaxes(title="false-positive rate (clean removed)", range=[0, 1])
    fig.update_yaxes(title="true-positive rate (poison removed)", range=[0, 1.02])
    fig.update_layout(legend=dict(title="defense (◆ = current threshold)"))
    return fig


def asr_utility(df: "pd.DataFrame", use_asr: bool, note: str | None = None) -> go.Figure:
    """One point per defense: attack success (ASR, or poison-in-context without answers) averaged over
    the attack families, against utility (clean accuracy, or 1 − clean removal rate without answers).
    The same numbers as the table: a 0.0 is plotted at 0, only a missing value is left out. Error
    bars: the mean of the per-family Wilson 95 % intervals on y, the clean row's interval on x."""
    ykey = "asr" if use_asr else "poison_in_context_rate"
    yci = "asr_ci95" if use_asr else "poison_in_context_ci95"
    fig = _fig("Attack success vs. utility across defenses", height=420)
    attacked = df[df["attack"] != "clean"]
    clean = df[df["attack"] == "clean"].set_index("defense")
    for j, (name, sub) in enumerate(attacked.groupby("defense", sort=False)):
        ys = [_num(v) for v in sub[ykey]] if ykey in sub else []
        ys = [v for v in ys if not np.isnan(v)]
        y = float(np.mean(ys)) if ys else np.nan
        x, xci = np.nan, None
        if name in clean.index:
            crow = clean.loc[name]
            if use_asr and not np.isnan(_num(crow.get("clean_acc"))):
                x, xci = _num(crow.get("clean_acc")), crow.get("clean_acc_ci95")
            elif not np.isnan(_num(crow.get("clean_removal_rate"))):
                x = 1.0 - _num(crow.get("clean_removal_rate"))
        if np.isnan(x) or np.isnan(y):
            continue
        cis = [c for c in (sub[yci] if yci in sub else []) if isinstance(c, (list, tuple)) and len(c) == 2]
        lo = float(np.mean([c[0] for c in cis])) if cis else y
        hi = float(np.mean([c[1] for c in cis])) if cis else y
        ex = dict(type="data", symmetric=False, array=[max(0.0, float(xci[1]) - x)], arrayminus=[max(0.0, x - float(xci[0]))]) \
            if isinstance(xci, (list, tuple)) and len(xci) == 2 else None
        fig.add_scatter(x=[x], y=[y], mode="markers", name=_esc(name), marker=dict(size=13, color=PALETTE[j % len(PALETTE)]),
                        error_y=dict(type="data", symmetric=False, array=[max(0.0, hi - y)], arrayminus=[max(0.0, y - lo)]),
                        error_x=ex, hovertemplate=f"{hover_text(name, 40)}<br>x %{{x:.3f}} · y %{{y:.3f}}<extra></extra>")
    fig.update_xaxes(title="clean accuracy" if use_asr else "utility: 1 − clean removal rate", range=[-0.02, 1.05])
    fig.update_yaxes(title="ASR (mean over attacks)" if use_asr else "poison-in-context rate (mean over attacks)",
                     range=[-0.02, 1.05])
    fig.update_layout(showlegend=True, legend=dict(title=dict(text="defense", side="top"), tracegroupgap=2))
    if note:   # why the axes are not the answer metrics (e.g. a k_ctx the answers were not generated for)
        fig.add_annotation(text=note, xref="paper", yref="paper", x=0.0, y=1.0, xanchor="left", yanchor="bottom",
                           showarrow=False, font=dict(size=11, color="#7a4b00"), align="left")
    return fig


def per_attack(df: "pd.DataFrame", metric: str) -> go.Figure:
    fig = _fig(f"{metric} per attack family", barmode="group", height=360)
    sub = df[df["attack"] != "clean"]
    for name, part in sub.groupby("defense", sort=False):
        fig.add_bar(x=[_esc(a) for a in part["attack"]], y=part[metric].astype(float), name=_esc(name))
    fig.update_yaxes(title=metric)
    return fig


def rank_strip(rankings: dict[str, Any], top: int = 20) -> go.Figure:
    """Where the poisons sit in each ranking (attack lab): one row per ranking, poisons in red."""
    fig = _fig("Top-20 ranks (red = poison)", height=80 + 60 * max(1, len(rankings)))
    for label, ranking in rankings.items():
        docs = ranking.documents[:top]
        fig.add_scatter(x=[d.rank for d in docs], y=[plotly_label(label)] * len(docs), mode="markers",
                        marker=dict(size=16, symbol="square", color=["#d62728" if d.poison else "#9ecae1" for d in docs]),
                        hovertext=[f"#{d.rank} {hover_text(d.id, 40)}<br>{hover_text(d.text)}" for d in docs],
                        hoverinfo="text", showlegend=False)
    fig.update_xaxes(title="rank", dtick=1)
    return fig


def lengths_histogram(df: "pd.DataFrame") -> go.Figure:
    fig = _fig("Passage length (words)", height=260)
    fig.add_histogram(x=df["words"], nbinsx=30, marker_color="#1f77b4")
    return fig
