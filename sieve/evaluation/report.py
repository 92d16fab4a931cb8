"""Run reports: a terminal table and a self-contained HTML page (``sieve report RUN_DIR``).

The HTML embeds plotly.js once (no network) and holds three figures, each in a ``div`` with a
stable id: ``asr-utility-plane`` (x = clean accuracy, or 1 − clean removal rate without generated
answers; y = ASR, or poison-in-context rate without answers), ``roc-curves`` (per attack, one curve
per defense, §9.2 positives/negatives from the records' raw scores) and ``per-attack-bars``.
A "What these numbers do not show" section states sample sizes and 95 % Wilson intervals.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from sieve.constants import CLEAN
from sieve.escape import html_text, plotly_label, plotly_labels, terminal_text
from sieve.evaluation import metrics as M
from sieve.evaluation.records import latest_records, read_records
from sieve.evaluation.summary import roc_inputs

PLOT_IDS = ("asr-utility-plane", "roc-curves", "per-attack-bars")

TABLE_COLUMNS = [
    ("defense", "defense"), ("attack", "attack"), ("queries", "n"),
    ("poison_in_context_rate", "poison-in-ctx"), ("poison_removal_rate", "poison rm"),
    ("clean_removal_rate", "clean rm"), ("auroc", "AUROC"), ("detect_at_5pct", "det@5%"),
    ("asr", "ASR"), ("clean_acc", "CleanAcc"), ("latency_ms_p50", "p50 ms"), ("latency_ms_p95", "p95 ms"),
]


class ReportError(ValueError):
    """The run directory cannot be reported (missing or unreadable files)."""


def load_run(run_dir: str | Path) -> tuple[dict[str, Any], dict[str, Any], list[dict[str, Any]]]:
    """(config, summary, records) of a run directory; the summary is recomputed if absent."""
    d = Path(run_dir)
    if not d.is_dir():
        raise ReportError(f"run directory not found: {d}")
    from sieve.evaluation.records import CONFIG, SUMMARY, RunError, has_records, read_run_config, read_summary

    if not has_records(d) and not (d / SUMMARY).exists():
        raise ReportError(f"{d} is not a sieve run directory (no records.jsonl / summary.json); run `sieve eval` first")
    try:
        cfg = read_run_config(d / CONFIG) if (d / CONFIG).exists() else {}
    except RunError as e:
        raise ReportError(str(e).replace("rerun with --force or use a new --out",
                                         "rerun `sieve eval` with --force")) from None
    records = latest_records(read_records(d))
    if (d / SUMMARY).exists():
        try:
            summary = read_summary(d)
        except RunError as e:
            raise ReportError(str(e)) from None
    else:
        from sieve.evaluation.summary import write_summary

        summary = write_summary(d)
    return cfg, summary, records


def _fmt(v: Any, key: str) -> str:
    if v is None:
        return "—"
    if key.startswith("latency"):
        return f"{v:.1f}"
    if isinstance(v, float):
        return f"{v:.3f}"
    return str(v)


def format_table(summary: dict[str, Any]) -> str:
    """Plain-text table, one line per defense × attack (— = not produced / not applicable). Names
    from the run (defenses, attack families, dataset) are terminal-escaped (:mod:`sieve.escape`)."""
    rows = [[terminal_text(_fmt(r.get(k), k)) for k, _ in TABLE_COLUMNS] for r in summary.get("results", [])]
    heads = [h for _, h in TABLE_COLUMNS]
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(heads)]
    line = lambda cells: "  ".join(c.ljust(w) if i < 2 else c.rjust(w) for i, (c, w) in enumerate(zip(cells, widths)))  # noqa: E731
    out = [f"dataset: {terminal_text(summary.get('dataset', ''))}   retriever: {terminal_text(summary.get('retriever', ''))}",
           line(heads), line(["-" * w for w in widths])]
    out += [line(r) for r in rows]
    notes = degradation_notes(summary)
    if notes:
        out += ["", "DEGRADED — these rows are not normal results:"] + [f"  {terminal_text(n)}" for n in notes]
    return "\n".join(out)


def degradation_notes(summary: dict[str, Any]) -> list[str]:
    """One line per run warning and per degraded defense × attack row (LLM endpoint errors,
    unavailable decisions, failed items); empty for a clean run."""
    notes = [f"warning: {w}" for w in summary.get("warnings", []) or []]
    for r in summary.get("results", []):
        for d in r.get("degraded") or []:
            notes.append(f"{r.get('defense')} × {r.get('attack')}: {d}")
    return notes


# ------------------------------------------------------------------------------------------------
# figures
# ------------------------------------------------------------------------------------------------

def _color(i: int) -> str:
    """One colour per defense (its position in the run), shared by every figure."""
    from plotly.colors import qualitative

    return qualitative.Plotly[i % len(qualitative.Plotly)]


def _plane_figure(results: list[dict[str, Any]]) -> Any:
    import plotly.graph_objects as go

    clean = {r["defense"]: r for r in results if r["attack"] == CLEAN}
    attacked = [r for r in results if r["attack"] != CLEAN]
    use_acc = any(r.get("clean_acc") is not None for r in clean.values())
    use_asr = any(r.get("asr") is not None for r in attacked)
    fig = go.Figure()
    order = list(dict.fromkeys(r["defense"] for r in results))
    for dname in dict.fromkeys(r["defense"] for r in attacked):
        c = clean.get(dname, {})
        if use_acc:
            x = c.get("clean_acc")
        else:
            x = None if c.get("clean_removal_rate") is None else 1.0 - c["clean_removal_rate"]
            if x is None and c:
                x = 1.0  # a defense that examines nothing removes nothing
        pts = [(r["attack"], r.get("asr") if use_asr else r.get("poison_in_context_rate"))
               for r in attacked if r["defense"] == dname]
        pts = [(a, y) for a, y in pts if y is not None and x is not None]
        if not pts:
            continue
        label = plotly_label(dname)   # names come from the run / attacks.jsonl: never markup
        fig.add_trace(go.Scatter(x=[x] * len(pts), y=[y for _, y in pts], mode="markers+text", name=label,
                                 marker={"color": _color(order.index(dname)), "size": 10},
                                 text=plotly_labels(a for a, _ in pts), textposition="top center",
                                 hovertemplate=f"{label}<br>%{{text}}<br>x=%{{x:.3f}} y=%{{y:.3f}}<extra></extra>"))
    fig.update_layout(title="ASR–utility plane (better: right and low)",
                      xaxis_title="clean accuracy" if use_acc else "1 − clean removal rate",
                      yaxis_title="ASR (string match)" if use_asr else "poison-in-context rate",
                      xaxis_range=[-0.05, 1.05], yaxis_range=[-0.05, 1.05], height=480)
    return fig


def _roc_figure(results: list[dict[str, Any]], records: list[dict[str, Any]]) -> Any:
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    attacks = list(dict.fromkeys(r["attack"] for r in results if r["attack"] != CLEAN)) or ["(no attack)"]
    fig = make_subplots(rows=1, cols=len(attacks), subplot_titles=plotly_labels(attacks), shared_yaxes=True)
    defenses = list(dict.fromkeys(r["defense"] for r in results))
    for j, att in enumerate(attacks, 1):
        fig.add_trace(go.Scatter(x=[0, 1], y=[0, 1], mode="lines", line={"dash": "dot", "color": "#bbb"},
                                 showlegend=False, hoverinfo="skip"), row=1, col=j)
        for i, dname in enumerate(defenses):
            pos, neg = roc_inputs(records, dname, att)
            fpr, tpr, _ = M.roc_curve(pos, neg)
            if not fpr:
                continue
            au = M.auroc(pos, neg)
            label = plotly_label(dname)
            fig.add_trace(go.Scatter(x=fpr, y=tpr, mode="lines", name=label, legendgroup=label,
                                     showlegend=(j == 1), line={"color": _color(i)},
                                     hovertemplate=f"{label} (AUROC {au:.3f})<br>FPR %{{x:.3f}} TPR %{{y:.3f}}<extra></extra>"),
                          row=1, col=j)
        fig.update_xaxes(title_text="clean removal (FPR)", range=[0, 1], row=1, col=j)
    fig.update_yaxes(title_text="poison detection (TPR)", range=[0, 1.02], row=1, col=1)
    fig.update_layout(title="ROC per attack: own poisons (attack condition) vs clean-condition scores", height=420)
    return fig


def _bars_figure(results: list[dict[str, Any]]) -> Any:
    import plotly.graph_objects as go

    attacked = [r for r in results if r["attack"] != CLEAN]
    use_asr = any(r.get("asr") is not None for r in attacked)
    key = "asr" if use_asr else "poison_in_context_rate"
    fig = go.Figure()
    order = list(dict.fromkeys(r["defense"] for r in results))
    for dname in dict.fromkeys(r["defense"] for r in attacked):
        rows = [r for r in attacked if r["defense"] == dname]
        fig.add_trace(go.Bar(name=plotly_label(dname), x=plotly_labels(r["attack"] for r in rows), y=[r.get(key) for r in rows],
                             marker_color=_color(order.index(dname))))
    fig.update_layout(barmode="group", title=f"{'ASR' if use_asr else 'Poison-in-context rate'} per attack (lower is better)",
                      yaxis_title=key, yaxis_range=[0, 1.02], height=420)
    return fig


def _caveats(results: list[dict[str, Any]], cfg: dict[str, Any]) -> str:
    items = []
    for r in results:
        if r["attack"] == CLEAN:
            continue
        n = r.get("queries") or 0
        pic = r.get("poison_in_context_rate")
        if pic is not None:
            ok = n - (r.get("n_errors") or 0)
            lo, hi = r.get("poison_in_context_ci95") or M.wilson_interval(round(pic * ok), ok)
            items.append(f"<li><b>{html_text(r['defense'])}</b> on <b>{html_text(r['attack'])}</b>: "
                         f"poison-in-context {pic:.3f} over {n} target queries, 95% Wilson interval "
                         f"[{lo:.3f}, {hi:.3f}].</li>")
    n_err = sum(r.get("n_errors") or 0 for r in results)
    gen = bool(cfg.get("generate"))
    notes = [
        "Rates are over few queries per cell; intervals above show what the data cannot rule out. "
        "Differences between defenses inside overlapping intervals are not evidence of a difference.",
        "AUROC and detection at 5% clean removal compare each defense's scores on its own poisons in the "
        "attack condition with its scores on the clean-condition rankings (docs/algorithms.md §9.2); a defense "
        "that only examines some documents (e.g. RSQ: the top 5) is measured only there. — means the "
        "defense produces no scores (or the metric does not apply), not zero.",
        "Removal rates count only the documents a defense examined; poison-in-context and MRR are "
        "measured on the final refilled context (k_ctx = %s)." % html_text(str(cfg.get("k_ctx", "?"))),
        ("ASR and CleanAcc are normalised substring matches (§9.1): an answer that mentions the target while "
         "denying it counts as a success; the LLM-judge ASR (when an endpoint was configured) does not."
         if gen else "No answers were generated (run with --generate): ASR, CleanAcc, F1 and EM are not measured; "
                     "poison-in-context is an upper bound on what the generator could be misled by."),
        "Latency is the defense call only, on this machine, with cached per-document artifacts; "
        "it excludes retrieval and generation.",
        f"{n_err} work item(s) failed and are excluded from the rates (see records.jsonl 'error').",
    ]
    degraded = degradation_notes({"results": results, "warnings": cfg.get("warnings", [])})
    return (("<h2>Degraded run</h2><ul>" + "".join(f"<li>{html_text(x)}</li>" for x in degraded) + "</ul>"
             if degraded else "")
            + "<h2>What these numbers do not show</h2><ul>" + "".join(f"<li>{x}</li>" for x in notes) + "</ul>"
            + ("<h3>Poison-in-context, 95% intervals</h3><ul>" + "".join(items) + "</ul>" if items else ""))


def _html_table(results: list[dict[str, Any]]) -> str:
    head = "".join(f"<th>{html_text(h)}</th>" for _, h in TABLE_COLUMNS)
    body = "".join("<tr>" + "".join(f"<td>{html_text(_fmt(r.get(k), k))}</td>" for k, _ in TABLE_COLUMNS) + "</tr>"
                   for r in results)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def build_report_html(cfg: dict[str, Any], summary: dict[str, Any], records: list[dict[str, Any]]) -> str:
    """The self-contained report page (plotly.js embedded once)."""
    from plotly.offline import get_plotlyjs

    results = summary.get("results", [])
    figs = [(PLOT_IDS[0], _plane_figure(results)), (PLOT_IDS[1], _roc_figure(results, records)),
            (PLOT_IDS[2], _bars_figure(results))]
    divs = "\n".join(f.to_html(full_html=False, include_plotlyjs=False, div_id=i) for i, f in figs)
    ds = cfg.get("dataset", {})
    meta = (f"dataset <b>{html_text(str(summary.get('dataset', '')))}</b> "
            f"({html_text(str(ds.get('documents', '?')))} documents, files sha256 "
            f"{html_text(str(ds.get('files_sha256', ''))[:12])}) · retriever <b>{html_text(str(summary.get('retriever', '')))}</b>"
            f" · k_ctx {html_text(str(cfg.get('k_ctx', '?')))} · depth {html_text(str(cfg.get('depth', '?')))}"
            f" · seed {html_text(str(cfg.get('seed', '?')))} · sieve {html_text(str(cfg.get('sieve_version', '?')))}")
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>Sieve run report — {html_text(str(summary.get('dataset', '')))}</title>
<style>
body {{ font-family: system-ui, sans-serif; margin: 2em; color: #222; }}
table {{ border-collapse: collapse; font-size: 0.9em; }}
th, td {{ border: 1px solid #ddd; padding: 4px 8px; text-align: right; }}
th:nth-child(-n+2), td:nth-child(-n+2) {{ text-align: left; }}
thead {{ background: #f4f4f4; }}
</style>
<script type="text/javascript">{get_plotlyjs()}</script>
</head><body>
<h1>Sieve run report</h1>
<p>{meta}</p>
<h2>Summary</h2>
{_html_table(results)}
<h2>Plots</h2>
{divs}
{_caveats(results, cfg)}
</body></html>
"""


def write_report(run_dir: str | Path, out: str | Path | None = None) -> Path:
    """Write ``RUN_DIR/report.html`` (or ``out``) and return its path."""
    from sieve.safe_io import atomic_write_text

    cfg, summary, records = load_run(run_dir)
    path = Path(out) if out else Path(run_dir) / "report.html"
    atomic_write_text(path, build_report_html(cfg, summary, records))
    return path


def is_report_html(path: str | Path) -> bool:
    """True when ``path`` is a report written by :func:`write_report` (safe to replace)."""
    try:
        with open(path, encoding="utf-8") as fh:
            head = fh.read(4096)
    except (OSError, UnicodeDecodeError):
        return False
    return "<title>Sieve run report" in head
