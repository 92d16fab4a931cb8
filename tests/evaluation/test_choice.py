"""The held-out choice of a configuration and fusion beside its components (sieve/evaluation/choice.py,
docs/algorithms.md §9.4), on hand-built suite rows."""
from __future__ import annotations

from sieve.evaluation.choice import dominates, held_out_tables, meets_goal, no_regret, pick, within_budget


def _row(ds, fam, defense, pic, tk=None, tc=1.0, removal=0.04, n_clean=300):
    return {"dataset": ds, "attack": fam, "defense": defense, "queries": 100, "poison_in_context_rate": pic,
            "poison_in_context_ci95": [max(0.0, pic - 0.05), min(1.0, pic + 0.05)], "truth_kept": tk,
            "clean_truth_kept": tc, "clean_removal_on_clean": removal, "clean_scored_on_clean": n_clean}


def test_budget_is_judged_within_the_wilson_interval_of_the_held_out_split():
    assert within_budget(_row("a", "pr_b", "x", 0.0, removal=0.06, n_clean=300), None)     # 18/300: cannot exclude 5 %
    assert not within_budget(_row("a", "pr_b", "x", 0.0, removal=0.10, n_clean=300), None)  # 30/300: it can
    assert not within_budget(_row("a", "pr_b", "x", 0.0, removal=0.06, n_clean=0), None)    # no n: the point itself


def test_a_cell_meets_its_goal_only_when_the_truth_is_kept_too():
    assert meets_goal(_row("a", "pr_b", "x", 0.01, tk=0.95))
    assert not meets_goal(_row("a", "pr_b", "x", 0.03, tk=0.95))            # black-box: 2 %
    assert meets_goal(_row("a", "payload_only", "x", 0.04, tk=0.95))        # other families: 5 %
    assert not meets_goal(_row("a", "payload_only", "x", 0.0, tk=0.5))      # emptied the context of the truth
    assert meets_goal(_row("a", "payload_only", "x", 0.0, tk=None))         # no relevant passage in the set
    assert not meets_goal(_row("a", "pr_b", "x", 0.0, tk=0.0, tc=0.0))      # no truth kept even on clean questions


def test_choose_prefers_goals_met_over_a_lower_poison_rate_that_discards_the_truth():
    cells = [("a", "pr_b"), ("a", "payload_only"), ("b", "pr_b")]
    rows = []
    for ds, fam in cells:
        rows.append(_row(ds, fam, "fusion[default]", 0.0, tk=0.2))          # lowest poison rate, truth gone
        rows.append(_row(ds, fam, "fusion[keep]", 0.01 if fam == "pr_b" else 0.3, tk=0.95))
    choice = pick(rows, ["default", "keep"], cells)
    chosen, mean = choice.label(), choice.mean_pic
    assert chosen.startswith("keep") and "2 of 3 cells" in chosen and abs(mean - 0.107) < 1e-3
    # over the budget somewhere: the configuration within it wins whatever its goals
    rows += [_row("c", "pr_b", "fusion[default]", 0.5, tk=0.9), _row("c", "pr_b", "fusion[keep]", 0.0, tk=1.0,
                                                                    removal=0.2)]
    assert pick(rows, ["default", "keep"], cells + [("c", "pr_b")]).label().startswith("default")
    table = {ln.split(" | ")[0]: ln for ln in held_out_tables(rows, ["default", "keep"]).splitlines()[2:]}
    assert table["| dataset a"].split(" | ")[1].startswith("default")   # chosen on b and c: keep is over budget on c
    assert table["| dataset c"].split(" | ")[1].startswith("keep")      # chosen on a and b


