"""Safe rendering of untrusted document text (docs/design.md: document text is data).

Document text is only ever shown as plain text (``st.text`` / ``st.code`` / dataframes) or,
when a highlight is needed, as ``html.escape``-d spans built here. Nothing in this module passes
document text through markdown. Secrets (API keys) are scrubbed from error messages.
"""
from __future__ import annotations

import html
import os
import re
from typing import Iterable, Sequence


def snippet(text: str, n: int = 140) -> str:
    """One-line preview of at most ``n`` characters (whitespace collapsed, '…' when cut)."""
    t = " ".join(str(text).split())
    return t if len(t) <= n else t[: n - 1].rstrip() + "…"


def hover_text(text: str, n: int = 160) -> str:
    """Plotly hover text: an escaped snippet (plotly renders a subset of HTML in hover labels, and
    ``%{…}`` in a hovertemplate): :func:`sieve.escape.plotly_label`."""
    from sieve.escape import plotly_label

    return plotly_label(snippet(text, n))


#: A whole word for anchor highlighting: letters/digits, with inner apostrophes kept ("can't" is one
#: word, so the anchor "can" is not highlighted inside it).
_WORD = re.compile(r"(?<!\w)[a-z0-9]+(?:['’][a-z0-9]+)*(?!\w)")


def anchor_words(tokens: Iterable[str]) -> list[str]:
    """The anchor tokens worth showing to a reader: lower-cased, without function words ("are",
    "can", "the": :data:`sieve.defenses.text.STOPWORDS`, which RSQ's statistics may still count),
    in their first order, each once."""
    from sieve.defenses.text import STOPWORDS

    out: list[str] = []
    for t in tokens:
        w = str(t).lower()
        if w and w not in STOPWORDS and w not in out:
            out.append(w)
    return out


def highlight_segments(text: str, tokens: Iterable[str]) -> list[tuple[str, bool]]:
    """Split ``text`` into ``(segment, is_highlighted)`` pieces, highlighting case-insensitive
    occurrences of the ``tokens`` (RSQ anchor tokens, §3.2) as whole words only — never inside a
    longer word such as "can't" — and never a function word (:func:`anchor_words`).
    Concatenating the segments gives ``text`` back exactly."""
    wanted = set(anchor_words(tokens))
    if not wanted or not text:
        return [(text, False)] if text else []
    out: list[tuple[str, bool]] = []
    pos = 0
    lower = text.lower()
    if len(lower) != len(text):   # a case mapping that changes the length (rare): match on the text itself
        lower = text
    for m in _WORD.finditer(lower):
        if m.group(0) in wanted:
            if m.start() > pos:
                out.append((text[pos : m.start()], False))
            out.append((text[m.start() : m.end()], True))
            pos = m.end()
    if pos < len(text):
        out.append((text[pos:], False))
    merged: list[tuple[str, bool]] = []
    for seg, hi in out:
        if merged and merged[-1][1] == hi:
            merged[-1] = (merged[-1][0] + seg, hi)
        else:
            merged.append((seg, hi))
    return merged


def highlighted_html(segments: Sequence[tuple[str, bool]]) -> str:
    """HTML for highlighted segments: every piece of text goes through ``html.escape`` (quotes too),
    so document markup (``<script>``, ``<img onerror>``) and markdown (``![x](…)``) stay literal.
    The only tags in the output are the ``<span>``/``<mark>`` this function writes."""
    parts = []
    for seg, hi in segments:
        esc = html.escape(seg, quote=True).replace("\n", "<br>")
        parts.append(f'<mark class="sieve-anchor">{esc}</mark>' if hi else esc)
    return ('<div class="sieve-doc" style="white-space:pre-wrap;font-family:monospace;font-size:0.85rem;'
            'line-height:1.5;border:1px solid #ddd;border-radius:6px;padding:0.6rem;">' + "".join(parts) + "</div>")


_SECRET_PATTERNS = (re.compile(r"sk-[A-Za-z0-9_\-]{8,}"), re.compile(r"(?i)(api[_-]?key\s*[=:]\s*)\S+"),
                    re.compile(r"(?i)(bearer\s+)\S+"))


def scrub_secrets(message: str) -> str:
    """Remove API keys from a message before it is shown: configured key values from the
    environment (``*API_KEY*``, ``*TOKEN*``) and common key shapes."""
    out = str(message)
    for name, value in os.environ.items():
        if value and len(value) >= 8 and any(k in name.upper() for k in ("API_KEY", "TOKEN", "SECRET", "PASSWORD")):
            out = out.replace(value, "***")
    for pat in _SECRET_PATTERNS:
        out = pat.sub(lambda m: (m.group(1) if m.groups() else "") + "***", out)
    return out


#: Every ASCII punctuation character (CommonMark lets each one be backslash-escaped; escaping all
#: of them leaves no markdown, HTML, link, image, directive (``:red[…]``) or LaTeX syntax behind).
_MD_SPECIAL = re.compile(r"([!-/:-@\[-`{-~])")
#: Control characters (except tab and newline) and bidirectional formatting characters, which can
#: reorder what an analyst reads: shown as a visible code point instead.
_INVISIBLE = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u200b-\u200f\u202a-\u202e\u2060-\u2069\ufeff]")


_LEADING_BLANKS = re.compile(r"(?m)^[ \t]+")


def visible(text: object) -> str:
    """``text`` with control and bidi-formatting characters replaced by a visible ``⟨U+XXXX⟩``."""
    return _INVISIBLE.sub(lambda m: f"⟨U+{ord(m.group(0)):04X}⟩", str(text))


def md_escape(text: object) -> str:
    """THE way to put a value that is not our own literal text (document ids, answers, family names,
    paths, error messages) into anything Streamlit renders as markdown (``st.caption``,
    ``st.write``, ``st.info``/``warning``/``error``, widget labels and help): every ASCII punctuation
    character is backslash-escaped and invisible characters are made visible, so the value shows
    literally and can never become markup, a link or an image. tests/dashboard/test_safe_render.py
    scans every page and service module for markdown calls that skip it."""
    out = _MD_SPECIAL.sub(r"\\\1", visible(text))
    # leading blanks would start an indented code block (where escapes show as backslashes): keep the
    # indentation visible with no-break spaces instead
    out = _LEADING_BLANKS.sub(lambda m: "\u00a0" * len(m.group(0).expandtabs(4)), out)
    return out.replace("\r", "").replace("\n", "  \n")


md = md_escape
