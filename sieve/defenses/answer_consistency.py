"""The ``answer_consistency`` defense: answer-level corroboration measured alone (docs/algorithms.md §14.1).

The candidates are the first ``k_ctx`` documents; each one's answer to the query is read by an
extractor (:mod:`sieve.defenses.answer_evidence`) and scored by how much less support it has than the
best-supported answer — counted over the fitted corpus snapshot (``reference="corpus"``, the default,
:mod:`sieve.defenses.answer_corpus`) or over ranks ``k_ctx``+1 … depth (``reference="ranking"``). The
removal threshold is calibrated on clean rankings with the one budget rule (:mod:`sieve.defenses.budget`,
docs/algorithms.md §9.2). Ranks beyond ``k_ctx`` get status ``not_examined``; refill candidates are
scored by :mod:`sieve.defenses.fusion`.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Sequence

from sieve.constants import K_CTX
from sieve.defenses.answer_corpus import CORPUS, REFERENCES, AnswerIndex, answer_corroboration
from sieve.defenses.answer_evidence import EXTRACTORS, Answer, Corroboration, lm_answer, span_scores
from sieve.defenses.base import Defense
from sieve.models.errors import ModelError
from sieve.registry import DEFENSES
from sieve.types import Ranking, Score, Scores

if TYPE_CHECKING:
    from sieve.resources import Resources


@DEFENSES.register
class AnswerConsistency(Defense):
    """Answer-level corroboration (docs/algorithms.md §14.1). Parameters: ``threshold`` (removal at
    score ≥ threshold; ``None`` = calibrate on clean rankings), ``reference`` (``"corpus"``, the
    default: support counted over the snapshot ``fit`` was given, and over the ranking — with a
    warning — when it was not fitted; ``"ranking"``: ranks ``k_ctx``+1 … depth only, the statistic
    before corpus support existed), ``duplicate_jaccard`` (0.5; reference
    passages at least this similar to a candidate do not count as independent), ``extractor``
    (``"lexical"``, the default; ``"lm"``; ``None`` = ``"lm"`` when a causal LM can be loaded, else
    ``"lexical"``; ``"lm"`` falls back to ``"lexical"`` with a warning when it cannot). Lexical is the
    default because the LM-scored spans separated no better and cost three orders of magnitude more
    time per query (docs/algorithms.md §14.1; numbers in docs/results/detection.md). Where several
    poisons agree they are the corroborated answer, and the true passages are removed instead."""

    name = "answer_consistency"
    summary = ("Answer-level evidence against lone poisons: removes a top-k passage that answers the question "
               "against what independent passages of the corpus say (several agreeing poisons ARE that answer).")
    paper = "Sieve extension (docs/algorithms.md §14.1)"
    needs = ()          # the default lexical extractor needs no model; "lm" loads the causal LM itself
    threshold_param = "threshold"
    corpus_time = True  # the corpus reference is fitted on the snapshot being defended

    # parameters (set by __init__ through Params; declared for type checkers)
    threshold: float | None
    duplicate_jaccard: float
    extractor: str | None
    reference: str

    def __init__(self, threshold: float | None = None, duplicate_jaccard: float = 0.5,
                 extractor: str | None = "lexical", reference: str = CORPUS) -> None:
        if extractor is not None and extractor not in EXTRACTORS:
            raise ValueError(f"answer_consistency: extractor must be one of {', '.join(EXTRACTORS)} "
                             f"(or None for lm when a causal LM is available), got {extractor!r}")
        if reference not in REFERENCES:
            raise ValueError(f"answer_consistency: reference must be one of {', '.join(REFERENCES)}, got {reference!r}")
        super().__init__(threshold=threshold, duplicate_jaccard=duplicate_jaccard, extractor=extractor,
                         reference=reference)

    def fit(self, snapshot: Any, resources: "Resources | None" = None) -> "AnswerConsistency":
        """Index the snapshot's passages for the corpus reference (``ids``, ``documents`` with ``.text``);
        no labels are read. A no-op for ``reference="ranking"``."""
        if self.reference == CORPUS:
            self.index_ = AnswerIndex.of_snapshot(snapshot)
        return self

    def extract_answers(self, query: str, texts: Sequence[str], resources: "Resources | None"
                ) -> tuple[str, dict[int, Answer] | None, dict[int, list[tuple[str, float]]], str | None]:
        """(extractor that ran, the LM answers by index or None, scored spans by index, why the LM
        extractor did not run when it was wanted)."""
        if self.extractor == "lexical":
            return "lexical", None, {}, None
        if resources is None:
            return "lexical", None, {}, "no resources given"
        try:
            scores = span_scores(query, texts, resources)
        except (ModelError, ImportError, OSError) as e:
            return "lexical", None, {}, f"causal LM unavailable ({str(e).splitlines()[0][:160] if str(e) else type(e).__name__})"
        out, spans = {}, {}
        for i, (t, sc) in enumerate(zip(texts, scores)):
            out[i], spans[i] = lm_answer(query, t, sc)
        return "lm", out, spans, None

    def corroboration(self, ranking: Ranking, k_ctx: int | None = K_CTX, resources: "Resources | None" = None,
                      exclude_ids: frozenset[str] = frozenset()
                      ) -> tuple[dict[int, Corroboration], str, dict[int, list[tuple[str, float]]], str | None]:
        """THE answer evidence (docs/algorithms.md §14.1), read by this defense and by fusion: the
        corroboration of the first ``k_ctx`` documents, against the fitted corpus snapshot (less
        ``exclude_ids``) or ranks ``k_ctx``+1 … ; also the extractor that ran, its spans and why the
        LM extractor did not run when it was wanted."""
        n = len(ranking.documents)
        k = n if k_ctx is None else min(int(k_ctx), n)
        texts = [d.text for d in ranking.documents]
        ran, answers, spans, why = self.extract_answers(ranking.query, texts[:k], resources)
        index = getattr(self, "index_", None) if self.reference == CORPUS else None
        cor = answer_corroboration(ranking.query, texts, [d.id for d in ranking.documents], list(range(k)),
                                   list(range(k, n)), index, float(self.duplicate_jaccard), answers=answers,
                                   exclude_ids=exclude_ids)
        return cor, ran, spans, why

    def scores(self, ranking: Ranking, k_ctx: int | None = K_CTX, resources: "Resources | None" = None
               ) -> dict[int, Corroboration]:
        return self.corroboration(ranking, k_ctx, resources)[0]

    def _unfitted(self) -> str | None:
        """Why the corpus reference is not used although it was asked for (None: it is, or was not asked)."""
        if self.reference == CORPUS and getattr(self, "index_", None) is None:
            return "not fitted on a corpus snapshot, so support was counted over the ranking only (ranks beyond k_ctx)"
        return None

    def score(self, ranking: Ranking, resources: "Resources", k_ctx: int | None = K_CTX) -> Scores:
        cor, ran, spans, why = self.corroboration(ranking, k_ctx, resources)
        unfitted = self._unfitted()
        degraded = "; ".join(w for w in (why, unfitted) if w) or None
        how = ("LM-scored span" if ran == "lm" else
               f"lexical extractor (degraded: {why}; LM-scored spans not used)" if why else "lexical extractor")
        warnings = ([f"answer_consistency: {why}; the lexical extractor ran instead of LM-scored spans"] if why else [])
        if unfitted:
            warnings.append(f"answer_consistency: {unfitted}")
        out = []
        for i, d in enumerate(ranking.documents):
            c = cor.get(i)
            if c is None:
                out.append(Score(d.id, None, "not_examined", "answer",
                                 note=f"rank {i + 1} is part of the reference (outside the top {len(cor)})"))
                continue
            where = (f"the answer sentence of {c.reference_support} of {c.reference_size} corpus passages "
                     f"(independent of it)" if c.reference == CORPUS else
                     f"{c.reference_support} of {c.reference_size} independent reference passages")
            statement = (f"{how}: answer {c.answer.text[:60]!r}"
                         + (f" (answer sentence holds {c.answers_query:.0%} of the question's words)"
                            if c.reference == CORPUS else "")
                         + f" is stated by {where}, the best-corroborated answer {c.consensus_answer[:60]!r} by "
                         f"{c.consensus_support}")
            ev = {**c.evidence(), "extractor": ran, "statement": statement}
            if degraded:
                ev["degraded"] = degraded
            if spans.get(i):
                ev["spans"] = [[sp, round(v, 4)] for sp, v in spans[i][:5]]
            out.append(Score(d.id, c.score, "scored", "answer", ev))
        info = {"extractor": ran, "reference": cor[0].reference if cor else self.reference}
        if degraded:
            info["degraded"] = degraded
        return Scores(out, info, warnings)

    def explain(self, s: Score, removed: bool, threshold: float | None) -> str:
        tail = (f" {'≥' if removed else '<'} {threshold:.2f}; {'removed' if removed else 'kept'}"
                if threshold is not None else " (no threshold set: calibrate on clean rankings); kept")
        return f"{s.evidence.get('statement', 'answer')}; score {s.value:.2f}" + tail
