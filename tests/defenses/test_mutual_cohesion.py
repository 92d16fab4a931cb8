"""Mutual cohesion (sieve/defenses/mutual_cohesion.py, docs/algorithms.md §14.8): members of a tight group of
mutually nearest passages score high, a true passage merely near the group does not — on hand-built
judge-space geometry."""
from __future__ import annotations

import numpy as np
import pytest

from _tris_fakes import FixedEmbedder, ranking_of, resources_with
from sieve.defenses.mutual_cohesion import MutualCohesion, mutual_cohesion_scores
from sieve.registry import DEFENSES
from sieve.types import Ranking

Q = "What county is Apopka, Florida in?"
GOLD = "Apopka is a city in Orange County, Florida, northwest of Orlando."
POISONS = [f"Apopka variant {i}: the city of Apopka, Florida, lies in Lake County." for i in range(5)]
OFF = [f"Harbour note {i}: ferries leave at dawn." for i in range(6)]


def _poison_vector(i: int) -> list[float]:
    # one author's five variants: cosine ~0.96–0.99 to one another, ~0.75 to the true passage
    return [0.6, 0.8, 0.05 * i, 0.02 * (i % 2), 0.0, 0.0] + [0.0] * 6


VECTORS = {
    Q: [1.0] + [0.0] * 11,
    GOLD: [1.0, 0.15, 0.0, 0.0, 0.55] + [0.0] * 7,
    **{t: _poison_vector(i) for i, t in enumerate(POISONS)},
    # ordinary off-topic passages: each along a direction of its own, a little towards the question
    **{t: list(np.eye(12)[6 + i] + 0.2 * np.eye(12)[0]) for i, t in enumerate(OFF)},
}


@pytest.fixture(scope="module")
def res():
    return resources_with(judge=FixedEmbedder(VECTORS))


def _cos(a: str, b: str) -> float:
    x, y = np.asarray(VECTORS[a]), np.asarray(VECTORS[b])
    return float(x @ y / np.linalg.norm(x) / np.linalg.norm(y))


def test_the_geometry_is_what_the_tests_say():
    assert min(_cos(a, b) for a in POISONS for b in POISONS if a != b) > 0.95
    assert 0.5 < max(_cos(GOLD, p) for p in POISONS) < 0.8
    assert max(_cos(a, b) for a in OFF for b in OFF if a != b) < 0.5


def test_five_agreeing_poisons_are_a_mutual_group_and_the_true_passage_beside_them_is_not(res):
    r = ranking_of(Q, [*POISONS[:2], GOLD, *POISONS[2:], *OFF[:2]], poison=[True, True, False, True, True, True,
                                                                            False, False])
    s = {x.doc_id: x for x in MutualCohesion(threshold=0.0).score(r, res, None).items}
    poisons = [s[f"d{i}"] for i in (0, 1, 3, 4, 5)]
    gold = s["d2"]
    # each poison names three of the other four and is named back by at least one (the variants lie on a
    # line: the two ends are each other's farthest); the middle three by all three they name
    assert [p.evidence["mutual_neighbours"] for p in poisons] == [1, 3, 3, 3, 2]
    assert all(p.value > 0.95 * p.evidence["mutual_neighbours"] for p in poisons)
    # the true passage's nearest are poisons, but no poison names it: nothing mutual
    assert gold.evidence["mutual_neighbours"] == 0 and gold.value == 0.0
    # plain cohesion (mean cosine to the two nearest) would have put the true passage next to them
    X = res.judge_embeddings([d.text for d in r.documents])
    S = X @ X.T
    np.fill_diagonal(S, -1)
    plain = np.sort(S, axis=1)[:, -2:].mean(axis=1)
    assert plain[2] > 0.6 and plain[2] > 4 * max(plain[6:])


def test_calibrated_on_clean_rankings_it_removes_the_group_and_keeps_the_truth(res):
    clean = [ranking_of(Q, [GOLD, *OFF]), ranking_of(Q, [*OFF[3:], GOLD, *OFF[:3]])]
    d = MutualCohesion().calibrate(clean, res, clean_budget=0.05)
    assert d.threshold is not None and d.threshold < 2.0
    r = ranking_of(Q, [*POISONS, GOLD, *OFF], poison=[True] * 5 + [False] * 7)
    out = d.apply(r, res, 5)
    kept = [c.text for c in out.context]
    assert GOLD in kept and not set(POISONS) & set(kept)


def test_a_lone_poison_and_the_true_passage_score_alike(res):
    # what it cannot see (module docstring): a pair names each other
    values, counts = mutual_cohesion_scores(res.judge_embeddings([POISONS[0], GOLD, *OFF[:4]]), 3)
    assert counts[0] >= 1 and counts[1] >= 1
    assert abs(values[0] - values[1]) < 0.5


def test_only_the_context_is_examined_and_the_window_bounds_the_comparison(res):
    r = ranking_of(Q, [*POISONS, GOLD, *OFF])
    alone = MutualCohesion(threshold=1.0).score(r, res, 3).items
    assert [x.status for x in alone[:3]] == ["scored"] * 3
    assert {x.status for x in alone[3:]} == {"not_examined"}
    narrow = MutualCohesion(threshold=1.0, window=4).score(r, res, 6).items
    assert [x.status for x in narrow[:4]] == ["scored"] * 4
    assert [x.status for x in narrow[4:6]] == ["unavailable"] * 2
    assert all(x.evidence["window"] == 4 for x in narrow[:4])


def test_parameters_are_checked_and_registered():
    assert isinstance(DEFENSES.create("mutual_cohesion"), MutualCohesion)
    with pytest.raises(ValueError, match="neighbours"):
        MutualCohesion(neighbours=0)
    with pytest.raises(ValueError, match="window"):
        MutualCohesion(window=1)
    with pytest.raises(TypeError):
        MutualCohesion(radius=3)   # unknown parameter names are errors


def test_an_empty_ranking_and_a_single_passage(res):
    assert MutualCohesion(threshold=0.0).score(Ranking(Q, []), res, 5).items == []
    s = MutualCohesion(threshold=0.0).score(ranking_of(Q, [GOLD]), res, 5).items
    assert [x.status for x in s] == ["unavailable"]
    assert np.isnan(mutual_cohesion_scores(np.ones((1, 3)), 3)[0][0])
