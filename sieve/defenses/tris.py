"""TRIS — the Tri-Layer Retrieval Integrity Sieve (docs/algorithms.md §2).

Size: just over 500 lines — the three layers (§2.2–§2.4), their serial composition and the presets
share one module so the layer rules and the preset table are read together.

L1 judge-space K-Means majority keep (§2.2) → L2 structural prefix filter on L1's survivors (§2.3)
→ optional L3 LLM consistency check on L2's survivors (§2.4, :mod:`sieve.defenses.l3`).

Registered presets: ``tris`` (L1+L2, L3 adaptive when an LLM is available), ``tris_l1``,
``tris_l2``, ``tris_l3`` (L3 alone, always on), ``tris_full`` (L1+L2+L3 always on).
"""
from __future__ import annotations

import math
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Mapping

import numpy as np

from sieve.constants import CLEAN_BUDGET, K_CTX
from sieve.defenses.base import CONTEXT_K, Defense, copy_decision, redecide_by_score
from sieve.defenses.budget import removal_threshold
from sieve.defenses.l3 import L3_VARIANTS, DocVerdict, L3Outcome, make_verifier, skipped_outcome
from sieve.defenses.text import ngram_set, word_tokens
from sieve.registry import DEFENSES
from sieve.types import Decision, Inspection, RankedDocument, Ranking

if TYPE_CHECKING:
    from sieve.resources import Resources

L3_MODES = ("off", "always", "adaptive", "selective")
CONTEXT_MODES = ("refill", "all_survivors")
QUERY_PREFIX_TOKENS = 12  # §2.3 repeat_trigger: first ≤ 12 query tokens
L1_THRESHOLD = 0.5        # L1 score is 1.0 outside the majority cluster, 0.0 inside; removed iff ≥ 0.5
#: L3 likelihood delta threshold (nats/token) used while ``l3_delta_threshold`` is not calibrated
#: (docs/models.md; docs/algorithms.md §14.3).
L3_DEFAULT_DELTA = 1.0


_KMEANS_CACHE: "OrderedDict[tuple[Any, ...], Any]" = OrderedDict()
_KMEANS_CACHE_SIZE = 1024


def fit_kmeans(X: np.ndarray, n_clusters: int, random_state: int, n_init: int = 10, max_iter: int = 300) -> Any:
    """scikit-learn K-Means (Lloyd, k-means++) on one thread; the fitted values (``labels_``,
    ``cluster_centers_``, ``inertia_``, ``n_iter_``).

    Inputs here are tiny (k ≤ a few hundred rows): :func:`sieve.defenses.kernels.kmeans_fit` runs
    scikit-learn's own steps with its fixed per-fit costs paid once (bit-identical to
    ``KMeans.fit``). Duplicate rows (fewer distinct points than clusters) are allowed; scikit-learn's
    warning about them is silenced.

    The fit is deterministic (fixed ``random_state``, one thread), so fits are memoised by the bytes
    of ``X`` and the parameters: TRIS presets, TrustRAG and fusion cluster the same ranking's
    embeddings in one ``sieve eval`` and share one fit (same labels and centres as a new fit).
    Callers must not modify the returned arrays.
    """
    import hashlib

    if not isinstance(random_state, (int, np.integer)):   # unseeded: every fit is its own
        return _fit_kmeans(X, n_clusters, random_state, n_init, max_iter)
    Xc = np.ascontiguousarray(X)
    key = (hashlib.blake2b(Xc.tobytes(), digest_size=16).digest(), Xc.shape, Xc.dtype.str, int(n_clusters),
           int(random_state), int(n_init), int(max_iter))
    hit = _KMEANS_CACHE.get(key)
    if hit is not None:
        _KMEANS_CACHE.move_to_end(key)
        return hit
    km = _fit_kmeans(X, n_clusters, random_state, n_init, max_iter)
    _KMEANS_CACHE[key] = km
    if len(_KMEANS_CACHE) > _KMEANS_CACHE_SIZE:
        _KMEANS_CACHE.popitem(last=False)
    return km


def _fit_kmeans(X: np.ndarray, n_clusters: int, random_state: Any, n_init: int, max_iter: int) -> Any:
    from sieve.defenses.kernels import kmeans_fit

    return kmeans_fit(X, n_clusters, random_state, n_init=n_init, max_iter=max_iter)


