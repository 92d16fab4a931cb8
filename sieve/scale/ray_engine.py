"""RSG as a Ray Data pipeline (``sieve audit --engine ray``). Optional extra ``sieve[ray]``.

Layout (the same audit as the local engine, docs/algorithms.md §4):

0. stage ``embed`` (only when the input has texts but no vectors: ``sieve audit --corpus``) —
   ``map_batches`` over the texts on a pool of ``EmbedActor`` actors, one retriever model per actor
   (loaded once in the actor's constructor from a picklable factory), ``EMBED_BATCH_RAY`` texts per
   call, encoded by the same function as the local engine (sieve/index/embedding.py:
   ``embed_documents``). The driver feeds the corpus in windows of ``EMBED_WINDOW_CHUNKS`` shard
   chunks, gathers the vectors by row and hands each chunk, as soon as all its rows are back, to
   the float16 shard writer of sieve/scale/shards.py (so a killed run resumes from the last verified
   shard); the knn stage then reads the same float16 vectors as the local engine.
1. driver — validate and normalise the vectors (float32 unit rows), choose the kNN plan
   (sieve/index/knn.py) and, for ``ivf``, train the ONE global IVF partition (FAISS k-means + the
   posting lists); put the vectors, the partition and the texts in the Ray object store once.
2. stage ``knn`` — ``map_batches`` over work units on a pool of ``KnnActor`` actors (one per CPU
   unless ``actors`` is given). A unit is one IVF list (``ivf``: the list's members joined against
   its postings — the lists are the shards of the global index) or one block of ``BLOCK`` rows
   (``exact``/``hnsw``); ``batch_size`` units per call. Output: rows, neighbour ids, similarities.
3. stage ``density`` — ``map_batches`` on ``DensityActor`` actors holding the texts: the per-document
   statistics with :func:`sieve.defenses.rsg.density_statistics`, the same function as the local
   engine.
4. driver — gather the batches by row and finish with :func:`sieve.defenses.rsg.assemble_audit`
   (script integrity + :func:`sieve.defenses.rsg.corpus_decision`: corpus tail and flags).

Given the same vectors and plan, the neighbour lists are computed by the same functions on the same
partition, so the flags equal the local engine's (tests/scale/test_ray_engine.py checks it).

Ray is started by :func:`ray_session` when no cluster address is given (``num_cpus`` = the machine's
cores, no dashboard) and shut down afterwards; with ``address`` an existing cluster is used and left
running.
"""
from __future__ import annotations

import logging
import os
import time
from contextlib import contextmanager
from dataclasses import asdict
from typing import Any, Callable, Iterable, Iterator, Sequence

import numpy as np

from sieve.defenses.rsg import (
    DensityStats,
    RSGAudit,
    RSGParams,
    TokenSets,
    _plan_args,
    _recall,
    _validate,
    assemble_audit,
    density_statistics,
)
from sieve.index.knn import BLOCK, exact_rows, ivf_lists, plan_knn, train_ivf

#: IVF lists per knn batch: with ~400-document lists a batch is ~10⁵ query×candidate products per
#: member — long enough (≥ 0.1 s) that Ray's per-task overhead stays small, short enough for balance.
LISTS_PER_BATCH = 16
#: rows per density batch (the statistic is O(k) per row; 4,096 rows ≈ 10 ms of numpy).
DENSITY_BATCH = 4096
#: texts per embedding call on an actor: 256, as many as one encode call of the local indexing path
#: (sieve/index/embedding.py: EMBED_BATCH). On a CPU, MiniLM takes ~1 s per 256 passages, so
#: Ray's per-batch cost (~ms) is < 1 %, while a window of 4 × 8,192 texts still splits into 128
#: batches — enough for the actors to stay evenly busy and for the last batch not to dominate.
EMBED_BATCH_RAY = 256
#: shard chunks (sieve/scale/shards.py: CHUNK_ROWS rows each) per Ray dataset: bounds the driver's
#: memory to one window of texts and vectors, and a kill loses at most one window of work. The
#: actors are started once per window (one model load each; seconds against minutes of encoding).
EMBED_WINDOW_CHUNKS = 4


class RayUnavailable(RuntimeError):
    pass


def _ray() -> Any:
    try:
        import ray
    except ImportError:
        raise RayUnavailable("the Ray engine needs the optional extra: pip install 'sieve[ray]'") from None
    return ray


