"""Planning a run: which conditions, which queries (``sieve eval``).

Conditions (docs/design.md, docs/algorithms.md §6.1): ``clean`` = corpus only, every query of
``queries.jsonl``; one condition per attack family = clean corpus + *all* documents of that family,
evaluated on the family's target queries. A dataset with ``contexts.jsonl`` is evaluated on those
saved rankings as given.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Sequence

from sieve.constants import CLEAN
from sieve.evaluation.records import RunError
from sieve.types import Ranking

if TYPE_CHECKING:
    from sieve.corpus import Dataset

log = logging.getLogger("sieve.evaluation")


@dataclass
class EvalItem:
    """One query of one condition. ``saved`` is the saved ranking in contexts mode."""

    query_id: str
    query: str
    condition: str
    correct_answers: tuple[str, ...] = ()
    target_answer: str = ""
    own_poison_ids: frozenset[str] = frozenset()
    saved: Ranking | None = None


@dataclass
class Plan:
    mode: str                                  # "retrieval" or "contexts"
    conditions: list[tuple[str, list[EvalItem]]] = field(default_factory=list)

    def items(self) -> list[EvalItem]:
        return [it for _, items in self.conditions for it in items]


def _correct_answers_by_query(ds: "Dataset") -> dict[str, tuple[str, ...]]:
    out: dict[str, tuple[str, ...]] = {}
    for t in ds.targets:
        out.setdefault(t.query_id, tuple(t.correct_answers))
    for a in ds.attacks:
        out.setdefault(a.query_id, tuple(a.correct_answers))
    for q in ds.queries:
        if q.answers:
            out[q.id] = tuple(q.answers)
    return out


def _select_families(available: list[str], attacks: Sequence[str] | None, where: str) -> list[str]:
    if attacks is None:
        return list(available)
    unknown = [a for a in attacks if a not in available]
    if unknown:
        raise RunError(f"unknown attack family {', '.join(map(repr, unknown))} in {where}; "
                       f"available: {', '.join(available) or 'none'}")
    return list(dict.fromkeys(attacks))


def plan_conditions(ds: "Dataset", attacks: Sequence[str] | None = None) -> Plan:
    """Conditions and their queries (see module docstring)."""
    answers = _correct_answers_by_query(ds)
    own: dict[tuple[str, str], set[str]] = {}
    for a in ds.attacks:
        own.setdefault((a.attack, a.query_id), set()).update(d.id for d in a.documents)

    if ds.contexts:
        avail = list(dict.fromkeys(r.condition for r in ds.contexts if r.condition != CLEAN))
        fams = _select_families(avail, attacks, "contexts.jsonl")
        by_cond: dict[str, list[EvalItem]] = {c: [] for c in [CLEAN, *fams]}
        seen: set[tuple[str, str]] = set()
        for r in ds.contexts:
            if r.condition not in by_cond or (r.query_id, r.condition) in seen:
                if (r.query_id, r.condition) in seen:
                    log.warning("contexts.jsonl: duplicate ranking for query %s, condition %s; first kept",
                                r.query_id, r.condition)
                continue
            seen.add((r.query_id, r.condition))
            if r.condition == CLEAN:
                mine: frozenset[str] = frozenset()
            else:
                mine = frozenset(own.get((r.condition, r.query_id)) or {d.id for d in r.documents if d.poison})
            by_cond[r.condition].append(EvalItem(
                r.query_id, r.query, r.condition, tuple(r.correct_answers) or answers.get(r.query_id, ()),
                r.target_answer, mine, saved=r))
        return Plan("contexts", [(c, items) for c, items in by_cond.items() if items or c == CLEAN])

    fams = _select_families(ds.attack_families(), attacks, "attacks.jsonl")
    conditions: list[tuple[str, list[EvalItem]]] = [
        (CLEAN, [EvalItem(q.id, q.text, CLEAN, answers.get(q.id, ())) for q in ds.queries])
    ]
    for fam in fams:
        items: dict[str, EvalItem] = {}
        for a in ds.attack_records(fam):
            if a.query_id in items:
                continue
            query = a.query or ds.query_by_id(a.query_id).text
            items[a.query_id] = EvalItem(a.query_id, query, fam, tuple(a.correct_answers) or answers.get(a.query_id, ()),
                                         a.target_answer, frozenset(own[(fam, a.query_id)]))
        conditions.append((fam, list(items.values())))
    return Plan("retrieval", conditions)


