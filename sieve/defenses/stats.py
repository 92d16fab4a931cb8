"""Small exact statistics shared by RSQ and RSG (docs/algorithms.md §3.1, §3.2, §4.5).

* :func:`midrank_upper_tail` – finite mid-rank upper-tail probability against a reference list
  (RS:statistics.py), used by RSQ's E_i and E_s.
* :func:`simes` – Simes combination of p-values (RSQ E_a).
* :func:`hypergeom_upper_tail` – P[X ≥ x] for X ~ Hypergeometric(population, successes, draws),
  computed exactly with integer binomials (equal to ``scipy.stats.hypergeom.sf(x-1, N, K, n)``).
* :func:`corpus_upper_tail` – RSG's empirical tail #{D_j ≥ D_i}/(N+1) with exact float32 ties.
"""
from __future__ import annotations

import math
from typing import Sequence

import numpy as np

#: float64 ulp of 1 (2.22e-16): the floor used before every log in RSQ (§3.2, §3.3, §3.5).
EPS = float(np.finfo(np.float64).eps)


def midrank_upper_tail(value: float, reference: Sequence[float] | np.ndarray) -> float:
    """p = (0.5 + #{r > v} + 0.5·#{r = v}) / (m + 1) over a non-empty reference of size m (§3.1).

    Ties are exact float equality. With m = 15 the range is [1/32, 15.5/16].
    """
    ref = np.asarray(reference, dtype=np.float64)
    m = ref.size
    if m == 0:
        raise ValueError("midrank_upper_tail needs a non-empty reference list")
    v = float(value)
    greater = int(np.count_nonzero(ref > v))
    equal = int(np.count_nonzero(ref == v))
    return (0.5 + greater + 0.5 * equal) / (m + 1)


def simes(pvalues: Sequence[float] | np.ndarray) -> float:
    """Simes combination (§3.1): sort ascending, p = min(1, min_i L·p_(i)/i). Needs L ≥ 1."""
    p = np.sort(np.asarray(pvalues, dtype=np.float64))
    n = p.size
    if n == 0:
        raise ValueError("simes needs at least one p-value")
    return float(min(1.0, np.min(n * p / np.arange(1, n + 1))))


def hypergeom_upper_tail(x: int, population: int, successes: int, draws: int) -> float:
    """P[X ≥ x], X ~ Hypergeometric(population, successes, draws) — exact (§3.2 step 5).

    Same value as ``scipy.stats.hypergeom.sf(x - 1, population, successes, draws)``, without
    scipy's per-call overhead (RSQ evaluates it for every tested token of every query).
    """
    if not (0 <= successes <= population and 0 <= draws <= population):
        raise ValueError(f"invalid hypergeometric parameters N={population} K={successes} n={draws}")
    lo = max(int(x), 0, draws - (population - successes))
    hi = min(successes, draws)
    if lo > hi:
        return 0.0
    total = math.comb(population, draws)
    num = sum(math.comb(successes, j) * math.comb(population - successes, draws - j) for j in range(lo, hi + 1))
    return num / total


def corpus_upper_tail(scores: Sequence[float] | np.ndarray) -> np.ndarray:
    """RSG corpus tail (§4.5): p_i = #{j : D_j ≥ D_i} / (N + 1), counting itself and every exact
    float32 tie in full (not mid-rank)."""
    d = np.asarray(scores, dtype=np.float32)
    n = d.size
    srt = np.sort(d)
    count_ge = n - np.searchsorted(srt, d, side="left")
    return count_ge.astype(np.float64) / (n + 1)
