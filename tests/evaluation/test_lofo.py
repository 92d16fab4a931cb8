"""Leave-one-family-out table (sieve/evaluation/lofo.py) and fusion's clean-only preparation."""
from __future__ import annotations

import numpy as np
import pytest

from sieve.corpus import load_dataset
from sieve.defenses.fusion import Fusion
from sieve.evaluation.lofo import CleanResult, FamilyResult, choose_config, format_lofo, lofo_table
from sieve.experiment import Experiment, prepare_defense

R = FamilyResult


def _results():
    # config "all" is good on a, b; "no_x" is better on b, c but bad on a; "wide" breaks the budget
    return {
        "all": {"a": R(1, 20), "b": R(8, 20), "c": R(12, 20)},
        "no_x": {"a": R(15, 20), "b": R(2, 20), "c": R(3, 20)},
        "wide": {"a": R(0, 20), "b": R(0, 20), "c": R(0, 20)},
    }


def _clean():
    return {"all": CleanResult(4, 100), "no_x": CleanResult(5, 100), "wide": CleanResult(30, 100)}


def test_choice_never_looks_at_the_held_out_family():
    res, clean = _results(), _clean()
    rows = {r.family: r for r in lofo_table(res, clean, budget=0.05)}
    # held out a: chosen on b, c → no_x (mean 0.125 vs all 0.5); reported on a with no_x: 15/20
    assert rows["a"].chosen == "no_x" and rows["a"].result == R(15, 20)
    assert rows["a"].others_mean == pytest.approx((2 + 3) / 40)
    # held out c: chosen on a, b → all (mean 0.225 vs 0.425)
    assert rows["c"].chosen == "all" and rows["c"].result == R(12, 20)
    assert rows["c"].full == R(12, 20)
    # "wide" removes 30 % of clean documents: never chosen although it holds every poison
    assert all(r.chosen != "wide" for r in rows.values())
    # changing the held-out family's own numbers cannot change its choice
    res["no_x"]["a"] = R(0, 20)
    assert lofo_table(res, clean)[0].chosen == "no_x"


def test_first_config_wins_ties_and_when_nothing_is_within_budget():
    res = {"all": {"a": R(1, 10)}, "other": {"a": R(1, 10)}}
    assert choose_config(res, {"all": CleanResult(0, 10), "other": CleanResult(0, 10)}, ["a"])[0] == "all"
    assert choose_config(res, {"all": CleanResult(9, 10), "other": CleanResult(9, 10)}, ["a"])[0] == "all"


def test_table_has_wilson_intervals():
    text = format_lofo(lofo_table(_results(), _clean()))
    assert "| a | no_x | 0.750 [0.531, 0.888] (n=20)" in text


def test_fusion_preparation_never_reads_the_attack_condition(tiny_dataset, eval_resources):
    """prepare_defense for an attack condition calibrates on the clean snapshot's clean rankings:
    the learned nulls and threshold equal those of the clean preparation. A calibration that read the
    attack documents (the family's snapshot or its rankings) would change them."""
    ds = load_dataset(tiny_dataset)
    exp = Experiment(ds, eval_resources, depth=20)
    family = ds.attack_families()[0]
    ev = ("l2", "rsg", "cohesion", "answer", "perplexity")
    clean = prepare_defense(exp, Fusion(evidence=ev), condition="clean", clean_budget=0.1)
    attacked = prepare_defense(exp, Fusion(evidence=ev), condition=family, clean_budget=0.1)
    assert clean.threshold == attacked.threshold
    assert set(clean.null_) == set(attacked.null_) == set(ev)
    for e in ev:
        assert np.array_equal(clean.null_[e], attacked.null_[e])
    # but the attacked defense's RSG is fitted on the attacked snapshot (it defends that corpus)
    poisons = {d.id for d in ds.attack_documents(family)}
    assert poisons <= set(attacked.rsg_.audit_.ids) and not poisons & set(clean.rsg_.audit_.ids)
    # and a clean-only calibration refuses attack rankings outright
    r = exp.rank(ds.attack_records(family)[0].query, condition=family)
    with pytest.raises(ValueError, match="clean rankings only"):
        Fusion(evidence=ev).calibrate([r], eval_resources)


def test_lofo_chooses_by_the_suites_rule():
    """One rule (sieve.evaluation.choice.pick): a configuration meeting the goal on more families
    beats one with a lower mean poison rate that meets it nowhere, as in the suite's tables."""
    res = {"a": {"x": R(1, 20), "y": R(20, 20)}, "b": {"x": R(5, 20), "y": R(5, 20)}}
    clean = {"a": CleanResult(2, 100), "b": CleanResult(2, 100)}
    assert choose_config(res, clean, ["x", "y"]) == ("a", pytest.approx((0.05 + 1.0) / 2))
    # and a configuration with no clean measurement is never within the budget
    assert choose_config(res, {"b": CleanResult(2, 100)}, ["x", "y"])[0] == "b"
