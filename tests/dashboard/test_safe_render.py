"""No document-derived string reaches markdown or HTML in the dashboard (issue 14 item 4).

1. A static scan of every page, ``app.py`` and every ``sieve/dashboard`` module: each call that
   Streamlit renders as markdown (``st.write``/``caption``/``info``/…, widget labels and ``help``,
   ``status.update(label=…)``) must get our own literal text, or an f-string / concatenation whose
   every dynamic part goes through :func:`sieve.dashboard.safe.md` (or is a number formatted with a
   format spec); ``st.html`` only gets ``highlighted_html(...)``; ``unsafe_allow_html`` is banned.
2. A property test (hypothesis) of the safe renderer: whatever the text — arbitrary unicode,
   control and bidi characters, markdown/HTML payloads — ``md(text)`` rendered by a CommonMark
   renderer (HTML allowed, the worst case) yields no tag but ``<p>``/``<br>`` and shows the text.
"""
from __future__ import annotations

import ast
import html
import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sieve.dashboard.safe import md, visible

ROOT = Path(__file__).resolve().parents[2]
FILES = sorted([*ROOT.glob("pages/*.py"), ROOT / "app.py", *ROOT.glob("sieve/dashboard/*.py")])

#: Calls whose first positional argument (and ``label``/``help``/``body`` keywords) is rendered as markdown.
MARKDOWN_CALLS = {"markdown", "write", "caption", "info", "warning", "error", "success", "toast", "header",
                  "subheader", "title", "metric", "expander", "button", "toggle", "checkbox", "radio",
                  "selectbox", "multiselect", "slider", "select_slider", "text_input", "text_area",
                  "number_input", "download_button", "file_uploader", "tabs", "popover", "status", "exception"}
#: Calls that return escaped text (md, friendly) or one of our own fixed sentences (answer_verdict).
SAFE_CALLS = {"md", "md_escape", "friendly", "answer_verdict", "len", "int", "float", "round", "sum"}


def _safe(node: ast.AST) -> bool:
    """True when ``node`` can only produce our own text or escaped values."""
    if isinstance(node, ast.Constant):
        return True
    if isinstance(node, ast.JoinedStr):
        return all(_safe(v) for v in node.values)
    if isinstance(node, ast.FormattedValue):
        if node.format_spec is not None and any(isinstance(v, ast.Constant) and re.search(r"[dfeg%]$", str(v.value))
                                                for v in node.format_spec.values):
            return True          # a number format: a string would raise
        return _safe(node.value)
    if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Mod)):
        return _safe(node.left) and _safe(node.right)
    if isinstance(node, ast.IfExp):
        return _safe(node.body) and _safe(node.orelse)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get" \
            and isinstance(node.func.value, ast.Name) and node.func.value.id.isupper():
        return all(_safe(a) for a in node.args[1:])              # HELP.get(name, "…")
    if isinstance(node, ast.ListComp):                            # st.tabs([md(n) for n in …])
        return _safe(node.elt)
    if isinstance(node, ast.Call):
        f = node.func
        name = f.id if isinstance(f, ast.Name) else (f.attr if isinstance(f, ast.Attribute) else "")
        if name in SAFE_CALLS:
            return True
        if name == "join" and isinstance(f, ast.Attribute) and node.args:   # "sep".join(md(x) for x in …)
            arg = node.args[0]
            if isinstance(arg, (ast.GeneratorExp, ast.ListComp)):
                return _safe(f.value) and _safe(arg.elt)
        return False
    if isinstance(node, ast.Name) and node.id.isupper():          # a module constant of our own text
        return True
    if isinstance(node, ast.Attribute) and node.attr.isupper():   # Gl.CONTEXT_HELP
        return True
    if isinstance(node, ast.Subscript) and (
            (isinstance(node.value, ast.Name) and node.value.id.isupper())
            or (isinstance(node.value, ast.Attribute) and node.value.attr.isupper())):
        return True                                               # HELP["…"] / R.METRIC_HELP[k]: our own text
    if isinstance(node, (ast.List, ast.Tuple)):     # st.tabs([...])
        return all(_safe(e) for e in node.elts)
    return False


