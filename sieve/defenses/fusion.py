"""Fusion: one clean-calibrated score from the evidence of every method, with a rescored refill
(docs/algorithms.md §14.2).

Evidence per document (each oriented "higher = more suspicious"):

* ``l2`` — TRIS L2's continuous score, max(Jaccard, bigram, trigram recall) of the prefix vs. the
  query (:func:`sieve.defenses.tris.l2_features`; ∞ when the query prefix repeats);
* ``rsq`` — RSQ's S = E_a + E_i + E_p + E_s of the document as a candidate of the current context
  (:func:`sieve.defenses.rsq.score_candidates`; needs ≥ 20 survivors);
* ``rsg`` — RSG's corpus-time density / tail score of the document (:mod:`sieve.defenses.rsg`,
  fitted on the snapshot being defended);
* ``cohesion`` — TrustRAG's cohesion signal per document: the mean judge-space cosine of the document
  to its two nearest neighbours among the first ``cohesion_scope`` survivors (poisons of one target
  form a tight cluster, docs/algorithms.md §8.2);
* ``perplexity`` — exp(mean token NLL) under the packaged causal LM (§8.4);
* ``answer`` — the answer-level corroboration score with the corpus reference fitted on the
  snapshot (:mod:`sieve.defenses.answer_corpus`; the ranking reference when not fitted);
* ``ragdefender`` — RAGDefender's per-passage score when a ``ragdefender`` defense is registered;
* ``similarity`` — the judge-space cosine of the document to the query (opt-in): poisons are written
  to be retrieved for the question, and sit closer to it than the clean passages that answer it;
  computed in the judge's space, not read from the ranking's scores (a posted ranking's scale, or a
  forced-top placement, says nothing about the text);
* ``rouge`` — TrustRAG's near-copy signal per document: the largest ROUGE-L F1 of the document to
  another of the first ``cohesion_scope`` survivors (:func:`sieve.defenses.trustrag.pairwise_rouge`;
  docs/algorithms.md §8.2). In the default since the Cauchy combination (below).

Calibration (:meth:`Fusion.calibrate`; p-values and their combinations in
:mod:`sieve.defenses.pvalues`) reads clean rankings only: the evidence of every document of
the clean generation contexts forms, per evidence, an empirical null distribution; a document's
p-value is p_e = (1 + #{clean ≥ x}) / (1 + n). The p-values are combined — the Cauchy combination
mean tan((½ − p_e)π) by default, Fisher's −2 Σ ln p_e, −ln min p_e, or the smaller p of Fisher and
min-p (``combine="omnibus"``) — and the combination is turned into an empirical p-value against the
clean documents; the score is −ln of it. The Cauchy combination is the default: one very small
p-value (a near-copy, a repeated question) is enough, as with min-p, yet every evidence still counts,
as with Fisher, whose sum dilutes one strong evidence among four ordinary ones (measurements:
docs/algorithms.md §14.2). The combination nulls are **cross-fitted by query**: the calibration
queries are split into ``calibration_folds`` folds and a document's per-evidence p-values are taken
against the documents of the *other* folds only, so the calibration documents are scored as
documents of a new query would be. Documents of one query share the query's topic and neighbours,
so scoring them against their own query's documents (or even leaving only the document itself out)
makes them look more ordinary than a new query's documents and the threshold lands too low. The
per-document threshold is the budget rule of :mod:`sieve.defenses.budget`
(docs/algorithms.md §9.2) on the clean scores. The refill then scores more documents of the queries
where something was removed, and those queries are the unusual ones, so the budget is finally
applied to the whole procedure: the threshold is raised (bisection over the clean scores) until the
rescored refill, run on every calibration query by a detector fitted on the other query folds,
removes at most the budget of the clean documents it scores. No attack document is read: rankings with a
poison-labelled document or a non-clean condition are refused.

Default evidence: TRIS L2, RSQ, RSG, cohesion, perplexity and ROUGE-L near-copy. Opt-in
(``evidence=``): ``answer``, ``ragdefender`` and ``similarity`` (the last holds single fluent poisons
better, but the leave-one-family-out rule does not choose it: its gain is on that family alone;
docs/algorithms.md §14.2). The defaults were chosen by the leave-one-family-out rule
(:mod:`sieve.evaluation.lofo`, docs/algorithms.md §14.4) over the configurations of
``bench/fusion_bench.py``: for every one of the eleven demo families, the configuration chosen on the
*other ten* was the Cauchy combination with ``rouge``, the pairwise evidence over the documents seen
(``pairwise_scope="seen"``) and a threshold lowered by ln 3 after a removal (``refill_factor=3``).
RAGDefender costs ~90 ms per query warm, more than the fused detector's 50 ms latency goal.

Rescored refill: the first ``k_ctx`` survivors are scored; removed documents are replaced by the
next survivors, which are scored too (RSQ and answer evidence are recomputed on the ranking without
the removed documents), until a round removes nothing — the context is clean — or ``max_rounds``
(10) rounds are spent; the budget bounds the whole procedure (above). With ``refill_factor`` > 1 a
query where something was removed is suspect: later rounds need ``refill_factor`` times less evidence
(five spread poisons refill one after another; docs/algorithms.md §14.2). Documents that never entered a
context keep status ``not_examined``; the context itself is built by :mod:`sieve.defenses.base`.

Each decision's evidence lists every value with its p-value, and the reason names the evidence that
pushed the document over (p ≤ 0.05 against the clean documents).
"""
from __future__ import annotations

