"""Corpus snapshots and ranking: the one place where a query is ranked for a condition.

An :class:`Experiment` binds a dataset to the models (:class:`~sieve.resources.Resources`) and
answers three questions for every face of Sieve (evaluation runner, CLI, dashboard, service):

* *what corpus does this condition see?* — :meth:`Experiment.snapshot`: the clean corpus, or the
  clean corpus plus every document of one attack family (docs/design.md: an attack condition is
  the clean corpus plus all documents of that family, the base vectors are never re-embedded), or
  the clean corpus plus a sandbox of documents (the attack lab);
* *what does the retriever return?* — :meth:`Experiment.rank`: retrieval at ``depth`` on the
  snapshot, minus documents the quarantine ledger excludes, with forced-top poisons pinned above
  every clean document (docs/algorithms.md §7.3) — decided by the poison documents' placement
  metadata, never by a family name;
* *which rankings may calibrate a threshold?* — :meth:`Experiment.clean_rankings`: the clean
  rankings of the dataset's own queries (saved ``contexts.jsonl`` rankings when the dataset has
  them), never attack data (docs/algorithms.md §9.2).

Preparing a defense (construct, fit, calibrate) is :mod:`sieve.experiment.defenses`.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

from sieve.constants import CLEAN, DEPTH
from sieve.types import Document, Ranking

if TYPE_CHECKING:
    from sieve.corpus import Dataset
    from sieve.index import VectorIndex
    from sieve.resources import Resources

#: Quarantine policies: which ledger states keep a document out of retrieval (see sieve/ledger.py).
NO_QUARANTINE = "none"


class ExperimentError(ValueError):
    """A request the dataset cannot serve (unknown condition, empty query); the message is for users."""


@dataclass
class Snapshot:
    """The corpus one condition sees: ``index`` holds the clean corpus plus ``injected`` documents.

    ``index`` is what corpus-time detectors are fitted on (it has ``ids``, ``documents`` and
    ``vectors``); ``excluded`` are ids the quarantine ledger keeps out of retrieval."""

    condition: str
    index: "VectorIndex"
    injected: tuple[Document, ...] = ()
    excluded: frozenset[str] = frozenset()
    quarantine_policy: str = NO_QUARANTINE
    forced_top: tuple[Document, ...] = field(default=())
    #: True when ``injected`` is a caller's document set (attack lab, saved contexts), not a dataset family.
    sandbox: bool = False

    @property
    def documents(self) -> list[Document]:
        return list(self.index.documents)

    def __len__(self) -> int:
        return len(self.index)


class Experiment:
    """A dataset + models: snapshots per condition, ranking, clean calibration material.

    Parameters
    ----------
    dataset : a loaded :class:`~sieve.corpus.Dataset`
    resources : models and caches
    depth : retrieval depth (documents ranked per query; TRIS k=50, RSQ reads the top 20)
    ledger_path, quarantine : quarantine ledger and exclusion policy (``open_and_confirmed``,
        ``confirmed_only`` or ``none``). Evaluation runs use ``none`` (results must not depend on
        a user's triage state); search and the explorer honour the ledger.
    persist : keep the retriever index in the workspace (default: yes unless the models were
        injected in-process, e.g. tiny test models).
    base : the clean corpus's index when the caller already has it (a vector store's stored
        vectors, sieve/experiment/stores.py); nothing is embedded for the base corpus then.
    """

    def __init__(self, dataset: "Dataset", resources: "Resources", *, depth: int = DEPTH,
                 ledger_path: str | Path | None = None, quarantine: str = NO_QUARANTINE,
                 persist: bool | None = None, progress: bool = False, base: "VectorIndex | None" = None) -> None:
        from sieve.ledger import EXCLUSION_POLICIES

        if quarantine not in EXCLUSION_POLICIES:
            raise ExperimentError(f"quarantine policy must be one of {', '.join(EXCLUSION_POLICIES)}; "
                                  f"got {quarantine!r}")
        if int(depth) < 1:
            raise ExperimentError(f"retrieval depth must be >= 1, got {depth}")
        self.dataset = dataset
        self.resources = resources
        self.depth = int(depth)
        self.ledger_path = Path(ledger_path) if ledger_path is not None else None
        self.quarantine = quarantine
        self.persist = (not getattr(resources, "_models_injected", False)) if persist is None else bool(persist)
        self.progress = progress
        self._base: "VectorIndex | None" = base
        self._snapshots: dict[Any, Snapshot] = {}
        self._clean: dict[tuple[Any, ...], Ranking] = {}   # clean rankings, shared by calibration and evaluation
        #: Degradations the caller must show (e.g. a corrupt ledger: retrieval runs without exclusions).
        self.warnings: list[str] = []

    # -- snapshots --------------------------------------------------------------------------------
    def base_index(self) -> "VectorIndex":
        """The clean corpus's retriever index (built once, or reused from the workspace)."""
        if self._base is None:
            from sieve.index import VectorIndex, open_index

            res = self.resources
            if self.persist:
                self._base = open_index(self.dataset, res, progress=self.progress)
            else:
                self._base = VectorIndex.build(self.dataset.documents, res.retriever, progress=self.progress,
                                               cache=res.cache)
        return self._base

    def conditions(self) -> list[str]:
        """``clean`` plus one condition per attack family of ``attacks.jsonl``."""
        return [CLEAN, *self.dataset.attack_families()]

    def snapshot(self, condition: str = CLEAN, documents: Sequence[Document] | None = None) -> Snapshot:
        """The corpus of ``condition``: clean, clean + one attack family, or clean + ``documents``
        (a sandbox such as the attack lab's generated poisons, or the poison-labelled documents of
        saved contexts). Snapshots are cached per condition and document set."""
        if documents is None:
            if condition == CLEAN:
                docs: tuple[Document, ...] = ()
            elif condition in self.dataset.attack_families():
                docs = tuple(self.dataset.attack_documents(condition))
            else:
                known = ", ".join(self.conditions())
                raise ExperimentError(f"{self.dataset.path}: unknown condition {condition!r}; available: {known}")
        else:
            docs = tuple(documents)
        key = (condition, tuple(d.id for d in docs), tuple(d.hash for d in docs))
        snap = self._snapshots.get(key)
        if snap is None:
            base = self.base_index()
            index = base.with_documents(list(docs), progress=self.progress) if docs else base
            from sieve.attacks.placement import is_forced_top

            forced = tuple(d for d in docs if is_forced_top(d))
            snap = Snapshot(condition, index, docs, forced_top=forced, sandbox=documents is not None)
            self._snapshots[key] = snap
        snap.excluded = frozenset(self._quarantined(snap.index))
        snap.quarantine_policy = self.quarantine
        return snap

    def _quarantined(self, index: "VectorIndex") -> set[str]:
        if self.quarantine == NO_QUARANTINE or self.ledger_path is None or not self.ledger_path.exists():
            return set()
        from sieve.ledger import Ledger, LedgerError, LedgerIOError

        try:
            with Ledger(self.ledger_path) as led:
                return led.quarantined_ids(index.documents, self.quarantine)
        except LedgerIOError:   # unreadable, not corrupt: never run as if nothing were quarantined
            raise
        except LedgerError as e:   # corrupt (moved aside) or not a ledger: search keeps working, and says so
            msg = f"{e}; retrieval runs WITHOUT quarantine exclusions"
            if msg not in self.warnings:
                self.warnings.append(msg)
            self.ledger_path = None
            return set()

    # -- ranking ------------------------------------------------------------------------------------
    def answers_for(self, query_id: str, condition: str = CLEAN) -> tuple[tuple[str, ...], str]:
        """(correct answers, target answer) of a query in a condition, from the dataset."""
        ds = self.dataset
        correct: tuple[str, ...] = ()
        target_answer = ""
        if not query_id:
            return correct, target_answer
        t = ds.targets_by_query.get(query_id)
        if t is not None:
            correct, target_answer = tuple(t.correct_answers), t.target_answer
        try:
            q = ds.query_by_id(query_id)
            correct = tuple(q.answers) or correct
        except KeyError:
            pass
        if condition != CLEAN and condition in ds.attack_families():
            recs = [r for r in ds.attack_records(condition) if r.query_id == query_id]
            if recs:
                target_answer = recs[0].target_answer or target_answer
                correct = correct or tuple(recs[0].correct_answers)
        return correct, target_answer

    def query_id_for(self, query: str, condition: str = CLEAN) -> str:
        """The dataset's id of a query typed as text (exact match after trimming), so a typed
        question gets its answers and, for forced-top families, its pinned poisons; "" if unknown."""
        text = query.strip()
        if condition != CLEAN and condition in self.dataset.attack_families():
            for r in self.dataset.attack_records(condition):
                if r.query.strip() == text:
                    return r.query_id
        for q in self.dataset.queries:
            if q.text.strip() == text:
                return q.id
        return ""

    def rank(self, query: str, *, condition: str = CLEAN, query_id: str = "", snapshot: Snapshot | None = None,
             depth: int | None = None, correct_answers: Sequence[str] | None = None,
             target_answer: str | None = None) -> Ranking:
        """The ranking a retriever returns for ``query`` in ``condition`` (or on ``snapshot``).

        Quarantined documents are excluded; forced-top poisons are pinned above every clean
        document: the poisons of this query for a dataset family (records whose placement
        metadata is ``forced_top``), or every forced-top document of a sandbox snapshot."""
        if not query.strip():
            raise ExperimentError("the query is empty")
        snap = snapshot if snapshot is not None else self.snapshot(condition)
        condition = snap.condition
        depth = self.depth if depth is None else int(depth)
        query_id = query_id or self.query_id_for(query, condition)
        correct, target = self.answers_for(query_id, condition)
        if correct_answers is not None:
            correct = tuple(correct_answers)
        if target_answer is not None:
            target = target_answer
        clean_key = (query, query_id, depth, correct, target, snap.excluded) if condition == CLEAN and not snap.sandbox \
            else None
        if clean_key is not None and clean_key in self._clean:
            return self._clean[clean_key]
        ranking = snap.index.rank(query, depth, query_id=query_id, condition=condition, correct_answers=correct,
                                  target_answer=target, exclude=set(snap.excluded))
        if clean_key is not None:
            self._clean[clean_key] = ranking
            return ranking
        from sieve.attacks.placement import apply_placement, force_top

        if not snap.sandbox:
            return apply_placement(ranking, self.dataset, depth)
        if snap.forced_top:
            # a sandbox pins the forced-top poisons written for this query (documents without a
            # query_id in their metadata are pinned for every query)
            pinned = [d for d in snap.forced_top if d.id not in snap.excluded
                      and d.metadata.get("query_id", query_id) in (query_id, "")]
            return force_top(ranking, pinned, depth) if pinned else ranking
        return ranking

    def clean_rankings(self, limit: int | None = None, depth: int | None = None) -> list[Ranking]:
        """Clean rankings of the dataset's queries in file order (the first ``limit``): saved clean
        contexts when the dataset has ``contexts.jsonl``, else retrieval on the clean corpus. The
        only material thresholds are calibrated on (docs/algorithms.md §9.2)."""
        ds = self.dataset
        if ds.contexts:
            saved = [r for r in ds.contexts if r.condition == CLEAN]
            return saved[:limit] if limit is not None else saved
        depth = self.depth if depth is None else int(depth)
        return [self.rank(q.text, condition=CLEAN, query_id=q.id, depth=depth, correct_answers=tuple(q.answers) or None)
                for q in (ds.queries[:limit] if limit is not None else ds.queries)]
