"""RSG as a Ray Data pipeline (``sieve audit --engine ray``; issue 13). Optional extra ``sieve[ray]``.

Layout (the same audit as the local engine, docs/algorithms.md §4):

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

import os
import time
from contextlib import contextmanager
from dataclasses import asdict
from typing import Any, Iterator, Sequence

import numpy as np

from sieve.defenses.rsg import (DensityStats, RSGAudit, RSGParams, TokenSets, _plan_args, _recall, _validate,
                                assemble_audit, density_statistics)
from sieve.index.knn import BLOCK, exact_rows, ivf_lists, plan_knn, train_ivf

#: IVF lists per knn batch: with ~400-document lists a batch is ~10⁵ query×candidate products per
#: member — long enough (≥ 0.1 s) that Ray's per-task overhead stays small, short enough for balance.
LISTS_PER_BATCH = 16
#: rows per density batch (the statistic is O(k) per row; 4,096 rows ≈ 10 ms of numpy).
DENSITY_BATCH = 4096


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
        yield ray
    finally:
        if started:
            ray.shutdown()


class KnnActor:
    """Holds the normalised vectors and the global index; answers one batch of work units."""

    def __init__(self, x: Any, plan: dict[str, Any], partition: Any = None, hnsw_bytes: Any = None) -> None:
        ray = _ray()
        self.x = ray.get(x) if isinstance(x, ray.ObjectRef) else x
        self.k = int(plan["k"])
        self.mode = plan["mode"]
        self.part = ray.get(partition) if isinstance(partition, ray.ObjectRef) else partition
        self.index = None
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
              recall_sample: int | None = None, **overrides: Any) -> tuple[RSGAudit, dict[str, Any]]:
    """RSG over a snapshot on Ray. Returns the audit and the pipeline layout with stage timings."""
    p = params or RSGParams()
    if overrides:
        p = RSGParams(**{**asdict(p), **overrides})
    ids = [str(i) for i in ids]
    texts = list(texts)
    t0 = time.perf_counter()
    x = _validate(ids, texts, vectors)
    n = x.shape[0]
    plan = plan_knn(n, p.neighbor_count, p.mode, **_plan_args(p))
    k = plan.k
    with ray_session(address, num_cpus) as ray:
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
        "stages": [
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
