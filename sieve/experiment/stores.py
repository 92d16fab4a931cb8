"""A vector store as a corpus: the experiment over a store source, its audit and incremental audit.

The one path from a store source (sieve/stores/uri.py: ``chroma:///dir?collection=NAME``,
``qdrant:///dir?collection=NAME``, ``lancedb:///dir?table=NAME``) to an :class:`Experiment` and an
RSG :class:`~sieve.experiment.audit.AuditReport`, for every face:

* :func:`open_store` reads the collection (documents, ids, metadata, stored vectors; read only),
  decides whether the stored vectors are used (the agreement gate, sieve/stores/vectors.py) and
  returns the experiment whose base index is the stored vectors, or Sieve's re-embedding of the
  corpus (workspace + artifact cache, as for a dataset);
* :func:`audit_store` runs RSG over the whole collection, or, with ``since`` (an earlier audit's
  snapshot id recorded in the ledger), over the documents added since then **against the whole
  current corpus**: their kNN lists are searched in the full snapshot, the earlier documents' lists
  are those of the recorded snapshot merged with the new documents (exact, the lists of documents
  whose neighbours changed or vanished are searched again), and the corpus tail statistics are
  recomputed on the full density vector — the flags of the new documents equal a full re-audit's
  (exact search). Each audit saves its neighbour lists (``<cache>/snapshots/<id>.npz``) and records
  a snapshot in the ledger; alerts are raised for the new documents only and carry the snapshot id
  (``evidence.batch``). ``since`` may instead be a metadata filter (``meta:ingested_at>=2026-11-30``,
  sieve/stores/filters.py): the matching documents are the batch, the newest usable snapshot of
  the store is the base of the neighbour lists (none: the whole store is audited).
"""
from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from sieve.constants import CLEAN
from sieve.experiment.audit import snapshot_id_for

if TYPE_CHECKING:
    from sieve.corpus import Dataset
    from sieve.experiment.audit import AuditReport
    from sieve.experiment.snapshots import Experiment
    from sieve.ledger import Ledger
    from sieve.resources import Resources
    from sieve.stores.filters import MetadataFilter
    from sieve.stores.readers import StoreCorpus
    from sieve.stores.uri import StoreURI
    from sieve.stores.vectors import VectorDecision

STATE_FORMAT = 2


@dataclass
class StoreSource:
    """A store opened as a corpus: what was read, the dataset view of it and the vector decision."""

    uri: "StoreURI"
    corpus: "StoreCorpus"
    dataset: "Dataset"
    decision: "VectorDecision"
    seconds: dict[str, float] = field(default_factory=dict)


def store_dataset(corpus: "StoreCorpus") -> "Dataset":
    """The collection as a :class:`~sieve.corpus.Dataset` (documents only: a store has no queries or
    attack families). Its ``path`` is a virtual ``<store dir>/<collection>`` (never written; it keys
    the re-embedding workspace per collection)."""
    from sieve.corpus import Dataset
    from sieve.index.storage import safe_name

    uri = corpus.uri
    base = uri.path if uri.path is not None else Path(safe_name(uri.server or "server"))
    return Dataset(path=base / f"{uri.scheme}-{safe_name(uri.name)}", name=f"{uri.scheme}-{uri.name}",
                   documents=list(corpus.documents))


