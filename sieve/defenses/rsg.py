"""RSG — RAGSieve's corpus-time graph detector (docs/algorithms.md §4; RS:graph.py, integrity.py).

Size: about 610 lines — the audit (§4.1–§4.5), its row view and the defense stay together so the
one rule is read in one place, and the per-query recomputations fusion reads (:func:`density_without`,
:func:`mutual_neighbours`) stay beside the one density formula they share (``_contrast``).

For every document of a corpus snapshot:

1. exact kNN graph on the retriever's own (re-normalised float32) vectors, k = min(16, N − 1),
   self masked (§4.1);
2. eligible neighbours: walk the sorted list, stop at the first similarity < 0.85, keep a
   neighbour iff the lexical Jaccard of ASCII ``[a-z0-9]+`` token sets is ≤ 0.60 (§4.2);
3. density contrast D_i = min(1, |N_i|/2) · clip((μ_i − b_i)/max(1e-6, 1 − b_i), 0, 1), with b_i the
   k-th unfiltered similarity and μ_i the mean of the top-4 retained similarities (§4.3);
4. integrity predicate I_i: adjacent script transitions or ≥ 3 scripts (§4.4);
5. corpus tail p_i = #{D_j ≥ D_i}/(N + 1); shared budget f_T = max(0, 0.05 − f_I);
   T_i = min(1, 0.5·f_T/p_i) if f_T > 0 else 0; score = max(T_i, I_i); flagged ⇔ score ≥ 0.5 (§4.5).

Quarantine semantics (§5, docs/design.md): RSG flags are corpus-time; the ``rsg`` defense removes
flagged documents from rankings (refill from the saved ranking) and the CLI records them in the
quarantine ledger. Nothing is deleted. Scores depend on the whole snapshot: refit after any
corpus change.

Neighbour search is sieve/index/knn.py: ``exact``, ``ivf`` (IVF-Flat self-join), ``hnsw`` or ``auto``
(exact for small corpora, IVF past them); approximate audits carry their neighbour recall@k measured
against exact on a sample (``RSGAudit.recall``). The per-document statistics
(:func:`density_statistics`) and the corpus tail/decision (:func:`corpus_decision`) are single
functions shared with the Ray engine (sieve/scale/ray_engine.py).
"""
from __future__ import annotations

from collections import OrderedDict
from dataclasses import asdict, dataclass, field, fields
from typing import TYPE_CHECKING, Any, Callable, Sequence

import numpy as np

from sieve.constants import K_CTX
from sieve.defenses.base import Defense
from sieve.defenses.scripts import ascii_tokens, script_profile
from sieve.defenses.stats import corpus_upper_tail
from sieve.index.knn import HNSW_EF_SEARCH, HNSW_M, IVF_NPROBE
from sieve.ledger import DETECTOR_FLAG
from sieve.registry import DEFENSES
from sieve.types import Decision, Ranking, Score, Scores

if TYPE_CHECKING:
    from sieve.resources import Resources


@dataclass(frozen=True)
class RSGParams:
    """Fixed configuration of RS:graph.py (§4). ``block_size`` only affects memory use."""

    neighbor_count: int = 16            # k_G
    dense_core_count: int = 4           # h_G
    support_scale: float = 2.0          # c_G
    semantic_threshold: float = 0.85
    lexical_ceiling: float = 0.60
    multiscript_gate: int = 3
    target_alert_fraction: float = 0.05  # α_G
    decision_threshold: float = 0.5      # η_G
    mode: str = "exact"                 # "exact" | "ivf" | "hnsw" | "auto" (sieve/index/knn.py)
    hnsw_m: int = HNSW_M
    hnsw_ef_search: int = HNSW_EF_SEARCH
    ivf_nprobe: int = IVF_NPROBE
    block_size: int = 1024
    progress: bool = False


