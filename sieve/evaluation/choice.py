"""Reading the development suite's rows (docs/algorithms.md §9.4): the suite table, the rule that
chooses a configuration on held-out data, and fusion beside its best component.

Rows are ``summary.json`` rows (:func:`sieve.evaluation.summary.summary_row`) with the suite's keys
(``dataset``, ``untargeted``, ``clean_truth_kept``, ``clean_removal_on_clean``,
``clean_scored_on_clean``), as ``sieve bench suite`` (sieve/bench/suite_bench.py) writes them.

* :func:`pick` — the held-out rule: within the clean budget on the most datasets
  (:func:`within_budget`; every one, where any configuration is), then the most cells meeting their goal (:func:`meets_goal`), then the
  lowest mean poison-in-context; :func:`held_out_tables` applies it leaving out each dataset and
  each family.
* :func:`no_regret` — per cell, fusion against the best component within the budget.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sieve.constants import CLEAN
from sieve.evaluation.metrics import wilson_interval

#: Attacked truth-kept must be at least this share of clean truth-kept (the issue's goal).
TRUTH_RATIO = 0.9


def _pct(x: Any, digits: int = 2) -> str:
    return "—" if x is None else f"{x:.{digits}f}"


def format_suite(rows: list[dict[str, Any]]) -> str:
    """The suite table (markdown): one line per dataset × family × defense."""
    out = ["| dataset | family | defense | n | poison-in-context [95 % CI] | truth-kept attacked / clean | "
           "AUROC | detect@5 % | clean removal attacked / clean |", "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if r["attack"] == CLEAN:
            continue
        ci = r.get("poison_in_context_ci95")
        pic = _pct(r["poison_in_context_rate"]) + (f" [{ci[0]:.2f}, {ci[1]:.2f}]" if ci else "")
        fam = r["attack"] + (" (untargeted)" if r.get("untargeted") else "")
        out.append(f"| {r['dataset']} | {fam} | {r['defense']} | {r['queries']} | {pic} | "
                   f"{_pct(r.get('truth_kept'))} / {_pct(r.get('clean_truth_kept'))} | {_pct(r.get('auroc'))} | "
                   f"{_pct(r.get('detect_at_5pct'))} | {_pct(r.get('clean_removal_rate'), 3)} / "
                   f"{_pct(r.get('clean_removal_on_clean'), 3)} |")
    return "\n".join(out)


def format_generation(rows: list[dict[str, Any]]) -> str:
    """Accuracy (normalised substring of a correct answer) and attack success (of the target answer)
    of the answers generated from the final contexts, per dataset × condition × defense ("" when the
    run did not generate)."""
    gen = [r for r in rows if r.get("clean_acc") is not None or r.get("asr") is not None]
    if not gen:
        return ""
    out = ["| dataset | condition | defense | n | accuracy [95 % CI] | ASR [95 % CI] |", "|---|---|---|---|---|---|"]
    def ci(r: dict[str, Any], key: str) -> str:
        v, c = r.get(key), r.get(key + "_ci95")
        return "—" if v is None else f"{v:.2f}" + (f" [{c[0]:.2f}, {c[1]:.2f}]" if c else "")

    for r in gen:
        out.append(f"| {r['dataset']} | {r['attack']} | {r['defense']} | {r['queries']} | {ci(r, 'clean_acc')} | "
                   f"{ci(r, 'asr')} |")
    return "\n".join(out)


def within_budget(row: dict[str, Any], clean: dict[str, Any] | None, budget: float = 0.05) -> bool:
    """Clean removal on held-out clean questions is within the budget: the lower end of its 95 %
    Wilson interval (over the clean documents examined) is at most ``budget`` — one split of 50–64
    questions cannot tell 5 % from 6 %, but it can tell 5 % from 10 %."""
    rate = row.get("clean_removal_on_clean")
    if rate is None:
        return True
    n = int((clean or {}).get("n_scored_clean") or row.get("clean_scored_on_clean") or 0)
    if n <= 0:
        return rate <= budget + 1e-9
    return wilson_interval(round(rate * n), n)[0] <= budget + 1e-9


#: The issue's goal per family: poison-in-context at most this (black-box 2 %, every other family 5 %).
GOAL_PIC = {"pr_b": 0.02}
GOAL_PIC_DEFAULT = 0.05


def meets_goal(row: dict[str, Any]) -> bool:
    """One cell's goal: poison-in-context at most :data:`GOAL_PIC` (else 5 %) and attacked truth-kept at
    least :data:`TRUTH_RATIO` of clean truth-kept (where the set has relevant passages)."""
    pic = row.get("poison_in_context_rate")
    if pic is None or pic > GOAL_PIC.get(row["attack"], GOAL_PIC_DEFAULT) + 1e-9:
        return False
    return keeps_truth(row)   # keeping no truth on clean questions meets no truth goal


@dataclass(frozen=True)
class Choice:
    """What :func:`pick` chose and why: the configuration, its mean poison-in-context over the cells
    seen, how many of them meet the goal, and on how many of their datasets it is over the clean budget."""

    config: str
    mean_pic: float
    met: int
    cells: int
    within_budget: bool
    over_budget: int = 0          # datasets of the cells seen where it is over the clean budget
    datasets: int = 0             # datasets of the cells seen

    def label(self) -> str:
        over = (f"; over the clean budget on {self.over_budget} of {self.datasets} datasets, none is within it everywhere"
                if self.over_budget else "")
        return f"{self.config} ({self.met} of {self.cells} cells meet the goal{over})"


def pick(rows: list[dict[str, Any]], configs: list[str], cells: list[tuple[str, str]], budget: float = 0.05
         ) -> Choice:
    """The held-out rule, the one way Sieve chooses a configuration (the suite's leave-one-dataset-out
    and leave-one-family-out tables, :mod:`sieve.evaluation.lofo`): the fewest datasets where clean
    removal on held-out clean queries is over the budget first (:func:`within_budget`; none, where any
    configuration manages that), then the most ``cells`` (dataset, family) meeting their goal
    (:func:`meets_goal`: poison-in-context and truth-kept), then the lowest mean poison-in-context over
    them; ties go to the earlier configuration, i.e. the default. Counting the datasets over budget,
    rather than asking for none, keeps the budget in the rule when one dataset is over it for every
    configuration (the label says so)."""
    by = {(r["dataset"], r["attack"], r["defense"]): r for r in rows}
    scored: list[tuple[int, int, float, int, str, int]] = []
    for order, c in enumerate(configs):
        label = f"fusion[{c}]"
        vals, met, over, seen = [], 0, set(), set()
        for ds, fam in cells:
            r = by.get((ds, fam, label))
            if r is None or r.get("poison_in_context_rate") is None:
                continue
            seen.add(ds)
            if not within_budget(r, by.get((ds, CLEAN, label)), budget):
                over.add(ds)
            met += meets_goal(r)
            vals.append(r["poison_in_context_rate"])
        if vals:
            scored.append((len(over), -met, sum(vals) / len(vals), order, c, len(seen)))
    if not scored:
        return Choice(configs[0], float("inf"), 0, len(cells), False)
    n_over, met, mean, _, best, n_seen = min(scored)
    return Choice(best, mean, -met, len(cells), not n_over, n_over, n_seen)


def _mean_pic(by: dict[tuple[str, str, str], dict[str, Any]], cells: list[tuple[str, str]], cfg: str) -> str:
    v = [by[(d, f, f"fusion[{cfg}]")]["poison_in_context_rate"] for d, f in cells if (d, f, f"fusion[{cfg}]") in by]
    return f"{sum(v) / len(v):.3f}" if v else "—"


def held_out_tables(rows: list[dict[str, Any]], configs: list[str]) -> str:
    """Leave-one-dataset-out and leave-one-family-out choices of the fusion configuration, with what
    each choice does where it was not chosen: its mean poison-in-context and goal cells there beside
    the default's (``configs[0]``). A choice that differs from the default but meets no more goals
    where it was held out has not shown that it transfers."""
    cells = sorted({(r["dataset"], r["attack"]) for r in rows if r["attack"] != CLEAN and not r.get("untargeted")})
    by = {(r["dataset"], r["attack"], r["defense"]): r for r in rows}
    out = ["| held out | configuration chosen without it | its poison-in-context there (mean) | default there | "
           "goal cells there: chosen / default |", "|---|---|---|---|---|"]
    for kind, key in (("dataset", 0), ("family", 1)):
        for held in sorted({c[key] for c in cells}):
            others = [c for c in cells if c[key] != held]
            mine = [c for c in cells if c[key] == held]
            chosen = pick(rows, configs, others)
            out.append(f"| {kind} {held} | {chosen.label()} | {_mean_pic(by, mine, chosen.config)} | "
                       f"{_mean_pic(by, mine, configs[0])} | {_goal_cells(by, mine, chosen.config)} / "
                       f"{_goal_cells(by, mine, configs[0])} |")
    return "\n".join(out)


def _goal_cells(by: dict[tuple[str, str, str], dict[str, Any]], cells: list[tuple[str, str]], cfg: str) -> str:
    rs = [by[(d, f, f"fusion[{cfg}]")] for d, f in cells if (d, f, f"fusion[{cfg}]") in by]
    return f"{sum(meets_goal(r) for r in rs)} of {len(rs)}" if rs else "—"


def keeps_truth(row: dict[str, Any]) -> bool:
    """Attacked truth-kept at least :data:`TRUTH_RATIO` of clean truth-kept (true where the set has no
    relevant passage); the truth half of :func:`meets_goal`."""
    tk, tc = row.get("truth_kept"), row.get("clean_truth_kept")
    if tk is None or tc is None:
        return True
    return tc > 0 and tk / tc >= TRUTH_RATIO - 1e-9


def dominates(c: dict[str, Any], f: dict[str, Any], truth_tolerance: float = 0.05) -> bool:
    """Row ``c`` is better than row ``f`` on one measure and no worse on the other: poison-in-context
    below the lower end of ``f``'s Wilson interval with truth-kept no more than ``truth_tolerance``
    lower, or poison-in-context at most ``f``'s with truth-kept more than ``truth_tolerance`` higher."""
    pc, pf = c["poison_in_context_rate"], f["poison_in_context_rate"]
    lo = (f.get("poison_in_context_ci95") or [pf, pf])[0]
    tc, tf = c.get("truth_kept"), f.get("truth_kept")
    if tc is None or tf is None:
        return pc < lo - 1e-12
    return (pc < lo - 1e-12 and tc >= tf - truth_tolerance) or (pc <= pf + 1e-12 and tc > tf + truth_tolerance)


