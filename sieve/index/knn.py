"""kNN self-join of a corpus for RSG (docs/algorithms.md §4.1): exact, IVF or HNSW, parameters chosen
from the corpus size, and neighbour recall@k measured on a sample against exact.

Every document's ``k`` most similar *other* documents (inner product of unit vectors, self masked,
sorted by similarity descending, ties broken by row index). Vectors may be float16 memory maps
(sieve/scale/shards.py); they are converted to float32 and re-normalised block by block, so the
corpus is never held twice in float32.

Modes (:func:`plan_knn` picks one for ``mode="auto"``):

* ``exact`` — FAISS ``IndexFlatIP``, blocked queries (BLAS). O(N²·d), so auto uses it only up to
  ``EXACT_MAX`` documents (throughput at 100k: docs/results/scale.md).
* ``ivf`` — an IVF-Flat self-join with redundant assignment. FAISS k-means trains ``nlist``
  centroids on a sample (the coarse quantizer); a FAISS flat search over the centroids gives every
  document its ``nprobe`` nearest lists. A document is a *query* of its nearest list and is *posted*
  in all ``nprobe`` of them (the "spilling" of SPANN/ScaNN; the mirror image of IVF probing: a
  neighbour y of q is found when q's list is among y's nearest lists instead of the other way
  round). Each list is then one matrix product, queries × postings, at BLAS speed instead of one
  query at a time; the cost per document is the same nprobe·N/nlist·d as an ``IndexIVFFlat``
  scan. Lists are independent: the Ray engine shards them over actors (sieve/scale/ray_engine.py).
* ``hnsw`` — FAISS ``IndexHNSWFlat``. Kept for comparison; building the graph costs about as much as
  searching it, which makes it slower than ``ivf`` for a self-join of the whole corpus on 2 cores.
"""
from __future__ import annotations

import math
import os
from dataclasses import asdict, dataclass
from typing import Any, Callable, Iterable, Iterator

import numpy as np

KNN_MODES = ("exact", "ivf", "hnsw", "auto")

#: auto mode: exact up to this many documents. 20k² × 384 ≈ 1.5·10¹¹ multiply-adds, a few seconds
#: of BLAS on 2 cores; past it the quadratic cost dominates the audit.
EXACT_MAX = 20_000
#: IVF lists: nlist = sqrt(nprobe · N) (clipped to [IVF_MIN_LISTS, IVF_MAX_LISTS]). The coarse
#: assignment costs N·nlist·d and the join N·nprobe·(N/nlist)·d; their sum is smallest when the two
#: are equal, i.e. at nlist = sqrt(nprobe·N) (≈ 630 lists at 100k, 2,450 at 1M).
IVF_MIN_LISTS = 16
IVF_MAX_LISTS = 8192
#: lists each document is posted in. Neighbourhoods of retriever embeddings sit inside one topic;
#: 4 gave recall@16 0.990 and 8 gave 0.994 on the 100k clustered synthetic corpus
#: (sieve/scale/synthetic.py; docs/results/scale.md); 6 keeps a margin for less clustered corpora.
IVF_NPROBE = 6
#: k-means training: FAISS's k-means needs ≥ 39 points per centroid to be stable (it warns below);
#: 40 is enough for a partition that only prunes candidates (recall is measured, not assumed);
#: 10 iterations: the assignment barely moves after that.
IVF_TRAIN_PER_LIST = 40
IVF_TRAIN_ITER = 10
#: HNSW: M = 32 links per node and efSearch = 128 (≥ 8·k) are FAISS's recommended range for ≥ 0.95
#: recall at k = 16 on 384-d embeddings; efConstruction = 64 halves the build time of 128 with
#: little loss.
HNSW_M = 32
HNSW_EF_SEARCH = 128
HNSW_EF_CONSTRUCTION = 64
#: rows per query block (memory: block × N floats for exact; bounded per list for ivf).
BLOCK = 1024
#: exact blocks are also capped by memory: each (query, candidate) pair costs 16 bytes (float32
#: similarity, its negation and argpartition's int64 index in ``_top_k``), so a block holds at most
#: this budget ÷ (16·N) rows — 1,024 rows up to N ≈ 32k, 33 rows at 1M. Without the cap the
#: 1,000-row recall sample alone needs 1,000 × N × 16 bytes, 16 GB at 1M (docs/results/scale.md).
EXACT_BLOCK_BYTES = 512 << 20
#: sample of rows on which recall@k against exact is measured with every approximate audit:
#: 1,000 rows give the mean recall ± 0.01 (95 %) when per-row recall has s.d. ≤ 0.15.
RECALL_SAMPLE = 1000
SEED = 0


