"""Escaping untrusted text for the medium it reaches — one helper per medium, used everywhere.

Document ids, titles, attack-family names, defense labels and reasons come from dataset files
(``corpus.jsonl``, ``attacks.jsonl``, …) a user may not control. Before they reach a medium that
interprets markup or control sequences they go through exactly one of these:

* :func:`html_text` — HTML element content and attribute values (the report page, the dashboard's
  ``unsafe_allow_html`` snippets), control and bidi characters shown visibly;
* :func:`plotly_label` — every string Plotly renders as its pseudo-HTML: trace names (legend), text
  labels, categorical tick labels, subplot and axis titles, and names embedded in a
  ``hovertemplate`` (``%`` is escaped too, so a name cannot inject ``%{…}`` substitutions);
* :func:`markdown_text` — Markdown (Streamlit ``st.markdown``/``st.caption``, generated ``.md``):
  every Markdown and HTML metacharacter backslash-escaped, ``$`` included (Streamlit renders LaTeX);
* :func:`terminal_text` — terminals: C0/C1 control characters (ESC of colour and OSC-8 link
  sequences, BEL, CR, backspace), DEL and bidi/zero-width format characters are shown visibly as
  ``\\xNN`` / ``\\uNNNN`` escapes, never interpreted; whitespace collapsed to one line.

All four accept any object (``str()`` of it; ``None`` → ``""``).
"""
from __future__ import annotations

import html
import re
from typing import Any

__all__ = ["html_text", "plotly_label", "plotly_labels", "markdown_text", "terminal_text"]

#: Characters a terminal interprets or that reorder / hide text: C0 controls (but plain spaces),
#: DEL, C1 controls, zero-width and bidi formatting, BOM.
_TERMINAL_UNSAFE = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u200b-\u200f\u2028\u2029\u202a-\u202e"
                              r"\u2060-\u2064\u2066-\u2069\ufeff]")
_MD_SPECIAL = re.compile(r"([\\`*_{}\[\]()#+\-.!|<>~$&=:^])")


def _s(value: Any) -> str:
    return "" if value is None else str(value)


def html_text(value: Any) -> str:
    """``value`` as HTML text: ``& < > " '`` escaped (safe in element content and quoted attributes),
    control and bidi characters shown visibly (a right-to-left override cannot reorder the page)."""
    return html.escape(_visible(_s(value)), quote=True)


def plotly_label(value: Any) -> str:
    """``value`` as a Plotly label: ``& < >`` as entities (Plotly shows them as the characters, so no
    tag — ``<a href>``, ``<span style>``, ``<b>`` — forms), ``%`` as ``&#37;`` (no hovertemplate
    substitution), control characters shown visibly."""
    s = _visible(_s(value))
    return s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace("%", "&#37;")


def plotly_labels(values: Any) -> list[str]:
    """:func:`plotly_label` of every item (tick labels, text arrays, categories)."""
    return [plotly_label(v) for v in values]


def markdown_text(value: Any) -> str:
    """``value`` as literal Markdown text: metacharacters backslash-escaped, one line."""
    s = " ".join(_visible(_s(value)).split())
    return _MD_SPECIAL.sub(r"\\\1", s)


def terminal_text(value: Any, width: int | None = None) -> str:
    """``value`` as one printable terminal line: control, escape and bidi characters shown as
    ``\\xNN`` / ``\\uNNNN`` (visible, never interpreted), whitespace collapsed, cut to ``width``
    characters with an ellipsis."""
    s = " ".join(_visible(_s(value).replace("\t", " ").replace("\n", " ").replace("\r", "\\r")).split())
    if width is not None and len(s) > width:
        s = s[: max(0, width - 1)] + "…"
    return s


def _visible(s: str) -> str:
    def repl(m: re.Match[str]) -> str:
        c = ord(m.group(0))
        return f"\\x{c:02x}" if c < 0x100 else f"\\u{c:04x}"

    return _TERMINAL_UNSAFE.sub(repl, s)