# ---- Layer 1 -----------------------------------------------------------------------------------
@dataclass
class L1Result:
    removed: list[bool]
    evidence: list[dict[str, Any]]
    cluster_sizes: list[int]
    majority_cluster: int | None
    reason: str


def layer1(texts: list[str], resources: "Resources", cluster_count: int = 2) -> L1Result:
    """§2.2: K-Means (k_c = min(C, n), random_state 42, n_init 10) on judge embeddings; keep the largest
    cluster iff its size > n/2 (strict). n < 3, k_c < 2 or no strict majority → keep all."""
    n = len(texts)
    keep = L1Result([False] * n, [{} for _ in range(n)], [], None, "")
    if n < 3:
        keep.reason = f"fewer than 3 documents ({n}); L1 keeps all"
        return keep
    k_c = min(int(cluster_count), n)
    if k_c < 2:
        keep.reason = f"cluster count {cluster_count} < 2: L1 is off"
        return keep
    X = resources.judge_embeddings(texts)
    km = fit_kmeans(X, k_c, random_state=42, n_init=10)
    labels = km.labels_.astype(int)
    sizes = np.bincount(labels, minlength=k_c)
    largest = int(np.argmax(sizes))
    majority = bool(sizes[largest] > n / 2)
    dist = np.linalg.norm(X - km.cluster_centers_[largest], axis=1)
    judge_space = getattr(resources.judge, "model_id", "judge")
    out = L1Result([], [], [int(s) for s in sizes], largest if majority else None, "")
    for i in range(n):
        removed = bool(majority and labels[i] != largest)
        out.removed.append(removed)
        out.evidence.append({
            "cluster": int(labels[i]), "cluster_sizes": out.cluster_sizes,
            "majority_cluster": out.majority_cluster, "judge_space": judge_space,
            "distance_to_largest_centroid": float(dist[i]), "in_majority": majority and not removed,
        })
    out.reason = (f"majority cluster {largest} holds {sizes[largest]} of {n} (> {n / 2:g})" if majority
                  else f"no strict majority (cluster sizes {out.cluster_sizes}, need > {n / 2:g}); L1 keeps all")
    return out


# ---- Layer 2 -----------------------------------------------------------------------------------
@dataclass
class QueryGrams:
    """Query-side features of §2.3, computed once per query."""

    tokens: list[str]
    token_set: set[str]
    bigrams: set[tuple[str, ...]]
    trigrams: set[tuple[str, ...]]
    prefix_string: str

    @classmethod
    def of(cls, query: str) -> "QueryGrams":
        q = word_tokens(query)
        return cls(q, set(q), ngram_set(q, 2), ngram_set(q, 3), " ".join(q[:QUERY_PREFIX_TOKENS]))


@dataclass
class L2Features:
    jaccard: float
    bigram_overlap: float
    trigram_overlap: float
    repeat_trigger: bool
    prefix_tokens: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {"jaccard": self.jaccard, "bigram_overlap": self.bigram_overlap,
                "trigram_overlap": self.trigram_overlap, "repeat_trigger": self.repeat_trigger,
                "prefix_tokens": self.prefix_tokens}


def l2_features(query: QueryGrams, text: str, prefix_token_count: int = 20) -> L2Features:
    """§2.3 features of one document: prefix P = first T tokens (T clamped to ≥ 5); Jaccard of sets;
    query-side bigram/trigram recall |Q ∩ P| / max(1, |Q|); repeat_trigger = the ≤12-token query
    prefix string occurs ≥ 2 times (non-overlapping, raw substring) in the space-joined P.
    Memoised per (query, text, T): the same document meets the same query in every condition's
    ranking and in every TRIS preset and fusion; each call returns its own copy."""
    T = max(5, int(prefix_token_count))
    key = (tuple(query.tokens), query.prefix_string, len(query.token_set), len(query.bigrams),
           len(query.trigrams), text, T)
    hit = _L2_CACHE.get(key)
    if hit is None:
        hit = _L2_CACHE[key] = _l2_features(query, text, T)
        if len(_L2_CACHE) > _L2_CACHE_SIZE:
            _L2_CACHE.popitem(last=False)
    return L2Features(hit.jaccard, hit.bigram_overlap, hit.trigram_overlap, hit.repeat_trigger,
                      list(hit.prefix_tokens))


_L2_CACHE: "OrderedDict[tuple[Any, ...], L2Features]" = OrderedDict()
_L2_CACHE_SIZE = 50_000


