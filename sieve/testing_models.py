"""A :class:`~sieve.resources.Resources` whose every model role is a tiny in-process model.

Used by the CLI's hidden test retriever (``tiny-hashing``), the dashboard's tiny mode and tests.
It lives here, not in :mod:`sieve.models.tiny`, so that the model package never imports
:mod:`sieve.resources` (which imports the model loaders): no import cycle.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

from sieve.models.tiny import HashingEmbedder, HashingTokenEncoder, UnigramLM
from sieve.resources import Resources

if TYPE_CHECKING:
    from sieve.config import SieveConfig
    from sieve.index import ArtifactCache
    from sieve.models.protocols import LLMClient


def tiny_resources(config: "SieveConfig | None" = None, corpus_texts: Sequence[str] = (),
                   llm: "LLMClient | None" = None, cache: "ArtifactCache | None" = None) -> Resources:
    """Every model role tiny: hashing retriever (64-d) and judge (48-d), a unigram LM fitted on
    ``corpus_texts``, a hashing token encoder, and ``llm`` (``None``: no LLM). ``cache``: the
    artifact cache (default: in memory; the CLI's test hook passes the persistent one)."""
    return Resources(config, retriever=HashingEmbedder(dim=64), judge=HashingEmbedder(dim=48, model_id="tiny-judge"),
                     causal_lm=UnigramLM(list(corpus_texts)), token_encoder=HashingTokenEncoder(), llm=llm,
                     cache=cache)


__all__ = ["tiny_resources"]