def open_store(source: "str | StoreURI", resources: "Resources", *, store_model: str | None = None,
               reembed: bool = False, sample: int | None = None, progress: bool = False,
               ledger_path: str | Path | None = None, quarantine: str = "none",
               depth: int | None = None, corpus: "StoreCorpus | None" = None) -> tuple["Experiment", StoreSource]:
    """Read ``source`` and build its experiment (module docstring). ``store_model`` names the model
    of the stored vectors (overrides the source's ``model=`` option and the collection metadata);
    ``reembed`` skips the stored vectors; ``corpus``: the collection when the caller read it already."""
    from sieve.constants import DEPTH
    from sieve.experiment.snapshots import Experiment
    from sieve.stores.readers import read_store
    from sieve.stores.uri import parse_store_uri
    from sieve.stores.vectors import SAMPLE, VectorDecision, decide_vectors, stored_index

    uri = parse_store_uri(source) if isinstance(source, str) else source
    t0 = time.perf_counter()
    if corpus is None:
        corpus = read_store(uri, progress=progress)
    t_read = corpus.info.get("read_seconds", time.perf_counter() - t0)
    if store_model:
        corpus.model = store_model
    ds = store_dataset(corpus)
    embedder = resources.retriever
    t1 = time.perf_counter()
    if reembed:
        decision = VectorDecision(False, "--reembed: re-embedding with Sieve's retriever", corpus.model,
                                  str(embedder.model_id))
    else:
        decision = decide_vectors(corpus, embedder, resources.cache, sample=sample or SAMPLE, progress=progress)
    t_gate = time.perf_counter() - t1
    base = stored_index(corpus, embedder, resources.cache) if decision.use_stored else None
    persist = None if base is None else False
    exp = Experiment(ds, resources, depth=depth or DEPTH, ledger_path=ledger_path, quarantine=quarantine,
                     persist=persist, progress=progress, base=base)
    t2 = time.perf_counter()
    exp.base_index()
    src = StoreSource(uri, corpus, ds, decision, {"read": round(t_read, 3), "gate": round(t_gate, 3),
                                                  "index": round(time.perf_counter() - t2, 3)})
    return exp, src


# -- snapshots -----------------------------------------------------------------------------------
def state_dir(cache_dir: str | Path) -> Path:
    return Path(cache_dir) / "snapshots"


def save_state(path: Path, ids: list[str], hashes: list[str], audit: Any, index_version: str, mode: str) -> None:
    """What an incremental audit starts from: the snapshot's neighbour lists and the per-document
    statistics that depend only on them and on the text (§4.2–4.4: eligible / kept neighbours,
    Jaccard, b_i, μ_i, D_i, the script fields)."""
    from sieve.index.storage import atomic_write

    sf = audit.script_fields
    arrays = dict(ids=np.asarray(ids, dtype=str), hashes=np.asarray(hashes, dtype="S32"),
                  nb_ids=np.asarray(audit.neighbour_ids, np.int64), nb_sims=np.asarray(audit.neighbour_sims, np.float32),
                  eligible=audit.eligible, kept=audit.kept, jaccard=audit.jaccard, floor=audit.floor,
                  core_mean=audit.core_mean, density=audit.density, integrity=audit.integrity,
                  transitions=np.asarray(sf.transitions), mixed=np.asarray(sf.mixed), rate=np.asarray(sf.rate),
                  scripts=np.asarray(["|".join(x) for x in sf.scripts], dtype=str),
                  meta=np.asarray([str(STATE_FORMAT), index_version, mode]))

    def write(p: Path) -> None:
        with open(p, "wb") as fh:
            np.savez(fh, **arrays)

    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, write)


def load_state(path: Path) -> dict[str, Any]:
    with np.load(path, allow_pickle=False) as z:
        out: dict[str, Any] = {k: z[k] for k in z.files}
    meta = [str(x) for x in out.pop("meta")]
    out.update(ids=[str(x) for x in out["ids"]], hashes=[h.decode("ascii") for h in out["hashes"]],
               format=int(meta[0]), index_version=meta[1], mode=meta[2])
    return out


class SinceError(ValueError):
    """``--since`` names no usable snapshot (unknown id, another store, another model, missing state)."""


