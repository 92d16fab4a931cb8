"""Forced-top placement (TRIS pilot_cpu.py, docs/algorithms.md §7.3) and volume slicing."""
from __future__ import annotations

import pytest

from sieve.attacks import force_top, generate_attack, is_forced_top, with_volume
from sieve.types import RankedDocument, Ranking


def _clean(n=8):
    return Ranking("who wrote the novel pride and prejudice",
                   [RankedDocument(f"c{i}", f"clean {i}", i + 1, 0.8 - 0.05 * i) for i in range(n)], query_id="q1")


def test_forced_top_documents_and_flags(targets, tiny_resources):
    out = generate_attack("forced_top", targets, tiny_resources)
    rec = out.records[0]
    assert is_forced_top(rec) and rec.metadata == {"placement": "forced_top"}
    assert [d.metadata["forced_rank"] for d in rec.documents] == [0, 1, 2, 3, 4]
    assert [d.metadata["forced_score_offset"] for d in rec.documents] == [1.0, 0.999, 0.998, 0.997, 0.996]
    assert rec.documents[0].text == targets[0].query + "." + targets[0].payloads[0]
    assert all(is_forced_top(d) for d in rec.documents)


def test_force_top_puts_poisons_at_ranks_1_to_5(targets, tiny_resources):
    poisons = list(generate_attack("forced_top", targets, tiny_resources).records[0].documents)
    placed = force_top(_clean(), poisons)
    assert len(placed.documents) == 8                          # truncated to the input depth
    assert [d.rank for d in placed.documents] == list(range(1, 9))
    assert [d.id for d in placed.documents[:5]] == [p.id for p in poisons]
    assert all(d.poison for d in placed.documents[:5]) and not any(d.poison for d in placed.documents[5:])
    assert [d.score for d in placed.documents[:5]] == pytest.approx([1.8, 1.799, 1.798, 1.797, 1.796])
    assert [d.id for d in placed.documents[5:]] == ["c0", "c1", "c2"]
    # placing again does not duplicate; an explicit depth keeps more clean documents
    again = force_top(placed, poisons, depth=50)
    assert [d.id for d in again.documents] == [p.id for p in poisons] + ["c0", "c1", "c2"]
    assert again.documents[0].score == pytest.approx(placed.documents[5].score + 1.0)


def test_force_top_on_empty_ranking(targets, tiny_resources):
    poisons = list(generate_attack("forced_top", targets, tiny_resources, volume=2).records[0].documents)
    placed = force_top(Ranking("q", []), poisons, depth=5)
    assert [d.score for d in placed.documents] == pytest.approx([1.0, 0.999])


def test_with_volume_equals_generating_that_volume(targets, tiny_resources):
    big = generate_attack("script", targets, tiny_resources, volume=20, seed=4).records
    small = generate_attack("script", targets, tiny_resources, volume=3, seed=4).records
    cut = with_volume(big, 3)
    assert [[(d.id, d.text) for d in r.documents] for r in cut] == [[(d.id, d.text) for d in r.documents] for r in small]
    with pytest.raises(ValueError, match="fewer than volume"):
        with_volume(small, 5)
