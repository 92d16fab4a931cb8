"""``none`` — vanilla RAG (ALGORITHMS.md §8.1): no filtering, the top ``k_ctx`` go to the generator."""
from __future__ import annotations

from sieve.defenses.base import Defense, keep_all
from sieve.registry import DEFENSES
from sieve.types import Decision, Ranking


@DEFENSES.register("none", summary="Vanilla RAG: no filtering (baseline).", paper="PoisonedRAG §8.1 baseline")
class NoDefense(Defense):
    """Vanilla RAG: keeps every document."""

    name = "none"
    paper = "vanilla RAG"
    needs = ()

    def inspect(self, ranking: Ranking, resources) -> list[Decision]:  # noqa: ANN001
        return keep_all(ranking, status="skipped", reason="no defense", layer="none")