@dataclass
class RSGRow:
    """One document of the audit (§4.5 output fields plus the neighbour walk)."""

    document_id: str
    kept: list[dict[str, Any]]        # eligible neighbours kept: {id, similarity, jaccard}
    dropped: list[dict[str, Any]]     # eligible by similarity but dropped for Jaccard > ceiling
    eligible_neighbor_count: int
    neighbourhood_floor: float        # b_i
    core_mean: float                  # μ_i
    local_density_contrast: float     # D_i
    topology_tail_probability: float  # p_i
    topological_coordination_score: float  # T_i
    script_integrity_score: int       # I_i
    scripts: list[str]
    adjacent_transitions: int
    mixed_script_fraction: float
    script_transition_rate: float
    snapshot_integrity_alert_fraction: float   # f_I
    snapshot_remaining_topology_tail_fraction: float  # f_T
    score: float
    flagged: bool

    @property
    def branch(self) -> str:
        """Which branch flagged the document: "integrity", "topology", "both" or ""."""
        if not self.flagged:
            return ""
        integ = self.script_integrity_score >= 1
        topo = self.topological_coordination_score >= 0.5
        return "both" if integ and topo else ("integrity" if integ else "topology")

    def to_dict(self) -> dict[str, Any]:
        """What ``asdict`` gives (the neighbour lists and scripts copied), plus ``branch``; built
        by hand because ``asdict``'s generic deep copy was a hot spot of ``sieve eval``."""
        d = {f.name: getattr(self, f.name) for f in fields(self)}
        d["kept"] = [dict(e) for e in self.kept]
        d["dropped"] = [dict(e) for e in self.dropped]
        d["scripts"] = list(self.scripts)
        d["branch"] = self.branch
        return d


@dataclass
class RSGAudit:
    """The audit of one snapshot. Arrays are aligned with ``ids``; :meth:`row` expands one document."""

    ids: list[str]
    params: RSGParams
    neighbour_ids: np.ndarray        # [N, k] int64 row indices (−1 = missing in approximate modes)
    neighbour_sims: np.ndarray       # [N, k] float32, descending
    eligible: np.ndarray             # [N, k] bool (similarity walk)
    kept: np.ndarray                 # [N, k] bool (eligible and Jaccard ≤ ceiling)
    jaccard: np.ndarray              # [N, k] float32 (NaN where not computed)
    floor: np.ndarray                # b_i
    core_mean: np.ndarray            # μ_i
    density: np.ndarray              # D_i (float32)
    tail_p: np.ndarray               # p_i
    integrity: np.ndarray            # I_i (int8)
    topology: np.ndarray             # T_i
    score: np.ndarray
    flagged: np.ndarray              # bool
    f_I: float
    f_T: float
    script_fields: Sequence[dict[str, Any]] = field(default_factory=list)
    knn: dict[str, Any] = field(default_factory=dict)        # the kNN plan (sieve/index/knn.py)
    recall: dict[str, Any] | None = None                      # sampled neighbour recall@k (approximate)
    _pos: dict[str, int] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        self._pos = {d: i for i, d in enumerate(self.ids)}

    def __len__(self) -> int:
        return len(self.ids)

    def __contains__(self, doc_id: object) -> bool:
        return doc_id in self._pos

    def index_of(self, doc_id: str) -> int:
        return self._pos[doc_id]

    @property
    def flagged_ids(self) -> list[str]:
        return [self.ids[i] for i in np.flatnonzero(self.flagged)]

    @property
    def eligible_counts(self) -> np.ndarray:
        return self.kept.sum(axis=1)

    def row(self, i: int | str) -> RSGRow:
        if isinstance(i, str):
            i = self._pos[i]
        kept: list[dict[str, Any]] = []
        dropped: list[dict[str, Any]] = []
        for j in range(self.neighbour_ids.shape[1]):
            if not self.eligible[i, j]:
                continue
            entry = {"id": self.ids[int(self.neighbour_ids[i, j])],
                     "similarity": float(self.neighbour_sims[i, j]),
                     "jaccard": float(self.jaccard[i, j])}
            (kept if self.kept[i, j] else dropped).append(entry)
        sf = self.script_fields[i]
        return RSGRow(
            document_id=self.ids[i], kept=kept, dropped=dropped, eligible_neighbor_count=len(kept),
            neighbourhood_floor=float(self.floor[i]), core_mean=float(self.core_mean[i]),
            local_density_contrast=float(self.density[i]), topology_tail_probability=float(self.tail_p[i]),
            topological_coordination_score=float(self.topology[i]),
            script_integrity_score=int(self.integrity[i]), scripts=list(sf["scripts"]),
            adjacent_transitions=int(sf["transitions"]), mixed_script_fraction=float(sf["mixed_fraction"]),
            script_transition_rate=float(sf["transition_rate"]),
            snapshot_integrity_alert_fraction=self.f_I, snapshot_remaining_topology_tail_fraction=self.f_T,
            score=float(self.score[i]), flagged=bool(self.flagged[i]),
        )

    def rows(self) -> list[RSGRow]:
        return [self.row(i) for i in range(len(self.ids))]