def test_when_one_dataset_is_over_budget_for_every_configuration_the_budget_still_counts_elsewhere():
    cells = [("a", "pr_b"), ("b", "pr_b"), ("c", "pr_b")]
    rows = [_row("a", "pr_b", "fusion[default]", 0.0, tk=0.95, removal=0.2),     # a: over for both
            _row("a", "pr_b", "fusion[greedy]", 0.0, tk=0.95, removal=0.2),
            _row("b", "pr_b", "fusion[default]", 0.3, tk=0.95), _row("b", "pr_b", "fusion[greedy]", 0.0, tk=0.95,
                                                                                    removal=0.2),
            _row("c", "pr_b", "fusion[default]", 0.3, tk=0.95), _row("c", "pr_b", "fusion[greedy]", 0.0, tk=0.95)]
    choice = pick(rows, ["default", "greedy"], cells)
    # greedy meets 3 goals to the default's 1, but it is over the budget on b too
    assert choice.config == "default" and (choice.over_budget, choice.datasets) == (1, 3)
    assert choice.label() == ("default (1 of 3 cells meet the goal; over the clean budget on 1 of 3 datasets, "
                              "none is within it everywhere)")
    rows[3]["clean_removal_on_clean"] = 0.04                                       # now only a is over for greedy
    assert pick(rows, ["default", "greedy"], cells).config == "greedy"


def test_no_regret_compares_with_the_best_component_within_the_budget():
    rows = [_row("a", "pr_b", "fusion[default]", 0.30, tk=0.2), _row("a", "pr_b", "tris_l2", 0.0, tk=1.0),
            _row("a", "pr_b", "rsg", 0.0, tk=1.0, removal=0.3),               # over budget: not a fair comparison
            _row("a", "payload_only", "fusion[default]", 0.05, tk=0.97), _row("a", "payload_only", "tris_l2", 0.9, tk=1.0)]
    table = no_regret(rows, ["tris_l2", "rsg"])
    lines = {ln.split(" | ")[1]: ln for ln in table.splitlines()[2:]}
    assert "| yes |" in lines["payload_only"]
    assert "tris_l2: 0.00" in lines["pr_b"] and "| no (poisons) | tris_l2 |" in lines["pr_b"]


def test_a_component_dominates_fusion_only_when_better_on_one_measure_and_no_worse_on_the_other():
    rows = [_row("a", "pr_b", "fusion[default]", 0.30, tk=0.9),
            _row("a", "pr_b", "tris_l2", 0.0, tk=0.0, tc=0.05),               # holds the poisons by removing the truth
            _row("a", "pr_b", "trustrag", 0.10, tk=0.88),                     # fewer poisons, as much truth: dominates
            _row("a", "pr_b", "promotion", 1.0, tk=1.0),                      # keeps everything: not better
            _row("b", "pr_b", "fusion[default]", 0.5, tk=0.7), _row("b", "pr_b", "rsq", 0.5, tk=0.9)]
    lines = {ln.split(" | ")[0]: ln for ln in no_regret(rows, ["tris_l2", "trustrag", "promotion", "rsq"]).splitlines()[2:]}
    assert "tris_l2: 0.00 / 0.00" in lines["| a"] and "no (poisons)" in lines["| a"]   # the literal comparison
    assert lines["| a"].endswith("| trustrag |")
    assert lines["| b"].endswith("| rsq |")             # as many poisons, more truth
    assert not dominates(rows[1], rows[0]) and not dominates(rows[3], rows[0])


def test_held_out_tables_say_whether_a_choice_transfers():
    rows = [_row("a", "pr_b", "fusion[default]", 0.03, tk=0.95), _row("a", "pr_b", "fusion[new]", 0.0, tk=0.99),
            _row("b", "pr_b", "fusion[default]", 0.01, tk=0.95), _row("b", "pr_b", "fusion[new]", 0.10, tk=0.99)]
    lines = {ln.split(" | ")[0]: ln for ln in held_out_tables(rows, ["default", "new"]).splitlines()[2:]}
    # chosen on a, where only "new" meets the goal; held out b, it would not meet it and the default does
    assert lines["| dataset b"].split(" | ")[1].startswith("new")
    assert lines["| dataset b"].endswith("| 0 of 1 / 1 of 1 |")
    # chosen on b (only the default meets it there): held out a, the default misses it
    assert lines["| dataset a"].split(" | ")[1].startswith("default") and lines["| dataset a"].endswith("| 0 of 1 / 0 of 1 |")
