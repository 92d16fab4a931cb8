"""Hostile names never reach markup or a terminal raw (issue 26, bullet 3): every figure builder
(the HTML report's and the dashboard's) and every table printer, fed ids, titles, family and
defense names carrying HTML, Plotly template syntax and terminal escape sequences."""
from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Any, Iterator

import pandas as pd

from hardening_helpers import sieve
from sieve.escape import html_text, markdown_text, plotly_label, terminal_text

EVIL = ('<a href="http://evil.example">x</a><span style="color:red">s</span><b>B</b>'
        '\x1b[31mRED\x1b]8;;http://evil.example\x07L\x1b]8;;\x07%{customdata}\u202e\x00')
EVIL2 = "<img src=x onerror=alert(1)>" + EVIL
RAW = ("<a href", "<span style", "<b>B", "<img", "\x1b", "\x07", "\u202e", "\x00", "%{customdata")


def _strings(obj: Any) -> Iterator[str]:
    if isinstance(obj, str):
        yield obj
    elif isinstance(obj, dict):
        for k, v in obj.items():
            if k == "customdata":   # data handed back on click (the document id), never rendered
                continue
            yield from _strings(k)
            yield from _strings(v)
    elif isinstance(obj, (list, tuple)):
        for v in obj:
            yield from _strings(v)
    elif hasattr(obj, "tolist"):
        yield from _strings(obj.tolist())


def assert_no_raw(fig_or_text: Any) -> None:
    data = fig_or_text.to_plotly_json() if hasattr(fig_or_text, "to_plotly_json") else fig_or_text
    for s in _strings(data):
        for bad in RAW:
            assert bad not in s, (bad, s[:200])


# -- the helpers --------------------------------------------------------------------------------------

def test_one_helper_per_medium():
    assert html_text('<a href="x">&') == "&lt;a href=&quot;x&quot;&gt;&amp;"
    p = plotly_label(EVIL)
    assert "<" not in p and ">" not in p and "%{" not in p and "\x1b" not in p and "\\x1b" in p
    t = terminal_text(EVIL)
    assert all(c.isprintable() for c in t) and "\\x1b[31m" in t and "\\u202e" in t and "\\x00" in t
    assert terminal_text("a\n\tb  c", 4) == "a b…"
    m = markdown_text("**bold** [x](http://e) $x$ <b>")
    assert "\\*\\*bold\\*\\*" in m and "\\[x\\]\\(http" in m and "\\$x\\$" in m and "\\<b\\>" in m


# -- the HTML report -----------------------------------------------------------------------------------

def _results() -> list[dict[str, Any]]:
    rows = []
    for d in (EVIL, "none"):
        for a in ("clean", EVIL2):
            rows.append({"defense": d, "attack": a, "queries": 2, "asr": None, "clean_acc": None,
                         "poison_in_context_rate": 0.5, "clean_removal_rate": 0.1, "n_errors": 0,
                         "degraded": [f"{EVIL} failed"]})
    return rows


def test_report_figures_escape_every_label():
    from sieve.evaluation import report

    results = _results()
    records = [{"defense": EVIL, "condition": EVIL2, "query_id": "q", "own_poison_ids": ["p"], "error": None,
                "ranking": [{"id": "p", "poison": True}],
                "decisions": [{"doc_id": "p", "status": "scored", "score": 0.9, "removed": True}]},
               {"defense": EVIL, "condition": "clean", "query_id": "q", "own_poison_ids": [], "error": None,
                "ranking": [{"id": "c", "poison": False}],
                "decisions": [{"doc_id": "c", "status": "scored", "score": 0.1, "removed": False}]}]
    for fig in (report._plane_figure(results), report._roc_figure(results, records), report._bars_figure(results)):
        assert_no_raw(fig)
    page = report.build_report_html({"k_ctx": 5, "warnings": [EVIL]},
                                    {"dataset": EVIL, "retriever": EVIL, "results": results}, records)
    body = page[page.index("<body"):]
    for bad in ('<a href="http://evil', "<span style=", "<img", "\x1b", '\\u003ca href', '\\u003cspan style'):
        assert bad not in body, bad


