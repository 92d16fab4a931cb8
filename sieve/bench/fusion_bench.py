"""Fusion detector: warm latency, evidence ablation and the leave-one-family-out table (docs/algorithms.md §14.2, §14.4).

    sieve bench fusion [--calib 64] [--clean-test 64] [--limit 16] [--families a,b] [--configs A,B]
                       [--splits 10] [--split-configs default,B] [--out DIR]

On demo_data with the packaged models, depth 50, k_ctx 5:

* calibration on the first ``--calib`` clean queries only; clean removal measured on the next
  ``--clean-test`` clean queries (never calibrated on);
* the held-out clean removal of the default detector (and of ``--split-configs``) over ``--splits`` random 50/50 splits of the
  clean queries (calibrate on one half, measure on the other): mean, p10–p90 and max — one split
  says little, because the documents of one query are correlated and the queries are ordered by topic;
  with qrels, also the relevant passages of the top 5 removed and the questions keeping one (pooled
  over the splits: the clean budget bounds all clean documents, not the ones that answer);
* every configuration — the default evidence, all-but-one for each evidence, the default plus the
  answer evidence or RAGDefender, every other combination of the p-values (Fisher, omnibus, min-p),
  cohesion over the whole depth, the pairwise evidence over removed documents too (or not), a refill
  threshold lowered by ln 2, ln 3 or ln 4 once a query had a removal (``refill_factor``; alone and with
  the other pairwise scope), 3 or 10 refill rounds, and the previous default (Fisher without ROUGE-L) — is calibrated the same way and run on the first ``--limit`` targets of every family:
  poison-in-context with a Wilson 95 % interval (the ablation table); ``--configs`` runs a subset;
* the LOFO table (:mod:`sieve.evaluation.lofo`) chooses, for each family, the configuration on the
  other families only;
* warm latency (per-document caches filled by a first pass) of the full detector per query, p50/p95,
  against RSQ alone on the same rankings in the same run (ratio).

Writes ``fusion_bench.json`` and ``fusion_bench.md`` to ``--out`` when given. Nothing is asserted.
"""
from __future__ import annotations

import argparse
import json
import shlex
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from sieve.bench import DEMO_DATA
from sieve.bench.outputs import claim_outputs, mentions, write_outputs
from sieve.config import SieveConfig
from sieve.corpus import load_dataset
from sieve.defenses.fusion import COMBINE, DEFAULT_EVIDENCE, PAIRWISE_SCOPES, Fusion
from sieve.evaluation.lofo import CleanResult, FamilyResult, format_lofo, lofo_table
from sieve.evaluation.metrics import percentiles, wilson_interval
from sieve.experiment import prepare_defense
from sieve.experiment.workspace import open_experiment


def held_out_clean(exp, params, calib, test_clean, k_ctx=5, gold=None):
    """(calibrated defense, clean documents removed of those scored) on queries never calibrated on.
    With ``gold`` (a dict to fill) also the relevant passages (qrels) of the top ``k_ctx`` that were
    removed, and the questions whose final context still holds one."""
    d = prepare_defense(exp, Fusion(**params), clean_rankings=calib)
    removed = scored = 0
    qrels = exp.dataset.qrels
    for r in test_clean:
        res = d.apply(r, exp.resources, k_ctx)
        for x in res.decisions:
            if x.status == "scored":
                scored += 1
                removed += int(x.removed)
        rel = {i for i, v in qrels.get(r.query_id, {}).items() if v > 0} if gold is not None else set()
        if rel:
            top = rel & {x.doc_id for x in res.decisions[:k_ctx]}
            gone = {x.doc_id for x in res.decisions if x.removed}
            gold["removed"] = gold.get("removed", 0) + len(top & gone)
            gold["in_top"] = gold.get("in_top", 0) + len(top)
            gold["kept"] = gold.get("kept", 0) + int(bool(rel & {c.id for c in res.context}))
            gold["queries"] = gold.get("queries", 0) + 1
    return d, CleanResult(removed, scored)