# ---------------------------------------------------------------------------------------------
def _validate(ids: Sequence[str], texts: Sequence[str], vectors: Any) -> np.ndarray:
    """Validation errors of §4, as clear ValueErrors; returns float32 unit rows (converted block by
    block, so a float16 memory map is never held twice)."""
    shape = getattr(vectors, "shape", None)
    arr = vectors if shape is not None else np.asarray(vectors)
    if arr.ndim != 2:
        raise ValueError(f"RSG: vectors must be a 2-D matrix, got shape {arr.shape}")
    if arr.shape[0] < 2:
        raise ValueError(f"RSG: needs at least 2 documents, got {arr.shape[0]}")
    if not np.issubdtype(arr.dtype, np.floating):
        raise ValueError(f"RSG: vectors must be a float matrix, got dtype {arr.dtype}")
    if len(texts) != arr.shape[0] or len(ids) != arr.shape[0]:
        raise ValueError(f"RSG: length mismatch: {len(ids)} ids, {len(texts)} texts, {arr.shape[0]} vectors")
    n = arr.shape[0]
    x = np.empty(arr.shape, np.float32)
    for s in range(0, n, 65_536):
        blk = np.asarray(arr[s: s + 65_536], dtype=np.float32)
        finite = np.isfinite(blk).all(axis=1)
        if not finite.all():
            bad = s + int(np.flatnonzero(~finite)[0])
            raise ValueError(f"RSG: non-finite values in the vector of document {ids[bad]!r} (row {bad})")
        norms = np.linalg.norm(blk, axis=1)
        if np.any(norms == 0):
            bad = s + int(np.flatnonzero(norms == 0)[0])
            raise ValueError(f"RSG: zero vector for document {ids[bad]!r} (row {bad})")
        x[s: s + 65_536] = blk / norms[:, None]
    return x


def _jaccard(a: frozenset[str], b: frozenset[str]) -> float:
    union = len(a | b)
    return len(a & b) / union if union else 0.0


@dataclass
class DensityStats:
    """Per-document statistics of §4.2–4.3 for a batch of rows (arrays aligned with ``rows``)."""

    rows: np.ndarray         # [m] corpus row indices
    eligible: np.ndarray     # [m, k] bool
    kept: np.ndarray         # [m, k] bool
    jaccard: np.ndarray      # [m, k] float32 (NaN where not computed)
    floor: np.ndarray        # b_i
    core_mean: np.ndarray    # μ_i
    density: np.ndarray      # D_i float32


