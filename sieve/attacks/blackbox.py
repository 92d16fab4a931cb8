"""Template (no search) attacks: PoisonedRAG black-box, diversified payload, payload only.

One class, three registered presets (docs/algorithms.md §7.1, §7.3, RobustRAG setting):

* ``pr_b`` – PoisonedRAG black-box "LM_targeted": poison = query + "." + payload_j. "The join has
  no space" (PR:src/attack.py, §7.1).
* ``diverse`` – TRIS four-level generator, ``diversity`` level: "distinct genres and voices
  (encyclopedia, news, blog, textbook, Q&A) … the verbatim question is prepended" as
  "question. passage" ("note the space", TRIS:gen_adaptive_poisons.py, §7.3). The target's five
  payloads are its five genres; the genre name is the target's ``voices[j]``.
* ``payload_only`` – the payload passages alone, no trigger (RobustRAG poisoning setting, where the
  retriever is bypassed; also TRIS pilot ``verbatim`` mode, §7.3).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sieve.attacks.base import Attack
from sieve.registry import ATTACKS
from sieve.types import Target

if TYPE_CHECKING:
    from sieve.resources import Resources


@ATTACKS.register
class TemplateAttack(Attack):
    """Poison = trigger + join + payload, with ``trigger`` "query" (the verbatim question) or
    "none" (payload alone). Presets: ``pr_b``, ``diverse``, ``payload_only``."""

    name = "pr_b"
    summary = "PoisonedRAG black-box: query + '.' + payload (no space)"
    paper = "PoisonedRAG (Zou et al., USENIX Sec 2025), docs/algorithms.md §7.1"
    needs = ()
    presets = {
        "diverse": {"params": {"trigger": "query", "join": ". "},
                    "summary": "Diversified payload: verbatim question + '. ' + five genre-distinct payloads",
                    "paper": "TRIS adaptive 'diversity' level, docs/algorithms.md §7.3"},
        "payload_only": {"params": {"trigger": "none", "join": ""},
                         "summary": "Payload passages alone, no trigger (RobustRAG poisoning setting)",
                         "paper": "RobustRAG (Xiang et al. 2024); TRIS pilot 'verbatim', docs/algorithms.md §7.3"},
    }

    # parameters, stored as attributes by Params.__init__ (declared for type checkers)
    trigger: str
    join: str

    def __init__(self, trigger: str = "query", join: str = ".") -> None:
        if trigger not in ("query", "none"):
            raise ValueError(f"trigger must be 'query' or 'none', got {trigger!r}")
        super().__init__(trigger=trigger, join=join)

    def build(self, target: Target, payload_indices: list[int], resources: "Resources",
              seed: int) -> dict[int, tuple[str, dict[str, Any]]]:
        out = {}
        for p in payload_indices:
            payload = target.payloads[p].strip()
            text = payload if self.trigger == "none" else target.query.strip() + self.join + payload
            out[p] = (text, {"trigger": "" if self.trigger == "none" else target.query.strip()})
        return out
