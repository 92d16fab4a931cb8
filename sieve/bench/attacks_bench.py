"""Attack effectiveness on the demo knowledge base with the default retriever (all-mpnet-base-v2).

    .venv/bin/python -m sieve.bench.attacks_bench [--data demo_data] [--depth 50] [--live-pr-w 4] [--families a b]

For each attack family in ``<data>/attacks.jsonl`` (families missing there, except pr_w and
paraphrase, are generated in memory), the attack condition = clean corpus + *all* documents of
the family (other targets' poisons compete, as in PoisonedRAG). Per target: the rank of its best
own poison in the top-``depth``. Prints, per family:

* ``hit@5``: fraction of targets with ≥ 1 own poison in the top-5;
* ``poisons@5``: mean number of own poisons in the top-5;
* ``best rank``: mean best own-poison rank (poisons beyond the depth count as depth + 1);
* ``L1 keeps``: of the own poisons in the top-``depth``, the fraction TRIS L1 (judge-space majority
  keep, docs/algorithms.md §2.2) would keep on that ranking — what ``judge_aware`` (§7.8) optimises;
* judge_aware / near_duplicate: the measured objective terms and cosine to the source passage from
  the documents' metadata;
* pr_w: mean similarity before → after HotFlip and seconds per target, from the documents'
  metadata (as generated) and, with ``--live-pr-w N``, re-measured now on the first N targets.

forced_top documents are pinned by the experiment core (placement metadata), not retrieved.
Nothing is asserted; numbers depend on the load of the machine (2 shared CPU cores).
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

import numpy as np

from sieve.attacks import ATTACKS, generate_attack
from sieve.bench import DEMO_DATA
from sieve.config import SieveConfig
from sieve.corpus import load_dataset
from sieve.experiment import Experiment
from sieve.resources import Resources


def family_effectiveness(exp: Experiment, records, depth: int) -> dict[str, float]:
    """hit@5 / poisons@5 / best rank of one family's poisons, ranked through the experiment core
    (forced-top records are pinned by their placement metadata, as in `sieve eval`)."""
    docs = [d for r in records for d in r.documents]
    snap = exp.snapshot(f"bench:{records[0].attack}", documents=docs)
    from sieve.defenses.tris import layer1

    hits: list[bool] = []
    n5: list[int] = []
    best: list[int] = []
    l1_kept: list[bool] = []
    for r in records:
        own = {d.id for d in r.documents}
        ranking = exp.rank(r.query, snapshot=snap, query_id=r.query_id, depth=depth)
        ranks = [d.rank for d in ranking.documents if d.id in own]
        hits.append(any(x <= 5 for x in ranks))
        n5.append(sum(x <= 5 for x in ranks))
        best.append(min(ranks) if ranks else depth + 1)
        if ranks:
            l1 = layer1([d.text for d in ranking.documents], exp.resources)
            l1_kept.extend(not rm for d, rm in zip(ranking.documents, l1.removed) if d.id in own)
    return {"targets": len(records), "hit@5": float(np.mean(hits)), "poisons@5": float(np.mean(n5)),
            "best_rank": float(np.mean(best)), "l1_kept": float(np.mean(l1_kept)) if l1_kept else float("nan")}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="attack effectiveness benchmark")
    ap.add_argument("--data", type=Path, default=DEMO_DATA)
    ap.add_argument("--depth", type=int, default=50)
    ap.add_argument("--live-pr-w", type=int, default=0, help="re-run pr_w on the first N targets and time it")
    ap.add_argument("--iterations", type=int, default=4)
    ap.add_argument("--candidates", type=int, default=12)
    ap.add_argument("--families", nargs="*", default=None, help="only these families (default: all)")
    args = ap.parse_args(argv)

    if not (args.data / "corpus.jsonl").exists():
        print(f"skipped: no dataset at {args.data}")
        return 0
    ds = load_dataset(args.data)
    res = Resources(SieveConfig.load())
    t0 = time.perf_counter()
    exp = Experiment(ds, res, depth=args.depth)
    base = exp.base_index()
    print(f"index: {len(base.ids)} documents, retriever {base.model_id} ({time.perf_counter() - t0:.1f} s)")
    by_family = {f: [r for r in ds.attacks if r.attack == f] for f in ds.attack_families()}
    for fam in ATTACKS.names():
        if fam not in by_family and fam not in ("pr_w", "paraphrase", "judge_aware") and ds.targets:
            extra: dict[str, Any] = {"data": str(args.data)} if "data" in ATTACKS.entry(fam).param_names() else {}
            by_family[fam] = generate_attack(fam, ds.targets, res, **extra).records

    if args.families:
        by_family = {f: r for f, r in by_family.items() if f in args.families}
    print(f"\n{'family':<16}{'targets':>8}{'poisons':>8}{'hit@5':>8}{'poisons@5':>11}{'best rank':>11}{'L1 keeps':>10}")
    for fam, records in by_family.items():
        if not records:
            continue
        m = family_effectiveness(exp, records, args.depth)
        print(f"{fam:<16}{m['targets']:>8}{len(records[0].documents):>8}{m['hit@5']:>8.2f}{m['poisons@5']:>11.2f}"
              f"{m['best_rank']:>11.2f}{m['l1_kept']:>10.2f}")

    prw = by_family.get("pr_w") or []
    metas = [d.metadata for r in prw for d in r.documents[:5]]
    if metas and "similarity_before" in metas[0]:
        b = np.mean([m["similarity_before"] for m in metas])
        a = np.mean([m["similarity_after"] for m in metas])
        secs = np.mean([r.documents[0].metadata.get("seconds_per_target", np.nan) for r in prw])
        print(f"\npr_w (as generated, {metas[0].get('iterations')} it × {metas[0].get('candidates')} cand): "
              f"similarity {b:.4f} -> {a:.4f} (gain {a - b:+.4f}), improved "
              f"{np.mean([m['hotflip_improved'] for m in metas]):.0%}, {secs:.1f} s/target")
    ja = [d.metadata for r in by_family.get("judge_aware") or [] for d in r.documents]
    if ja:
        mean = lambda k: float(np.mean([m[k] for m in ja]))  # noqa: E731
        print(f"judge_aware (as generated, {ja[0].get('iterations')} it × {ja[0].get('candidates')} cand, weight "
              f"{ja[0].get('weight')}): retriever similarity {mean('similarity_before'):.4f} -> "
              f"{mean('similarity_after'):.4f}, judge-majority cosine {mean('judge_majority_cos_before'):.4f} -> "
              f"{mean('judge_majority_cos_after'):.4f}, improved {np.mean([m['hotflip_improved'] for m in ja]):.0%}, "
              f"{np.mean([m['seconds_per_target'] for m in ja[::5]]):.1f} s/target")
    nd = [d.metadata["cosine_to_source"] for r in by_family.get("near_duplicate") or [] for d in r.documents]
    if nd:
        print(f"near_duplicate: retriever cosine to the source passage mean {np.mean(nd):.4f}, "
              f"min {np.min(nd):.4f}, p10 {np.percentile(nd, 10):.4f}, max {np.max(nd):.4f} (n={len(nd)})")
    if args.live_pr_w and ds.targets:
        out = generate_attack("pr_w", ds.targets[: args.live_pr_w], res, iterations=args.iterations,
                              candidates=args.candidates, progress=False)
        st = out.stats
        print(f"pr_w live ({args.live_pr_w} targets, {args.iterations} it × {args.candidates} cand): similarity "
              f"{st['mean_similarity_before']:.4f} -> {st['mean_similarity_after']:.4f} "
              f"(gain {st['mean_similarity_gain']:+.4f}), {st['seconds_per_target']:.1f} s/target")
        live = family_effectiveness(exp, out.records, args.depth)
        pr_b = family_effectiveness(exp, generate_attack("pr_b", ds.targets[: args.live_pr_w], res).records, args.depth)
        print(f"  same targets, own family only: pr_b best rank {pr_b['best_rank']:.2f} hit@5 {pr_b['hit@5']:.2f}"
              f" | pr_w best rank {live['best_rank']:.2f} hit@5 {live['hit@5']:.2f}")
    print(json.dumps({"depth": args.depth}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