def density_statistics(rows: np.ndarray, nb_ids: np.ndarray, nb_sims: np.ndarray,
                       tokens: Callable[[int], frozenset[str]], p: RSGParams) -> DensityStats:
    """§4.2–4.3 for the documents ``rows`` given their neighbour lists (``nb_ids``/``nb_sims`` rows
    aligned with ``rows``): the similarity walk, the lexical ceiling, b_i, μ_i and D_i.

    The ONE implementation of the per-document statistics: the local engine calls it on the whole
    corpus, the Ray engine (sieve/scale/ray_engine.py) on each batch. ``tokens(j)`` returns the ASCII
    token set of corpus row ``j`` (neighbours may lie outside the batch)."""
    rows = np.asarray(rows, np.int64)
    nb_ids = np.asarray(nb_ids, np.int64)
    sims = np.asarray(nb_sims, np.float32)
    m, k = nb_ids.shape
    valid = nb_ids >= 0
    has = valid.any(axis=1)
    last = k - 1 - np.argmax(valid[:, ::-1], axis=1)
    floor = np.where(has, sims[np.arange(m), last], np.float32(0.0)).astype(np.float32)
    # the walk stops at the first similarity below the threshold (or the first missing neighbour)
    eligible = np.cumprod(valid & (sims >= np.float32(p.semantic_threshold)), axis=1).astype(bool)
    jac = np.full((m, k), np.nan, np.float32)
    r_idx, c_idx = np.nonzero(eligible)
    if r_idx.size:
        vals = np.fromiter((_jaccard(tokens(int(rows[r])), tokens(int(nb_ids[r, c])))
                            for r, c in zip(r_idx.tolist(), c_idx.tolist())), np.float64, r_idx.size)
        jac[r_idx, c_idx] = vals.astype(np.float32)
        kept_vals = vals <= p.lexical_ceiling
    else:
        kept_vals = np.zeros(0, bool)
    kept = np.zeros((m, k), bool)
    kept[r_idx[kept_vals], c_idx[kept_vals]] = True
    mu, density = _contrast(kept, sims, floor, p)
    return DensityStats(rows, eligible, kept, jac, floor, mu, density)


def _contrast(kept: np.ndarray, sims: np.ndarray, floor: np.ndarray, p: RSGParams) -> tuple[np.ndarray, np.ndarray]:
    """μ_i and D_i (§4.3) from the retained neighbours ``kept`` ([m, k] bool), their similarities and
    b_i: the one formula behind :func:`density_statistics` and :func:`density_without`."""
    m = kept.shape[0]
    count = kept.sum(axis=1)
    # μ_i: mean of the first dense_core_count retained similarities, summed left to right in float32
    # exactly as np.mean does for so few values (bit-identical to the per-row definition)
    rank = np.cumsum(kept, axis=1)
    core_mask = kept & (rank <= p.dense_core_count)
    n_core = core_mask.sum(axis=1)
    core = np.zeros((m, p.dense_core_count), np.float32)
    cr, cc = np.nonzero(core_mask)
    core[cr, rank[cr, cc] - 1] = sims[cr, cc]
    core_sum = core[:, 0].copy()
    for j in range(1, p.dense_core_count):
        core_sum += core[:, j]
    mu = np.where(n_core > 0, core_sum / np.maximum(n_core, 1).astype(np.float32), floor).astype(np.float32)
    support = np.minimum(1.0, count / p.support_scale)
    b64 = floor.astype(np.float64)
    excess = (mu.astype(np.float64) - b64) / np.maximum(1e-6, 1.0 - b64)
    density = (support * np.clip(excess, 0.0, 1.0)).astype(np.float32)
    return mu, density


def density_without(audit: "RSGAudit", rows: Sequence[int], excluded: Sequence[int] = (),
                    mutual: int = 0) -> np.ndarray:
    """D_i of the corpus rows ``rows`` with the neighbours in ``excluded`` (corpus rows) not counted
    (b_i, the walk and the lexical ceiling as audited): fusion's ``density_scope="survivors"``
    (docs/algorithms.md §14.2). With ``mutual`` = m > 0, a neighbour j also counts only if i is among
    j's own first m neighbours (:func:`mutual_neighbours`): fusion's ``density_mutual``. With nothing
    excluded and ``mutual`` 0 it is the audited D_i exactly."""
    r = np.asarray(rows, np.int64)
    kept = audit.kept[r] & ~np.isin(audit.neighbour_ids[r], np.asarray(list(excluded), np.int64))
    if mutual > 0:
        kept &= mutual_neighbours(audit.neighbour_ids, r, int(mutual))
    return _contrast(kept, audit.neighbour_sims[r].astype(np.float32), audit.floor[r].astype(np.float32),
                     audit.params)[1]


