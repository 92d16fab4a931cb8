"""Leave-one-family-out evaluation of a detector's design choices (docs/algorithms.md §14.4).

The fusion detector (:mod:`sieve.defenses.fusion`) learns nothing from attacks: its calibration reads
clean rankings only. Its *design* does: which evidence enters the fusion was chosen while looking at
the attack families. A leave-one-family-out (LOFO) table makes that choice honest: for every family
F, the configuration (here: the evidence subset, e.g. all evidence or all-but-one) is chosen by a
fixed rule on the *other* families only, and F is reported with the configuration chosen without it.

Rule (:func:`choose_config`): the held-out rule of the development suite,
:func:`sieve.evaluation.choice.pick` — one rule for both — over this table's families: within the
clean budget (the lower end of the Wilson interval of the clean removal), then the most families
meeting the goal (poison-in-context ≤ 5 %, ≤ 2 % for ``pr_b``), then the lowest mean
poison-in-context over the other families (ties: the earlier configuration in the given order, i.e.
the full detector first). A configuration without a clean measurement is not within the budget.

Inputs are per-configuration result tables ``{config: {family: FamilyResult}}`` (poison-in-context
counts, n) plus the clean removal per configuration, produced e.g. by ``sieve/bench/fusion_bench.py``.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from sieve.constants import CLEAN
from sieve.evaluation.choice import pick
from sieve.evaluation.metrics import wilson_interval


@dataclass(frozen=True)
class FamilyResult:
    """Poison-in-context of one configuration on one family: ``k`` of ``n`` targets kept a poison."""

    k: int
    n: int

    @property
    def rate(self) -> float:
        return self.k / self.n if self.n else float("nan")

    def interval(self) -> tuple[float, float]:
        return wilson_interval(self.k, self.n)


@dataclass(frozen=True)
class CleanResult:
    """Clean documents removed (``k`` of ``n`` scored clean documents) by one configuration."""

    k: int
    n: int

    @property
    def rate(self) -> float:
        return self.k / self.n if self.n else float("nan")


@dataclass(frozen=True)
class LofoRow:
    family: str
    chosen: str                 # configuration chosen without looking at ``family``
    result: FamilyResult        # its poison-in-context on ``family``
    full: FamilyResult          # the full (first) configuration on ``family``, for comparison
    others_mean: float          # chosen configuration's mean poison-in-context on the other families


#: The dataset name of the rows :func:`choose_config` hands to the suite's rule (one dataset here).
_ONE = "-"


def choose_config(results: Mapping[str, Mapping[str, FamilyResult]], clean: Mapping[str, CleanResult],
                  families: Sequence[str], budget: float = 0.05) -> tuple[str, float]:
    """(configuration, its mean poison-in-context over ``families``) by the module's rule; the first
    configuration in ``results`` wins ties."""
    configs = list(results)
    if not configs:
        raise ValueError("lofo: no configurations")
    rows: list[dict[str, Any]] = []
    for c in configs:
        cl = clean.get(c)
        removal = {"clean_removal_on_clean": cl.rate if cl is not None else 1.0,
                   "clean_scored_on_clean": cl.n if cl is not None else 1}
        rows.append({"dataset": _ONE, "attack": CLEAN, "defense": f"fusion[{c}]",
                     "n_scored_clean": cl.n if cl is not None else 1, **removal})
        rows += [{"dataset": _ONE, "attack": f, "defense": f"fusion[{c}]", "poison_in_context_rate": r.rate,
                  **removal} for f, r in results[c].items() if f in families and r.n]
    chosen = pick(rows, configs, [(_ONE, f) for f in families], budget)
    return chosen.config, chosen.mean_pic


def lofo_table(results: Mapping[str, Mapping[str, FamilyResult]], clean: Mapping[str, CleanResult],
               budget: float = 0.05) -> list[LofoRow]:
    """One :class:`LofoRow` per family present in the first configuration's results."""
    configs = list(results)
    if not configs:
        return []
    full = configs[0]
    families = list(results[full])
    rows = []
    for f in families:
        others = [g for g in families if g != f]
        chosen, mean = choose_config(results, clean, others, budget)
        rows.append(LofoRow(f, chosen, results[chosen][f], results[full][f], mean))
    return rows


def format_lofo(rows: Sequence[LofoRow]) -> str:
    """A markdown table of :func:`lofo_table` rows with Wilson 95 % intervals."""
    out = ["| held-out family | config chosen on the other families | poison-in-context (95 % CI) | "
           "full fusion on it | chosen config on the others (mean) |",
           "|---|---|---|---|---|"]
    for r in rows:
        lo, hi = r.result.interval()
        out.append(f"| {r.family} | {r.chosen} | {r.result.rate:.3f} [{lo:.3f}, {hi:.3f}] (n={r.result.n}) | "
                   f"{r.full.rate:.3f} | {r.others_mean:.3f} |")
    return "\n".join(out)
