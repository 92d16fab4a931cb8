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


#: Class-mode preset: the whole demo in under a minute on 2 CPU cores — the dataset's own pr_b poisons
#: (no generation), five of them, one fast defense (TRIS L2: no model) and three short answers that
#: the answer cache keeps for the next class.
CLASS_MODE = {"family": "pr_b", "volume": 5, "defenses": ("tris_l2",), "use_dataset_poisons": True}


def _replace_ci(text: str, old: str, new: str) -> str:
    import re

    return re.sub(re.escape(old), lambda _m: new, text, flags=re.IGNORECASE) if old else text


def retarget(target: Target, answer: str) -> Target:
    """``target`` with another target answer: every payload asserting the old answer now asserts
    ``answer`` (case-insensitive substitution; payloads that never name it are kept as they are)."""
    import dataclasses

    answer = answer.strip()
    if not answer or answer == target.target_answer:
        return target
    return dataclasses.replace(target, target_answer=answer,
                               payloads=tuple(_replace_ci(p, target.target_answer, answer) for p in target.payloads))


def retarget_documents(docs: Sequence[Document], old: str, new: str) -> list[Document]:
    """Poison documents rewritten for a custom target answer (same substitution as :func:`retarget`)."""
    if not new.strip() or new == old:
        return list(docs)
    return [Document(d.id, _replace_ci(d.text, old, new), d.title, d.poison, dict(d.metadata)) for d in docs]


def clean_answer_status(run_records: Sequence[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per question id, the undefended clean-condition answer recorded in an answers run and whether
    it is correct (§9.1 normalised substring): ``{qid: {"answer": str, "correct": bool}}``."""
    from sieve.evaluation.metrics import clean_correct

    out: dict[str, dict[str, Any]] = {}
    for r in run_records:
        if r.get("defense") != "none" or r.get("condition") != "clean" or r.get("answer") is None:
            continue
        ok = bool(r.get("correct_answers")) and clean_correct(r["answer"], r["correct_answers"])
        out[r["query_id"]] = {"answer": r["answer"], "correct": ok}
    return out
