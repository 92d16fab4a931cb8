"""Attack factory: registered recipes that turn attack targets into poison documents (docs/algorithms.md §7).

Registered names (a public contract, :data:`sieve.registry.ATTACKS`):

========================  =====================================================================
``pr_b``                  PoisonedRAG black-box: query + "." + payload (§7.1)
``pr_w``                  PoisonedRAG white-box HotFlip trigger against the retriever (§7.2)
``paraphrase``            TRIS adaptive round 1: LLM-paraphrased trigger (§7.3)
``diverse``               TRIS diversified payload: "question. " + genre-distinct payloads (§7.3)
``payload_only``          payloads alone, no trigger (RobustRAG setting)
``script``                mixed-script (CEM-style) trigger shared by a target's documents (§7.4)
``forced_top``            poisons pinned above every clean document (TRIS pilot, §7.3); place
                          them with :func:`sieve.attacks.placement.force_top`
``single_trigger``        one poison: question + "earlier sources are outdated" frame + payload (§7.5)
``single_fluent``         one poison: the payload closest to the question, no trigger (§7.6)
``near_duplicate``        a gold passage with only the answer span replaced (§7.7)
``judge_aware``           TRIS Level-2 adaptive HotFlip: retriever + judge-majority objective (§7.8)
========================  =====================================================================

    from sieve.attacks import generate_attack
    out = generate_attack("pr_b", targets, resources, seed=0, volume=5)
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Iterable

from sieve.attacks.base import (
    MAX_VOLUME,
    MIN_VOLUME,
    Attack,
    AttackError,
    AttackOutput,
    SkipTarget,
    load_targets,
    merge_attacks,
    poison_id,
    read_attack_lines,
    validate_volume,
    write_attacks,
)
from sieve.attacks.placement import force_top, is_forced_top, with_volume
from sieve.registry import ATTACKS
from sieve.types import Target

if TYPE_CHECKING:
    from sieve.resources import Resources

__all__ = [
    "ATTACKS", "Attack", "AttackError", "AttackOutput", "SkipTarget", "MIN_VOLUME", "MAX_VOLUME",
    "generate_attack", "load_targets", "write_attacks", "merge_attacks", "read_attack_lines",
    "poison_id", "validate_volume", "force_top", "is_forced_top", "with_volume",
]


def generate_attack(name: str, targets: Iterable[Target], resources: "Resources", *, seed: int = 0,
                    volume: int = 5, progress: bool = False, **params: Any) -> AttackOutput:
    """Create the registered attack ``name`` with ``params`` and run it on ``targets``."""
    return ATTACKS.create(name, **params).generate(targets, resources, seed=seed, volume=volume, progress=progress)
