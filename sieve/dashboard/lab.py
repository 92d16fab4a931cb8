"""The Attack lab's data: poisons generated for one target, ranked on a sandbox snapshot."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Sequence

from sieve.types import Document, Ranking, Target

if TYPE_CHECKING:
    from sieve.experiment import Experiment, Snapshot
    from sieve.resources import Resources


LAB_FAMILIES = ("pr_b", "pr_w", "paraphrase", "script", "forced_top", "diverse", "payload_only")


def lab_families() -> list[str]:
    from sieve.registry import ATTACKS

    names = ATTACKS.names()
    return [f for f in LAB_FAMILIES if f in names] + [n for n in names if n not in LAB_FAMILIES]


def lab_poisons(family: str, target: Target, resources: "Resources", volume: int = 5, seed: int = 0,
                id_prefix: str = "lab") -> tuple[list[Document], dict[str, Any]]:
    """Generate ``volume`` poisons of ``family`` for one target (ids prefixed so they never clash
    with the dataset's own attack documents). Returns (documents, stats)."""
    from sieve.attacks import generate_attack

    out = generate_attack(family, [target], resources, seed=seed, volume=volume)
    if out.skipped and not out.records:
        from sieve.attacks import AttackError

        raise AttackError(f"{family}: target {target.query_id} skipped: {out.skipped[0][1]}")
    docs = [Document(f"{id_prefix}:{d.id}", d.text, d.title, True, dict(d.metadata)) for d in out.documents]
    return docs, dict(out.stats)


def lab_snapshot(experiment: "Experiment", family: str, poisons: Sequence[Document]) -> "Snapshot":
    """A sandbox snapshot: the clean corpus plus ``poisons`` (in memory; the dataset files are never touched)."""
    return experiment.snapshot(f"lab:{family}", documents=list(poisons))


def lab_ranking(experiment: "Experiment", target: Target, family: str, poisons: Sequence[Document]) -> Ranking:
    """The target question ranked on the sandbox (:meth:`Experiment.rank`: forced-top poisons are
    pinned by their placement metadata, the same rule as ``sieve eval`` and ``sieve search``)."""
    return experiment.rank(target.query, snapshot=lab_snapshot(experiment, family, poisons), query_id=target.query_id,
                           correct_answers=target.correct_answers, target_answer=target.target_answer)


def poison_ranks(ranking: Ranking) -> list[int]:
    return [d.rank for d in ranking.documents if d.poison]
