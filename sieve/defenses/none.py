"""``none`` — vanilla RAG (docs/algorithms.md §8.1): no filtering, the top ``k_ctx`` go to the generator."""
from __future__ import annotations

from sieve.constants import K_CTX
from sieve.defenses.base import Defense, keep_all
from sieve.registry import DEFENSES
from sieve.types import Inspection, Ranking


@DEFENSES.register
class NoDefense(Defense):
    """Vanilla RAG: keeps every document."""

    name = "none"
    summary = "Vanilla RAG: no filtering (baseline)."
    paper = "PoisonedRAG vanilla RAG baseline (docs/algorithms.md §8.1)"
    needs = ()

    def __init__(self) -> None:
        super().__init__()

    def inspect(self, ranking: Ranking, resources, k_ctx: int | None = K_CTX) -> Inspection:  # noqa: ANN001
        return Inspection(keep_all(ranking, status="skipped", reason="no defense", layer="none"))