def _l2_features(query: QueryGrams, text: str, T: int) -> L2Features:
    P = word_tokens(text)[:T]
    sp = set(P)
    union = query.token_set | sp
    jaccard = len(query.token_set & sp) / len(union) if union else 0.0
    bigram = len(query.bigrams & ngram_set(P, 2)) / max(1, len(query.bigrams))
    trigram = len(query.trigrams & ngram_set(P, 3)) / max(1, len(query.trigrams))
    repeat = bool(query.prefix_string) and " ".join(P).count(query.prefix_string) >= 2
    return L2Features(jaccard, bigram, trigram, repeat, P)


def l2_removes(f: L2Features, jaccard_threshold: float = 0.8, ngram_threshold: float = 0.8) -> bool:
    """§2.3 rule, inclusive (≥) [CONTRADICTION #2: paper says >]."""
    return (f.jaccard >= jaccard_threshold or f.bigram_overlap >= ngram_threshold
            or f.trigram_overlap >= ngram_threshold or f.repeat_trigger)


def l2_evidence_score(ev: Mapping[str, Any]) -> float:
    """The L2 score to compare with ONE L2 threshold, from stored ``evidence["L2"]``: ``inf`` when
    repeat_trigger fired (it removes at any threshold), else max(jaccard, bigram, trigram recall)."""
    if ev.get("repeat_trigger"):
        return math.inf
    return max(float(ev.get(k, 0.0) or 0.0) for k in ("jaccard", "bigram_overlap", "trigram_overlap"))


