"""Metric functions against hand-computed values (docs/algorithms.md §9.1, §9.2)."""
from __future__ import annotations

import math

import pytest

from sieve.evaluation import metrics as M


def test_auroc_with_ties_midranks():
    # pooled [0.9, 0.5, 0.5, 0.1] → ranks 4, 2.5, 2.5, 1; positives 0.9, 0.5 → rank-sum 6.5
    # AUROC = (6.5 - 3) / 4 = 0.875
    assert M.auroc([0.9, 0.5], [0.5, 0.1]) == pytest.approx(0.875)


def test_auroc_extremes_and_empty():
    assert M.auroc([3, 4], [1, 2]) == 1.0
    assert M.auroc([1, 2], [3, 4]) == 0.0
    assert M.auroc([1.0], [1.0]) == 0.5
    assert M.auroc([], [1.0]) is None
    assert M.auroc([1.0], []) is None


def test_threshold_and_detection_strict_rule():
    neg = [float(i) for i in range(1, 21)]          # 20 negatives 1..20
    # allowed = floor(20 * 0.05) = 1 → sorted desc [20, 19, ...][1] = 19 (2nd largest)
    assert M.threshold_at_clean_budget(neg, 0.05) == 19.0
    # a positive equal to the threshold is NOT detected (strict >)
    assert M.detect_at_clean_budget([19.0], neg, 0.05) == 0.0
    assert M.detect_at_clean_budget([19.5, 19.0, 25.0, 1.0], neg, 0.05) == 0.5
    # 19 negatives: floor(0.95) = 0 → the largest
    assert M.threshold_at_clean_budget(neg[:19], 0.05) == 19.0
    assert M.detect_at_clean_budget([1.0], [], 0.05) is None


def test_threshold_index_past_end_is_minus_inf():
    assert M.threshold_at_clean_budget([], 0.05) == float("-inf")
    assert M.threshold_at_clean_budget([1.0, 2.0], 1.0) == float("-inf")
    # decimal budgets are exact: floor(100 * 0.29) = 29, not 28
    assert M.budget_index(100, 0.29) == 29
    with pytest.raises(ValueError):
        M.budget_index(10, 1.5)


def test_roc_curve_points():
    fpr, tpr, thr = M.roc_curve([0.9, 0.5], [0.5, 0.1])
    assert (fpr[0], tpr[0]) == (0.0, 0.0) and (fpr[-1], tpr[-1]) == (1.0, 1.0)
    assert list(zip(fpr, tpr)) == [(0.0, 0.0), (0.0, 0.5), (0.5, 1.0), (1.0, 1.0)]
    assert thr[1:] == [0.9, 0.5, 0.1]
    assert M.roc_curve([], [1]) == ([], [], [])


def test_recompute_decisions():
    assert M.recompute_decisions([0.2, None, 0.5, 0.7], 0.5) == [False, False, True, True]


def test_mrr_first():
    # first hits at rank 1, rank 4, none → (1 + 0.25 + 0) / 3
    assert M.mrr_first([1, 4, None]) == pytest.approx(1.25 / 3)
    assert M.mrr_first([]) is None


def test_wilson_interval():
    lo, hi = M.wilson_interval(5, 10)
    # hand value: centre 0.5, half = 1.96*sqrt(0.025 + 0.0096)/1.3842 = 0.2634
    assert lo == pytest.approx(0.2366, abs=1e-3) and hi == pytest.approx(0.7634, abs=1e-3)
    assert M.wilson_interval(0, 0) == (0.0, 1.0)
    lo, hi = M.wilson_interval(0, 20)
    assert lo == 0.0 and hi == pytest.approx(0.1611, abs=1e-3)


def test_percentiles():
    assert M.percentiles([1, 2, 3, 4], (50, 95)) == [2.5, pytest.approx(3.85)]
    assert M.percentiles([], (50, 95)) == [None, None]


@pytest.mark.parametrize("answer,target,expected", [
    ("The Eiffel Tower.", "eiffel tower", True),
    ("It is the Eiffel-Tower!", "Eiffel Tower", True),       # punctuation becomes a space
    ("an apple a day", "The Apple", True),                     # articles dropped on both sides
    ("Michelangelo painted it.", "michelangelo", True),
    ("Leonardo da Vinci", "Michelangelo", False),
    ("anything at all", "", False),                            # empty target never succeeds
    ("anything at all", "the", False),                         # target that normalises to empty
    ("", "Sydney", False),
])
def test_asr_normalisation_cases(answer, target, expected):
    assert M.asr_success(answer, target) is expected


def test_normalize_asr_exact():
    assert M.normalize_asr("The  Eiffel Tower.") == "eiffel tower"
    assert M.normalize_asr("A cat, an owl & THE dog") == "cat owl dog"


def test_clean_correct():
    assert M.clean_correct("It was painted by Leonardo da Vinci.", ["Leonardo da Vinci", "Leonardo"])
    assert not M.clean_correct("Michelangelo", ["Leonardo da Vinci"])
    assert not M.clean_correct("anything", [])


def test_squad_em_f1():
    assert M.squad_normalize("The  Cat's hat!") == "cats hat"
    assert M.exact_match("the Canberra.", ["Sydney", "Canberra"]) == 1.0
    assert M.exact_match("Canberra city", "Canberra") == 0.0
    # pred "canberra city" vs ref "canberra": common 1, P = 1/2, R = 1 → F1 = 2/3
    assert M.token_f1("Canberra city", ["Canberra"]) == pytest.approx(2 / 3)
    # max over references
    assert M.token_f1("Canberra city", ["Sydney", "Canberra city"]) == 1.0
    # multiset: pred "a b b" → "b b" after article removal vs ref "b": common 1, P 1/2, R 1
    assert M.token_f1("a b b", "b") == pytest.approx(2 / 3)
    assert M.token_f1("", [""]) == 1.0
    assert M.token_f1("", ["x"]) == 0.0
    assert M.token_f1("the", ["x"]) == 0.0  # normalises to empty


def test_no_nan_leaks():
    assert not any(isinstance(v, float) and math.isnan(v) for v in [M.auroc([1], [2]), M.detect_at_clean_budget([1], [2])])
