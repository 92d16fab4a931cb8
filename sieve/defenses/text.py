"""Text helpers shared by TRIS, TrustRAG and RobustRAG: word tokens, n-gram sets, ROUGE-L.

* :func:`word_tokens` is the TRIS tokeniser of docs/algorithms.md §2.3: lowercase, then every maximal
  run of Unicode word characters (``\\w+``). Punctuation and apostrophes split tokens
  ("don't" → "don", "t").
* :func:`lcs_length` / :func:`rouge_l` implement ROUGE-L F1 over such tokens (TrustRAG §8.2 uses
  the ``rouge-score`` package with stemming; Sieve uses its own LCS without stemming, so scores
  can be slightly lower on inflected words).
* :func:`phrase_candidates` is the POS-free keyword extractor of the RobustRAG baseline (§8.3).
"""
from __future__ import annotations

import re
from typing import Hashable, Sequence

_WORD = re.compile(r"\w+", re.UNICODE)
_WORD_OR_PUNCT = re.compile(r"\w+|[^\w\s]", re.UNICODE)


def word_tokens(text: str) -> list[str]:
    """TRIS tokeniser (§2.3): lowercase, maximal ``\\w+`` runs."""
    return _WORD.findall(text.lower())


def ngram_set(tokens: Sequence[str], n: int) -> set[tuple[str, ...]]:
    """Set of contiguous ``n``-grams of ``tokens`` (empty when there are fewer than ``n`` tokens)."""
    return {tuple(tokens[i:i + n]) for i in range(len(tokens) - n + 1)}


def lcs_length(a: Sequence[Hashable], b: Sequence[Hashable]) -> int:
    """Length of the longest common subsequence of two token sequences.

    Bit-parallel algorithm (Allison–Dix / Hyyrö): one big-integer update per token of ``b``, so a
    pairwise ROUGE-L matrix over 50 passages costs milliseconds instead of seconds.
    """
    if not a or not b:
        return 0
    masks: dict[Hashable, int] = {}
    for i, tok in enumerate(a):
        masks[tok] = masks.get(tok, 0) | (1 << i)
    full = (1 << len(a)) - 1
    v = full
    for tok in b:
        u = v & masks.get(tok, 0)
        v = ((v + u) | (v - u)) & full
    return len(a) - bin(v).count("1")


def rouge_l(a: Sequence[Hashable], b: Sequence[Hashable]) -> float:
    """ROUGE-L F1 = 2PR/(P+R) with P = LCS/|b|, R = LCS/|a| (symmetric); 0 when either is empty."""
    lcs = lcs_length(a, b)
    if lcs == 0:
        return 0.0
    return 2.0 * lcs / (len(a) + len(b))


#: English function words (determiners, pronouns, auxiliaries, prepositions, conjunctions,
#: particles, interjections). RobustRAG (§8.3) splits responses at these parts of speech with spaCy;
#: Sieve splits at this built-in list instead (no spaCy model ships offline).
STOPWORDS: frozenset[str] = frozenset(
    """a about above after again against all am an and any are aren as at be because been before being
    below between both but by can cannot could couldn d did didn do does doesn doing don down during each
    few for from further had hadn has hasn have haven having he her here hers herself him himself his how
    i if in into is isn it its itself just ll m me might more most must mustn my myself no nor not now o
    of off on once only or other ought our ours ourselves out over own re s same shall shan she should
    shouldn so some such t than that the their theirs them themselves then there these they this those
    through to too under until up ve very was wasn we were weren what when where which while who whom
    why will with won would wouldn y you your yours yourself yourselves yes oh well also according
    answer context""".split()
)


def phrase_candidates(response: str) -> set[str]:
    """RobustRAG keyword candidates of one isolated answer (§8.3, POS-free variant).

    Lowercase; tokens are words and single punctuation marks. Stopwords (:data:`STOPWORDS`) and
    punctuation are separators; every maximal run of the remaining words is a phrase (joined by
    spaces) and each of its words is a candidate too; the whole stripped response (lowercased) is
    also a candidate. Deduplicated per response.
    """
    text = response.strip().lower()
    out: set[str] = set()
    if not text:
        return out
    out.add(text)
    run: list[str] = []
    for tok in _WORD_OR_PUNCT.findall(text):
        if _WORD.fullmatch(tok) and tok not in STOPWORDS:
            run.append(tok)
            out.add(tok)
            continue
        if run:
            out.add(" ".join(run))
            run = []
    if run:
        out.add(" ".join(run))
    return out


def is_keyword(candidate: str) -> bool:
    """A candidate counts as a keyword unless it is only punctuation and stopwords (§8.3)."""
    return any(w not in STOPWORDS for w in word_tokens(candidate))
