"""P-values and their combinations (sieve/defenses/pvalues.py, docs/algorithms.md §14.2)."""
from __future__ import annotations

import math

import numpy as np
import pytest

from sieve.defenses.pvalues import cauchy_stat, combination_nulls, empirical_p, fisher_stat, minp_stat, query_folds


def test_empirical_p_counts_ties_as_at_least_as_extreme():
    null = np.sort(np.array([0.1, 0.2, 0.2, 0.5]))
    assert empirical_p(null, 0.2) == pytest.approx((1 + 3) / 5)
    assert empirical_p(null, 0.6) == pytest.approx(1 / 5)
    assert empirical_p(null, 0.0) == pytest.approx(1.0)


def test_calibration_documents_get_leave_one_out_p_values():
    null = np.sort(np.array([0.1, 0.2, 0.3, 0.9]))
    # a new document above every clean value: 1/5; the clean maximum itself, left out: 1/4 (not 2/5)
    assert empirical_p(null, 1.0) == pytest.approx(1 / 5)
    assert empirical_p(null, 0.9, member=True) == pytest.approx(1 / 4)
    assert empirical_p(null, 0.1, member=True) == pytest.approx(4 / 4)


def test_cauchy_combination_keeps_one_strong_evidence_that_fisher_dilutes():
    """One evidence at p = 0.002 among four ordinary ones (p = 0.6) against five moderate ones
    (p = 0.1 each): Fisher's sum ranks the moderate document higher, the Cauchy combination the one
    with the strong evidence (docs/algorithms.md §14.2)."""
    strong, moderate = [0.002, 0.6, 0.6, 0.6, 0.6], [0.1] * 5
    assert fisher_stat(strong) < fisher_stat(moderate)
    assert cauchy_stat(strong) > cauchy_stat(moderate)
    assert cauchy_stat(moderate) == pytest.approx(math.tan(0.4 * math.pi))
    assert cauchy_stat([0.5, 0.5]) == pytest.approx(0.0, abs=1e-12)
    # p = 1 (a value tied with the bottom of its clean null) vetoes: not capped (docs/algorithms.md §14.2)
    assert cauchy_stat([0.002, 1.0, 0.6]) < cauchy_stat([0.9, 0.9, 0.9]) < 0


def test_combination_nulls_are_sorted_statistics_of_documents_with_evidence():
    per = [{"l2": 0.5, "rouge": 0.5}, {}, {"l2": 0.01}]
    fisher, minp, cauchy = combination_nulls(per)
    assert fisher.tolist() == pytest.approx(sorted([fisher_stat([0.5, 0.5]), fisher_stat([0.01])]))
    assert minp.tolist() == pytest.approx(sorted([minp_stat([0.5, 0.5]), minp_stat([0.01])]))
    assert cauchy.tolist() == pytest.approx([0.0, math.tan(0.49 * math.pi)])


def test_query_folds_deal_queries_round_robin_and_need_two_queries():
    assert query_folds([7, 7, 3, 9, 3], 2) == {3: 0, 7: 1, 9: 0}
    assert query_folds([1, 2, 3], 8) == {1: 0, 2: 1, 3: 2}      # at most one fold per query
    assert query_folds([4, 4, 4], 8) is None


def test_mid_p_counts_a_tie_half_and_never_vetoes_a_pile_at_the_bottom():
    null = np.sort(np.array([0.0, 0.0, 0.0, 0.2, 0.5]))
    # three clean values tied at 0: conservatively p = 1 (a Cauchy veto), mid-p (½ + 2 + 3/2) / 6
    assert empirical_p(null, 0.0) == pytest.approx(1.0)
    assert empirical_p(null, 0.0, ties="mid") == pytest.approx(4.0 / 6)
    # tied with the clean maximum: half of it counts, and the document itself half
    assert empirical_p(null, 0.5, ties="mid") == pytest.approx((0.5 + 0.5) / 6)
    assert empirical_p(null, 0.5) == pytest.approx(2 / 6)
    # above every clean value: the floor halves, ½ / (n + 1)
    assert empirical_p(null, 0.9, ties="mid") == pytest.approx(0.5 / 6)
    # a calibration document leaves itself out: the other four, with two zeros tied
    assert empirical_p(null, 0.0, member=True, ties="mid") == pytest.approx((0.5 + 2 + 1.0) / 5)
    with pytest.raises(ValueError, match="ties"):
        empirical_p(null, 0.1, ties="random")
