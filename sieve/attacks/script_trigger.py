"""Mixed-script trigger (CEM-style), docs/algorithms.md §7.2 (last bullet) and §7.4 (CEM-C).

RAGSieve's PR-W demo under BGE-M3 shows "an optimised prefix [that] is a multilingual mix of
scripts followed by the payload", and its CEM-C demo shares "one identical optimised multilingual
prefix … by all 5 documents of a query … followed by 5 different payloads; metadata payload_index
is 0..4" (RS:data/demo/attacks.jsonl). CEM construction code is not released (§13), so this recipe
reproduces the *observable* form without a multilingual white-box retriever:

* the query's words, a fraction ``swap_fraction`` of them rewritten with look-alike letters from
  Cyrillic / Greek (homoglyphs: the retriever's tokenizer sees different tokens, a reader does not),
  and a fraction ``foreign_fraction`` replaced by a word from another writing system
  (CJK, Arabic, Devanagari, Hangul, Thai, Cyrillic, Greek);
* followed by ``tail_tokens`` short multilingual tokens;
* one prefix per target, shared by all its documents (CEM-C); poison = prefix + " " + payload.

Deterministic in (seed, query_id). Metadata ``scripts`` lists the writing systems in the prefix.
"""
from __future__ import annotations

import unicodedata
from typing import Any

from sieve.attacks.base import Attack, target_rng
from sieve.registry import ATTACKS
from sieve.types import Target

#: Latin → look-alike letters (Cyrillic first, Greek second) – the classic homoglyph table.
HOMOGLYPHS: dict[str, tuple[str, ...]] = {
    "a": ("\u0430", "\u03b1"), "c": ("\u0441",), "e": ("\u0435", "\u03b5"), "i": ("\u0456", "\u03b9"),
    "j": ("\u0458",), "o": ("\u043e", "\u03bf"), "p": ("\u0440", "\u03c1"), "s": ("\u0455",),
    "x": ("\u0445", "\u03c7"), "y": ("\u0443", "\u03b3"), "h": ("\u04bb",), "k": ("\u03ba",),
    "n": ("\u03b7",), "v": ("\u03bd",), "t": ("\u03c4",), "u": ("\u03c5",),
}

#: Short "reference / source / answer / fact"-like words in other writing systems.
FOREIGN_TOKENS: tuple[str, ...] = (
    "参考", "資料", "答案", "事实", "出典", "情報",          # CJK (Han / Kanji)
    "مرجع", "حقيقة", "جواب",                              # Arabic
    "संदर्भ", "उत्तर", "तथ्य",                                # Devanagari
    "참고", "정답", "사실",                                # Hangul
    "อ้างอิง", "คำตอบ",                                   # Thai
    "справка", "ответ", "факт",                           # Cyrillic
    "αναφορά", "απάντηση", "γεγονός",                     # Greek
    "ソース", "こたえ",                                    # Katakana / Hiragana
)


def writing_systems(text: str) -> list[str]:
    """Names of the writing systems of the letters in ``text`` (first word of the Unicode name:
    LATIN, CYRILLIC, GREEK, CJK, ARABIC, DEVANAGARI, HANGUL, THAI, HIRAGANA, KATAKANA …), sorted."""
    out = set()
    for ch in text:
        if ch.isalpha():
            name = unicodedata.name(ch, "")
            if name:
                out.add(name.split()[0])
    return sorted(out)


@ATTACKS.register
class ScriptTriggerAttack(Attack):
    """Query with look-alike and foreign-script words + a multilingual tail, shared per target."""

    name = "script"
    summary = "Mixed-script trigger: homoglyph/foreign-script query prefix shared by all documents"
    paper = "RAGSieve PR-W (BGE-M3) / CEM-C demo, docs/algorithms.md §7.2, §7.4"
    needs = ()

    # parameters, stored as attributes by Params.__init__ (declared for type checkers)
    swap_fraction: float
    foreign_fraction: float
    tail_tokens: int

    def __init__(self, swap_fraction: float = 0.4, foreign_fraction: float = 0.2, tail_tokens: int = 4) -> None:
        if not 0 <= swap_fraction <= 1 or not 0 <= foreign_fraction <= 1:
            raise ValueError("swap_fraction and foreign_fraction must be in [0, 1]")
        if tail_tokens < 0:
            raise ValueError("tail_tokens must be >= 0")
        super().__init__(swap_fraction=swap_fraction, foreign_fraction=foreign_fraction,
                         tail_tokens=tail_tokens)

    def prefix(self, query: str, query_id: str, seed: int) -> str:
        """The shared mixed-script prefix of one target (deterministic in seed and query_id)."""
        rng = target_rng(seed, query_id)
        words = query.strip().rstrip("?").split()
        out = []
        for w in words:
            r = rng.random()
            if r < self.foreign_fraction:
                out.append(FOREIGN_TOKENS[int(rng.integers(len(FOREIGN_TOKENS)))])
            elif r < self.foreign_fraction + self.swap_fraction:
                out.append(_homoglyph_word(w, rng))
            else:
                out.append(w)
        n_tail = min(self.tail_tokens, len(FOREIGN_TOKENS))
        tail = [FOREIGN_TOKENS[int(i)] for i in rng.choice(len(FOREIGN_TOKENS), size=n_tail, replace=False)]
        return " ".join(out + tail)

    def build(self, target: Target, payload_indices: list[int], resources: Any,
              seed: int) -> dict[int, tuple[str, dict[str, Any]]]:
        prefix = self.prefix(target.query, target.query_id, seed)
        meta = {"trigger": prefix, "scripts": writing_systems(prefix), "shared_prefix": True}
        return {p: (prefix + " " + target.payloads[p].strip(), dict(meta)) for p in payload_indices}


def _homoglyph_word(word: str, rng: Any) -> str:
    """Replace every letter that has a look-alike with one of its look-alikes."""
    chars = []
    for ch in word:
        alts = HOMOGLYPHS.get(ch.lower())
        chars.append(alts[int(rng.integers(len(alts)))] if alts and ch.islower() else ch)
    return "".join(chars)