def mutual_neighbours(neighbour_ids: np.ndarray, rows: np.ndarray, m: int) -> np.ndarray:
    """[len(rows), k] bool: neighbour j of row i names i among its own first ``m`` neighbours.

    Five poisons written for one question are one another's nearest passages in the corpus, so each is
    dense by the others'; a true passage on their topic is near them too, but none of them names it
    among its nearest (they name each other), so its density by their company is not mutual
    (docs/algorithms.md §14.2, "Mutual density")."""
    nb = np.asarray(neighbour_ids, np.int64)[rows]
    their = np.asarray(neighbour_ids, np.int64)[np.maximum(nb, 0), :m]       # [rows, k, m]
    return (nb >= 0) & (their == np.asarray(rows, np.int64)[:, None, None]).any(axis=2)


@dataclass
class CorpusDecision:
    """§4.5: the corpus tail, the shared budget and the flags."""

    tail_p: np.ndarray
    topology: np.ndarray
    score: np.ndarray
    flagged: np.ndarray
    f_I: float
    f_T: float


def corpus_decision(density: np.ndarray, integrity: np.ndarray, p: RSGParams) -> CorpusDecision:
    """The corpus tail p_i = #{D_j ≥ D_i}/(N+1), the budget f_T = max(0, α − f_I), T_i, score and
    flags (§4.5). Used by both engines on the full density vector."""
    n = density.size
    tail = corpus_upper_tail(density)
    f_I = float(np.mean(integrity >= 0.5))
    f_T = max(0.0, p.target_alert_fraction - f_I)
    topology = np.minimum(1.0, p.decision_threshold * f_T / tail) if f_T > 0 else np.zeros(n)
    score = np.maximum(topology, integrity.astype(np.float64))
    return CorpusDecision(tail, topology, score, score >= p.decision_threshold, f_I, f_T)


class ScriptFields(Sequence):
    """Per-document script profile fields (§4.4), stored as arrays: ``fields[i]`` is a dict."""

    def __init__(self, scripts: list[tuple[str, ...]], transitions: np.ndarray, mixed: np.ndarray,
                 rate: np.ndarray) -> None:
        self.scripts, self.transitions, self.mixed, self.rate = scripts, transitions, mixed, rate

    def __len__(self) -> int:
        return len(self.scripts)

    def __getitem__(self, i: Any) -> Any:
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        return {"scripts": list(self.scripts[i]), "transitions": int(self.transitions[i]),
                "mixed_fraction": float(self.mixed[i]), "transition_rate": float(self.rate[i])}


_PROFILES: "OrderedDict[tuple[str, int], Any]" = OrderedDict()
_PROFILES_SIZE = 20_000


def _script_profile(text: str, gate: int) -> Any:
    """``script_profile`` memoised per (text, gate) (bounded): every condition's snapshot of one
    ``sieve eval`` holds the same clean documents. The profile is read, never modified."""
    key = (text, gate)
    pr = _PROFILES.get(key)
    if pr is None:
        pr = _PROFILES[key] = script_profile(text, gate)
        if len(_PROFILES) > _PROFILES_SIZE:
            _PROFILES.popitem(last=False)
    return pr


def script_fields(texts: Sequence[str], gate: int) -> tuple[np.ndarray, ScriptFields]:
    """I_i and the script fields of every text (§4.4)."""
    n = len(texts)
    integrity = np.zeros(n, np.int8)
    trans = np.zeros(n, np.int32)
    mixed = np.zeros(n, np.float32)
    rate = np.zeros(n, np.float32)
    interned: dict[tuple[str, ...], tuple[str, ...]] = {}
    scripts: list[tuple[str, ...]] = []
    for i, t in enumerate(texts):
        pr = _script_profile(t, gate)
        key = tuple(pr.scripts)
        scripts.append(interned.setdefault(key, key))
        integrity[i], trans[i], mixed[i], rate[i] = pr.integrity, pr.transitions, pr.mixed_fraction, pr.transition_rate
    return integrity, ScriptFields(scripts, trans, mixed, rate)


