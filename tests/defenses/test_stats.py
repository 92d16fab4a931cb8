"""Hand-computed values of the RAGSieve statistics helpers (docs/algorithms.md §3.1, §3.2, §4.5)."""
import math

import numpy as np
import pytest
from scipy.stats import hypergeom

from sieve.defenses.stats import corpus_upper_tail, hypergeom_upper_tail, midrank_upper_tail, simes


def test_midrank_floor_ceiling_and_one_tie():
    assert midrank_upper_tail(0.0, [0.0] * 15) == pytest.approx(0.5)          # tied with all: 8/16
    assert midrank_upper_tail(1.0, [0.0] * 15) == pytest.approx(1 / 32)       # above all
    assert midrank_upper_tail(0.3, [0.3] + [0.1] * 14) == pytest.approx(1 / 16)  # one tie
    assert midrank_upper_tail(-1.0, [0.0] * 15) == pytest.approx(15.5 / 16)   # below all


def test_midrank_rejects_empty_reference():
    with pytest.raises(ValueError):
        midrank_upper_tail(0.1, [])


def test_simes():
    # L=3: 3·0.01/1 = 0.03, 3·0.04/2 = 0.06, 3·0.5/3 = 0.5 → 0.03
    assert simes([0.5, 0.01, 0.04]) == pytest.approx(0.03)
    assert simes([0.6, 0.9]) == pytest.approx(0.9)        # min(1.2, 0.9)
    assert simes([0.9]) == pytest.approx(0.9)
    assert simes([0.8, 0.9, 0.95]) == pytest.approx(0.95)  # min(2.4, 1.35, 0.95)
    with pytest.raises(ValueError):
        simes([])


def test_hypergeom_tail_hand_values():
    assert hypergeom_upper_tail(5, 20, 5, 5) == pytest.approx(1 / 15504)
    # P[X ≥ 2], K = 3: (C(3,2)·C(17,3) + C(3,3)·C(17,2)) / C(20,5) = (2040 + 136) / 15504
    assert hypergeom_upper_tail(2, 20, 3, 5) == pytest.approx(2176 / 15504)
    assert hypergeom_upper_tail(5, 20, 20, 5) == pytest.approx(1.0)
    assert hypergeom_upper_tail(3, 20, 2, 5) == 0.0
    assert hypergeom_upper_tail(0, 20, 7, 5) == pytest.approx(1.0)


@pytest.mark.parametrize("x,K", [(2, 2), (2, 9), (3, 6), (4, 17), (5, 11), (2, 20)])
def test_hypergeom_tail_matches_scipy(x, K):
    assert hypergeom_upper_tail(x, 20, K, 5) == pytest.approx(float(hypergeom.sf(x - 1, 20, K, 5)), rel=1e-12)


def test_corpus_tail_counts_ties_in_full():
    p = corpus_upper_tail([0.0, 0.0, 0.5, 0.5, 1.0])
    assert p.tolist() == pytest.approx([5 / 6, 5 / 6, 3 / 6, 3 / 6, 1 / 6])


def test_corpus_tail_float32_ties():
    a = np.float32(0.1) * np.float32(3)
    b = np.float32(0.3)
    p = corpus_upper_tail([a, b])
    # float32 products can differ from the literal; equal only if the float32 values are equal
    expect_tie = np.float32(a) == np.float32(b)
    assert (p[0] == p[1]) == bool(expect_tie)
    assert math.isclose(max(p), 2 / 3)
