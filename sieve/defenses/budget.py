"""The clean-budget threshold rule shared by every calibration (docs/algorithms.md §9.2).

Lives with the defenses (not in :mod:`sieve.evaluation`) because :meth:`Defense.calibrate` uses it
and the evaluation package imports the defenses; :mod:`sieve.evaluation.metrics` re-exports it.
"""
from __future__ import annotations

import math
from typing import Optional, Sequence

import numpy as np


def budget_index(n_neg: int, budget: float) -> int:
    """⌊n·budget⌋ — the number of negatives allowed above the threshold (§9.2).

    A 1e-9 guard keeps decimal budgets exact (0.29·100 is 28.999… in binary floating point).
    """
    if not 0.0 <= budget <= 1.0:
        raise ValueError(f"clean budget must be within [0, 1], got {budget}")
    return int(math.floor(n_neg * budget + 1e-9))


def threshold_at_clean_budget(neg_scores: Sequence[Optional[float]], budget: float = 0.05) -> float:
    """Score threshold that removes at most ``budget`` of the negatives under the strict rule.

    §9.2: sort negatives descending, take the element at index ⌊n·budget⌋; a document is flagged iff
    its score is **strictly greater**. If that index is ≥ n (no negatives, or budget = 1) every
    negative may be removed, so the threshold is ``-inf`` (everything with a finite score is flagged).
    """
    s = np.sort(np.asarray([float(x) for x in neg_scores if x is not None], dtype=np.float64))[::-1]
    i = budget_index(len(s), budget)
    if i >= len(s):
        return float("-inf")
    return float(s[i])


def removal_threshold(neg_scores: Sequence[Optional[float]], budget: float = 0.05) -> float:
    """The threshold for a defense that removes at ``score ≥ threshold``: the next float above the
    §9.2 strict-rule threshold, so "≥ returned value" equals "> threshold_at_clean_budget"."""
    return float(np.nextafter(threshold_at_clean_budget(neg_scores, budget), np.inf))
