"""RSG — RAGSieve's corpus-time graph detector (docs/algorithms.md §4; RS:graph.py, integrity.py).

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

Approximate modes (``mode="hnsw"`` / ``"ivf"``) use FAISS IndexHNSWFlat / IndexIVFFlat for large
corpora; :func:`neighbour_recall` measures their neighbour recall against the exact graph.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np

from sieve.constants import K_CTX
from sieve.defenses.base import Defense
from sieve.defenses.scripts import ascii_tokens, script_profile
from sieve.defenses.stats import corpus_upper_tail
from sieve.registry import DEFENSES
from sieve.types import Decision, Inspection, Ranking

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
    mode: str = "exact"                 # "exact" | "hnsw" | "ivf"
    hnsw_m: int = 32
    hnsw_ef_search: int = 128
    ivf_nprobe: int = 16
    block_size: int = 512
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
        d = asdict(self)
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
    script_fields: list[dict[str, Any]] = field(default_factory=list)
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
        kept, dropped = [], []
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
    """Validation errors of §4, as clear ValueErrors."""
    arr = np.asarray(vectors)
    if arr.ndim != 2:
        raise ValueError(f"RSG: vectors must be a 2-D matrix, got shape {arr.shape}")
    if arr.shape[0] < 2:
        raise ValueError(f"RSG: needs at least 2 documents, got {arr.shape[0]}")
    if not np.issubdtype(arr.dtype, np.floating):
        raise ValueError(f"RSG: vectors must be a float matrix, got dtype {arr.dtype}")
    if len(texts) != arr.shape[0] or len(ids) != arr.shape[0]:
        raise ValueError(f"RSG: length mismatch: {len(ids)} ids, {len(texts)} texts, {arr.shape[0]} vectors")
    x = arr.astype(np.float32, copy=True)
    if not np.all(np.isfinite(x)):
        bad = int(np.flatnonzero(~np.isfinite(x).all(axis=1))[0])
        raise ValueError(f"RSG: non-finite values in the vector of document {ids[bad]!r} (row {bad})")
    norms = np.linalg.norm(x, axis=1)
    if np.any(norms == 0):
        bad = int(np.flatnonzero(norms == 0)[0])
        raise ValueError(f"RSG: zero vector for document {ids[bad]!r} (row {bad})")
    x /= norms[:, None]
    return x


def _knn(x: np.ndarray, k: int, p: RSGParams) -> tuple[np.ndarray, np.ndarray]:
    """Top-k other documents per row (self masked), sorted by similarity descending."""
    import faiss

    n, d = x.shape
    mode = p.mode
    if mode == "exact":
        index = faiss.IndexFlatIP(d)
    elif mode == "hnsw":
        index = faiss.IndexHNSWFlat(d, p.hnsw_m, faiss.METRIC_INNER_PRODUCT)
        index.hnsw.efConstruction = max(40, p.hnsw_ef_search)
        index.hnsw.efSearch = max(p.hnsw_ef_search, k + 1)
    elif mode == "ivf":
        nlist = max(1, min(int(4 * math.sqrt(n)), n // 39 or 1))
        quantizer = faiss.IndexFlatIP(d)
        index = faiss.IndexIVFFlat(quantizer, d, nlist, faiss.METRIC_INNER_PRODUCT)
        rng = np.random.default_rng(0)
        sample = x if n <= 256 * nlist else x[rng.choice(n, 256 * nlist, replace=False)]
        index.train(sample)
        index.nprobe = min(nlist, p.ivf_nprobe)
    else:
        raise ValueError(f"RSG: unknown mode {mode!r}; use 'exact', 'hnsw' or 'ivf'")
    index.add(x)
    nb_ids = np.full((n, k), -1, np.int64)
    nb_sims = np.full((n, k), -np.inf, np.float32)
    blocks = range(0, n, p.block_size)
    if p.progress:
        from tqdm import tqdm

        blocks = tqdm(blocks, total=math.ceil(n / p.block_size), desc=f"RSG kNN ({mode})", unit="block")
    for start in blocks:
        stop = min(n, start + p.block_size)
        sims, idx = index.search(x[start:stop], k + 1)
        for r in range(stop - start):
            i = start + r
            ids_r, sims_r = idx[r], sims[r]
            keep = (ids_r != i) & (ids_r >= 0)
            ids_r, sims_r = ids_r[keep][:k], sims_r[keep][:k]
            order = np.argsort(-sims_r, kind="stable")
            nb_ids[i, : ids_r.size] = ids_r[order]
            nb_sims[i, : ids_r.size] = sims_r[order]
    return nb_ids, nb_sims


def _jaccard(a: frozenset[str], b: frozenset[str]) -> float:
    union = len(a | b)
    return len(a & b) / union if union else 0.0


def audit_corpus(ids: Sequence[str], texts: Sequence[str], vectors: Any,
                 params: RSGParams | None = None, **overrides: Any) -> RSGAudit:
    """Run RSG over a snapshot (§4). ``overrides`` replace fields of ``params`` (e.g. ``mode="hnsw"``)."""
    p = params or RSGParams()
    if overrides:
        p = RSGParams(**{**asdict(p), **overrides})
    ids = [str(i) for i in ids]
    texts = list(texts)
    x = _validate(ids, texts, vectors)
    n = x.shape[0]
    k = min(p.neighbor_count, n - 1)
    nb_ids, nb_sims = _knn(x, k, p)
    token_sets = [frozenset(ascii_tokens(t)) for t in texts]

    eligible = np.zeros((n, k), bool)
    kept = np.zeros((n, k), bool)
    jac = np.full((n, k), np.nan, np.float32)
    floor = np.zeros(n, np.float32)
    core = np.zeros(n, np.float32)
    density = np.zeros(n, np.float32)
    below = nb_sims < np.float32(p.semantic_threshold)
    for i in range(n):
        valid = nb_ids[i] >= 0
        last = int(np.flatnonzero(valid)[-1]) if valid.any() else None
        b = np.float32(nb_sims[i, last]) if last is not None else np.float32(0.0)
        floor[i] = b
        stop = int(np.argmax(below[i])) if below[i].any() else k     # first sim < threshold
        retained: list[np.float32] = []
        for j in range(stop):
            if nb_ids[i, j] < 0:
                break
            eligible[i, j] = True
            jv = _jaccard(token_sets[i], token_sets[int(nb_ids[i, j])])
            jac[i, j] = jv
            if jv <= p.lexical_ceiling:
                kept[i, j] = True
                retained.append(nb_sims[i, j])
        support = min(1.0, len(retained) / p.support_scale)
        mu = np.float32(np.mean(np.asarray(retained[: p.dense_core_count], np.float32))) if retained else b
        core[i] = mu
        excess = (float(mu) - float(b)) / max(1e-6, 1.0 - float(b))
        density[i] = np.float32(support * min(1.0, max(0.0, excess)))

    profiles = [script_profile(t, p.multiscript_gate) for t in texts]
    integrity = np.array([pr.integrity for pr in profiles], np.int8)
    tail = corpus_upper_tail(density)
    f_I = float(np.mean(integrity >= 0.5))
    f_T = max(0.0, p.target_alert_fraction - f_I)
    topology = np.minimum(1.0, p.decision_threshold * f_T / tail) if f_T > 0 else np.zeros(n)
    score = np.maximum(topology, integrity.astype(np.float64))
    flagged = score >= p.decision_threshold
    return RSGAudit(
        ids=ids, params=p, neighbour_ids=nb_ids, neighbour_sims=nb_sims, eligible=eligible, kept=kept,
        jaccard=jac, floor=floor, core_mean=core, density=density, tail_p=tail, integrity=integrity,
        topology=topology, score=score, flagged=flagged, f_I=f_I, f_T=f_T,
        script_fields=[{"scripts": pr.scripts, "transitions": pr.transitions,
                        "mixed_fraction": pr.mixed_fraction, "transition_rate": pr.transition_rate}
                       for pr in profiles],
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


# ---------------------------------------------------------------------------------------------
RSG_DEFAULTS = RSGParams()


@DEFENSES.register
class RSG(Defense):
    """Corpus-time detector (docs/algorithms.md §4). ``fit`` audits the snapshot; ``inspect`` removes the
    documents the audit flagged (quarantine, §5) and marks documents outside the snapshot
    ``not_examined``. Parameters are the fields of :class:`RSGParams` (``mode``, ``progress`` …)."""

    name = "rsg"
    summary = "RAGSieve RSG: corpus-time kNN density audit + script integrity (quarantine flags)."
    paper = "RAGSieve RSG (docs/algorithms.md §4)"
    needs = ("retriever",)
    corpus_time = True

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
        self.audit_ = audit_corpus(list(snapshot.ids), texts, snapshot.vectors, self.rsg_params())
        self.flagged_ids_ = set(self.audit_.flagged_ids)
        return self

    def decisions_for(self, ranking: Ranking) -> list[Decision]:
        audit: RSGAudit | None = getattr(self, "audit_", None)
        threshold = self.rsg_params().decision_threshold
        if audit is None:
            return [Decision(d.id, False, "unavailable", threshold=threshold, layer="RSG",
                             reason="RSG is corpus-time: call fit(snapshot) on the indexed corpus first")
                    for d in ranking.documents]
        out = []
        for d in ranking.documents:
            if d.id not in audit:
                out.append(Decision(d.id, False, "not_examined", threshold=threshold, layer="RSG",
                                    reason="document not in the audited snapshot; refit RSG after corpus changes"))
                continue
            row = audit.row(d.id)
            reason = (f"quarantined ({row.branch}): score {row.score:.3f} ≥ {threshold:g}" if row.flagged
                      else f"score {row.score:.3f} < {threshold:g}")
            out.append(Decision(d.id, row.flagged, "scored", score=row.score, threshold=threshold,
                                evidence=row.to_dict(), reason=reason, layer="RSG"))
        return out

    def inspect(self, ranking: Ranking, resources: "Resources", k_ctx: int | None = K_CTX) -> Inspection:
        return Inspection(self.decisions_for(ranking))