# ---- the defense -------------------------------------------------------------------------------
@DEFENSES.register
class TRIS(Defense):
    """TRIS: L1 → L2 → L3 (docs/algorithms.md §2). Every threshold is a parameter:

    * ``use_l1`` (True), ``cluster_count`` C = 2 — §1.1: every TRIS run uses 2; 3 and 5 only in the
      k × C sweep [CONTRADICTION #1: paper says 3]. C = 1 switches L1 off, as in the TRIS ablations.
      L1 score: 1.0 for a document outside the strict-majority cluster, 0.0 otherwise, threshold 0.5;
      the continuous ``distance_to_largest_centroid`` is in the evidence.
    * ``use_l2`` (True), ``prefix_token_count`` T = 20 (clamped ≥ 5), ``jaccard_threshold`` = 0.8,
      ``ngram_threshold`` = 0.8, both inclusive (§2.3). L2 score = max(jaccard, bigram, trigram
      recall), raised to max(score, 1.0, threshold) when repeat_trigger fires; the reported threshold
      is min(jaccard_threshold, ngram_threshold) (exact when they are equal, as by default). Setting
      the thresholds to 10 (TRIS "L2 off" ablation) leaves repeat_trigger active, as in the source.
    * ``l3_mode``: ``off``; ``always`` (run on L2's survivors whenever non-empty); ``selective``
      (TRIS code §2.5: L1 removed ≥ 1 OR L2 removed ≥ 1); ``adaptive`` (default; the paper's "only
      when L1 and L2 disagree", contradiction register #6): L3 runs iff exactly ONE of L1 and L2
      removed at least one document — one layer saw an attack and the other did not. (L2 runs on
      L1's survivors, so disagreement is judged at the layer level, not per document.) A disabled
      layer counts as having removed nothing.
    * ``l3_variant``: ``auto`` (likelihood verifier for a local LLM, prompted JSON verifier for an
      endpoint), ``prompted``, ``likelihood``, ``paper`` (§2.4.1 SAFE/CONTRADICTORY reproduction).
      ``l3_confidence_threshold`` = 4.0 and ``l3_delta_threshold`` configure the likelihood verifier
      (see :class:`~sieve.defenses.l3.LikelihoodVerifier`). ``l3_delta_threshold`` = ``None`` (default)
      is calibrated on clean rankings with the one budget rule (docs/algorithms.md §14.3,
      :meth:`calibrate`): L3 then removes at most the clean budget of the clean documents it judges;
      until calibrated (no LLM, the prompted back-end, or no clean L3 verdicts) it is 1.0.
      ``l3_calibration_queries`` (24) caps the clean queries L3 is calibrated on (≈ 6 local-LLM
      calls each).
      Without an LLM (``resources.llm is None``) L3 is ``skipped`` with reason "no LLM configured".
    * ``context_mode``: ``refill`` (default, docs/design.md: first ``k_ctx`` survivors) or
      ``all_survivors`` (TRIS's variable-length context, §1.6; ``k_ctx`` ignored: the inspection
      sets ``info["context_k"] = None`` and ``apply`` passes every survivor).
    * ``l3_scope``: ``context`` (default, Sieve product decision) — L3 verifies L2's survivors in rank
      order until ``k_ctx`` of them are kept, i.e. exactly the documents that reach the generator
      (a removal pulls the next survivor in and verifies it too); the rest get status ``skipped``
      ("outside the generation context"). ``all`` — the source behaviour (§2.4: every survivor,
      1 + |working set| LLM calls; up to 50 calls per query at k = 50). ``context`` costs about
      1 + k_ctx calls and judges the same context documents; with ``context_mode="all_survivors"``
      (or ``k_ctx=None``) the scope is always ``all``. ``k_ctx`` is the argument of :meth:`inspect`
      / :meth:`apply` (decided once, by the caller).

    Everything filtered → unfiltered fallback with a warning (§2.5, docs/design.md).

    Re-deciding (:meth:`redecide`): the knob ``"L2"`` is one threshold for the L2 Jaccard and
    n-gram recalls (exactly the current decisions when ``jaccard_threshold == ngram_threshold``,
    as by default); L1 removals stay; documents L3 judged are re-tested against L2.
    """

    name = "tris"
    summary = ("TRIS L1+L2; L3 adaptive (only when exactly one of L1/L2 removed something) "
               "if an LLM is configured.")
    paper = "TRIS, Tri-Layer Retrieval Integrity Sieve (docs/algorithms.md §2)"
    needs = ("judge", "llm")
    presets = {
        "tris_l1": {"params": {"use_l2": False, "l3_mode": "off"}, "needs": ("judge",),
                    "paper": "TRIS Layer 1 (docs/algorithms.md §2.2)",
                    "summary": "TRIS Layer 1 only: judge-space K-Means majority keep."},
        "tris_l2": {"params": {"use_l1": False, "l3_mode": "off"}, "needs": (),
                    "paper": "TRIS Layer 2 (docs/algorithms.md §2.3)",
                    "summary": "TRIS Layer 2 only: structural query-prefix filter."},
        "tris_l3": {"params": {"use_l1": False, "use_l2": False, "l3_mode": "always"}, "needs": ("llm",),
                    "paper": "TRIS Layer 3 (docs/algorithms.md §2.4)",
                    "summary": "TRIS Layer 3 only: fail-open LLM consistency check, always on."},
        "tris_full": {"params": {"l3_mode": "always"}, "needs": ("judge", "llm"),
                      "paper": "TRIS full pipeline (docs/algorithms.md §2.5)",
                      "summary": "TRIS L1+L2+L3 with L3 always on."},
    }

    def __init__(self, use_l1: bool = True, use_l2: bool = True, cluster_count: int = 2,
                 prefix_token_count: int = 20, jaccard_threshold: float = 0.8, ngram_threshold: float = 0.8,
                 l3_mode: str = "adaptive", l3_variant: str = "auto", l3_confidence_threshold: float = 4.0,
                 l3_delta_threshold: float | None = None, context_mode: str = "refill", l3_scope: str = "context",
                 l3_calibration_queries: int = 24) -> None:
        if l3_scope not in ("context", "all"):
            raise ValueError(f"tris: l3_scope must be 'context' or 'all'; got {l3_scope!r}")
        if l3_mode not in L3_MODES:
            raise ValueError(f"tris: l3_mode must be one of {', '.join(L3_MODES)}; got {l3_mode!r}")
        if l3_variant not in L3_VARIANTS:
            raise ValueError(f"tris: l3_variant must be one of {', '.join(L3_VARIANTS)}; got {l3_variant!r}")
        if context_mode not in CONTEXT_MODES:
            raise ValueError(f"tris: context_mode must be one of {', '.join(CONTEXT_MODES)}; got {context_mode!r}")
        if int(cluster_count) < 1:
            raise ValueError(f"tris: cluster_count must be >= 1; got {cluster_count!r}")
        super().__init__(use_l1=use_l1, use_l2=use_l2, cluster_count=cluster_count,
                         prefix_token_count=prefix_token_count, jaccard_threshold=jaccard_threshold,
                         ngram_threshold=ngram_threshold, l3_mode=l3_mode, l3_variant=l3_variant,
                         l3_confidence_threshold=l3_confidence_threshold, l3_delta_threshold=l3_delta_threshold,
                         context_mode=context_mode, l3_scope=l3_scope, l3_calibration_queries=l3_calibration_queries)

    @property  # type: ignore[override]
    def threshold_param(self) -> str | None:  # noqa: D401
        """``l3_delta_threshold`` when L3 can run (``l3_mode`` not ``off``); ``None`` for tris_l1/tris_l2."""
        return None if self.l3_mode == "off" else "l3_delta_threshold"

    # -- L3 calibration ------------------------------------------------------------------------
    def l3_delta(self) -> float:
        """The L3 likelihood threshold in use (the calibrated one, else :data:`L3_DEFAULT_DELTA`)."""
        forced = getattr(self, "_delta_override", None)
        if forced is not None:
            return forced
        return L3_DEFAULT_DELTA if self.l3_delta_threshold is None else float(self.l3_delta_threshold)

    def l3_calibrates(self, resources: "Resources") -> bool:
        """True when L3 can run and uses the likelihood back-end (a continuous score to calibrate)."""
        llm = resources.llm
        if self.l3_mode == "off" or llm is None:
            return False
        return self.l3_variant == "likelihood" or (self.l3_variant == "auto" and bool(getattr(llm, "supports_nll", False)))

    def calibration_scores(self, clean_rankings: list[Ranking], resources: "Resources",
                           k_ctx: int | None = K_CTX) -> list[float]:
        """The L3 deltas of every clean document L3 judges (status ``ran``), with L3 removing nothing
        meanwhile, on the first ``l3_calibration_queries`` clean rankings."""
        self._delta_override = math.inf
        try:
            scores = []
            for r in clean_rankings[:max(1, int(self.l3_calibration_queries))]:
                decisions, _, _, _ = self._run(r, resources, k_ctx)
                scores += [float(d.score) for d in decisions
                           if d.layer == "L3" and d.status == "ran" and d.score is not None]
            return scores
        finally:
            self._delta_override = None

    def calibrate(self, clean_rankings: list[Ranking], resources: "Resources",
                  clean_budget: float = CLEAN_BUDGET, k_ctx: int | None = K_CTX) -> "TRIS":
        """Learn ``l3_delta_threshold`` on clean rankings only (docs/algorithms.md §14.3): at most
        ``clean_budget`` of the clean documents L3 judges are removed by L3. Nothing is learned (the
        threshold stays ``None`` → 1.0) when L3 cannot run, uses the prompted back-end, or judged no
        clean document; never below 1.0 (calibration only makes L3 more careful). L1 and L2 keep the
        paper's fixed thresholds."""
        if not self.l3_calibrates(resources):
            return self
        scores = self.calibration_scores(clean_rankings, resources, k_ctx)
        self.l3_calibration_n_ = len(scores)
        if not scores:
            return self
        self.threshold_ = max(removal_threshold(scores, clean_budget), L3_DEFAULT_DELTA)
        self.set_params(l3_delta_threshold=self.threshold_)
        return self

    # -- L3 gating ---------------------------------------------------------------------------
    def l3_should_run(self, l1_removed: int, l2_removed: int, working: int) -> tuple[bool, str]:
        """(run?, reason) for the mode rule of §2.5 / the adaptive definition above."""
        mode = self.l3_mode
        if mode == "off":
            return False, "L3 is off"
        if working == 0:
            return False, "no documents left for L3"
        if mode == "always":
            return True, "L3 always on"
        if mode == "selective":
            ok = l1_removed > 0 or l2_removed > 0
            return ok, ("L1 or L2 removed something (selective)" if ok
                        else "selective mode: neither L1 nor L2 removed anything")
        ok = (l1_removed > 0) != (l2_removed > 0)
        return ok, ("L1 and L2 disagree (exactly one removed something)" if ok
                    else f"adaptive mode: L1 and L2 agree (L1 removed {l1_removed}, L2 removed {l2_removed})")

    # -- protocol ------------------------------------------------------------------------------
    def inspect(self, ranking: Ranking, resources: "Resources", k_ctx: int | None = K_CTX) -> Inspection:
        """L1 → L2 → L3 on ``ranking``; L3's scope is the first ``k_ctx`` survivors (``l3_scope``)."""
        decisions, layers, latency, info = self._run(ranking, resources, k_ctx)
        if self.context_mode == "all_survivors":
            info[CONTEXT_K] = None
        return Inspection(decisions, info, layers_run=layers, latency_ms=latency)

    # -- re-deciding ---------------------------------------------------------------------------
    def current_thresholds(self) -> dict[str, float | None]:
        if not self.use_l2:
            return {}
        return {"L2": min(float(self.jaccard_threshold), float(self.ngram_threshold))}

    def redecide(self, decisions: list[Decision], thresholds: Mapping[str, float]) -> list[Decision]:
        """With ``thresholds["L2"]``: L2 decisions are removed iff :func:`l2_evidence_score` ≥ it; L3
        decisions of documents L2 kept are removed iff L2 now removes them or L3 removed them (a
        document a raised L2 threshold lets through was never shown to L3 and stays kept, i.e. L3 fails
        open); L1 removals stay. Every other decision/key follows the base rule
        (:func:`~sieve.defenses.base.redecide_by_score`)."""
        out = []
        for d in decisions:
            ev_l2 = d.evidence.get("L2")
            if "L2" in thresholds and isinstance(ev_l2, Mapping) and d.layer in ("L2", "L3"):
                nd = copy_decision(d)
                l2 = l2_evidence_score(ev_l2) >= float(thresholds["L2"])
                if d.layer == "L2":
                    nd.removed, nd.threshold = bool(l2), float(thresholds["L2"])
                else:
                    nd.removed = bool(l2 or d.removed)
                out.append(nd)
            else:
                out.append(redecide_by_score(d, thresholds))
        return out

    def _run(self, ranking: Ranking, resources: "Resources", k_ctx: int | None = K_CTX
             ) -> tuple[list[Decision], list[str], dict[str, float], dict[str, Any]]:
        t_start = time.perf_counter()
        docs = ranking.documents
        n = len(docs)
        evidence: list[dict[str, Any]] = [{} for _ in range(n)]
        decisions: list[Decision | None] = [None] * n
        layers: list[str] = []
        latency: dict[str, float] = {}
        removed_count = {"L1": 0, "L2": 0, "L3": 0}
        info: dict[str, Any] = {"l3_mode": self.l3_mode, "removed": removed_count}

        # L1
        working = list(range(n))
        if self.use_l1 and n:
            t = time.perf_counter()
            r1 = layer1([d.text for d in docs], resources, self.cluster_count)
            latency["L1"] = (time.perf_counter() - t) * 1000
            layers.append("L1")
            info["l1"] = {"cluster_sizes": r1.cluster_sizes, "majority_cluster": r1.majority_cluster,
                          "reason": r1.reason}
            for i in range(n):
                evidence[i]["L1"] = r1.evidence[i]
                score = 1.0 if r1.removed[i] else 0.0
                ev = r1.evidence[i]
                reason = (f"outside the judge-space majority cluster {r1.majority_cluster} "
                          f"(cluster sizes {r1.cluster_sizes}); removed" if r1.removed[i]
                          else r1.reason if r1.majority_cluster is None or not ev
                          else f"in the majority cluster {r1.majority_cluster}; kept")
                decisions[i] = Decision(docs[i].id, r1.removed[i], "scored", score, L1_THRESHOLD,
                                        evidence[i], reason, "L1")
            removed_count["L1"] = sum(r1.removed)
            working = [i for i in working if not r1.removed[i]]

        # L2
        if self.use_l2 and working:
            t = time.perf_counter()
            qg = QueryGrams.of(ranking.query)
            thr = min(float(self.jaccard_threshold), float(self.ngram_threshold))
            survivors = []
            for i in working:
                f = l2_features(qg, docs[i].text, self.prefix_token_count)
                removed = l2_removes(f, self.jaccard_threshold, self.ngram_threshold)
                score = max(f.jaccard, f.bigram_overlap, f.trigram_overlap)
                if f.repeat_trigger:
                    score = max(score, 1.0, thr)
                evidence[i]["L2"] = f.as_dict()
                decisions[i] = Decision(docs[i].id, removed, "scored", score, thr, evidence[i],
                                        _l2_reason(f, removed, self.jaccard_threshold, self.ngram_threshold), "L2")
                if removed:
                    removed_count["L2"] += 1
                else:
                    survivors.append(i)
            working = survivors
            latency["L2"] = (time.perf_counter() - t) * 1000
            layers.append("L2")

        # L3
        run_l3, why = self.l3_should_run(removed_count["L1"], removed_count["L2"], len(working))
        work_docs = [docs[i] for i in working]
        if not run_l3:
            outcome = skipped_outcome(work_docs, why)
        else:
            llm = resources.llm
            if llm is None:
                outcome = skipped_outcome(work_docs, "no LLM configured")
            else:
                t = time.perf_counter()
                verifier = make_verifier(llm, self.l3_variant, confidence_threshold=self.l3_confidence_threshold,
                                         delta_threshold=self.l3_delta())
                outcome = self._verify(verifier, ranking.query, work_docs, k_ctx)
                latency["L3"] = (time.perf_counter() - t) * 1000
                layers.append("L3")
        self._merge_l3(outcome, working, docs, decisions, evidence, removed_count)
        info.update(l3_status=outcome.status, l3_reason=outcome.reason, l3_backend=outcome.backend,
                    l3_abstained=outcome.status == "abstained", internal_answer=outcome.internal_answer,
                    l3_llm_calls=outcome.llm_calls)

        final = [d if d is not None else Decision(docs[i].id, False, "skipped", evidence=evidence[i],
                                                  reason="no TRIS layer is enabled", layer="")
                 for i, d in enumerate(decisions)]
        latency["total"] = (time.perf_counter() - t_start) * 1000
        return final, layers, latency, info

    def _verify(self, verifier: Any, query: str, work_docs: list[RankedDocument], k_ctx: int | None) -> L3Outcome:
        """Run the verifier over the whole working set (``l3_scope="all"``) or only over the documents
        that reach the generation context (``"context"``): verify the first ``k_ctx`` survivors, and
        while some are removed, verify the next ones that refill their places."""
        if self.l3_scope == "all" or self.context_mode == "all_survivors" or not k_ctx:
            return verifier.verify(query, work_docs)
        verdicts: dict[str, Any] = {}
        outcomes: list[L3Outcome] = []
        pos, kept = 0, 0
        while pos < len(work_docs) and kept < k_ctx:
            batch = work_docs[pos:pos + (k_ctx - kept)]
            pos += len(batch)
            out = verifier.verify(query, batch)
            outcomes.append(out)
            for v in out.verdicts:
                verdicts[v.doc_id] = v
                kept += int(not v.removed)
        first = outcomes[0]
        reason = "outside the generation context (l3_scope='context'); not verified"
        merged = [verdicts.get(d.id) or DocVerdict(d.id, False, "skipped", reason=reason) for d in work_docs]
        status = "ran" if any(o.status == "ran" for o in outcomes) else first.status
        return L3Outcome(status, first.backend, first.reason, merged, first.internal_answer,
                         sum(o.llm_calls for o in outcomes), {**first.info, "l3_rounds": len(outcomes)})

    @staticmethod
    def _merge_l3(outcome: L3Outcome, working: list[int], docs: list[RankedDocument],
                  decisions: list[Decision | None], evidence: list[dict[str, Any]], removed_count: dict[str, int]) -> None:
        """L3's verdict becomes the decision of each document it judged (ran/abstained/error); when it was
        skipped, documents keep their L2/L1 decision and the skip is recorded in evidence["L3"]."""
        for i, v in zip(working, outcome.verdicts):
            evidence[i]["L3"] = {"status": v.status, "verdict": v.verdict, "reason": v.reason, **v.evidence}
            if v.status == "skipped" and decisions[i] is not None:
                continue
            decisions[i] = Decision(docs[i].id, v.removed, v.status, v.score, v.threshold, evidence[i], v.reason, "L3")
            removed_count["L3"] += int(v.removed)


def _l2_reason(f: L2Features, removed: bool, jt: float, nt: float) -> str:
    if not removed:
        return (f"prefix does not repeat the query (jaccard {f.jaccard:.2f}, bigram recall {f.bigram_overlap:.2f}, "
                f"trigram recall {f.trigram_overlap:.2f}; thresholds {jt:g}/{nt:g}); kept")
    parts = []
    if f.bigram_overlap >= nt:
        parts.append(f"bigram recall {f.bigram_overlap:.2f} ≥ {nt:g}")
    if f.trigram_overlap >= nt:
        parts.append(f"trigram recall {f.trigram_overlap:.2f} ≥ {nt:g}")
    if f.jaccard >= jt:
        parts.append(f"token Jaccard {f.jaccard:.2f} ≥ {jt:g}")
    if f.repeat_trigger:
        parts.append("the query prefix occurs twice in the first tokens")
    return "prefix repeats the query: " + "; ".join(parts) + "; removed"