class TokenSets:
    """ASCII token sets of a corpus, computed on first use (most documents never need theirs)."""

    def __init__(self, texts: Sequence[str]) -> None:
        self.texts = texts
        self.cache: dict[int, frozenset[str]] = {}

    def __call__(self, j: int) -> frozenset[str]:
        s = self.cache.get(j)
        if s is None:
            s = self.cache[j] = frozenset(ascii_tokens(self.texts[j]))
        return s


def audit_corpus(ids: Sequence[str], texts: Sequence[str], vectors: Any,
                 params: RSGParams | None = None, *, recall_sample: int | None = None,
                 **overrides: Any) -> RSGAudit:
    """Run RSG over a snapshot (§4). ``overrides`` replace fields of ``params`` (e.g. ``mode="ivf"``).

    Approximate modes measure neighbour recall@k against exact on ``recall_sample`` rows
    (default :data:`sieve.index.knn.RECALL_SAMPLE`; 0 skips it) and store it in ``audit.recall``."""
    from sieve.index.knn import knn_graph

    p = params or RSGParams()
    if overrides:
        p = RSGParams(**{**asdict(p), **overrides})
    ids = [str(i) for i in ids]
    texts = list(texts)
    x = _validate(ids, texts, vectors)
    knn = knn_graph(None, p.neighbor_count, p.mode, x=x, progress=p.progress, block=p.block_size,
                    **_plan_args(p))
    recall = _recall(x, knn.ids, knn.plan.mode, recall_sample)
    del x
    return assemble_audit(ids, texts, knn.ids, knn.sims, p, knn_plan=knn.plan.to_dict(), recall=recall)


_AUDIT_CACHE: "OrderedDict[tuple[Any, ...], RSGAudit]" = OrderedDict()
_AUDIT_CACHE_SIZE = 4


def _cached_audit(ids: list[str], texts: list[str], vectors: Any, p: RSGParams) -> RSGAudit:
    """:func:`audit_corpus` memoised by the snapshot's content (ids, texts, vector bytes) and the
    parameters: ``rsg``, ``rsg_rsq`` and fusion fit the same condition's snapshot one after the
    other in ``sieve eval``; the audit is deterministic, so they share one (callers do not modify it)."""
    from sieve.defenses.memo import snapshot_digest

    h = snapshot_digest(ids, texts)
    x = np.ascontiguousarray(np.asarray(vectors))
    h.update(repr((x.shape, x.dtype.str)).encode())
    h.update(x.tobytes())
    key = (h.digest(), repr(sorted(asdict(p).items())))
    hit = _AUDIT_CACHE.get(key)
    if hit is not None:
        _AUDIT_CACHE.move_to_end(key)
        return hit
    audit = audit_corpus(ids, texts, vectors, p)
    _AUDIT_CACHE[key] = audit
    if len(_AUDIT_CACHE) > _AUDIT_CACHE_SIZE:
        _AUDIT_CACHE.popitem(last=False)
    return audit


def _plan_args(p: RSGParams) -> dict[str, Any]:
    return {"nprobe": p.ivf_nprobe, "hnsw_m": p.hnsw_m, "ef_search": p.hnsw_ef_search}


def _recall(x: np.ndarray, nb_ids: np.ndarray, mode: str, sample: int | None) -> dict[str, Any] | None:
    from sieve.index.knn import RECALL_SAMPLE, sampled_recall

    if mode == "exact":
        return None
    sample = RECALL_SAMPLE if sample is None else sample
    return sampled_recall(x, nb_ids, sample=sample) if sample > 0 else None