import copy
import math
import time
from typing import TYPE_CHECKING, Any, Mapping, Sequence

import numpy as np

from sieve.constants import CLEAN, CLEAN_BUDGET, K_CTX
from sieve.defenses.answer_corpus import AnswerIndex, answer_corroboration
from sieve.defenses.base import Defense, redecide_by_score
from sieve.defenses.budget import budget_index, removal_threshold
from sieve.defenses.pvalues import (COMBINE, cauchy_stat, combination_nulls, empirical_p, fisher_stat, minp_stat,
                                    query_folds)
from sieve.registry import DEFENSES
from sieve.types import Decision, Inspection, Ranking

if TYPE_CHECKING:
    from sieve.resources import Resources

EVIDENCE = ("l2", "rsq", "rsg", "cohesion", "perplexity", "answer", "ragdefender", "rouge", "similarity")
#: The evidence used unless ``evidence=`` says otherwise (module docstring).
DEFAULT_EVIDENCE = ("l2", "rsq", "rsg", "cohesion", "perplexity", "rouge")
#: Which documents the pairwise evidence (cohesion, rouge) compares a context document with: the
#: first ``cohesion_scope`` survivors, or those plus the documents removed in earlier refill rounds.
PAIRWISE_SCOPES = ("survivors", "seen")
#: Evidence whose value 0 means "nothing seen", not "clean": it abstains from the combination there.
#: The answer score is 0 for a passage that gives the best-corroborated answer — true of the
#: attacker's own consensus when several poisons agree — and most clean passages score 0 too, so
#: p = 1 there; under the uncapped Cauchy combination that p would veto removal (docs/algorithms.md §14.2).
ABSTAINS_AT_ZERO = frozenset({"answer"})
#: p-value at or below which an evidence is named in the reason.
REASON_P = 0.05


