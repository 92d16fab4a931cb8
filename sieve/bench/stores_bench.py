"""Store audit benchmark (issue 25 goal): a ``--size``-passage collection in a real embedded store
with stored vectors — the time to the first alert without re-embedding, and the incremental audit of
a ``--batch`` of new passages (``sieve audit SOURCE --since``) against a full re-audit.

    sieve bench stores [--size 100000] [--batch 1000] [--store chroma] [--retriever all-mpnet-base-v2]

The collection (what it is, honestly):

* the demo corpus (640 passages) with its **real** retriever vectors (all-mpnet-base-v2: the shipped
  ``demo_data/.artifacts`` vectors; another ``--retriever`` embeds them), then synthetic passages up
  to ``--size``: a demo passage with ~15% of its words dropped at random (a unique text), its vector
  the demo passage's real vector plus Gaussian noise of norm ``--noise`` (default 0.35: cosine
  ≈ 0.94 to the original), renormalised;
* the last ``--batch`` passages are the new ingestion batch; it carries 64 poisons of the demo's
  ``script`` attack family with their real vectors (embedded by the retriever).

Steps (each timed; the library functions ``sieve audit`` runs, sieve/experiment/stores.py):

1. fill the store with the ``size - batch`` earlier passages (``python -m sieve.stores.fill``'s
   writer); read them back; full exact RSG audit → snapshot S1 in a ledger;
2. ingest the batch; read the whole collection again; **incremental** audit ``--since S1``;
3. **full** exact re-audit of the same collection (fresh ledger): its flags for the new passages must
   equal the incremental audit's (printed), and every document's score is compared;
4. **first alert**: read + agreement gate + index + RSG with ``sieve audit``'s default neighbour
   search (``auto``: exact up to 20,000 documents, IVF past that) + recording the alerts. The synthetic
   vectors would (rightly) fail the gate — they are not the model's output — so the gate is run, and
   timed, on the demo's real passages (256 re-embedded, the same work as on any store), and its
   numbers are printed; the audit then uses the stored vectors as after a passed gate.

Everything is written under ``--workdir`` (default: a temporary directory, deleted at the end).
Prints a table; nothing is asserted.
"""
from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from sieve.bench import DEMO_DATA

FAMILY = "script"
N_POISONS = 64


def _say(msg: str) -> None:
    print(msg, flush=True)


