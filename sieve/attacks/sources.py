"""Dataset-backed inputs of the attacks that read the corpus: gold passages (qrels) and answer spans.

``near_duplicate`` copies a gold passage and ``judge_aware`` needs the clean neighbourhood of a query
(docs/algorithms.md §7.7, §7.8); both take the dataset directory as their ``data`` parameter
(``sieve attack`` fills it with the dataset it reads). Datasets are loaded once per path.
"""
from __future__ import annotations

import re
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Sequence

from sieve.attacks.base import AttackError
from sieve.types import Document, Target

if TYPE_CHECKING:
    from sieve.corpus.dataset import Dataset


def require_data(attack: str, data: str) -> "Dataset":
    """The dataset at ``data`` (loaded once); :class:`AttackError` naming the parameter if unset or bad."""
    if not data:
        raise AttackError(f"{attack} reads the dataset's corpus and qrels: pass data=<dataset directory> "
                          f"(sieve attack fills it with the dataset it reads)")
    p = Path(data)
    if not p.exists():
        raise AttackError(f"{attack}: dataset directory {data} does not exist")
    return _load(str(p.resolve()))


@lru_cache(maxsize=4)
def _load(path: str) -> "Dataset":
    from sieve.corpus import load_dataset

    return load_dataset(path)


def answer_pattern(answers: Sequence[str]) -> re.Pattern[str] | None:
    """One case-insensitive, word-bounded alternation of ``answers`` (longest first, so
    "Francisco de Orellana" wins over "Orellana"); ``None`` when no answer is usable."""
    alts = sorted({a.strip() for a in answers if a and a.strip()}, key=len, reverse=True)
    if not alts:
        return None
    return re.compile(r"(?<!\w)(?:" + "|".join(re.escape(a) for a in alts) + r")(?!\w)", re.IGNORECASE)


def gold_passages(ds: "Dataset", target: Target) -> list[Document]:
    """The target query's relevant passages (qrels score > 0, in qrels order) that contain one of its
    correct answers."""
    pat = answer_pattern(target.correct_answers)
    if pat is None:
        return []
    out = []
    for did, score in ds.qrels.get(target.query_id, {}).items():
        if score <= 0:
            continue
        try:
            doc = ds.doc_by_id(did)
        except KeyError:
            continue
        if pat.search(doc.text):
            out.append(doc)
    return out
