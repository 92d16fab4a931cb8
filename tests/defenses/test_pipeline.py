"""Serial composition (docs/algorithms.md §5): merge, renumbering, refill, fallback, build_defense."""
from __future__ import annotations

import pytest

from _tris_fakes import ranking_of, resources_with
from sieve.defenses.base import Defense
from sieve.defenses.perplexity import Perplexity
from sieve.defenses.pipeline import Serial, build_defense
from sieve.defenses.tris import TRIS
from sieve.models.tiny import UnigramLM
from sieve.types import Ranking, Score, Scores


class RemoveIds(Defense):
    """Stub stage: removes fixed ids (its own rule: ``Score.flag``) and records the rankings it saw."""

    name = "stub"

    def __init__(self, ids=(), label="stub"):
        super().__init__(ids=tuple(ids))
        self.registry_name = label
        self.seen: list[Ranking] = []
        self.k_seen: list = []

    def score(self, ranking, resources, k_ctx=5):
        self.seen.append(ranking)
        self.k_seen.append(k_ctx)
        return Scores([Score(d.id, float(d.id in self.ids), "scored", self.label, flag=d.id in self.ids,
                             threshold=0.5, note=f"rank {d.rank}") for d in ranking.documents])


def test_serial_merge_renumber_and_refill():
    r = ranking_of("q", [f"text {i}" for i in range(10)])
    a, b = RemoveIds(["d1", "d3"], "a"), RemoveIds(["d2", "d3"], "b")
    res = Serial([a, b]).apply(r, resources_with(), k_ctx=5)
    seen = b.seen[0]
    assert [d.id for d in seen.documents] == ["d0", "d2", "d4", "d5", "d6", "d7", "d8", "d9"]
    assert [d.rank for d in seen.documents] == list(range(1, 9))        # renumbered survivors
    assert res.removed_ids == ["d1", "d2", "d3"]
    assert res.decision_for("d1").layer == "a" and res.decision_for("d3").layer == "a"  # first removal wins
    assert res.decision_for("d2").layer == "b" and res.decision_for("d2").reason.endswith("b: rank 2")
    assert res.decision_for("d2").score == 2.0 and res.decision_for("d0").score < 1.0   # one scale: score / threshold
    assert res.decision_for("d0").layer == "b"                            # kept: the last stage's decision
    assert [c.id for c in res.context] == ["d0", "d4", "d5", "d6", "d7"]  # refill from the original ranking
    assert [c.rank for c in res.context] == [1, 5, 6, 7, 8]               # original ranks, not rescored
    assert res.layers_run == ["a:a", "b:b"]
    assert res.defense == "a+b" and res.info["stages"] == ["a", "b"]
    assert a.k_seen == [5] and b.k_seen == [5]                           # the real k_ctx, not None
    Serial([a, b]).apply(r, resources_with(), k_ctx=3)
    assert a.k_seen[-1] == 3 and b.k_seen[-1] == 3


def test_serial_fallback_and_skipped_stage():
    r = ranking_of("q", ["x", "y"])
    a, b = RemoveIds(["d0", "d1"], "a"), RemoveIds([], "b")
    res = Serial([a, b]).apply(r, resources_with())
    assert res.fallback_used and [c.id for c in res.context] == ["d0", "d1"]
    assert b.seen == [] and res.info["skipped_stages"] == ["b"]
    assert len(res.warnings) == 1


def test_build_defense_specs_and_params():
    assert isinstance(build_defense("tris"), TRIS)
    s = build_defense("tris_l2+perplexity", **{"perplexity.threshold": 40.0})
    assert isinstance(s, Serial) and s.label == "tris_l2+perplexity"
    assert [st.label for st in s.stages_] == ["tris_l2", "perplexity"] and s.stages == ("tris_l2", "perplexity")
    assert s.threshold_param == "perplexity__threshold" and s.perplexity__threshold == 40.0
    assert getattr(s, "perplexity.threshold") == 40.0          # the older dotted name still reads
    s.set_params(prefix_token_count=12)
    assert s.stages_[0].prefix_token_count == 12 and s.get_params()["tris_l2__prefix_token_count"] == 12
    s.set_params(tris_l2__prefix_token_count=14)
    assert s.stages_[0].prefix_token_count == 14
    with pytest.raises(ValueError, match="bad defense spec"):
        build_defense("tris+")
    with pytest.raises(KeyError, match="unknown defense"):
        build_defense("tris+nope")
    with pytest.raises(ValueError, match="tris_l2\\+perplexity: unknown parameter 'nonexistent'; valid parameters: "):
        s.set_params(nonexistent=1)
    with pytest.raises(ValueError, match="unknown parameter 'perplexity.bogus'"):
        s.set_params(**{"perplexity.bogus": 1})
    with pytest.raises(ValueError, match="unknown parameter 'perplexity__bogus'"):
        s.set_params(perplexity__bogus=1)
    with pytest.raises(ValueError, match="unknown parameter 'nope.threshold'"):
        s.set_params(**{"nope.threshold": 1})
    with pytest.raises(ValueError, match="unknown parameter 'bogus'"):
        build_defense("tris_l2+perplexity", bogus=1)
    with pytest.raises(ValueError, match="rsq: unknown parameter 'threshold'; valid parameters: eta_q"):
        build_defense("rsq", threshold=1.37)


def test_serial_calibrates_stage_on_its_own_survivors():
    corpus = ["the capital of france is paris", "paris is a city in france", "france is in europe"]
    res = resources_with(lm=UnigramLM(corpus))
    s = build_defense("tris_l2+perplexity")
    assert s.perplexity__threshold is None
    q = "capital of france"
    # d0 repeats the query (L2 removes it), so perplexity never sees it during calibration
    clean = [ranking_of(q, ["capital of france capital of france zzz qqq"] + corpus)]
    s.calibrate(clean, res, clean_budget=0.05)
    p = s.stages_[1]
    expected = max(Perplexity(threshold=1.0).score_text(t, res) for t in corpus)
    assert p.threshold > expected and p.threshold < expected * (1 + 1e-12)
    assert p.threshold_ == p.threshold and s.is_calibrated()


def test_serial_redecide_uses_the_stage_knobs():
    corpus = ["the capital of france is paris", "paris is a city in france", "france is in europe"]
    res = resources_with(lm=UnigramLM(corpus))
    s = build_defense("tris_l2+perplexity", **{"perplexity.threshold": 5.0})
    assert s.threshold_knobs() == ["tris_l2__L2", "perplexity__threshold"]
    assert s.current_thresholds() == {"tris_l2__L2": 0.8, "perplexity__threshold": 5.0}
    r = ranking_of("capital of france", ["capital of france capital of france zzz qqq"] + corpus)
    ins = s.inspect(r, res)
    same = s.redecide(ins.decisions, s.current_thresholds())
    assert [d.removed for d in same] == [d.removed for d in ins.decisions]
    assert ins.decisions[0].removed and ins.decisions[0].layer == "L2"
    loose = s.redecide(ins.decisions, {"tris_l2__L2": float("inf"), "perplexity__threshold": 1e9})
    assert not any(d.removed for d in loose[1:])
    assert loose[0].removed   # repeat_trigger removes at any L2 threshold
    # an undotted key reaches every stage: "perplexity" is the perplexity stage's layer name
    only_ppl = s.redecide(ins.decisions, {"perplexity": 1e9})
    assert [d.layer for d in only_ppl] == ["L2", "L2", "perplexity", "perplexity"]
    assert [d.removed for d in only_ppl] == [True, True, False, False]