def build_corpus(size: int, batch: int, noise: float, seed: int, embedder: Any, cache: Any,
                 shipped: bool) -> tuple[list[Any], np.ndarray, int]:
    """(documents, float32 vectors, number of real-vector passages) of the collection (module docstring)."""
    from sieve.corpus import load_dataset
    from sieve.index.embedding import embed_documents, finalise
    from sieve.stores.fill import demo_vectors
    from sieve.types import Document

    ds = load_dataset(DEMO_DATA)
    if shipped:
        base, base_v, _ = demo_vectors(DEMO_DATA)
    else:
        base = list(ds.documents)
        base_v = finalise(embed_documents(base, embedder, cache, False, "demo corpus"))[1]
    base_v = base_v / np.linalg.norm(base_v, axis=1, keepdims=True)
    poisons = list(ds.attack_documents(FAMILY))[: min(N_POISONS, batch // 4)]
    pois_v = finalise(embed_documents(poisons, embedder, cache, False, "poisons"))[1] if poisons else \
        np.zeros((0, base_v.shape[1]), np.float32)
    n_fill = size - len(base) - len(poisons)
    if n_fill < 0 or size - batch < len(base):
        raise SystemExit(f"--size must be at least {len(base) + batch} (the demo's {len(base)} passages + --batch)")
    rng = np.random.default_rng(seed)
    src = rng.integers(0, len(base), n_fill)
    words = [d.text.split() for d in base]
    seen = {d.text for d in base}
    fill: list[Any] = []
    for j, b in enumerate(src.tolist()):
        w = words[b]
        keep = rng.random(len(w)) >= 0.15
        text = " ".join(x for x, k in zip(w, keep) if k) or w[0]
        if text in seen:
            text = f"{text} ({j})"
        seen.add(text)
        fill.append(Document(f"{base[b].id}~{j:06d}", text, base[b].title))
    g = rng.standard_normal((n_fill, base_v.shape[1])).astype(np.float32)
    g *= noise / np.linalg.norm(g, axis=1, keepdims=True)
    fill_v = base_v[src] + g
    fill_v /= np.linalg.norm(fill_v, axis=1, keepdims=True)
    # earlier passages: the demo + most fillers; the batch: the last fillers + the poisons
    n_old = size - batch
    docs = list(base) + fill[: n_old - len(base)] + fill[n_old - len(base):] + poisons
    vecs = np.concatenate([base_v, fill_v, pois_v]).astype(np.float32)
    return docs, vecs, len(base) + len(poisons)


def open_collection(source: str, embedder: Any, cache: Any, resources: Any, decision: Any) -> tuple[Any, Any, float, float]:
    """Read the collection and build the experiment on its stored vectors: (experiment, StoreSource,
    read seconds, index seconds)."""
    from sieve.experiment.snapshots import Experiment
    from sieve.experiment.stores import StoreSource, store_dataset
    from sieve.stores.readers import read_store
    from sieve.stores.vectors import stored_index

    t0 = time.perf_counter()
    corpus = read_store(source)
    t_read = time.perf_counter() - t0
    t0 = time.perf_counter()
    ds = store_dataset(corpus)
    exp = Experiment(ds, resources, persist=False, base=stored_index(corpus, embedder, cache))
    exp.snapshot("clean")
    t_index = time.perf_counter() - t0
    return exp, StoreSource(corpus.uri, corpus, ds, decision), t_read, t_index


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="sieve bench stores", description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--size", type=int, default=100_000, help="passages in the collection after the batch "
                                                             "(default 100000; e.g. 3000 for a CI-sized run)")
    ap.add_argument("--n", type=int, default=None, help="passages audited before the batch (size = n + batch; "
                                                        "overrides --size)")
    ap.add_argument("--batch", type=int, default=1000, help="passages of the new batch (default 1000)")
    ap.add_argument("--store", choices=("chroma", "qdrant", "lancedb"), default="chroma")
    ap.add_argument("--retriever", default="all-mpnet-base-v2",
                    help="the model of the stored vectors and of the gate (default: the demo's shipped "
                         "all-mpnet-base-v2 vectors; tiny-hashing for a run without model weights)")
    ap.add_argument("--noise", type=float, default=0.35, help="norm of the noise added to a synthetic passage's "
                                                              "vector (default 0.35: cosine ~0.94)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--first-alert-only", action="store_true",
                    help="write the whole collection and measure step 4 only (the first alert), skipping the "
                         "full and incremental audits (minutes instead of half an hour at 100,000)")
    ap.add_argument("--workdir", type=Path, default=None, help="where the store, ledgers and snapshots go "
                                                               "(default: a temporary directory, deleted)")
    a = ap.parse_args(argv)
    size = a.n + a.batch if a.n is not None else a.size
    if a.batch < 1 or size <= a.batch:
        raise SystemExit("--batch must be >= 1 and smaller than --size")
    from sieve.runtime import configure_process_environment

    configure_process_environment()
    own = a.workdir is None
    work = Path(tempfile.mkdtemp(prefix="sieve-bench-stores-")) if own else Path(a.workdir)
    work.mkdir(parents=True, exist_ok=True)
    try:
        _run(a, size, work)
    finally:
        if own:
            shutil.rmtree(work, ignore_errors=True)


def _run(a: argparse.Namespace, size: int, work: Path) -> None:
    from sieve.config import SieveConfig
    from sieve.experiment import record_flags
    from sieve.experiment.stores import audit_store
    from sieve.experiment.workspace import make_resources
    from sieve.ledger import Ledger
    from sieve.stores.fill import fill_store
    from sieve.stores.vectors import VectorDecision

    cfg = SieveConfig.load(None)
    cfg.cache_dir = work / "cache"                      # a fresh artifact cache: the gate's embeddings are real work
    cfg.models.retriever = a.retriever
    if a.retriever != "tiny-hashing":
        cfg.validate()
    resources = make_resources(cfg)
    t0 = time.perf_counter()
    embedder = resources.retriever
    embedder.encode(["warm up"])
    t_model = time.perf_counter() - t0
    shipped = a.retriever == "all-mpnet-base-v2"
    docs, vecs, n_real = build_corpus(size, a.batch, a.noise, a.seed, embedder, resources.cache, shipped)
    n_old = size - a.batch
    _say(f"corpus     {size:,} passages ({n_real} with real {embedder.model_id} vectors: the demo corpus and "
         f"{sum(d.poison for d in docs)} '{FAMILY}' poisons in the batch; the rest synthetic: "
         f"perturbed demo passages, real vector + noise {a.noise}), dim {vecs.shape[1]}; "
         f"{n_old:,} earlier + {a.batch:,} new; model loaded in {t_model:.1f} s")
    key = "table" if a.store == "lancedb" else "collection"
    source = f"{a.store}://{work / a.store}?{key}=bench"
    synthetic = VectorDecision(True, "stored vectors used (synthetic: the gate is timed on the demo's real "
                                     "passages)", embedder.model_id, str(embedder.model_id))
    if a.first_alert_only:
        t0 = time.perf_counter()
        fill_store(source, docs, vecs, model=embedder.model_id)
        _say(f"store      {a.store}: {size:,} passages written in {time.perf_counter() - t0:.1f} s")
        exp, src, t_read, t_index = open_collection(source, embedder, resources.cache, resources, synthetic)
        n_poison = sum(d.poison for d in docs)
        _first_alert(exp, src, docs[: n_real - n_poison], vecs[: n_real - n_poison], embedder, resources, work,
                     size, t_read, t_index, None)
        return

    # 1. the earlier passages, their full exact audit (snapshot S1)
    t0 = time.perf_counter()
    fill_store(source, docs[:n_old], vecs[:n_old], model=embedder.model_id)
    t_fill = time.perf_counter() - t0
    exp, src, t_read_old, _ = open_collection(source, embedder, resources.cache, resources, synthetic)
    led_path = work / "ledger.sqlite"
    t0 = time.perf_counter()
    with Ledger(led_path) as led:
        first = audit_store(exp, src, mode="exact", ledger=led, cache_dir=work / "cache")
        record_flags(first, led, src.dataset.name, batch=first.summary["snapshot_id"])
    t_first = time.perf_counter() - t0
    s1 = first.summary["snapshot_id"]
    _say(f"store      {a.store}: {n_old:,} passages written in {t_fill:.1f} s, read back with vectors in "
         f"{t_read_old:.1f} s ({n_old / t_read_old:,.0f} docs/s)")
    _say(f"earlier    full exact audit of {n_old:,}: {t_first:.1f} s, {len(first.flagged)} flags, snapshot {s1}")
    del exp, src, first

    # 2. the batch: ingest, read the whole collection, incremental audit --since S1
    t0 = time.perf_counter()
    fill_store(source, docs[n_old:], vecs[n_old:], model=embedder.model_id, start=n_old)
    t_ingest = time.perf_counter() - t0
    exp, src, t_read, t_index = open_collection(source, embedder, resources.cache, resources, synthetic)
    t0 = time.perf_counter()
    with Ledger(led_path) as led:
        inc = audit_store(exp, src, since=s1, ledger=led, cache_dir=work / "cache")
        rows = inc.summary["incremental_rows"]
        record_flags(inc, led, src.dataset.name, rows=rows, batch=inc.summary["snapshot_id"])
    t_inc = time.perf_counter() - t0
    counts = inc.summary["incremental"]
    _say(f"ingest     {a.batch:,} passages added in {t_ingest:.1f} s; whole collection read in {t_read:.1f} s "
         f"({size / t_read:,.0f} docs/s), indexed in {t_index:.1f} s")
    _say(f"incremental --since {s1}: {t_inc:.2f} s ({counts['new']} new, {counts['searched']} kNN lists "
         f"searched, {counts['merged']:,} merged)")

    # 3. the full exact re-audit of the same collection
    t0 = time.perf_counter()
    with Ledger(work / "full.sqlite") as led:
        full = audit_store(exp, src, mode="exact", ledger=led, cache_dir=work / "cache-full")
        record_flags(full, led, src.dataset.name, batch=full.summary["snapshot_id"])
    t_full = time.perf_counter() - t0
    new = np.asarray(rows, np.int64)
    f_inc, f_full = inc.audit.flagged[new], full.audit.flagged[new]
    equal = bool(np.array_equal(f_inc, f_full))
    delta = float(np.max(np.abs(inc.audit.score - full.audit.score)))
    poison_rows = [i for i in rows if docs[i].poison]
    caught = int(inc.audit.flagged[np.asarray(poison_rows, np.int64)].sum()) if poison_rows else 0
    _say(f"full       exact re-audit of {size:,}: {t_full:.1f} s")
    _say(f"ratio      full / incremental = {t_full / t_inc:.1f}x (audit step); with the read of the collection "
         f"each needs: {(t_read + t_full) / (t_read + t_inc):.1f}x")
    _say(f"flags      new passages' flags equal: {equal} ({int(f_inc.sum())} of {new.size} flagged; "
         f"{caught} of {len(poison_rows)} poisons); max |score difference| over all {size:,} documents "
         f"{delta:.2g}")

    # 4. the first alert: read + gate + index + RSG (sieve audit's default search) + the ledger
    demo_docs, demo_v = docs[: n_real - len(poison_rows)], vecs[: n_real - len(poison_rows)]
    _first_alert(exp, src, demo_docs, demo_v, embedder, resources, work, size, t_read, t_index, full)


def _first_alert(exp: Any, src: Any, demo_docs: Sequence[Any], demo_v: np.ndarray, embedder: Any, resources: Any,
                 work: Path, size: int, t_read: float, t_index: float, full: Any) -> None:
    """Step 4: the agreement gate on the demo's real passages, then RSG with ``sieve audit``'s default
    neighbour search and the alerts recorded; ``full``: the exact audit to compare flags with (or None)."""
    from sieve.experiment import record_flags
    from sieve.experiment.stores import audit_store
    from sieve.ledger import Ledger
    from sieve.stores.vectors import SAMPLE, check_agreement

    t0 = time.perf_counter()
    nums = check_agreement(demo_v, demo_docs, embedder, resources.cache, sample=SAMPLE)
    t_gate = time.perf_counter() - t0
    t0 = time.perf_counter()
    with Ledger(work / "auto.sqlite") as led:
        auto = audit_store(exp, src, mode="auto", ledger=led, cache_dir=work / "cache-auto")
        n, added = record_flags(auto, led, src.dataset.name, batch=auto.summary["snapshot_id"])
    t_auto = time.perf_counter() - t0
    mode = (auto.summary.get("knn") or {}).get("mode", "auto")
    _say(f"gate       {nums['sample']} demo passages re-embedded in {t_gate:.1f} s: min cosine "
         f"{nums.get('min_cosine', float('nan')):.4f}, recall@10 agreement "
         f"{nums.get('recall_at_10_agreement', float('nan')):.4f} (passed: {nums['passed']})")
    total = t_read + t_gate + t_index + t_auto
    agree = ("" if full is None else
             f"; its flags agree with the exact audit on {int((auto.audit.flagged == full.audit.flagged).sum()):,} "
             f"of {size:,} documents")
    _say(f"first alert {total:.1f} s without re-embedding = read {t_read:.1f} + gate {t_gate:.1f} + index "
         f"{t_index:.1f} + RSG ({mode}) and {added} alerts recorded {t_auto:.1f}{agree}")


if __name__ == "__main__":
    main()