def unsafe_calls(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    out = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute):
            continue
        name = node.func.attr
        where = f"{path.name}:{node.lineno}"
        for kw in node.keywords:
            if kw.arg == "unsafe_allow_html":
                out.append(f"{where} unsafe_allow_html")
        if name == "html":
            arg = node.args[0] if node.args else None
            ok = isinstance(arg, ast.Call) and getattr(arg.func, "id", getattr(arg.func, "attr", "")) == "highlighted_html"
            ok = ok or (isinstance(arg, ast.JoinedStr) and path.name == "app.py")   # our own stylesheet file
            if not ok:
                out.append(f"{where} st.html without highlighted_html")
            continue
        if name == "update":      # st.status(...).update(label=...)
            for kw in node.keywords:
                if kw.arg == "label" and not _safe(kw.value):
                    out.append(f"{where} status label")
            continue
        if name not in MARKDOWN_CALLS:
            continue
        if name == "write" and isinstance(node.func.value, ast.Name) and node.func.value.id in ("fh", "f", "out"):
            continue          # a file handle, not Streamlit
        if name == "write":
            args = node.args
        else:
            args = node.args[:1]
        for a in args:
            if not _safe(a):
                out.append(f"{where} {name}(…) first argument")
        for kw in node.keywords:
            if kw.arg in ("label", "help", "body", "value") and name not in ("text_input", "text_area", "number_input",
                                                                             "slider", "toggle", "checkbox") \
                    and not _safe(kw.value):
                out.append(f"{where} {name}({kw.arg}=…)")
            elif kw.arg in ("label", "help") and not _safe(kw.value):
                out.append(f"{where} {name}({kw.arg}=…)")
    return out


def test_scan_finds_an_unsafe_call(tmp_path):
    """The scanner is not vacuous: it reports the kinds of calls issue 14 found, and accepts escaped ones."""
    p = tmp_path / "probe.py"
    p.write_text("import streamlit as st\nx = 'a'\nst.write(f'**{x}** — y')\nst.caption(x)\n"
                 "st.caption(f'n={len(x)} {x:.3f}')\nst.html(x)\nst.markdown('a', unsafe_allow_html=True)\n"
                 "st.caption('ok ' + md(x))\nst.selectbox('Doc', [1], help=x)\ns.update(label=f'{x}')\n",
                 encoding="utf-8")
    assert [r.split(" ", 1)[0] for r in unsafe_calls(p)] == ["probe.py:3", "probe.py:4", "probe.py:6", "probe.py:7",
                                                             "probe.py:9", "probe.py:10"]


@pytest.mark.parametrize("path", FILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_unsafe_markdown_or_html_calls(path):
    assert unsafe_calls(path) == []


# ---- property test of the renderer ------------------------------------------------------------
PAYLOADS = ["<img src=x onerror=alert(1)>", "![x](http://127.0.0.1:9/a.png)", "<script>alert(1)</script>",
            "[link](javascript:alert(1))", ":red[alert]", "$x^2$", "# heading", "<http://e.com>", "&lt;b&gt;",
            "\u202e\u2066evil\u2069", "`code`", "**bold**", "<iframe src=//e.com>", "line\n===\n", "    indented",
            "| a | b |\n|---|---|", "\x00\x07\x1b[31m", "~~s~~", "&#60;img src=x&#62;"]


def _render(text: str) -> str:
    from markdown_it import MarkdownIt

    return MarkdownIt("commonmark", {"html": True}).enable("table").enable("strikethrough").render(text)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(st.text(), st.sampled_from(PAYLOADS)), min_size=1, max_size=4).map("".join))
def test_md_renders_any_text_as_plain_text(text):
    out = _render(md(text))
    tags = set(re.findall(r"</?([a-zA-Z][a-zA-Z0-9]*)", out))
    assert tags <= {"p", "br"}, (text, out)
    assert not re.search(r"<[a-zA-Z][^>]*\s(src|href)\s*=", out)
    # the text itself is shown (markdown only collapses whitespace); invisible characters become visible
    shown = html.unescape(re.sub(r"<[^>]+>", "", out))
    want = visible(text).replace("\r", "")
    assert " ".join(shown.split()) == " ".join(want.split()) or not want.strip(), (text, out)


@given(st.text())
def test_visible_leaves_no_bidi_or_control_characters(text):
    v = visible(text)
    assert not re.search(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]", v)


def test_dashboard_binds_localhost_by_default():
    """Streamlit's default is every interface: the shipped config and the demo script pin 127.0.0.1."""
    import tomllib

    cfg = tomllib.loads((ROOT / ".streamlit" / "config.toml").read_text(encoding="utf-8"))
    assert cfg["server"]["address"] == "127.0.0.1"
    demo = (ROOT / "scripts" / "demo.sh").read_text(encoding="utf-8")
    assert 'ADDRESS="${SIEVE_DASHBOARD_ADDRESS:-127.0.0.1}"' in demo
    assert demo.count('--server.address "$ADDRESS"') == 2, "both the warmed and the SIEVE_SKIP_WARM start"