def test_report_table_is_terminal_safe():
    from sieve.evaluation.report import format_table

    out = format_table({"dataset": EVIL, "retriever": EVIL, "results": _results(), "warnings": [EVIL]})
    assert all(c.isprintable() for line in out.splitlines() for c in line), repr(out[:300])
    assert "\\x1b[31m" in out   # shown, not interpreted


# -- the dashboard figures -------------------------------------------------------------------------------

def test_dashboard_figures_escape_every_label():
    from sieve.dashboard import figures as F
    from sieve.types import RankedDocument, Ranking

    rows = {EVIL: {"rank": 1, "E_a": 0.5, "E_i": 0.1, "E_p": 0.2, "E_s": 0.3},
            EVIL2: {"rank": 2, "E_a": 0.1, "E_i": 0.0, "E_p": 0.0, "E_s": 0.1}}
    docs = pd.DataFrame({"id": [EVIL, EVIL2], "text": [EVIL, EVIL2], "x": [0.0, 1.0], "y": [0.0, 1.0],
                         "cluster": [0, 1], "poison": [True, False], "rank": [1, 2], "in_majority": [True, False],
                         "D": [0.1, 0.2], "flagged": [True, False], "words": [3, 4]})
    table = pd.DataFrame([{**r, "clean_acc_ci95": None, "poison_in_context_ci95": [0.1, 0.9]} for r in _results()])
    ranking = Ranking(EVIL, [RankedDocument(EVIL, EVIL, rank=1, score=0.5, poison=True, title=EVIL)], condition=EVIL2)
    figs = [
        F.rsq_components(rows, ids=[EVIL, EVIL2]),
        F.surprisal_trace({"surprisal": {"nll": [1.0, 2.0, 3.0], "tokens": [EVIL, EVIL2, "x"], "ratio": 1.0,
                                         "windows": []}, "E_p": 0.1}),
        F.alignment_curve({"alignment": {"f1": [0.1, 0.5], "window_starts": [0, 32], "jump_index": 1}}),
        F.judge_space(docs),
        F.corpus_density(docs, selected=EVIL, row=SimpleNamespace(kept=[{"id": EVIL2}], dropped=[])),
        F.roc_figure({EVIL: {"fpr": [0, 1], "tpr": [0, 1], "auroc": 0.5, "pos": [1], "neg": [0]}},
                     points={EVIL: (0.5, 0.5)}),
        F.asr_utility(table, use_asr=False),
        F.per_attack(table, "poison_in_context_rate"),
        F.rank_strip({EVIL: ranking}),
        F.lengths_histogram(docs),
    ]
    for fig in figs:
        assert_no_raw(fig)


# -- the command-line tables ------------------------------------------------------------------------------

def _printable(text: str) -> None:
    bad = [c for c in text if not c.isprintable() and c not in "\n\r"]
    assert not bad, (bad[:5], text[:300])


def test_cli_tables_show_hostile_names_visibly(ds, tmp_path):
    lines = [json.loads(x) for x in (ds / "attacks.jsonl").read_text().splitlines() if x.strip()]
    for r in lines:
        if r["attack"] == "pr_b":
            r["attack"] = EVIL.replace("\x00", "")
    (ds / "attacks.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
    fam = EVIL.replace("\x00", "")
    run = tmp_path / "run"
    outputs = [
        sieve("eval", ds, "--out", run, "-d", "none", "--limit", "1", "--no-progress", "--retriever", "tiny-hashing"),
        sieve("report", run),
        sieve("search", ds, "amazon river", "-k", "2", "-a", fam, "--retriever", "tiny-hashing"),
    ]
    from sieve.ledger import Flag, Ledger

    led = tmp_path / "l.sqlite"
    with Ledger(led) as lg:
        lg.add_flags([Flag(EVIL, "h", 0.9, 0.5, reason=EVIL)], detector=EVIL)
    outputs.append(sieve("ledger", "list", "--ledger", led))
    for res in outputs:
        assert res.exit_code == 0, res.output
        _printable(res.output)
    assert "\\x1b[31mRED" in outputs[0].output and "\\x1b[31mRED" in outputs[2].output