@contextmanager
def ray_session(address: str | None = None, num_cpus: int | None = None) -> Iterator[Any]:
    """A Ray runtime: connect to ``address`` or start a local instance and stop it afterwards."""
    ray = _ray()
    started = False
    if not ray.is_initialized():
        if address:
            ray.init(address=address, log_to_driver=False)
        else:
            ray.init(num_cpus=num_cpus or os.cpu_count() or 1, include_dashboard=False, log_to_driver=False,
                     configure_logging=False)
            started = True
    try:
        ctx = ray.data.DataContext.get_current()
        ctx.enable_progress_bars = False
        # Ray Data logs every dataset's start and end at INFO on the terminal; the audit prints its own
        # progress and the stage timings (layout["seconds"]), so only warnings get through
        logging.getLogger("ray.data").setLevel(logging.WARNING)
        yield ray
    finally:
        if started:
            ray.shutdown()


class EmbedActor:
    """One retriever model per actor: ``factory()`` is called once in the constructor."""

    def __init__(self, factory: Callable[[], Any]) -> None:
        self.model = factory()

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        from sieve.index.embedding import embed_documents
        from sieve.types import Document

        docs = [Document(str(i), str(t)) for i, t in zip(batch["row"].tolist(), batch["text"].tolist())]
        vec = embed_documents(docs, self.model, None, False, "embedding")
        return {"row": batch["row"], "vector": np.asarray(vec, np.float32)}


