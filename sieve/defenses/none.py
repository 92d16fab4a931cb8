"""``none`` — vanilla RAG (docs/algorithms.md §8.1): no filtering, the top ``k_ctx`` go to the generator."""
from __future__ import annotations

from typing import TYPE_CHECKING

from sieve.constants import K_CTX
from sieve.defenses.base import Defense, unscored
from sieve.registry import DEFENSES
from sieve.types import Ranking, Scores

if TYPE_CHECKING:
    from sieve.resources import Resources


@DEFENSES.register
class NoDefense(Defense):
    """Vanilla RAG: keeps every document."""

    name = "none"
    summary = "Vanilla RAG: no filtering (baseline)."
    paper = "PoisonedRAG vanilla RAG baseline (docs/algorithms.md §8.1)"
    needs = ()

    # parameters (set by __init__ through Params; declared for type checkers)


    def __init__(self) -> None:
        super().__init__()

    def score(self, ranking: Ranking, resources: "Resources", k_ctx: int | None = K_CTX) -> Scores:
        return Scores(unscored(ranking, status="skipped", reason="no defense", layer="none"))