def assemble_audit(ids: list[str], texts: list[str], nb_ids: np.ndarray, nb_sims: np.ndarray, p: RSGParams,
                   stats: DensityStats | None = None, *, knn_plan: dict[str, Any] | None = None,
                   recall: dict[str, Any] | None = None) -> RSGAudit:
    """Statistics (unless given, e.g. gathered from Ray batches), integrity and the corpus decision."""
    n = len(ids)
    if stats is None:
        stats = density_statistics(np.arange(n), nb_ids, nb_sims, TokenSets(texts), p)
    integrity, fields = script_fields(texts, p.multiscript_gate)
    dec = corpus_decision(stats.density, integrity, p)
    return RSGAudit(
        ids=ids, params=p, neighbour_ids=nb_ids, neighbour_sims=nb_sims, eligible=stats.eligible,
        kept=stats.kept, jaccard=stats.jaccard, floor=stats.floor, core_mean=stats.core_mean,
        density=stats.density, tail_p=dec.tail_p, integrity=integrity, topology=dec.topology,
        score=dec.score, flagged=dec.flagged, f_I=dec.f_I, f_T=dec.f_T, script_fields=fields,
        knn=knn_plan or {}, recall=recall,
    )


def neighbour_recall(exact: RSGAudit | np.ndarray, approx: RSGAudit | np.ndarray) -> float:
    """Mean over documents of |exact kNN ∩ approximate kNN| / |exact kNN| (ties count as misses)."""
    a = exact.neighbour_ids if isinstance(exact, RSGAudit) else np.asarray(exact)
    b = approx.neighbour_ids if isinstance(approx, RSGAudit) else np.asarray(approx)
    if a.shape[0] != b.shape[0]:
        raise ValueError(f"neighbour_recall: {a.shape[0]} vs {b.shape[0]} rows")
    total = 0.0
    for ra, rb in zip(a, b):
        sa = set(int(v) for v in ra if v >= 0)
        if sa:
            total += len(sa & set(int(v) for v in rb if v >= 0)) / len(sa)
        else:
            total += 1.0
    return total / a.shape[0]


def flag_overlap(a: RSGAudit | np.ndarray, b: RSGAudit | np.ndarray) -> float:
    """|flags(a) ∩ flags(b)| / |flags(a) ∪ flags(b)| (1.0 when neither flags anything)."""
    fa = a.flagged if isinstance(a, RSGAudit) else np.asarray(a, bool)
    fb = b.flagged if isinstance(b, RSGAudit) else np.asarray(b, bool)
    union = int((fa | fb).sum())
    return float((fa & fb).sum()) / union if union else 1.0


# ---------------------------------------------------------------------------------------------
def snapshot_free_score(evidence: dict[str, Any]) -> float:
    """max(D_i, I_i) of a document's audit row (:meth:`RSGRow.to_dict`): its density contrast or
    integrity alert, without the corpus-relative tail normalisation of the score.

    The score T_i = min(1, 0.5·f_T/p_i) sits at 0.5·f_T for every passage of ordinary density, and
    f_T = 0.05 − f_I moves with each snapshot's share of integrity alerts: compared with a null
    learned on the clean snapshot, every passage of an attacked snapshot looked like the clean tail
    (measured on msmarco-gold, docs/results/suite.md). D_i and I_i depend on a passage's own
    neighbours and text only, so a clean null of them holds on any snapshot. Fusion's ``rsg``
    evidence (docs/algorithms.md §14.2)."""
    return float(max(float(evidence["local_density_contrast"]), float(evidence["script_integrity_score"])))


RSG_DEFAULTS = RSGParams()


