#!/usr/bin/env python3
"""Real PoisonedRAG payloads injected into the demo corpus: RSQ / RSG / TRIS detection numbers.

Builds a temporary dataset directory: the demo corpus, the 100 MS MARCO target questions of
``../shared/data/poisonedrag/msmarco.json`` as queries, and their GPT-4 poison passages injected
as ``pr_b`` (question + "." + passage, docs/algorithms.md §7.1). Then runs ``sieve eval`` on it and
prints AUROC and detection at 5 % clean removal (§9.2; negatives = clean-condition candidates).

The third-party data is read from ``../shared`` at run time and never copied into the project.
Note what this does not show: the MS MARCO questions are off-topic for the demo corpus, so the
clean rankings are weakly related passages, which is easier for query-local detectors than a
corpus that really answers the question.

    python -m sieve.bench.msmarco_injection_bench [--defenses rsq,rsg,tris_l2,tris_l1] [--limit N] [--out DIR]
"""
from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

from sieve.bench import DEMO_DATA, ROOT
from sieve.corpus import load_dataset, write_jsonl

SHARED = ROOT.parent / "shared" / "data" / "poisonedrag" / "msmarco.json"


def build_dataset(out: Path, limit: int | None) -> Path:
    demo = load_dataset(DEMO_DATA)
    entries = list(json.loads(SHARED.read_text(encoding="utf-8")).values())[: limit or None]
    out.mkdir(parents=True, exist_ok=True)
    write_jsonl(out / "corpus.jsonl", [{"id": d.id, "title": d.title, "text": d.text} for d in demo.documents])
    write_jsonl(out / "queries.jsonl", [{"id": f"msmarco-{e['id']}", "text": e["question"],
                                         "answers": [e["correct answer"]]} for e in entries])
    rows = []
    for e in entries:
        qid = f"msmarco-{e['id']}"
        rows.append({"query_id": qid, "query": e["question"], "correct_answers": [e["correct answer"]],
                     "target_answer": e["incorrect answer"], "attack": "pr_b",
                     "documents": [{"id": f"attack:pr_b:{qid}:{j}", "text": e["question"] + "." + t}
                                   for j, t in enumerate(e["adv_texts"])]})
    write_jsonl(out / "attacks.jsonl", rows)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--defenses", default="none,rsq,rsg,rsg_rsq,tris_l1,tris_l2,perplexity")
    ap.add_argument("--limit", type=int, default=None, help="first N MS MARCO targets (default all 100)")
    ap.add_argument("--out", type=Path, default=None, help="run directory (default: a temp dir)")
    args = ap.parse_args()
    if not SHARED.exists():
        print(f"skipped: {SHARED} not found (development data lives in ../shared beside the project)")
        return 0
    from sieve.config import SieveConfig
    from sieve.evaluation.report import format_table
    from sieve.evaluation.runner import run_eval
    from sieve.index import ArtifactCache
    from sieve.resources import Resources

    cfg = SieveConfig().validate()
    cfg.llm.enabled = False
    tmp = Path(tempfile.mkdtemp(prefix="sieve-msmarco-"))
    ds_dir = build_dataset(tmp / "dataset", args.limit)
    run_dir = args.out or tmp / "run"
    t0 = time.perf_counter()
    summary = run_eval(ds_dir, run_dir, Resources(cfg, cache=ArtifactCache.default(cfg)),
                       defenses=args.defenses.split(","), depth=50, progress=True,
                       command="sieve bench msmarco_injection")
    print(format_table(summary))
    print(f"\nwall-clock {time.perf_counter() - t0:.0f} s; run dir {run_dir}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