@DEFENSES.register
class Fusion(Defense):
    """Clean-calibrated fusion of per-document evidence with a rescored refill (docs/algorithms.md §14.2).

    Parameters: ``threshold`` (on the fused score; ``None`` = calibrate), ``evidence`` (the names
    used, a subset of :data:`EVIDENCE`; default :data:`DEFAULT_EVIDENCE`; ablations drop one),
    ``combine`` (``cauchy`` | ``fisher`` | ``omnibus`` | ``minp``), ``calibration_folds`` (8: query folds of the
    cross-fitted calibration), ``max_rounds`` (10: rescoring rounds of the refill — in practice until the context is clean),
    ``cohesion_scope`` (10), ``duplicate_jaccard`` (0.5, answer evidence), ``pairwise_scope``
    (``"seen"``, default: cohesion and ROUGE-L compare with the first ``cohesion_scope`` survivors and
    the documents removed in earlier rounds, so removing one of two near-copies does not make the
    other look unique when it refills; ``"survivors"``: with the survivors only), ``refill_factor``
    (3: once the procedure has removed a document from a query, later rounds remove at a p-value
    ``refill_factor`` times larger, i.e. the threshold is lowered by ln ``refill_factor``; 1 = the
    same threshold in every round; the procedure threshold is calibrated with it, so the clean
    budget still holds).
    Learned in :meth:`calibrate`: ``null_`` (sorted clean values per evidence), ``fisher_null_``,
    ``minp_null_``, ``cauchy_null_`` and ``threshold``.
    """

    name = "fusion"
    summary = ("Fusion of TRIS L2, RSQ, RSG, cohesion, perplexity and ROUGE-L near-copy evidence (answer, "
               "RAGDefender, query similarity opt-in): clean-only p-values, Cauchy combination, budget threshold, "
               "rescored refill.")
    paper = "Sieve extension (docs/algorithms.md §14.2)"
    needs = ("retriever", "judge", "causal_lm", "token_encoder")
    corpus_time = True
    threshold_param = "threshold"

    def __init__(self, threshold: float | None = None, evidence: Sequence[str] = DEFAULT_EVIDENCE,
                 combine: str = "cauchy", calibration_folds: int = 8, max_rounds: int = 10,
                 cohesion_scope: int = 10, duplicate_jaccard: float = 0.5, pairwise_scope: str = "seen",
                 refill_factor: float = 3.0) -> None:
        ev = tuple(evidence.split(",") if isinstance(evidence, str) else evidence)
        bad = [e for e in ev if e not in EVIDENCE]
        if bad or not ev:
            raise ValueError(f"fusion: evidence must be a non-empty subset of {', '.join(EVIDENCE)}; got {list(ev)}")
        if int(max_rounds) < 1:
            raise ValueError("fusion: max_rounds must be >= 1")
        if combine not in COMBINE:
            raise ValueError(f"fusion: combine must be one of {', '.join(COMBINE)}; got {combine!r}")
        if int(calibration_folds) < 2:
            raise ValueError("fusion: calibration_folds must be >= 2")
        if pairwise_scope not in PAIRWISE_SCOPES:
            raise ValueError(f"fusion: pairwise_scope must be one of {', '.join(PAIRWISE_SCOPES)}; got {pairwise_scope!r}")
        if not float(refill_factor) >= 1.0:
            raise ValueError(f"fusion: refill_factor must be >= 1 (1 = the same threshold in every round); got {refill_factor!r}")
        super().__init__(threshold=threshold, evidence=ev, combine=combine, calibration_folds=calibration_folds,
                         max_rounds=max_rounds, cohesion_scope=cohesion_scope, duplicate_jaccard=duplicate_jaccard,
                         pairwise_scope=pairwise_scope, refill_factor=refill_factor)

    # -- corpus time ------------------------------------------------------------------------------
    def fit(self, snapshot: Any, resources: "Resources") -> "Fusion":
        """Fit the RSG component and the answer evidence's corpus reference on the snapshot being
        defended (no labels are read)."""
        if "answer" in self.evidence:
            self.answer_index_ = AnswerIndex.of_snapshot(snapshot)
        if "rsg" in self.evidence:
            from sieve.defenses.rsg import RSG

            self.rsg_ = RSG().fit(snapshot, resources)
        if "ragdefender" in self.evidence and "ragdefender" in DEFENSES.names():
            rd = DEFENSES.create("ragdefender")
            self.ragdefender_ = rd.fit(snapshot, resources) or rd
        return self

    # -- evidence ---------------------------------------------------------------------------------
    def _static(self, ranking: Ranking, resources: "Resources", idx: list[int]) -> dict[int, dict[str, float]]:
        """Evidence that does not depend on the other documents of the context."""
        docs = ranking.documents
        out: dict[int, dict[str, float]] = {i: {} for i in idx}
        ev = self.evidence
        if "l2" in ev:
            from sieve.defenses.tris import QueryGrams, l2_features

            qg = QueryGrams.of(ranking.query)
            for i in idx:
                f = l2_features(qg, docs[i].text)
                out[i]["l2"] = 10.0 if f.repeat_trigger else max(f.jaccard, f.bigram_overlap, f.trigram_overlap)
        if "similarity" in ev and idx:
            qv = resources.judge_query_embedding(ranking.query)
            X = resources.judge_embeddings([docs[i].text for i in idx])
            X = X / np.maximum(np.linalg.norm(X, axis=1, keepdims=True), 1e-12)
            for i, sim in zip(idx, X @ qv):
                out[i]["similarity"] = float(sim)
        if "perplexity" in ev:
            for i, tr in zip(idx, resources.lm_traces([docs[i].text for i in idx])):
                tr = np.asarray(tr, dtype=np.float64)
                if tr.size:
                    out[i]["perplexity"] = float(math.exp(min(float(tr.mean()), 700.0)))
        rsg = getattr(self, "rsg_", None)
        if "rsg" in ev and rsg is not None:
            for i, d in zip(idx, rsg.decisions_for(Ranking(ranking.query, [docs[i] for i in idx]))):
                if d.score is not None:
                    out[i]["rsg"] = float(d.score)
        rd = getattr(self, "ragdefender_", None)
        if "ragdefender" in ev and rd is not None:
            try:
                for d, i in zip(rd.inspect(ranking, resources, K_CTX).decisions, range(len(docs))):
                    if i in out and d.score is not None:
                        out[i]["ragdefender"] = float(d.score)
            except Exception:  # noqa: BLE001 - a peer baseline failing must not break the fused detector
                pass
        return out

    def _contextual(self, ranking: Ranking, resources: "Resources", survivors: list[int], ctx: list[int],
                    k: int) -> dict[int, dict[str, float]]:
        """Evidence that depends on the current context: RSQ, cohesion, answer corroboration."""
        docs = ranking.documents
        out: dict[int, dict[str, float]] = {i: {} for i in ctx}
        ev = self.evidence
        if "rsq" in ev and len(survivors) >= 20:
            from sieve.defenses.rsq import score_candidates

            sub = Ranking(ranking.query, [docs[i] for i in survivors], ranking.query_id, ranking.condition)
            rows, _ = score_candidates(sub, resources, trace_tokens=False)
            pos = {docs[i].id: i for i in survivors}
            for r in rows:
                if pos[r.doc_id] in out:
                    out[pos[r.doc_id]]["rsq"] = float(r.S)
        alive = set(survivors)
        window = survivors[:max(int(self.cohesion_scope), k)]
        if self.pairwise_scope == "seen":   # removed documents stay neighbours: removal does not launder a twin
            window = sorted(set(window) | {i for i in range(len(docs)) if i not in alive})
        if "cohesion" in ev:
            scope = window
            if len(scope) >= 3:
                X = resources.judge_embeddings([docs[i].text for i in scope])
                X = X / np.maximum(np.linalg.norm(X, axis=1, keepdims=True), 1e-12)
                S = X @ X.T
                np.fill_diagonal(S, -np.inf)
                where = {i: j for j, i in enumerate(scope)}
                for i in ctx:
                    top2 = np.sort(S[where[i]])[-2:]
                    out[i]["cohesion"] = float(np.mean(top2))
        if "rouge" in ev:
            from sieve.defenses.trustrag import pairwise_rouge

            scope = window
            if len(scope) >= 2:
                R = pairwise_rouge([docs[i].text for i in scope])
                where = {i: j for j, i in enumerate(scope)}
                for i in ctx:
                    out[i]["rouge"] = float(R[where[i]].max())
        if "answer" in ev:
            texts = [d.text for d in docs]
            in_ctx = set(ctx)
            ref = [i for i in survivors if i not in in_ctx]
            cor = answer_corroboration(ranking.query, texts, [d.id for d in docs], ctx, ref,
                                       getattr(self, "answer_index_", None), float(self.duplicate_jaccard),
                                       exclude_ids=frozenset(d.id for j, d in enumerate(docs) if j not in alive))
            for i, c in cor.items():
                out[i]["answer"] = c.score
                out[i]["answer_text"] = c.answer.text  # type: ignore[assignment]
        return out

    # -- scoring ----------------------------------------------------------------------------------
    def _pvalues(self, values: dict[str, float], null: dict[str, np.ndarray] | None = None) -> dict[str, float]:
        """Per-evidence p-values; an evidence of :data:`ABSTAINS_AT_ZERO` at a value ≤ 0 abstains."""
        null = (getattr(self, "null_", None) or {}) if null is None else null
        return {e: empirical_p(null[e], float(v)) for e, v in values.items()
                if e in null and isinstance(v, (int, float)) and null[e].size
                and not (e in ABSTAINS_AT_ZERO and float(v) <= 0.0)}

    def _combined(self, ps: dict[str, float], member: bool = False) -> float:
        """−ln of the combination's p-value against the clean combination nulls."""
        vals = list(ps.values())
        if self.combine == "cauchy":
            return float(-math.log(empirical_p(self.cauchy_null_, cauchy_stat(vals), member)))
        pf = empirical_p(self.fisher_null_, fisher_stat(vals), member)
        pm = empirical_p(self.minp_null_, minp_stat(vals), member)
        p = {"omnibus": min(pf, pm), "fisher": pf, "minp": pm}[self.combine]
        return float(-math.log(p))

    def _score(self, values: dict[str, float]) -> tuple[float | None, dict[str, float]]:
        ps = self._pvalues(values)
        if not ps:
            return None, ps
        return self._combined(ps), ps

    def _rounds(self, ranking: Ranking, resources: "Resources", k_ctx: int | None, thr: float | None,
                collect: bool = False) -> tuple[dict[int, dict[str, Any]], set[int], int]:
        """The rescored refill: evidence (and, with a threshold, removals) round by round."""
        n = len(ranking.documents)
        k = n if k_ctx is None else min(int(k_ctx), n)
        removed: set[int] = set()
        seen: dict[int, dict[str, Any]] = {}
        rounds = 0
        static: dict[int, dict[str, float]] = {}
        relaxed = None if thr is None else self._lowered(thr)
        for rnd in range(1, int(self.max_rounds) + 1):
            survivors = [i for i in range(n) if i not in removed]
            ctx = survivors[:k]
            new_idx = [i for i in ctx if i not in static]
            static.update(self._static(ranking, resources, new_idx))
            ctxev = self._contextual(ranking, resources, survivors, ctx, k)
            rounds = rnd
            flagged = []
            t = relaxed if removed else thr   # once something was removed, the query is suspect (refill_factor)
            for i in ctx:
                values = {**static[i], **ctxev[i]}
                answer_text = values.pop("answer_text", None)
                rec: dict[str, Any] = {"values": values, "round": rnd, "answer_text": answer_text}
                if not collect:
                    score, ps = self._score(values)
                    rec.update(score=score, p=ps, threshold=t)
                    if t is not None and score is not None and score >= t:
                        flagged.append(i)
                seen[i] = rec
            if not flagged:
                break
            removed |= set(flagged)
        return seen, removed, rounds

    # -- calibration ------------------------------------------------------------------------------
    def calibrate(self, clean_rankings: list[Ranking], resources: "Resources",
                  clean_budget: float = CLEAN_BUDGET, k_ctx: int | None = K_CTX) -> "Fusion":
        """Learn the per-evidence clean nulls, the combination nulls and the budget threshold from
        clean rankings only (module docstring). Refuses any ranking that is not clean."""
        for r in clean_rankings:
            if r.condition != CLEAN or any(d.poison for d in r.documents):
                raise ValueError(f"fusion: calibration reads clean rankings only; query {r.query_id or r.query!r} "
                                 f"(condition {r.condition!r}) holds attack documents")
        rows: list[dict[str, float]] = []
        query_of: list[int] = []
        for q, r in enumerate(clean_rankings):
            seen, _, _ = self._rounds(r, resources, k_ctx, None, collect=True)
            rows.extend(rec["values"] for rec in seen.values())
            query_of.extend(q for _ in seen)
        if not rows:
            raise ValueError("fusion: no clean documents to calibrate on")
        self.null_ = self._nulls(rows)
        per = self._cross_fitted_pvalues(rows, query_of)
        self.fisher_null_, self.minp_null_, self.cauchy_null_ = combination_nulls(per)
        scores = [self._combined(p, member=True) for p in per if p]
        self.clean_scores_ = scores
        self.document_threshold_ = removal_threshold(scores, clean_budget)
        self.threshold_, self.calibration_removal_ = self._procedure_threshold(
            clean_rankings, resources, k_ctx, rows, query_of, per, scores, clean_budget)
        self.set_params(threshold=self.threshold_)
        return self

    def _procedure_threshold(self, rankings: list[Ranking], resources: "Resources", k_ctx: int | None,
                             rows: list[dict[str, float]], query_of: list[int], per: list[dict[str, float]],
                             scores: list[float], budget: float) -> tuple[float, tuple[int, int]]:
        """The smallest threshold at or above the per-document one at which the whole procedure —
        first context and every rescored refill round — removes at most ``budget`` of the clean
        documents it scores on the calibration rankings, each query scored by a detector fitted on
        the other query folds (docs/algorithms.md §14.2). Returns (threshold, (removed, scored))."""
        fold_of = query_folds(query_of, self.calibration_folds)
        if fold_of is None or int(self.max_rounds) < 2:
            return self.document_threshold_, (sum(s >= self.document_threshold_ for s in scores), len(scores))
        states = []
        for k in sorted(set(fold_of.values())):
            other = [j for j, q in enumerate(query_of) if fold_of[q] != k]
            st = copy.copy(self)
            st.null_ = self._nulls([rows[j] for j in other])
            st.fisher_null_, st.minp_null_, st.cauchy_null_ = combination_nulls([per[j] for j in other])
            states.append(st)

        def removal(t: float) -> tuple[int, int]:
            removed = scored = 0
            for q, r in enumerate(rankings):
                seen, gone, _ = states[fold_of[q]]._rounds(r, resources, k_ctx, t)
                scored += len(seen)
                removed += len(gone)
            return removed, scored

        def within(counts: tuple[int, int]) -> bool:
            return counts[0] <= budget_index(counts[1], budget)

        candidates = sorted({float(np.nextafter(s, np.inf)) for s in scores if s >= self.document_threshold_}
                            | {self.document_threshold_})
        lo, hi = 0, len(candidates) - 1
        best = removal(candidates[lo])
        if within(best):
            return candidates[lo], best
        top = removal(candidates[hi])
        if not within(top):
            return candidates[hi], top
        best = top
        while hi - lo > 1:               # removal falls as the threshold rises: bisect to the lowest within budget
            mid = (lo + hi) // 2
            counts = removal(candidates[mid])
            if within(counts):
                hi, best = mid, counts
            else:
                lo = mid
        return candidates[hi], best

    def _nulls(self, rows: list[dict[str, float]]) -> dict[str, np.ndarray]:
        null = {e: np.sort(np.asarray([row[e] for row in rows if e in row], dtype=np.float64)) for e in self.evidence}
        return {e: v for e, v in null.items() if v.size}

    def _cross_fitted_pvalues(self, rows: list[dict[str, float]], query_of: list[int]) -> list[dict[str, float]]:
        """Per-evidence p-values of each calibration document against the documents of the other
        query folds (module docstring); with a single query, against the other documents."""
        fold_of = query_folds(query_of, self.calibration_folds)
        if fold_of is None:
            return [self._pvalues(row, self._nulls(rows[:j] + rows[j + 1:])) for j, row in enumerate(rows)]
        per: list[dict[str, float]] = [{} for _ in rows]
        for k in sorted(set(fold_of.values())):
            null = self._nulls([row for row, q in zip(rows, query_of) if fold_of[q] != k])
            for j, (row, q) in enumerate(zip(rows, query_of)):
                if fold_of[q] == k:
                    per[j] = self._pvalues(row, null)
        return per

    def calibration_scores(self, clean_rankings: list[Ranking], resources: "Resources",
                           k_ctx: int | None = K_CTX) -> list[float]:
        return list(getattr(self, "clean_scores_", []))

    # -- protocol ---------------------------------------------------------------------------------
    def inspect(self, ranking: Ranking, resources: "Resources", k_ctx: int | None = K_CTX) -> Inspection:
        if getattr(self, "null_", None) is None:
            raise ValueError("fusion: not calibrated; call calibrate(clean_rankings, resources) "
                             "(prepare_defense does) or load a calibrated defense")
        t0 = time.perf_counter()
        thr = None if self.threshold is None else float(self.threshold)
        seen, removed, rounds = self._rounds(ranking, resources, k_ctx, thr)
        out = []
        for i, d in enumerate(ranking.documents):
            rec = seen.get(i)
            if rec is None:
                out.append(Decision(d.id, False, "not_examined", threshold=thr, layer="fusion",
                                    reason="never entered the generation context (no refill reached it)"))
                continue
            score, ps, t = rec["score"], rec["p"], rec["threshold"]
            ev = {"values": rec["values"], "p_values": ps, "round": rec["round"],
                  "relaxed": thr is not None and t is not None and t < thr}
            if rec.get("answer_text"):
                ev["answer"] = rec["answer_text"]
            if score is None:
                out.append(Decision(d.id, False, "unavailable", None, t, ev, "no evidence available", "fusion"))
                continue
            rem = i in removed
            drivers = sorted((p, e) for e, p in ps.items() if p <= REASON_P)
            ev["drivers"] = [e for _, e in drivers]
            why = (", ".join(f"{e} {rec['values'][e]:.3g} (p={p:.3f})" for p, e in drivers)
                   or "no single evidence below p=0.05")
            where = (f"round {rec['round']}" + (" (refill)" if rec["round"] > 1 else "")
                     + (f", threshold lowered by ln {float(self.refill_factor):g} after a removal"
                        if ev["relaxed"] else ""))
            reason = (f"fused score {score:.2f} {'≥' if rem else '<'} {t:.2f} ({where}); "
                      + (f"pushed over by {why}; removed" if rem else f"strongest: {why}; kept")
                      if t is not None else f"fused score {score:.2f} (calibrating)")
            out.append(Decision(d.id, rem, "scored", score, t, ev, reason, "fusion"))
        info: dict[str, Any] = {"rounds": rounds, "removed": len(removed)}
        missing = self._unfitted()
        if missing:   # a degraded run says so (summary.json lists it per row)
            info["degraded"] = missing
        return Inspection(out, info, warnings=[f"fusion: {missing}"] if missing else [],
                          latency_ms={"total": (time.perf_counter() - t0) * 1000})

    def redecide(self, decisions: list[Decision], thresholds: Mapping[str, float]) -> list[Decision]:
        """Re-decide by score (:meth:`Defense.redecide`); a decision taken after a removal in its
        query (``evidence["relaxed"]``) is held to the new threshold lowered by ln ``refill_factor``.
        Which documents a refill reaches at another threshold is not re-run."""
        relaxed = {k: self._lowered(v) for k, v in thresholds.items() if v is not None}
        return [redecide_by_score(d, relaxed if d.evidence.get("relaxed") else thresholds) for d in decisions]

    def _lowered(self, threshold: float) -> float:
        """The threshold of a query after a removal: lowered by ln ``refill_factor``."""
        return float(threshold) - math.log(float(self.refill_factor))

    def _unfitted(self) -> str | None:
        """What corpus-time evidence is missing because ``fit`` was not called (None: nothing)."""
        gaps = []
        if "rsg" in self.evidence and getattr(self, "rsg_", None) is None:
            gaps.append("rsg evidence unavailable")
        if "answer" in self.evidence and getattr(self, "answer_index_", None) is None:
            gaps.append("answer evidence counted over the ranking only")
        return (", ".join(gaps) + " (not fitted on a corpus snapshot: call fit(snapshot), as prepare_defense does)"
                if gaps else None)