@DEFENSES.register
class RSG(Defense):
    """Corpus-time detector (docs/algorithms.md §4). ``fit`` audits the snapshot; ``score`` reads each
    document's audit score and ``decide`` removes the documents it flags (quarantine, §5) and marks documents outside the snapshot
    ``not_examined``. Parameters are the fields of :class:`RSGParams` (``mode``, ``progress`` …)."""

    name = "rsg"
    summary = "RAGSieve RSG: corpus-time kNN density audit + script integrity (quarantine flags)."
    paper = "RAGSieve RSG (docs/algorithms.md §4)"
    needs = ("retriever",)
    corpus_time = True

    # parameters (set by __init__ through Params; declared for type checkers)
    neighbor_count: int
    dense_core_count: int
    support_scale: float
    semantic_threshold: float
    lexical_ceiling: float
    multiscript_gate: int
    target_alert_fraction: float
    decision_threshold: float
    mode: str
    hnsw_m: int
    hnsw_ef_search: int
    ivf_nprobe: int
    block_size: int
    progress: bool

    def __init__(self, neighbor_count: int = RSG_DEFAULTS.neighbor_count,
                 dense_core_count: int = RSG_DEFAULTS.dense_core_count,
                 support_scale: float = RSG_DEFAULTS.support_scale,
                 semantic_threshold: float = RSG_DEFAULTS.semantic_threshold,
                 lexical_ceiling: float = RSG_DEFAULTS.lexical_ceiling,
                 multiscript_gate: int = RSG_DEFAULTS.multiscript_gate,
                 target_alert_fraction: float = RSG_DEFAULTS.target_alert_fraction,
                 decision_threshold: float = RSG_DEFAULTS.decision_threshold,
                 mode: str = RSG_DEFAULTS.mode, hnsw_m: int = RSG_DEFAULTS.hnsw_m,
                 hnsw_ef_search: int = RSG_DEFAULTS.hnsw_ef_search, ivf_nprobe: int = RSG_DEFAULTS.ivf_nprobe,
                 block_size: int = RSG_DEFAULTS.block_size, progress: bool = RSG_DEFAULTS.progress) -> None:
        super().__init__(neighbor_count=neighbor_count, dense_core_count=dense_core_count,
                         support_scale=support_scale, semantic_threshold=semantic_threshold,
                         lexical_ceiling=lexical_ceiling, multiscript_gate=multiscript_gate,
                         target_alert_fraction=target_alert_fraction, decision_threshold=decision_threshold,
                         mode=mode, hnsw_m=hnsw_m, hnsw_ef_search=hnsw_ef_search, ivf_nprobe=ivf_nprobe,
                         block_size=block_size, progress=progress)

    def current_thresholds(self) -> dict[str, float | None]:
        """η_G. Re-deciding at another η_G is approximate: T_i itself scales with η_G (§4.5)."""
        return {"threshold": float(self.decision_threshold)}

    def rsg_params(self) -> RSGParams:
        return RSGParams(**self.get_params())

    def fit(self, snapshot: Any, resources: "Resources | None" = None) -> "RSG":
        """Audit ``snapshot`` (``ids``, ``documents`` with ``.text``, ``vectors``) and store ``audit_``."""
        texts = [getattr(d, "text", d) for d in snapshot.documents]
        self.audit_ = _cached_audit(list(snapshot.ids), texts, snapshot.vectors, self.rsg_params())
        self.flagged_ids_ = set(self.audit_.flagged_ids)
        return self

    def score(self, ranking: Ranking, resources: "Resources | None" = None, k_ctx: int | None = K_CTX) -> Scores:
        """The audit's score of each document of ``ranking`` (documents outside the snapshot are
        ``not_examined``; before ``fit`` every document is ``unavailable``)."""
        audit: RSGAudit | None = getattr(self, "audit_", None)
        threshold = self.rsg_params().decision_threshold
        if audit is None:
            why = "RSG is corpus-time: call fit(snapshot) on the indexed corpus first"
            return Scores([Score(d.id, None, "unavailable", "RSG", threshold=threshold, note=why)
                           for d in ranking.documents], warnings=[f"rsg: not fitted; {why} (prepare_defense does)"])
        out = []
        for d in ranking.documents:
            if d.id not in audit:
                out.append(Score(d.id, None, "not_examined", "RSG", threshold=threshold,
                                 note="document not in the audited snapshot; refit RSG after corpus changes"))
                continue
            row = audit.row(d.id)
            out.append(Score(d.id, row.score, "scored", "RSG", row.to_dict()))
        return Scores(out)

    def summarize(self, scores: Scores, decisions: list[Decision]) -> dict[str, Any]:
        return {"flagged": [d.doc_id for d in decisions if d.removed]}

    def explain(self, s: Score, removed: bool, threshold: float | None) -> str:
        if not removed:
            return f"score {s.value:.3f} < {threshold:g}"
        branch = s.evidence.get("branch")
        return f"{DETECTOR_FLAG}{f' ({branch})' if branch else ''}: score {s.value:.3f} ≥ {threshold:g}"