def ray_embed_chunks(chunks: Iterable[tuple[list[str], list[str]]], factory: Callable[[], Any], *,
                     actors: int | None = None, window_chunks: int = EMBED_WINDOW_CHUNKS,
                     stats: dict[str, Any] | None = None) -> Iterator[np.ndarray]:
    """The embedding stage: yields one float32 [rows, dim] matrix per (ids, texts) chunk, in order.
    Needs a running Ray runtime (:func:`ray_session`). ``stats`` collects the stage's layout."""
    ray = _ray()
    pool = max(1, actors or int(ray.cluster_resources().get("CPU", 1)))
    if stats is not None:
        stats.update({"name": "embed", "actor": "EmbedActor", "actors": pool, "batch_size": EMBED_BATCH_RAY,
                      "window_chunks": window_chunks, "windows": 0, "rows": 0, "seconds": 0.0})
    window: list[tuple[list[str], list[str]]] = []

    def run(win: list[tuple[list[str], list[str]]]) -> Iterator[np.ndarray]:
        t = time.perf_counter()
        texts = [tx for _, chunk in win for tx in chunk]
        m = len(texts)
        ds = ray.data.from_items([{"row": i, "text": tx} for i, tx in enumerate(texts)],
                                 override_num_blocks=max(1, min(4 * pool, (m + EMBED_BATCH_RAY - 1) // EMBED_BATCH_RAY)))
        ds = ds.map_batches(EmbedActor, fn_constructor_kwargs={"factory": factory}, batch_size=EMBED_BATCH_RAY,
                            batch_format="numpy", num_cpus=1, compute=ray.data.ActorPoolStrategy(size=pool))
        bounds = np.cumsum([0] + [len(chunk) for _, chunk in win])
        out: np.ndarray | None = None
        seen = np.zeros(m, bool)
        nxt = 0                                    # the next chunk to hand over (in order)
        for b in ds.iter_batches(batch_size=None, batch_format="numpy"):
            r = b["row"].astype(np.int64)
            if out is None:
                out = np.empty((m, b["vector"].shape[1]), np.float32)
            if seen[r].any():
                raise RuntimeError("Ray engine: a text was embedded twice")
            seen[r] = True
            out[r] = b["vector"]
            # a chunk is handed to the shard writer as soon as all its rows are back: the progress
            # bar and the resumable shards advance chunk by chunk, not window by window
            while nxt < len(win) and seen[bounds[nxt]: bounds[nxt + 1]].all():
                yield out[bounds[nxt]: bounds[nxt + 1]]
                nxt += 1
        if out is None or not seen.all() or nxt != len(win):
            raise RuntimeError("Ray engine: texts missing from the embedding stage's output")
        if stats is not None:
            stats["windows"] += 1
            stats["rows"] += m
            stats["seconds"] = round(stats["seconds"] + time.perf_counter() - t, 3)

    for ch in chunks:
        window.append(ch)
        if len(window) >= window_chunks:
            yield from run(window)
            window = []
    if window:
        yield from run(window)


class KnnActor:
    """Holds the normalised vectors and the global index; answers one batch of work units."""

    def __init__(self, x: Any, plan: dict[str, Any], partition: Any = None, hnsw_bytes: Any = None) -> None:
        ray = _ray()
        self.x = ray.get(x) if isinstance(x, ray.ObjectRef) else x
        self.k = int(plan["k"])
        self.mode = plan["mode"]
        self.part = ray.get(partition) if isinstance(partition, ray.ObjectRef) else partition
        self.index: Any = None
        if hnsw_bytes is not None:
            import faiss

            raw = ray.get(hnsw_bytes) if isinstance(hnsw_bytes, ray.ObjectRef) else hnsw_bytes
            self.index = faiss.deserialize_index(np.asarray(raw))
            self.index.hnsw.efSearch = int(plan["ef_search"])

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        units = batch["unit"].astype(np.int64)
        rows_out, ids_out, sims_out = [], [], []
        if self.mode == "ivf":
            for mem, ids, sims in ivf_lists(self.x, self.part, units.tolist(), self.k):
                rows_out.append(mem); ids_out.append(ids); sims_out.append(sims)  # noqa: E702
        else:
            n = self.x.shape[0]
            for u in units.tolist():
                rows = np.arange(u * BLOCK, min(n, (u + 1) * BLOCK))
                if self.mode == "exact":
                    ids, sims = exact_rows(self.x, rows, self.k)
                else:
                    from sieve.index.knn import hnsw_rows

                    ids, sims = hnsw_rows(self.index, self.x, rows, self.k)
                rows_out.append(rows); ids_out.append(ids); sims_out.append(sims)  # noqa: E702
        if not rows_out:
            return {"row": np.empty(0, np.int64), "nb_ids": np.empty((0, self.k), np.int64),
                    "nb_sims": np.empty((0, self.k), np.float32)}
        return {"row": np.concatenate(rows_out), "nb_ids": np.concatenate(ids_out),
                "nb_sims": np.concatenate(sims_out)}


class DensityActor:
    """Holds the corpus texts (token sets built on demand); computes §4.2–4.3 for a batch of rows."""

    def __init__(self, texts: Any, params: dict[str, Any]) -> None:
        ray = _ray()
        self.tokens = TokenSets(ray.get(texts) if isinstance(texts, ray.ObjectRef) else texts)
        self.p = RSGParams(**params)

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        st = density_statistics(batch["row"], batch["nb_ids"], batch["nb_sims"], self.tokens, self.p)
        return {"row": st.rows, "nb_ids": batch["nb_ids"], "nb_sims": batch["nb_sims"], "eligible": st.eligible,
                "kept": st.kept, "jaccard": st.jaccard, "floor": st.floor, "core_mean": st.core_mean,
                "density": st.density}


def ray_audit(ids: Sequence[str], texts: Sequence[str], vectors: Any, params: RSGParams | None = None, *,
              address: str | None = None, num_cpus: int | None = None, actors: int | None = None,
              recall_sample: int | None = None, embedder: Callable[[], Any] | None = None,
              **overrides: Any) -> tuple[RSGAudit, dict[str, Any]]:
    """RSG over a snapshot on Ray. Returns the audit and the pipeline layout with stage timings.

    ``vectors=None`` with ``embedder`` (a picklable zero-argument factory of the retriever) embeds
    the texts first in the ``embed`` stage; the vectors then take the float16 round trip of the
    shards (sieve/scale/shards.py), so they equal what ``sieve audit --corpus`` stores."""
    p = params or RSGParams()
    if overrides:
        p = RSGParams(**{**asdict(p), **overrides})
    ids = [str(i) for i in ids]
    texts = list(texts)
    t0 = time.perf_counter()
    embed_stage: dict[str, Any] = {}
    with ray_session(address, num_cpus) as ray:
        if vectors is None:
            if embedder is None:
                raise ValueError("ray_audit: vectors=None needs an embedder factory")
            from sieve.scale.shards import CHUNK_ROWS

            chunks = [(ids[s: s + CHUNK_ROWS], texts[s: s + CHUNK_ROWS]) for s in range(0, len(ids), CHUNK_ROWS)]
            vectors = np.concatenate([v.astype(np.float16) for v in
                                      ray_embed_chunks(chunks, embedder, actors=actors, stats=embed_stage)])
        x = _validate(ids, texts, vectors)
        n = x.shape[0]
        plan = plan_knn(n, p.neighbor_count, p.mode, **_plan_args(p))
        k = plan.k
        t_ray = time.perf_counter()
        cpus = int(ray.cluster_resources().get("CPU", 1))
        pool = max(1, actors or cpus)
        part = hnsw = None
        if plan.mode == "ivf":
            part = train_ivf(x, plan)
            units = part.balanced_order()
            per_batch = LISTS_PER_BATCH
        elif plan.mode == "hnsw":
            import faiss

            from sieve.index.knn import build_hnsw

            hnsw = ray.put(faiss.serialize_index(build_hnsw(x, plan)))
            units = np.arange((n + BLOCK - 1) // BLOCK)
            per_batch = 1
        else:
            units = np.arange((n + BLOCK - 1) // BLOCK)
            per_batch = 1
        t_index = time.perf_counter()
        x_ref = ray.put(x)
        part_ref = ray.put(part) if part is not None else None
        texts_ref = ray.put(texts)
        ds = ray.data.from_items([{"unit": int(u)} for u in units], override_num_blocks=min(len(units), 4 * pool))
        ds = ds.map_batches(KnnActor, fn_constructor_kwargs={"x": x_ref, "plan": plan.to_dict(),
                                                              "partition": part_ref, "hnsw_bytes": hnsw},
                            batch_size=per_batch, batch_format="numpy", num_cpus=1,
                            compute=ray.data.ActorPoolStrategy(size=pool))
        ds = ds.map_batches(DensityActor, fn_constructor_kwargs={"texts": texts_ref, "params": asdict(p)},
                            batch_size=DENSITY_BATCH, batch_format="numpy", num_cpus=1,
                            compute=ray.data.ActorPoolStrategy(size=pool))
        nb_i = np.full((n, k), -1, np.int64)
        nb_s = np.full((n, k), -np.inf, np.float32)
        stats = DensityStats(np.arange(n), np.zeros((n, k), bool), np.zeros((n, k), bool),
                             np.full((n, k), np.nan, np.float32), np.zeros(n, np.float32),
                             np.zeros(n, np.float32), np.zeros(n, np.float32))
        seen = np.zeros(n, bool)
        for b in ds.iter_batches(batch_size=None, batch_format="numpy"):
            r = b["row"].astype(np.int64)
            if seen[r].any():
                raise RuntimeError("Ray engine: a document was returned twice")
            seen[r] = True
            nb_i[r], nb_s[r] = b["nb_ids"], b["nb_sims"]
            stats.eligible[r], stats.kept[r], stats.jaccard[r] = b["eligible"], b["kept"], b["jaccard"]
            stats.floor[r], stats.core_mean[r], stats.density[r] = b["floor"], b["core_mean"], b["density"]
        if not seen.all():
            raise RuntimeError(f"Ray engine: {int((~seen).sum())} documents missing from the pipeline output")
        t_pipe = time.perf_counter()
    recall = _recall(x, nb_i, plan.mode, recall_sample)
    audit = assemble_audit(ids, texts, nb_i, nb_s, p, stats, knn_plan=plan.to_dict(), recall=recall)
    t_end = time.perf_counter()
    layout = {
        "engine": "ray", "address": address or "local", "cpus": cpus, "actors_per_stage": pool,
        "stages": ([embed_stage] if embed_stage else []) + [
            {"name": "index (driver)", "what": f"{plan.mode} plan; global IVF partition trained on the driver"
             if plan.mode == "ivf" else f"{plan.mode} plan"},
            {"name": "knn", "actor": "KnnActor", "actors": pool, "work_units": int(len(units)),
             "unit": "IVF list" if plan.mode == "ivf" else f"{BLOCK}-row block", "batch_size": per_batch},
            {"name": "density", "actor": "DensityActor", "actors": pool, "batch_size": DENSITY_BATCH},
            {"name": "decision (driver)", "what": "script integrity + corpus tail + flags"},
        ],
        "seconds": {"validate_and_start_ray": round(t_ray - t0, 3), "index": round(t_index - t_ray, 3),
                    "pipeline": round(t_pipe - t_index, 3), "decision": round(t_end - t_pipe, 3),
                    "total": round(t_end - t0, 3)},
    }
    return audit, layout