def incremental_neighbours(x: np.ndarray, ids: list[str], hashes: list[str], prev: dict[str, Any],
                           k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
    """The exact kNN lists of every row of ``x`` (float32 unit rows of the current corpus) from the
    previous snapshot's lists: new rows (and rows whose list cannot be reused) are searched in the
    whole matrix; reused rows merge their old list with their similarities to the new rows. Returns
    (nb_ids, nb_sims, new_rows, changed, counts); ``changed`` marks the rows whose list is not the
    recorded one (new, searched again, or a new document among their neighbours)."""
    from sieve.index.knn import exact_rows

    n = len(ids)
    old_pos = {d: i for i, d in enumerate(prev["ids"])}
    old_hash = prev["hashes"]
    cur_of_old = np.full(len(prev["ids"]), -1, np.int64)
    is_new = np.ones(n, bool)
    for i, (d, h) in enumerate(zip(ids, hashes)):
        j = old_pos.get(d)
        if j is not None and old_hash[j] == h:
            cur_of_old[j] = i
            is_new[i] = False
    new_rows = np.flatnonzero(is_new)
    old_nb = prev["nb_ids"]
    reusable = prev["nb_ids"].shape[1] == k
    nb_i = np.full((n, k), -1, np.int64)
    nb_s = np.full((n, k), -np.inf, np.float32)
    redo = is_new.copy()
    changed = np.zeros(n, bool)               # reused rows whose list gained a new document
    kept_rows = np.flatnonzero(~is_new)
    if reusable and kept_rows.size:
        old_rows = np.asarray([old_pos[ids[i]] for i in kept_rows], np.int64)
        mapped = np.where(old_nb[old_rows] >= 0, cur_of_old[np.maximum(old_nb[old_rows], 0)], -1)
        broken = ((old_nb[old_rows] >= 0) & (mapped < 0)).any(axis=1)   # a neighbour vanished or changed
        redo[kept_rows[broken]] = True
        ok = kept_rows[~broken]
        ok_old = old_rows[~broken]
        if ok.size:
            base_i, base_s = mapped[~broken], prev["nb_sims"][ok_old].astype(np.float32)
            if new_rows.size:
                from sieve.index.knn import _top_k

                block = 4096
                for s in range(0, ok.size, block):
                    r = ok[s: s + block]
                    new_i, new_s = _top_k(x[r] @ x[new_rows].T, new_rows, k)   # the k best new rows first
                    cand_i = np.concatenate([base_i[s: s + block], new_i], axis=1)
                    cand_s = np.concatenate([base_s[s: s + block], new_s], axis=1)
                    cand_s = np.where(cand_i >= 0, cand_s, -np.inf).astype(np.float32)
                    order = np.lexsort((cand_i, -cand_s), axis=1)[:, :k]
                    nb_i[r] = np.take_along_axis(cand_i, order, axis=1)
                    nb_s[r] = np.take_along_axis(cand_s, order, axis=1)
                    same = (nb_i[r] == base_i[s: s + block]).all(axis=1)
                    changed[r[~same]] = True
            else:
                nb_i[ok], nb_s[ok] = base_i, base_s
    else:
        redo[:] = True
    todo = np.flatnonzero(redo)
    if todo.size:
        nb_i[todo], nb_s[todo] = exact_rows(x, todo, k)
    nb_i[~np.isfinite(nb_s)] = -1
    changed |= redo
    counts = {"new": int(new_rows.size), "searched": int(todo.size), "merged": int(n - todo.size),
              "changed": int(changed.sum()), "removed": int((cur_of_old < 0).sum())}
    return nb_i, nb_s, new_rows, changed, counts


def incremental_audit(ids: list[str], texts: list[str], hashes: list[str], nb_ids: np.ndarray, nb_sims: np.ndarray,
                      changed: np.ndarray, prev: dict[str, Any], p: Any, knn_plan: dict[str, Any]) -> Any:
    """The RSG audit of the current snapshot from its neighbour lists: the per-document statistics
    (§4.2–4.4) are computed for the ``changed`` rows only — every other row has the same neighbour
    list and text as in ``prev``, so the same statistics — and the corpus decision (§4.5) on the full
    density vector. The same functions as :func:`sieve.defenses.rsg.assemble_audit`."""
    from sieve.defenses.rsg import RSGAudit, ScriptFields, TokenSets, corpus_decision, density_statistics, script_fields

    n, k = nb_ids.shape
    old_pos = {d: i for i, d in enumerate(prev["ids"])}
    src = np.asarray([old_pos.get(d, -1) if not changed[i] else -1 for i, d in enumerate(ids)], np.int64)
    reuse = src >= 0
    eligible = np.zeros((n, k), bool)
    kept = np.zeros((n, k), bool)
    jaccard = np.full((n, k), np.nan, np.float32)
    floor = np.zeros(n, np.float32)
    core = np.zeros(n, np.float32)
    density = np.zeros(n, np.float32)
    r = np.flatnonzero(reuse)
    s = src[reuse]
    eligible[r], kept[r], jaccard[r] = prev["eligible"][s], prev["kept"][s], prev["jaccard"][s]
    floor[r], core[r], density[r] = prev["floor"][s], prev["core_mean"][s], prev["density"][s]
    todo = np.flatnonzero(~reuse)
    if todo.size:
        st = density_statistics(todo, nb_ids[todo], nb_sims[todo], TokenSets(texts), p)
        eligible[todo], kept[todo], jaccard[todo] = st.eligible, st.kept, st.jaccard
        floor[todo], core[todo], density[todo] = st.floor, st.core_mean, st.density
    # script fields depend on the text alone: every document seen before keeps its own
    seen = np.asarray([j if (j := old_pos.get(d, -1)) >= 0 and prev["hashes"][j] == h else -1
                       for d, h in zip(ids, hashes)], np.int64)
    same_text = seen >= 0
    integrity = np.zeros(n, np.int8)
    trans = np.zeros(n, np.int32)
    mixed = np.zeros(n, np.float32)
    rate = np.zeros(n, np.float32)
    scripts: list[tuple[str, ...]] = [()] * n
    o = seen[same_text]
    idx = np.flatnonzero(same_text)
    integrity[idx], trans[idx] = prev["integrity"][o], prev["transitions"][o]
    mixed[idx], rate[idx] = prev["mixed"][o], prev["rate"][o]
    for i, j in zip(idx.tolist(), o.tolist()):
        sc = str(prev["scripts"][j])
        scripts[i] = tuple(sc.split("|")) if sc else ()
    fresh = np.flatnonzero(~same_text)
    if fresh.size:
        fi, ff = script_fields([texts[i] for i in fresh], p.multiscript_gate)
        integrity[fresh], trans[fresh], mixed[fresh], rate[fresh] = fi, ff.transitions, ff.mixed, ff.rate
        for i, t in zip(fresh.tolist(), ff.scripts):
            scripts[i] = t
    dec = corpus_decision(density, integrity, p)
    return RSGAudit(ids=ids, params=p, neighbour_ids=nb_ids, neighbour_sims=nb_sims, eligible=eligible, kept=kept,
                    jaccard=jaccard, floor=floor, core_mean=core, density=density, tail_p=dec.tail_p,
                    integrity=integrity, topology=dec.topology, score=dec.score, flagged=dec.flagged, f_I=dec.f_I,
                    f_T=dec.f_T, script_fields=ScriptFields(scripts, trans, mixed, rate), knn=knn_plan)


def _recorded_state(ledger: "Ledger", since: str, source: str, iv: str) -> dict[str, Any]:
    """The saved state of snapshot ``since`` of ``source`` (audited with index version ``iv``), or
    :class:`SinceError` saying why it cannot be the base of an incremental audit."""
    rec = ledger.snapshot(since)
    if rec is None:
        known = [s["snapshot_id"] for s in ledger.snapshots(source=source)][:5]
        raise SinceError(f"no snapshot {since!r} in the ledger {ledger.path}"
                         + (f"; snapshots of this store: {', '.join(known)}" if known else
                            "; run a full `sieve audit` of this store first"))
    if rec["source"] != source:
        raise SinceError(f"snapshot {since} is of {rec['source']}, not of {source}")
    if rec["index_version"] != iv:
        raise SinceError(f"snapshot {since} was audited with {rec['index_version']}, this audit uses {iv}: "
                         "run a full audit")
    state_path = Path(rec["state_path"])
    if not state_path.is_file():
        raise SinceError(f"snapshot {since}: its neighbour lists {state_path} are gone; run a full audit")
    prev = load_state(state_path)
    if prev["format"] != STATE_FORMAT:
        raise SinceError(f"snapshot {since} was saved by another version of Sieve; run a full audit")
    return prev


def latest_snapshot(ledger: "Ledger", source: str, iv: str) -> tuple[str, dict[str, Any]] | None:
    """The newest recorded snapshot of ``source`` usable as the base of an incremental audit (same
    index version, state file present and readable), with its state; None when there is none."""
    for rec in ledger.snapshots(source=source):
        try:
            return rec["snapshot_id"], _recorded_state(ledger, rec["snapshot_id"], source, iv)
        except (SinceError, OSError, ValueError, KeyError):
            continue
    return None


def audit_store(exp: "Experiment", src: StoreSource, *, since: "str | MetadataFilter | None" = None,
                mode: str = "auto", ledger: "Ledger | None" = None, cache_dir: str | Path,
                progress: bool = False) -> "AuditReport":
    """RSG over the store's corpus (full), or over the documents added since snapshot ``since``
    against the whole corpus (module docstring). ``since`` may also be a metadata filter
    (``meta:ingested_at>=2026-11-30T00:00``, sieve/stores/filters.py): the documents it matches are
    the batch; the newest usable snapshot of the store in the ledger is the base of the neighbour
    lists (else the whole store is audited), and alerts are raised for the matching documents only.
    Saves the snapshot's neighbour lists under ``cache_dir`` and, with a ``ledger``, records the
    snapshot there. The report's ``incremental_rows`` are the rows whose flags are to be recorded."""
    from sieve.experiment.audit import index_version, run_audit
    from sieve.stores.filters import MetadataFilter, is_snapshot_id, parse_filter, select

    snap = exp.snapshot(CLEAN)
    idx = snap.index
    iv = index_version(idx)
    source = src.uri.canonical()
    ids = list(idx.ids)
    texts = [d.text for d in idx.documents]
    hashes = [d.hash for d in idx.documents]
    flt: MetadataFilter | None = None
    if isinstance(since, MetadataFilter):
        flt = since
    elif since is not None and not is_snapshot_id(since):
        flt = parse_filter(since)                      # FilterError (a ValueError) for a malformed one
    matched = select(idx.documents, flt) if flt is not None else None
    if since is not None and ledger is None:
        raise SinceError("--since needs the ledger (it records the snapshots)")
    base: tuple[str, dict[str, Any]] | None = None
    if flt is not None:
        assert ledger is not None
        base = latest_snapshot(ledger, source, iv)
    elif since is not None:
        assert ledger is not None and isinstance(since, str)
        base = (since, _recorded_state(ledger, since, source, iv))
    inc: dict[str, Any] | None = None
    if base is None:
        report = run_audit(exp, CLEAN, mode=mode, progress=progress, snapshot=snap)
        plan_mode = str(report.audit.knn.get("mode", mode))
        if matched is not None:
            inc = {"since": str(flt), "filter": True, "base": None, "matched": len(matched), "new": len(matched),
                   "searched": len(ids), "merged": 0, "new_rows": matched}
    else:
        base_id, prev = base
        report, counts, new_rows = _incremental_report(exp, snap, ids, texts, hashes, prev, progress)
        plan_mode = "exact" if prev["mode"] == "exact" else prev["mode"]
        if plan_mode != "exact":                      # reused lists of an approximate audit stay approximate
            report.summary["knn"] = {**(report.summary.get("knn") or {}), "mode": plan_mode,
                                     "note": f"lists merged from the {plan_mode} audit of {base_id}"}
        if matched is not None:
            inc = {"since": str(flt), "filter": True, "base": base_id, "matched": len(matched), **counts,
                   "new_rows": matched}
        else:
            inc = {"since": base_id, **counts, "new_rows": [int(i) for i in new_rows]}
    if inc is not None:
        report.summary["incremental"] = {k: v for k, v in inc.items() if k != "new_rows"}
    chash = report.summary["corpus_hash"]
    sid = snapshot_id_for(source, chash, iv)
    state_path = state_dir(cache_dir) / f"{sid}.npz"
    save_state(state_path, ids, hashes, report.audit, iv, plan_mode)
    report.summary.update(source=source, store=src.uri.scheme, snapshot_id=sid, vectors=src.decision.to_dict(),
                          store_seconds=src.seconds)
    if inc is not None:
        report.summary["incremental_rows"] = [int(i) for i in inc["new_rows"]]
    if ledger is not None:
        parent = (base[0] if base is not None else None) if since is not None else None
        ledger.add_snapshot(sid, source=source, corpus_hash=chash, index_version=iv, n_docs=len(ids),
                            parent=parent if parent != sid else None,
                            new_docs=len(inc["new_rows"]) if inc is not None else len(ids),
                            state_path=str(state_path))
    return report


def _incremental_report(exp: "Experiment", snap: Any, ids: list[str], texts: list[str], hashes: list[str],
                        prev: dict[str, Any], progress: bool) -> tuple["AuditReport", dict[str, Any], np.ndarray]:
    """The exact RSG audit of ``snap`` from the recorded state ``prev`` (:func:`incremental_neighbours`,
    :func:`incremental_audit`) as a report, with the neighbour-list counts and the new rows."""
    from sieve.defenses.rsg import RSGParams
    from sieve.experiment.audit import _report
    from sieve.index.knn import plan_knn, unit_matrix

    idx = snap.index
    p = RSGParams(mode="exact", progress=progress)
    t0 = time.perf_counter()
    x = unit_matrix(idx.vectors)
    plan = plan_knn(len(ids), p.neighbor_count, "exact")
    nb_ids, nb_sims, new_rows, changed, counts = incremental_neighbours(x, ids, hashes, prev, plan.k)
    del x
    audit = incremental_audit(ids, texts, hashes, nb_ids, nb_sims, changed, prev, p,
                              {**plan.to_dict(), "incremental": True})
    seconds = time.perf_counter() - t0
    report = _report(audit, snap, idx.documents, exp.dataset.name, str(exp.dataset.path), "exact", "local",
                     seconds, None)
    return report, counts, new_rows


# -- sieve eval on a store (clean conditions) ------------------------------------------------------
def load_queries(path: str | Path) -> list[Any]:
    """Clean queries from a JSONL file in the dataset format (``{"id", "text", "answers"?}`` per line,
    docs/design.md); :class:`~sieve.corpus.DatasetError` naming file, line and field otherwise."""
    from sieve.corpus.errors import DatasetError, Issues, TooManyErrors
    from sieve.corpus.sieve_format import read_queries

    p = Path(path)
    if not p.is_file():
        raise DatasetError(p, None, None, "queries file not found (--queries: JSONL lines {\"id\", \"text\", "
                                          "\"answers\"?})")
    issues = Issues()
    try:
        queries = read_queries(p, p.name, issues)
    except TooManyErrors:
        queries = []
    if not issues.items and not queries:
        issues.items.append(DatasetError(p.name, None, None, "no queries (the file is empty)"))
    issues.raise_if_any(str(p))
    return queries


def store_eval_dataset(exp: "Experiment", src: StoreSource, queries_path: str | Path,
                       cache_dir: str | Path) -> "Dataset":
    """The store's corpus with the clean queries of ``queries_path`` as a dataset ``sieve eval`` can
    run (clean condition only: a store has no attack families).

    Its directory is Sieve's own (``<cache>/stores/eval/<collection>-<hash>``, never the store's):
    ``queries.jsonl`` (a copy) and ``source.json`` (source, corpus hash, whether the stored vectors
    are used), so a run's fingerprint changes when the store or the queries change. The experiment's
    index — the stored vectors that passed the agreement gate, or Sieve's re-embedding — is written to
    that dataset's workspace, so the evaluation embeds nothing again."""
    import json

    from sieve.corpus import Dataset
    from sieve.corpus.hashing import corpus_hash
    from sieve.index.build import workspace_dir
    from sieve.index.embedding import flat_ip
    from sieve.index.storage import atomic_write, make_manifest, read_workspace, safe_name, write_workspace

    queries = load_queries(queries_path)
    raw = Path(queries_path).read_bytes()
    index = exp.base_index()
    docs = list(index.documents)
    source = src.uri.canonical()
    key = hashlib.sha256(f"{source}\x1f{hashlib.sha256(raw).hexdigest()}".encode("utf-8")).hexdigest()[:12]
    root = Path(cache_dir) / "stores" / "eval" / f"{safe_name(src.dataset.name)}-{key}"
    root.mkdir(parents=True, exist_ok=True)
    chash = corpus_hash(docs)
    info = {"source": source, "corpus_hash": chash, "documents": len(docs),
            "stored_vectors": bool(src.decision.use_stored), "store_model": src.decision.model,
            "queries_file": str(Path(queries_path).resolve())}
    atomic_write(root / "queries.jsonl", lambda p: p.write_bytes(raw))
    atomic_write(root / "source.json", lambda p: p.write_text(json.dumps(info, indent=2), encoding="utf-8"))
    ds = Dataset(path=root, name=src.dataset.name, documents=docs, queries=queries)
    res = exp.resources
    embedder = res.retriever
    ws = workspace_dir(ds, embedder.model_id, res.config)
    old = read_workspace(ws)
    ids = [d.id for d in docs]
    origin = "store" if src.decision.use_stored else "re-embedded"
    if not (isinstance(old, tuple) and old[0].get("corpus_hash") == chash and old[2] == ids
            and old[0].get("model_id") == embedder.model_id and old[0].get("vectors_from") == origin):
        v32 = np.asarray(index.vectors, np.float32)
        manifest = {**make_manifest(embedder, docs, v32.shape[1], chash), "vectors_from": origin, "source": source}
        write_workspace(ws, manifest, v32.astype(np.float16), ids, flat_ip(v32))
    return ds