def run_config(exp, ds, params, calib, test_clean, families, limit, k_ctx=5):
    d, clean = held_out_clean(exp, params, calib, test_clean, k_ctx)
    fams = {}
    for fam in families:
        if d.corpus_time:   # RSG and the answer evidence's corpus reference defend this family's snapshot
            d.fit(exp.snapshot(fam).index, exp.resources)
        k = n = 0
        for rec in ds.attack_records(fam)[:limit]:
            res = d.apply(exp.rank(rec.query, condition=fam, query_id=rec.query_id), exp.resources, k_ctx)
            k += int(any(c.poison for c in res.context))
            n += 1
        fams[fam] = FamilyResult(k, n)
    if d.corpus_time:
        d.fit(exp.snapshot("clean").index, exp.resources)
    return d, clean, fams


def forget_query_results() -> None:
    """Empty the memos of per-query results (sieve/defenses/memo.py, scope "query"): they make a
    repeated ranking free, while "warm" here means per-document caches filled and the query itself new."""
    from sieve.defenses import memo

    memo.clear("query")


def latency(exp, d, rankings, k_ctx=5):
    from sieve.defenses.rsq import RSQ

    rsq = RSQ()
    for r in rankings:                       # warm every per-document cache
        d.inspect(r, exp.resources, k_ctx)
        rsq.inspect(r, exp.resources, k_ctx)
    fus, base = [], []
    for r in rankings:
        forget_query_results()
        t = time.perf_counter()
        rsq.inspect(r, exp.resources, k_ctx)
        base.append((time.perf_counter() - t) * 1000)
        forget_query_results()
        t = time.perf_counter()
        d.inspect(r, exp.resources, k_ctx)
        fus.append((time.perf_counter() - t) * 1000)
    return fus, base


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dataset", default=str(DEMO_DATA))
    ap.add_argument("--calib", type=int, default=64)
    ap.add_argument("--clean-test", type=int, default=64)
    ap.add_argument("--limit", type=int, default=16)
    ap.add_argument("--families", default="")
    ap.add_argument("--evidence", default=",".join(DEFAULT_EVIDENCE))
    ap.add_argument("--no-ablation", action="store_true")
    ap.add_argument("--splits", type=int, default=10, help="random clean-query splits for the held-out removal")
    ap.add_argument("--split-configs", default="default",
                    help="comma-separated configurations whose held-out removal is measured over the random splits")
    ap.add_argument("--configs", default="", help="comma-separated configuration names to run (default: all)")
    ap.add_argument("--latency-only", action="store_true", help="only the warm latency of the default detector")
    ap.add_argument("--latency-condition", default="clean",
                    help="rankings the latency is measured on: clean, or an attack family (refill rounds cost more)")
    ap.add_argument("--latency-queries", type=int, default=32)
    ap.add_argument("--out", default="", help="directory for fusion_bench.json and fusion_bench.md (files an earlier "
                                              "fusion bench wrote are replaced; any other needs --force)")
    ap.add_argument("--force", action="store_true", help="replace those files even if this bench did not write them")
    a = ap.parse_args()
    outputs = (claim_outputs([Path(a.out) / "fusion_bench.json", Path(a.out) / "fusion_bench.md"],
                             mentions("sieve bench fusion"), force=a.force) if a.out else [])
    if a.latency_only:
        a.no_ablation, a.splits, a.limit = True, 0, 0

    ds = load_dataset(Path(a.dataset))
    exp = open_experiment(ds, SieveConfig.load(None), depth=50, progress=False)
    clean = exp.clean_rankings()
    calib, test_clean = clean[:a.calib], clean[a.calib:a.calib + a.clean_test]
    # no targets scored (--limit 0, --latency-only): no family columns, rather than rates of 0/0
    families = [] if a.limit == 0 else (a.families.split(",") if a.families else ds.attack_families())
    full = tuple(a.evidence.split(","))
    configs: dict[str, dict[str, Any]] = {"default": {"evidence": full}}
    if not a.no_ablation:
        configs.update({f"without {e}": {"evidence": tuple(x for x in full if x != e)} for e in full})
        for extra in ("answer", "ragdefender", "rouge", "similarity"):
            if extra not in full:
                configs[f"with {extra}"] = {"evidence": full + (extra,)}
        default_combine = Fusion().combine
        names = {"fisher": "Fisher combination", "omnibus": "omnibus (Fisher or min-p)", "minp": "min-p only",
                 "cauchy": "Cauchy combination"}
        for comb in COMBINE:
            if comb != default_combine:
                configs[names[comb]] = {"evidence": full, "combine": comb}
        configs["cohesion over depth 50"] = {"evidence": full, "cohesion_scope": 50}
        other_scope = next(x for x in PAIRWISE_SCOPES if x != Fusion().pairwise_scope)
        configs[f"pairwise evidence over {other_scope}"] = {"evidence": full, "pairwise_scope": other_scope}
        for factor in (1, 2, 3, 4):       # a suspect query's later rounds need `factor` times less evidence
            if factor != Fusion().refill_factor:
                configs[f"refill ×{factor} after a removal"] = {"evidence": full, "refill_factor": factor}
                configs[f"refill ×{factor} + pairwise over {other_scope}"] = {
                    "evidence": full, "refill_factor": factor, "pairwise_scope": other_scope}
        if Fusion().max_rounds != 3:
            configs["refill of 3 rounds (previous default)"] = {"evidence": full, "max_rounds": 3}
        else:
            configs["refill until clean (10 rounds)"] = {"evidence": full, "max_rounds": 10}
        if "rouge" in full:
            configs["previous default (Fisher without rouge)"] = {
                "evidence": tuple(x for x in full if x != "rouge"), "combine": "fisher"}
    if a.configs:
        wanted = a.configs.split(",")
        unknown = [w for w in wanted if w not in configs]
        if unknown:
            sys.exit(f"fusion bench: unknown --configs {unknown}; known: {', '.join(configs)}")
        configs = {k: v for k, v in configs.items() if k == "default" or k in wanted}
    print(f"fusion bench: {len(calib)} calibration / {len(test_clean)} held-out clean queries, "
          f"{a.limit} targets per family × {len(families)} families, k_ctx 5, depth 50")
    half = len(clean) // 2
    split_rates: dict[str, list[float]] = {}
    split_lines = []
    for cname in (a.split_configs.split(",") if a.splits else []):
        if cname not in configs:
            sys.exit(f"fusion bench: unknown --split-configs {cname!r}; known: {', '.join(configs)}")
        rng = np.random.default_rng(0)           # the same splits for every configuration
        rates = split_rates.setdefault(cname, [])
        gold: dict[str, int] = {}
        for s in range(a.splits):
            order = rng.permutation(len(clean))
            _, c = held_out_clean(exp, configs[cname], [clean[i] for i in order[:half]],
                                  [clean[i] for i in order[half:]], gold=gold)
            rates.append(c.rate)
            print(f"  {cname}: random split {s + 1}/{a.splits}: held-out clean removal {c.rate:.3f} ({c.k}/{c.n})",
                  flush=True)
        split_lines.append(
            f"{cname}: held-out clean removal over {len(rates)} random {half}/{len(clean) - half} splits of the "
            f"clean queries: mean {np.mean(rates):.3f}, p10–p90 {np.percentile(rates, 10):.3f}–"
            f"{np.percentile(rates, 90):.3f}, max {np.max(rates):.3f} (budget 0.05)"
            + (f"; relevant passages (qrels) of the top 5 removed {gold['removed']}/{gold['in_top']} = "
               f"{gold['removed'] / max(gold['in_top'], 1):.3f}, questions keeping one in the final context "
               f"{gold['kept']}/{gold['queries']} = {gold['kept'] / max(gold['queries'], 1):.3f}"
               if gold.get("queries") else ""))
        print(split_lines[-1], flush=True)
    splits = "\n\n".join(split_lines)
    results, cleans, full_defense = {}, {}, None
    for name, ev in configs.items():
        t = time.perf_counter()
        d, c, fams = run_config(exp, ds, ev, calib, test_clean, families, a.limit)
        full_defense = full_defense or d
        results[name], cleans[name] = fams, c
        print(f"  {name:<22} clean removal {c.rate:.3f} ({c.k}/{c.n})  "
              + "  ".join(f"{f} {r.rate:.2f}" for f, r in fams.items())
              + f"   [{time.perf_counter() - t:.0f} s]", flush=True)
    assert full_defense is not None   # configs always holds "default"

    lines = ["| " + " | ".join(["configuration", "clean removal (held-out)", *families]) + " |",
             "|---|---|" + "---|" * len(families)]
    for name in configs:
        c = cleans[name]
        lo, hi = wilson_interval(c.k, c.n)
        cells = []
        for f in families:
            r = results[name][f]
            flo, fhi = r.interval()
            cells.append(f"{r.rate:.2f} [{flo:.2f}, {fhi:.2f}]")
        lines.append("| " + " | ".join([name, f"{c.rate:.3f} [{lo:.3f}, {hi:.3f}] (n={c.n})", *cells]) + " |")
    ablation = "\n".join(lines)
    rows = lofo_table(results, cleans)
    lofo = format_lofo(rows) if families else "no attack targets scored (--limit 0 or --latency-only)"
    lat_rankings = test_clean[:a.latency_queries] or calib[:a.latency_queries]
    if a.latency_condition != "clean":
        if "rsg" in full_defense.evidence:
            full_defense.fit(exp.snapshot(a.latency_condition).index, exp.resources)
        lat_rankings = [exp.rank(rec.query, condition=a.latency_condition, query_id=rec.query_id)
                        for rec in ds.attack_records(a.latency_condition)[:a.latency_queries]]
    fus, base = latency(exp, full_defense, lat_rankings)
    f50, f95 = percentiles(fus)
    b50, b95 = percentiles(base)
    assert f50 is not None and f95 is not None and b50 is not None and b95 is not None, "no latency measured"
    lat = (f"warm latency per query at depth 50 ({a.latency_condition} rankings, n={len(fus)}): fusion p50 {f50:.1f} ms, p95 {f95:.1f} ms; "
           f"RSQ alone p50 {b50:.1f} ms, p95 {b95:.1f} ms; ratio p50 {f50 / b50:.2f}×, p95 {f95 / b95:.2f}×")
    print(f"\nAblation (poison-in-context, Wilson 95 % CI; n per family = {a.limit})\n" + ablation)
    print("\nLeave-one-family-out\n" + lofo)
    print("\n" + lat)
    if outputs:
        cmd = f"sieve bench fusion {shlex.join(sys.argv[1:])}"
        write_outputs({
            outputs[0]: json.dumps({
                "command": cmd,
                "args": vars(a),
                "clean": {k: {"removed": v.k, "n": v.n} for k, v in cleans.items()},
                "random_split_clean_removal": split_rates,
                "configs": {k: {kk: list(vv) if isinstance(vv, tuple) else vv for kk, vv in v.items()}
                            for k, v in configs.items()},
                "families": {k: {f: {"poison_in_context": r.k, "n": r.n} for f, r in v.items()} for k, v in results.items()},
                "lofo": [{"family": r.family, "chosen": r.chosen, "k": r.result.k, "n": r.result.n} for r in rows],
                "latency_ms": {"fusion": fus, "rsq": base},
            }, indent=1),
            outputs[1]: (f"# Fusion bench\n\nCommand: `{cmd}`\n\n"
                         f"## Held-out clean removal\n\n{splits}\n\n## Ablation\n\n{ablation}\n\n"
                         f"## Leave-one-family-out\n\n{lofo}\n\n## Latency\n\n{lat}\n"),
        })

if __name__ == "__main__":
    main()