def no_regret(rows: list[dict[str, Any]], components: list[str], fusion: str = "fusion[default]",
              budget: float = 0.05) -> str:
    """Fusion beside its components per dataset × family, among the components within the clean
    budget on held-out clean queries (:func:`within_budget`):

    * the best component by poison-in-context (ties: truth-kept), and whether fusion is at least as
      good within the Wilson interval, on poison-in-context and on truth-kept (the issue's reading;
      a component that holds every poison by removing every relevant passage wins it);
    * the components that **dominate** fusion (:func:`dominates`: better on one measure, no worse on
      the other) — "none" is fusion never losing to its parts on both measures at once."""
    by = {(r["dataset"], r["attack"], r["defense"]): r for r in rows}
    cells = sorted({(r["dataset"], r["attack"]) for r in rows if r["attack"] != CLEAN})
    out = ["| dataset | family | fusion PIC [CI] / truth-kept | best component within budget: PIC / truth-kept | "
           "fusion ≥ best? | dominated by |", "|---|---|---|---|---|---|"]
    for ds, fam in cells:
        f = by.get((ds, fam, fusion))
        if f is None:
            continue
        comps = [by[(ds, fam, c)] for c in components if c != "none" and (ds, fam, c) in by
                 and by[(ds, fam, c)].get("poison_in_context_rate") is not None
                 and within_budget(by[(ds, fam, c)], by.get((ds, CLEAN, c)), budget)]
        if not comps:
            continue
        best = min(comps, key=lambda r: (r["poison_in_context_rate"], -(r.get("truth_kept") or 0.0)))
        ci = f.get("poison_in_context_ci95") or [0.0, 1.0]
        ok_pic = ci[0] <= best["poison_in_context_rate"] + 1e-12
        ok_truth = (f.get("truth_kept") or 0.0) >= (best.get("truth_kept") or 0.0) - 0.05
        verdict = "yes" if ok_pic and ok_truth else ("no (poisons)" if not ok_pic else "no (truth)")
        over = [c["defense"] for c in comps if dominates(c, f)]
        out.append(f"| {ds} | {fam} | {_pct(f['poison_in_context_rate'])} [{ci[0]:.2f}, {ci[1]:.2f}] / "
                   f"{_pct(f.get('truth_kept'))} | {best['defense']}: {_pct(best['poison_in_context_rate'])} / "
                   f"{_pct(best.get('truth_kept'))} | {verdict} | {', '.join(over) or 'none'} |")
    return "\n".join(out)