@dataclass(frozen=True)
class KnnPlan:
    """The search and its parameters, with why they were chosen."""

    mode: str
    n: int
    k: int
    nlist: int = 0
    nprobe: int = 0
    train_size: int = 0
    hnsw_m: int = 0
    ef_search: int = 0
    ef_construction: int = 0
    why: str = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def plan_knn(n: int, k: int = 16, mode: str = "auto", *, nprobe: int | None = None, nlist: int | None = None,
             hnsw_m: int | None = None, ef_search: int | None = None) -> KnnPlan:
    """Choose the search for ``n`` documents (module constants explain each number)."""
    if mode not in KNN_MODES:
        raise ValueError(f"unknown kNN mode {mode!r}; use one of {', '.join(KNN_MODES)}")
    if n < 2:
        raise ValueError(f"kNN needs at least 2 documents, got {n}")
    k = min(k, n - 1)
    if mode == "auto":
        mode = "exact" if n <= EXACT_MAX else "ivf"
        why = f"auto: {'exact' if mode == 'exact' else 'ivf'} ({n} documents, exact up to {EXACT_MAX})"
    else:
        why = f"{mode} requested"
    if mode == "exact":
        return KnnPlan("exact", n, k, why=why)
    if mode == "ivf":
        probes = nprobe or IVF_NPROBE
        lists = nlist or int(min(IVF_MAX_LISTS, max(IVF_MIN_LISTS, round(math.sqrt(probes * n)))))
        lists = max(1, min(lists, n // 2))
        probes = max(1, min(lists, probes))
        return KnnPlan("ivf", n, k, nlist=lists, nprobe=probes, train_size=min(n, IVF_TRAIN_PER_LIST * lists),
                       why=why + f"; nlist {lists} = sqrt(nprobe·N), nprobe {probes}")
    m = hnsw_m or HNSW_M
    ef = max(ef_search or HNSW_EF_SEARCH, k + 1)
    return KnnPlan("hnsw", n, k, hnsw_m=m, ef_search=ef, ef_construction=max(HNSW_EF_CONSTRUCTION, ef // 2),
                   why=why)


# ---------------------------------------------------------------------------------------------
def unit_rows(vectors: Any, start: int = 0, stop: int | None = None) -> np.ndarray:
    """Rows [start, stop) as contiguous float32 unit vectors (works on float16 memory maps)."""
    x = np.asarray(vectors[start:stop], dtype=np.float32)
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    return np.ascontiguousarray(x / norms)


def unit_matrix(vectors: Any, block: int = 65_536) -> np.ndarray:
    """All rows as one float32 unit matrix, converted block by block."""
    n = len(vectors)
    out = np.empty((n, np.asarray(vectors[:1]).shape[1]), np.float32)
    for s in range(0, n, block):
        out[s: s + block] = unit_rows(vectors, s, s + block)
    return out


def _top_k(sims: np.ndarray, cand: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Per row: the k best (similarity desc, candidate row asc). ``cand`` are the column row ids."""
    m = sims.shape[1]
    kk = min(k, m)
    if kk < m:
        part = np.argpartition(-sims, kk - 1, axis=1)[:, :kk]
    else:
        part = np.broadcast_to(np.arange(m), sims.shape).copy()
    s = np.take_along_axis(sims, part, axis=1)
    ids = cand[part]
    order = np.lexsort((ids, -s), axis=1) if s.size else np.zeros_like(ids)
    s = np.take_along_axis(s, order, axis=1)
    ids = np.take_along_axis(ids, order, axis=1)
    out_i = np.full((sims.shape[0], k), -1, np.int64)
    out_s = np.full((sims.shape[0], k), -np.inf, np.float32)
    out_i[:, :kk], out_s[:, :kk] = ids, s
    out_i[~np.isfinite(out_s)] = -1
    return out_i, out_s


def exact_rows(x: np.ndarray, rows: np.ndarray, k: int, block: int = BLOCK) -> tuple[np.ndarray, np.ndarray]:
    """Exact kNN (self masked) for ``rows`` of the unit matrix ``x`` by blocked matrix products."""
    rows = np.asarray(rows, np.int64)
    cand = np.arange(x.shape[0], dtype=np.int64)
    block = max(1, min(block, EXACT_BLOCK_BYTES // (16 * max(1, x.shape[0]))))
    out_i = np.empty((rows.size, k), np.int64)
    out_s = np.empty((rows.size, k), np.float32)
    for s in range(0, rows.size, block):
        r = rows[s: s + block]
        sims = x[r] @ x.T
        sims[np.arange(r.size), r] = -np.inf
        out_i[s: s + block], out_s[s: s + block] = _top_k(sims, cand, k)
    return out_i, out_s


# ---------------------------------------------------------------------------------------------
@dataclass
class IvfPartition:
    """The trained global IVF index of a corpus: centroids, each document's list, and the posting
    lists with redundant assignment (every document is posted in its ``nprobe`` nearest lists)."""

    centroids: np.ndarray     # [nlist, d] float32
    assign: np.ndarray        # [N] int32: the nearest list of each document (where it is a query)
    order: np.ndarray         # [N] int64: rows sorted by their nearest list
    offsets: np.ndarray       # [nlist + 1] int64: members of list c are order[offsets[c]:offsets[c+1]]
    postings: np.ndarray      # [N·nprobe] int64: rows posted in list c are postings[poff[c]:poff[c+1]]
    poff: np.ndarray          # [nlist + 1] int64

    @property
    def nlist(self) -> int:
        return int(self.centroids.shape[0])

    def members(self, c: int) -> np.ndarray:
        """Documents whose nearest list is ``c`` (the queries of list ``c``), ascending."""
        return self.order[self.offsets[c]: self.offsets[c + 1]]

    def candidates(self, c: int) -> np.ndarray:
        """Documents posted in list ``c`` (``c`` is one of their ``nprobe`` nearest lists), ascending."""
        return self.postings[self.poff[c]: self.poff[c + 1]]

    def balanced_order(self) -> np.ndarray:
        """Lists by decreasing join cost (members × postings): the order in which a pool of workers
        takes them so the largest lists do not finish last."""
        cost = np.diff(self.offsets) * np.diff(self.poff)
        return np.argsort(-cost, kind="stable")


def train_ivf(x: np.ndarray, plan: KnnPlan) -> IvfPartition:
    """Train the coarse quantizer (FAISS k-means on a seeded sample) and assign every document."""
    import faiss

    n, d = x.shape
    rng = np.random.default_rng(SEED)
    sample = x if plan.train_size >= n else x[np.sort(rng.choice(n, plan.train_size, replace=False))]
    km = faiss.Kmeans(d, plan.nlist, niter=IVF_TRAIN_ITER, seed=SEED, spherical=True,
                      max_points_per_centroid=IVF_TRAIN_PER_LIST, min_points_per_centroid=1, verbose=False)
    km.train(np.ascontiguousarray(sample))
    centroids = np.ascontiguousarray(km.centroids, dtype=np.float32)
    quant = faiss.IndexFlatIP(d)
    quant.add(centroids)
    probes = np.empty((n, plan.nprobe), np.int32)
    for s in range(0, n, 65_536):
        _, p = quant.search(x[s: s + 65_536], plan.nprobe)
        probes[s: s + 65_536] = p
    assign = probes[:, 0].copy()
    order = np.argsort(assign, kind="stable").astype(np.int64)
    offsets = np.zeros(plan.nlist + 1, np.int64)
    np.cumsum(np.bincount(assign, minlength=plan.nlist), out=offsets[1:])
    flat = probes.ravel()
    porder = np.argsort(flat, kind="stable")            # stable: rows ascending inside each list
    postings = (porder // plan.nprobe).astype(np.int64)
    poff = np.zeros(plan.nlist + 1, np.int64)
    np.cumsum(np.bincount(flat, minlength=plan.nlist), out=poff[1:])
    return IvfPartition(centroids, assign, order, offsets, postings, poff)


def ivf_lists(x: np.ndarray, part: IvfPartition, lists: Iterable[int], k: int, workers: int | None = None
              ) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """For each list: (member rows, neighbour ids [m, k], similarities [m, k]) — the per-list join.

    The per-list products are small (hundreds × thousands), where a multi-threaded BLAS spends more
    time synchronising than computing (3× slower on the shared 2-core box); each product therefore
    runs single-threaded, with ``workers`` lists in flight at once (default: the CPU count). This
    also makes every product's summation order independent of the engine (local or a Ray actor)."""
    from concurrent.futures import ThreadPoolExecutor

    from threadpoolctl import threadpool_limits

    def join(c: int) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
        mem = part.members(c)
        if mem.size == 0:
            return None
        cand = part.candidates(c)
        sims = x[mem] @ x[cand].T
        # mask self: every member is posted in its own nearest list
        pos = np.searchsorted(cand, mem)
        ok = (pos < cand.size) & (cand[np.minimum(pos, cand.size - 1)] == mem)
        sims[np.flatnonzero(ok), pos[ok]] = -np.inf
        ids, s = _top_k(sims, cand, k)
        return mem, ids, s

    with threadpool_limits(1, user_api="blas"), ThreadPoolExecutor(workers or os.cpu_count() or 1) as pool:
        for out in pool.map(join, [int(c) for c in lists]):
            if out is not None:
                yield out


# ---------------------------------------------------------------------------------------------
@dataclass
class KnnResult:
    ids: np.ndarray           # [N, k] int64 (−1 = missing)
    sims: np.ndarray          # [N, k] float32 descending
    plan: KnnPlan
    partition: IvfPartition | None = None


def knn_graph(vectors: Any, k: int = 16, mode: str = "auto", *, plan: KnnPlan | None = None,
              progress: bool = False, x: np.ndarray | None = None, block: int = BLOCK,
              **plan_args: Any) -> KnnResult:
    """Every document's k nearest other documents. ``vectors`` may be a float16 memory map;
    pass ``x`` (float32 unit rows) when the caller already has it."""
    n = len(vectors) if x is None else x.shape[0]
    plan = plan or plan_knn(n, k, mode, **plan_args)
    k = plan.k
    if x is None:
        x = unit_matrix(vectors)
    nb_i = np.full((n, k), -1, np.int64)
    nb_s = np.full((n, k), -np.inf, np.float32)
    bar = _bar(progress, n, f"kNN ({plan.mode})")
    part = None
    if plan.mode == "exact":
        for s in range(0, n, block):
            rows = np.arange(s, min(n, s + block))
            nb_i[rows], nb_s[rows] = exact_rows(x, rows, k, block)
            bar(rows.size)
    elif plan.mode == "ivf":
        part = train_ivf(x, plan)
        for mem, ids, sims in ivf_lists(x, part, range(plan.nlist), k):
            nb_i[mem], nb_s[mem] = ids, sims
            bar(mem.size)
    else:
        index = build_hnsw(x, plan)
        for s in range(0, n, block):
            rows = np.arange(s, min(n, s + block))
            nb_i[rows], nb_s[rows] = hnsw_rows(index, x, rows, k)
            bar(rows.size)
    bar(0, close=True)
    return KnnResult(nb_i, nb_s, plan, part)


def build_hnsw(x: np.ndarray, plan: KnnPlan) -> Any:
    import faiss

    index = faiss.IndexHNSWFlat(x.shape[1], plan.hnsw_m, faiss.METRIC_INNER_PRODUCT)
    index.hnsw.efConstruction = plan.ef_construction
    index.hnsw.efSearch = plan.ef_search
    index.add(x)
    return index


def hnsw_rows(index: Any, x: np.ndarray, rows: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """HNSW search for ``rows`` (self masked, similarity desc, row asc)."""
    sims, idx = index.search(x[rows], k + 1)
    sims = np.where((idx == rows[:, None]) | (idx < 0), -np.inf, sims).astype(np.float32)
    order = np.lexsort((np.where(idx < 0, np.iinfo(np.int64).max, idx), -sims), axis=1)[:, :k]
    out_s = np.take_along_axis(sims, order, axis=1)
    out_i = np.where(np.isfinite(out_s), np.take_along_axis(idx, order, axis=1), -1).astype(np.int64)
    return out_i, out_s


def sampled_recall(x: np.ndarray, nb_ids: np.ndarray, k: int | None = None, sample: int = RECALL_SAMPLE,
                   seed: int = SEED) -> dict[str, Any]:
    """Neighbour recall@k of ``nb_ids`` against exact kNN on a seeded sample of rows:
    mean |approx ∩ exact| / |exact| with a 95 % normal interval, n = sample size."""
    n = x.shape[0]
    k = k or nb_ids.shape[1]
    rows = np.sort(np.random.default_rng(seed).choice(n, min(sample, n), replace=False))
    ex, _ = exact_rows(x, rows, k)
    per = np.array([len(set(a[a >= 0].tolist()) & set(b[b >= 0].tolist())) / max(1, int((a >= 0).sum()))
                    for a, b in zip(ex, nb_ids[rows, :k])])
    half = 1.96 * float(per.std(ddof=1)) / math.sqrt(per.size) if per.size > 1 else 0.0
    return {"recall": float(per.mean()), "ci95": [max(0.0, float(per.mean()) - half), min(1.0, float(per.mean()) + half)],
            "n": int(per.size), "k": int(k)}


def _bar(enabled: bool, total: int, desc: str) -> Callable[..., None]:
    if not enabled:
        return lambda step, close=False: None
    from tqdm import tqdm

    bar = tqdm(total=total, desc=desc, unit="doc", unit_scale=True, smoothing=0.1)

    def step(m: int, close: bool = False) -> None:
        bar.update(m)
        if close:
            bar.close()
    return step
