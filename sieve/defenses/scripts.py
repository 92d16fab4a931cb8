"""Writing-system helpers for RSQ's E_i and RSG's integrity predicate (docs/algorithms.md §3.3, §4.4),
and the ASCII casefold tokeniser shared by RSQ's E_a and RSG's lexical Jaccard (§3.2, §4.2).

Script label per alphabetic character, by substring test on its Unicode name in this order:
LATIN, CYRILLIC, ARABIC, HEBREW, DEVANAGARI, BENGALI, THAI, ARMENIAN, GEORGIAN, GREEK; else
EAST_ASIAN if the name contains CJK / HIRAGANA / KATAKANA / HANGUL; else OTHER (also for
characters without a name). Non-alphabetic characters have no label.
"""
from __future__ import annotations

import re
import unicodedata
from collections import Counter
from dataclasses import dataclass, field
from functools import lru_cache

_ORDERED_SCRIPTS = ("LATIN", "CYRILLIC", "ARABIC", "HEBREW", "DEVANAGARI", "BENGALI", "THAI",
                    "ARMENIAN", "GEORGIAN", "GREEK")
_EAST_ASIAN_MARKERS = ("CJK", "HIRAGANA", "KATAKANA", "HANGUL")
_ASCII_TOKEN = re.compile(r"[a-z0-9]+")

#: RSG multiscript gate: this many distinct scripts trip the integrity predicate (§4 config).
MULTISCRIPT_GATE = 3


def ascii_tokens(text: str) -> list[str]:
    """Casefold, then maximal runs of ASCII ``[a-z0-9]`` (§3.2 step 1, §4.2).

    Non-ASCII letters split tokens ("café" → "caf"); non-Latin scripts yield no tokens.
    """
    return _ASCII_TOKEN.findall(text.casefold())


@lru_cache(maxsize=65536)
def script_label(ch: str) -> str | None:
    """Script label of one character, or ``None`` if it is not alphabetic (§3.3)."""
    if not ch.isalpha():
        return None
    if ch.isascii():
        return "LATIN"
    name = unicodedata.name(ch, "")
    if not name:
        return "OTHER"
    for s in _ORDERED_SCRIPTS:
        if s in name:
            return s
    for m in _EAST_ASIAN_MARKERS:
        if m in name:
            return "EAST_ASIAN"
    return "OTHER"


def mixed_script_fraction(text: str) -> float:
    """1 − (count of the most frequent label) / (number of alphabetic characters); 0 without any (§3.3)."""
    if text.isascii():
        return 0.0
    counts = Counter(lab for lab in map(script_label, text) if lab is not None)
    total = sum(counts.values())
    if total == 0:
        return 0.0
    return 1.0 - max(counts.values()) / total


def adjacent_transitions(text: str) -> int:
    """Adjacent character pairs of the raw text where both are alphabetic with different labels (§4.4).

    A space, digit or punctuation character between two letters breaks adjacency.
    """
    if text.isascii():
        return 0
    n = 0
    prev: str | None = None
    for ch in text:
        lab = script_label(ch)
        if lab is not None and prev is not None and lab != prev:
            n += 1
        prev = lab
    return n


@dataclass
class ScriptProfile:
    """Script fields of one document (§4.4; ``mixed_fraction`` and ``transition_rate`` are informational)."""

    scripts: list[str] = field(default_factory=list)
    alphabetic: int = 0
    transitions: int = 0
    mixed_fraction: float = 0.0
    transition_rate: float = 0.0
    integrity: int = 0


def script_profile(text: str, gate: int = MULTISCRIPT_GATE) -> ScriptProfile:
    """Scripts, adjacent transitions and the RSG integrity predicate
    I = 1 iff (adjacent transitions > 0) or (distinct scripts ≥ ``gate``) (§4.4)."""
    if text.isascii():
        alpha = sum(1 for c in text if c.isalpha())
        return ScriptProfile(["LATIN"] if alpha else [], alpha, 0, 0.0, 0.0, 0)
    labels = [script_label(c) for c in text]
    counts = Counter(lab for lab in labels if lab is not None)
    alpha = sum(counts.values())
    transitions = 0
    prev = None
    for lab in labels:
        if lab is not None and prev is not None and lab != prev:
            transitions += 1
        prev = lab
    mixed = 1.0 - max(counts.values()) / alpha if alpha else 0.0
    pairs = max(1, alpha - 1)
    integrity = int(transitions > 0 or len(counts) >= gate)
    return ScriptProfile(sorted(counts), alpha, transitions, mixed, transitions / pairs if alpha > 1 else 0.0, integrity)


def integrity_predicate(text: str, gate: int = MULTISCRIPT_GATE) -> int:
    """RSG I_i ∈ {0, 1} (§4.4)."""
    return script_profile(text, gate).integrity
