"""Store audit benchmark (issue 25): reading a real store, and an incremental audit of a new batch
(``sieve audit SOURCE --since``) against a full re-audit of the whole corpus.

    .venv/bin/python -m sieve.bench.stores_bench [--n 100000] [--batch 1000] [--dim 384] [--store chroma]

* synthetic clustered unit vectors (sieve/bench/rsg_bench.py's generator) with random-word texts;
* ``--store chroma|qdrant|lancedb`` (default: none) writes the N + batch documents with their vectors
  into a real embedded store in a temporary directory and times reading them back (docs/s) — the
  first step of ``sieve audit SOURCE`` with stored vectors (no embedding at all);
* full: RSG with exact kNN over all N + batch documents (what a re-audit costs);
* incremental: the previous snapshot's neighbour lists (N documents) merged with the batch
  (sieve/experiment/stores.py: ``incremental_neighbours``), then the same statistics and corpus
  decision; prints the speed-up and whether the batch's flags (and every document's score) equal
  the full audit's.

Prints a table; nothing is asserted.
"""
from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from sieve.bench.rsg_bench import synthetic


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="sieve bench stores", description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=20000, help="documents already audited (default 20000)")
    ap.add_argument("--batch", type=int, default=1000, help="documents of the new batch (default 1000)")
    ap.add_argument("--dim", type=int, default=384)
    ap.add_argument("--store", choices=("none", "chroma", "qdrant", "lancedb"), default="none")
    a = ap.parse_args(argv)
    from sieve.defenses.rsg import RSGParams, assemble_audit
    from sieve.experiment.stores import incremental_audit, incremental_neighbours
    from sieve.index.embedding import finalise
    from sieve.index.knn import knn_graph, plan_knn, unit_matrix

    total = a.n + a.batch
    ids, texts, raw = synthetic(total, a.dim)
    vecs = finalise(raw)[1]                                 # the float16 round trip of every Sieve index
    hashes = [f"{i:032x}" for i in range(total)]
    print(f"corpus     {a.n} audited + {a.batch} new documents, dim {a.dim}")
    if a.store != "none":
        from sieve.stores.fill import fill_store
        from sieve.stores.readers import read_store
        from sieve.types import Document

        with tempfile.TemporaryDirectory() as tmp:
            key = "table" if a.store == "lancedb" else "collection"
            src = f"{a.store}://{Path(tmp) / a.store}?{key}=bench&model=synthetic"
            docs = [Document(i, t) for i, t in zip(ids, texts)]
            t0 = time.perf_counter()
            fill_store(src, docs, vecs)
            t_fill = time.perf_counter() - t0
            t0 = time.perf_counter()
            got = read_store(src)
            t_read = time.perf_counter() - t0
            diff = float(np.max(np.abs(got.vectors - vecs))) if got.vectors is not None else float("nan")
            print(f"store      {a.store}: written in {t_fill:.1f} s; read {len(got)} documents with vectors in "
                  f"{t_read:.1f} s ({len(got) / t_read:,.0f} docs/s); max |stored - written| "
                  f"{diff:.2g}")
    p = RSGParams(mode="exact")
    k = plan_knn(total, p.neighbor_count, "exact").k

    t0 = time.perf_counter()
    x = unit_matrix(vecs)
    knn = knn_graph(None, k, "exact", x=x)
    full = assemble_audit(ids, texts, knn.ids, knn.sims, p)
    t_full = time.perf_counter() - t0
    print(f"full       RSG exact over {total} documents: {t_full:.2f} s ({total / t_full:,.0f} docs/s)")

    # the previous snapshot: the first N documents audited alone (its neighbour lists and per-document
    # statistics are what an audit records for the next one)
    x_old = unit_matrix(vecs[: a.n])
    old_knn = knn_graph(None, plan_knn(a.n, p.neighbor_count, "exact").k, "exact", x=x_old)
    old = assemble_audit(ids[: a.n], texts[: a.n], old_knn.ids, old_knn.sims, p)
    sf: Any = old.script_fields
    prev = {"ids": ids[: a.n], "hashes": hashes[: a.n], "nb_ids": old.neighbour_ids, "nb_sims": old.neighbour_sims,
            "eligible": old.eligible, "kept": old.kept, "jaccard": old.jaccard, "floor": old.floor,
            "core_mean": old.core_mean, "density": old.density, "integrity": old.integrity,
            "transitions": sf.transitions, "mixed": sf.mixed, "rate": sf.rate,
            "scripts": np.asarray(["|".join(t) for t in sf.scripts])}
    del x_old, old_knn

    t0 = time.perf_counter()
    x = unit_matrix(vecs)
    nb_i, nb_s, new_rows, changed, counts = incremental_neighbours(x, ids, hashes, prev, k)
    inc = incremental_audit(ids, texts, hashes, nb_i, nb_s, changed, prev, p, {})
    t_inc = time.perf_counter() - t0
    new = np.asarray(new_rows)
    flags_equal = bool(np.array_equal(full.flagged[new], inc.flagged[new]))
    delta = float(np.max(np.abs(full.score - inc.score)))
    print(f"incremental {a.batch} new against {total}: {t_inc:.2f} s ({counts['searched']} kNN lists searched, "
          f"{counts['merged']} merged, statistics recomputed for {counts['changed']})")
    print(f"ratio      full / incremental = {t_full / t_inc:.1f}x; new documents' flags equal: {flags_equal} "
          f"({int(inc.flagged[new].sum())} flagged); max |score difference| over all documents {delta:.2g}")


if __name__ == "__main__":
    main()
