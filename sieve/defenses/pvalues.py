"""Empirical p-values and their combinations, as the fused detector uses them (docs/algorithms.md §14.2).

A document's p-value for one evidence is its rank among clean values (:func:`empirical_p`); the
per-evidence p-values are combined by Fisher's sum, min-p or the Cauchy combination, and the
combination is itself turned into a p-value against the same statistic of clean documents
(:func:`combination_nulls`). Calibration queries are split into folds (:func:`query_folds`) so a
calibration document is scored against the documents of other queries only.
"""
from __future__ import annotations

import math
from typing import Sequence

import numpy as np

#: How per-evidence p-values are combined into the fused score.
COMBINE = ("fisher", "omnibus", "minp", "cauchy")


#: How an empirical p-value counts clean values tied with the document's (:func:`empirical_p`).
TIES = ("conservative", "mid")


def empirical_p(null_sorted: np.ndarray, x: float, member: bool = False, ties: str = "conservative") -> float:
    """The share of clean values at least as extreme as ``x`` for an ascending ``null_sorted``.

    ``ties="conservative"``: (1 + #{null ≥ x}) / (1 + n) — a tie counts as more extreme. ``"mid"``:
    the mid-p value (½ + #{null > x} + ½·#{null = x}) / (1 + n) — a tie counts half, and ``x`` itself
    half. Mid-p matters where clean values pile up on one value (RSG's density is 0 for most
    passages, L2 is 0 for a passage sharing no prefix word with the question): conservatively such a
    passage gets p = 1, which vetoes removal under the Cauchy combination, and a value just above the
    pile jumps to the small p of the mass above it (docs/algorithms.md §14.2).

    ``member=True``: ``x`` is itself one of the null values and is left out ((1 + #{others ≥ x}) / n
    conservatively) — without this the calibration documents get larger p-values than new documents
    and the threshold is too low."""
    if ties not in TIES:
        raise ValueError(f"ties must be one of {', '.join(TIES)}; got {ties!r}")
    n = int(null_sorted.size)
    lo = int(np.searchsorted(null_sorted, x, side="left"))
    ge = n - lo
    if ties == "mid":
        gt = n - int(np.searchsorted(null_sorted, x, side="right"))
        eq = ge - gt
        if member:                                  # x is one of the eq tied values: leave it out
            return (0.5 + gt + 0.5 * max(eq - 1, 0)) / max(n, 1)
        return (0.5 + gt + 0.5 * eq) / (1.0 + n)
    if member:
        return max(ge, 1) / max(n, 1)
    return (1.0 + ge) / (1.0 + n)


def fisher_stat(ps: Sequence[float]) -> float:
    """Fisher's −2 Σ ln p."""
    return float(-2.0 * sum(math.log(max(p, 1e-300)) for p in ps))


def minp_stat(ps: Sequence[float]) -> float:
    """−ln min p."""
    return float(-math.log(max(min(ps), 1e-300))) if ps else 0.0


def cauchy_stat(ps: Sequence[float]) -> float:
    """The Cauchy combination (ACAT): mean of tan((½ − p)π). Its tail is driven by the smallest
    p-values like min-p, but every evidence still counts, like Fisher (docs/algorithms.md §14.2).

    Not capped below 1: an evidence with p = 1 (its value is at or below the bottom of the clean
    null, e.g. L2 = 0, a passage sharing no prefix word with the question) contributes ≈ −∞ and
    vetoes removal. Capping at 1 − 1/d (ACAT's convention) was measured and lost more than it gained
    (docs/algorithms.md §14.2)."""
    if not ps:
        return 0.0
    return float(np.mean([math.tan((0.5 - min(max(p, 1e-12), 1 - 1e-12)) * math.pi) for p in ps]))


def combination_nulls(per: Sequence[dict[str, float]]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The sorted clean Fisher, min-p and Cauchy statistics of documents with these per-evidence p-values."""
    rows = [list(p.values()) for p in per if p]
    return tuple(np.sort(np.asarray([stat(p) for p in rows], dtype=np.float64))  # type: ignore[return-value]
                 for stat in (fisher_stat, minp_stat, cauchy_stat))


def query_folds(query_of: Sequence[int], folds: int) -> dict[int, int] | None:
    """Query → fold of a cross-fitted calibration (``folds``, at most one per query); ``None`` with a
    single query."""
    queries = sorted(set(query_of))
    folds = min(int(folds), len(queries))
    return {q: j % folds for j, q in enumerate(queries)} if folds >= 2 else None
