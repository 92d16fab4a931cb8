"""The development suite (docs/algorithms.md §9.4): every dataset × family × defense, with truth-kept.

    sieve bench suite [--datasets demo,demo-faq,msmarco-gold,msmarco-gold-faq] [--defenses none,tris_l2,...]
                      [--fusion-configs default,refill1,...] [--limit N] [--work DIR] [--out DIR] [--shared DIR]

Datasets are built at run time (:mod:`sieve.evaluation.suite`) from ``../shared/data`` (the
development data beside the project; never copied into it). For each dataset, depth 50, k_ctx 5:

* the clean queries are split in two by a hash of their id: thresholds (and fusion's nulls) are
  learned on one half only, and clean removal and truth-kept on clean rankings are measured on the
  other half, never calibrated on;
* every defense runs on the held-out clean rankings and on every target of every family; the rows
  are ``summary.json`` rows (:func:`sieve.evaluation.summary.summary_row`: poison-in-context with a
  Wilson interval, AUROC and detection at 5 % against the held-out clean scores, clean removal) plus
  truth-kept on clean and attacked rankings (:mod:`sieve.evaluation.truth`);
* fusion is run once per configuration of ``--fusion-configs``; the leave-one-dataset-out table
  chooses, for each dataset, the configuration on the *other* datasets only (within the clean budget
  and keeping ≥ 90 % of its clean truth-kept), and the leave-one-family-out table the same per family.

No LLM is called (as ``sieve eval --no-llm``). Writes ``suite.json`` and ``suite.md`` to ``--out`` when
given. Nothing is asserted.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import shlex
import sys
import time
from pathlib import Path
from typing import Any

from sieve.bench import DEMO_DATA, ROOT
from sieve.cli.common import load_config, load_dataset, open_experiment
from sieve.constants import CLEAN
from sieve.evaluation.suite import DATASETS, UNTARGETED, build_suite
from sieve.evaluation.summary import _negatives, summary_row
from sieve.evaluation.truth import relevant_ids
from sieve.experiment import prepare_defense

SHARED = ROOT.parent / "shared" / "data"
COMPONENTS = ("none", "tris_l2", "rsq", "rsg", "perplexity", "trustrag", "rsg_rsq", "answer_consistency",
              "ragdefender")
#: Fusion configurations (parameters of :class:`~sieve.defenses.fusion.Fusion`); the first is the default.
FUSION_CONFIGS: dict[str, dict[str, Any]] = {
    "default": {},
    "refill1": {"refill_factor": 1.0, "pairwise_scope": "survivors"},
    "+answer": {"evidence": ("l2", "rsq", "rsg", "cohesion", "perplexity", "rouge", "answer")},
    "+similarity": {"evidence": ("l2", "rsq", "rsg", "cohesion", "perplexity", "rouge", "similarity")},
    "refill1+similarity": {"refill_factor": 1.0, "pairwise_scope": "survivors",
                           "evidence": ("l2", "rsq", "rsg", "cohesion", "perplexity", "rouge", "similarity")},
    "-rsg": {"evidence": ("l2", "rsq", "cohesion", "perplexity", "rouge")},
    "refill1-rsg": {"refill_factor": 1.0, "pairwise_scope": "survivors",
                    "evidence": ("l2", "rsq", "cohesion", "perplexity", "rouge")},
}
TRUTH_RATIO = 0.9


def split_clean(query_ids: list[str]) -> tuple[set[str], set[str]]:
    """(calibration, held-out) halves of the clean queries, by a hash of the id (stable across runs)."""
    calib = {q for q in query_ids if hashlib.sha256(q.encode()).digest()[0] % 2 == 0}
    return calib, set(query_ids) - calib


def _record(qid: str, cond: str, spec: str, ranking: Any, result: Any, own: set[str], rel: list[str]) -> dict[str, Any]:
    return {"query_id": qid, "condition": cond, "defense": spec, "error": None,
            "ranking": [{"id": d.id, "rank": d.rank, "poison": d.poison} for d in ranking.documents],
            "own_poison_ids": sorted(own), "context_ids": [c.id for c in result.context],
            "decisions": [{"doc_id": x.doc_id, "status": x.status, "score": x.score, "removed": x.removed}
                          for x in result.decisions],
            "relevant_ids": rel, "latency_ms": result.latency_ms.get("total"), "answer": None}


def run_dataset(name: str, path: Path, cfg: Any, specs: list[str], fusion_configs: list[str], limit: int | None,
                k_ctx: int = 5) -> list[dict[str, Any]]:
    """Summary rows (plus truth-kept) of every defense on every condition of one dataset."""
    from tqdm.auto import tqdm

    ds = load_dataset(path)
    exp = open_experiment(ds, cfg, progress=True)
    res = exp.resources
    clean_q = [q for q in ds.queries]
    calib_ids, test_ids = split_clean([q.id for q in clean_q])
    rankings: dict[tuple[str, str], Any] = {}
    items: dict[str, list[tuple[str, Any, set[str], list[str]]]] = {}
    t0 = time.perf_counter()
    for q in tqdm(clean_q, desc=f"{name}: rank clean", unit="q"):
        r = exp.rank(q.text, condition=CLEAN, query_id=q.id, correct_answers=q.answers)
        rankings[(CLEAN, q.id)] = r
    items[CLEAN] = [(q.id, rankings[(CLEAN, q.id)], set(), relevant_ids(ds.qrels, q.id, q.answers,
                                                                         rankings[(CLEAN, q.id)]))
                    for q in clean_q if q.id in test_ids]
    calib = [rankings[(CLEAN, q.id)] for q in clean_q if q.id in calib_ids]
    for fam in ds.attack_families():
        targets = ds.attack_records(fam)[:limit or None]
        items[fam] = []
        for rec in tqdm(targets, desc=f"{name}: rank {fam}", unit="q"):
            r = exp.rank(rec.query, condition=fam, query_id=rec.query_id, correct_answers=rec.correct_answers,
                         target_answer=rec.target_answer)
            own = {d.id for d in rec.documents}
            items[fam].append((rec.query_id, r, own, relevant_ids(ds.qrels, rec.query_id, rec.correct_answers, r)))
    print(f"{name}: ranked {sum(len(v) for v in items.values()) + len(calib)} queries in {time.perf_counter() - t0:.0f} s",
          flush=True)
    rows = []
    runs = [(s, s, None) for s in specs] + [(f"fusion[{c}]", "fusion", FUSION_CONFIGS[c]) for c in fusion_configs]
    for label, spec, params in runs:
        t1 = time.perf_counter()
        try:
            from sieve.defenses.fusion import Fusion

            d = prepare_defense(exp, Fusion(**params) if params is not None else spec, clean_rankings=calib)
        except Exception as e:  # noqa: BLE001 - a defense that cannot run here is reported, not fatal
            print(f"{name}: {label} not prepared: {type(e).__name__}: {e}", flush=True)
            continue
        recs: dict[str, list[dict[str, Any]]] = {}
        for cond, its in items.items():
            if d.corpus_time:
                prepare_defense(exp, d, condition=cond, calibrate=False)
            recs[cond] = [_record(qid, cond, label, r, d.apply(r, res, k_ctx), own, rel)
                          for qid, r, own, rel in tqdm(its, desc=f"{name}: {label} × {cond}", unit="q", leave=False)]
        if d.corpus_time:
            prepare_defense(exp, d, condition=CLEAN, calibrate=False)
        neg = _negatives(recs[CLEAN])
        clean_row = summary_row(label, CLEAN, recs[CLEAN], neg)
        for cond, rr in recs.items():
            row = summary_row(label, cond, rr, neg)
            row.update(dataset=name, untargeted=cond in UNTARGETED, clean_truth_kept=clean_row.get("truth_kept"),
                       clean_removal_on_clean=clean_row.get("clean_removal_rate"))
            rows.append(row)
        print(f"{name}: {label} in {time.perf_counter() - t1:.0f} s", flush=True)
    return rows


def _pct(x: Any, digits: int = 2) -> str:
    return "—" if x is None else f"{x:.{digits}f}"


def format_suite(rows: list[dict[str, Any]]) -> str:
    """The suite table (markdown): one line per dataset × family × defense."""
    out = ["| dataset | family | defense | n | poison-in-context [95 % CI] | truth-kept attacked / clean | "
           "AUROC | detect@5 % | clean removal attacked / clean |", "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if r["attack"] == CLEAN:
            continue
        ci = r.get("poison_in_context_ci95")
        pic = _pct(r["poison_in_context_rate"]) + (f" [{ci[0]:.2f}, {ci[1]:.2f}]" if ci else "")
        fam = r["attack"] + (" (untargeted)" if r.get("untargeted") else "")
        out.append(f"| {r['dataset']} | {fam} | {r['defense']} | {r['queries']} | {pic} | "
                   f"{_pct(r.get('truth_kept'))} / {_pct(r.get('clean_truth_kept'))} | {_pct(r.get('auroc'))} | "
                   f"{_pct(r.get('detect_at_5pct'))} | {_pct(r.get('clean_removal_rate'), 3)} / "
                   f"{_pct(r.get('clean_removal_on_clean'), 3)} |")
    return "\n".join(out)


def choose(rows: list[dict[str, Any]], configs: list[str], cells: list[tuple[str, str]], budget: float = 0.05
           ) -> tuple[str, float]:
    """The fusion configuration with the lowest mean poison-in-context over ``cells`` (dataset,
    family), among those within the clean budget on held-out clean queries and keeping at least
    :data:`TRUTH_RATIO` of their clean truth-kept on attacked rankings, in those cells (ties: the
    earlier configuration, i.e. the default)."""
    by = {(r["dataset"], r["attack"], r["defense"]): r for r in rows}
    scored: list[tuple[bool, float, int, str]] = []
    for order, c in enumerate(configs):
        label = f"fusion[{c}]"
        vals, ratios, within = [], [], True
        for ds, fam in cells:
            r = by.get((ds, fam, label))
            if r is None or r.get("poison_in_context_rate") is None:
                continue
            within = within and (r.get("clean_removal_on_clean") or 0.0) <= budget + 1e-9
            tk, tc = r.get("truth_kept"), r.get("clean_truth_kept")
            if tk is not None and tc:
                ratios.append(tk / tc)
            vals.append(r["poison_in_context_rate"])
        if not vals:
            continue
        keeps = not ratios or sum(ratios) / len(ratios) >= TRUTH_RATIO
        scored.append((not (within and keeps), sum(vals) / len(vals), order, c))
    if not scored:
        return configs[0], float("inf")
    failed, mean, _, best = min(scored)
    return (best + " (no configuration met the budget and truth-kept rules)" if failed else best), mean


def _mean_pic(by: dict[tuple[str, str, str], dict[str, Any]], cells: list[tuple[str, str]], cfg: str) -> str:
    v = [by[(d, f, f"fusion[{cfg}]")]["poison_in_context_rate"] for d, f in cells if (d, f, f"fusion[{cfg}]") in by]
    return f"{sum(v) / len(v):.3f}" if v else "—"


def held_out_tables(rows: list[dict[str, Any]], configs: list[str]) -> str:
    """Leave-one-dataset-out and leave-one-family-out choices of the fusion configuration."""
    cells = sorted({(r["dataset"], r["attack"]) for r in rows if r["attack"] != CLEAN and not r.get("untargeted")})
    by = {(r["dataset"], r["attack"], r["defense"]): r for r in rows}
    out = ["| held out | configuration chosen without it | its poison-in-context there (mean) | default there |",
           "|---|---|---|---|"]
    for kind, key in (("dataset", 0), ("family", 1)):
        for held in sorted({c[key] for c in cells}):
            others = [c for c in cells if c[key] != held]
            mine = [c for c in cells if c[key] == held]
            chosen, _ = choose(rows, configs, others)
            name = chosen.split(" (", 1)[0]
            out.append(f"| {kind} {held} | {chosen} | {_mean_pic(by, mine, name)} | "
                       f"{_mean_pic(by, mine, configs[0])} |")
    return "\n".join(out)


def no_regret(rows: list[dict[str, Any]], components: list[str], fusion: str = "fusion[default]",
              budget: float = 0.05) -> str:
    """Fusion beside its best component per dataset × family: the component with the lowest
    poison-in-context among those within the clean budget on held-out clean queries, and whether
    fusion is at least as good within the Wilson interval, on poison-in-context and on truth-kept."""
    by = {(r["dataset"], r["attack"], r["defense"]): r for r in rows}
    cells = sorted({(r["dataset"], r["attack"]) for r in rows if r["attack"] != CLEAN})
    out = ["| dataset | family | fusion PIC [CI] / truth-kept | best component within budget: PIC / truth-kept | "
           "fusion ≥ best? |", "|---|---|---|---|---|"]
    for ds, fam in cells:
        f = by.get((ds, fam, fusion))
        if f is None:
            continue
        comps = [by[(ds, fam, c)] for c in components if c != "none" and (ds, fam, c) in by
                 and by[(ds, fam, c)].get("poison_in_context_rate") is not None
                 and (by[(ds, fam, c)].get("clean_removal_on_clean") or 0.0) <= budget + 1e-9]
        if not comps:
            continue
        best = min(comps, key=lambda r: (r["poison_in_context_rate"], -(r.get("truth_kept") or 0.0)))
        ci = f.get("poison_in_context_ci95") or [0.0, 1.0]
        ok_pic = ci[0] <= best["poison_in_context_rate"] + 1e-12
        ok_truth = (f.get("truth_kept") or 0.0) >= (best.get("truth_kept") or 0.0) - 0.05
        verdict = "yes" if ok_pic and ok_truth else ("no (poisons)" if not ok_pic else "no (truth)")
        out.append(f"| {ds} | {fam} | {_pct(f['poison_in_context_rate'])} [{ci[0]:.2f}, {ci[1]:.2f}] / "
                   f"{_pct(f.get('truth_kept'))} | {best['defense']}: {_pct(best['poison_in_context_rate'])} / "
                   f"{_pct(best.get('truth_kept'))} | {verdict} |")
    return "\n".join(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--datasets", default=",".join(DATASETS))
    ap.add_argument("--defenses", default=",".join(COMPONENTS))
    ap.add_argument("--fusion-configs", default=",".join(FUSION_CONFIGS))
    ap.add_argument("--limit", type=int, default=None, help="first N targets of every family")
    ap.add_argument("--work", type=Path, default=Path("/tmp/sieve-suite"), help="where the datasets are built")
    ap.add_argument("--shared", type=Path, default=SHARED, help="the development data (../shared/data)")
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--reuse", action="store_true", help="use the datasets already built under --work")
    args = ap.parse_args()
    names = [x for x in args.datasets.split(",") if x]
    configs = [x for x in args.fusion_configs.split(",") if x]
    bad = [c for c in configs if c not in FUSION_CONFIGS]
    if bad:
        sys.exit(f"error: unknown fusion configuration(s) {', '.join(bad)}; known: {', '.join(FUSION_CONFIGS)}")
    cfg = load_config(None)
    cfg.llm.enabled = False   # no LLM: TRIS L3 and TrustRAG's consolidation are skipped, as with `sieve eval --no-llm`
    from sieve.cli.common import make_resources

    res = make_resources(cfg, load_dataset(DEMO_DATA))
    shared = args.shared if (args.shared / "poisonedrag" / "msmarco.json").exists() else None
    if shared is None and any(n.startswith("msmarco") for n in names):
        print(f"note: {args.shared} not found; the msmarco datasets are skipped", flush=True)
    built = build_suite(args.work, res, demo=DEMO_DATA, shared_data=shared, datasets=names, progress=True,
                        reuse=args.reuse)
    rows: list[dict[str, Any]] = []
    for name in names:
        if name in built:
            rows += run_dataset(name, built[name], cfg, [s for s in args.defenses.split(",") if s], configs, args.limit)
    components = [s for s in args.defenses.split(",") if s]
    table, held = format_suite(rows), held_out_tables(rows, configs)
    regret = no_regret(rows, components, f"fusion[{configs[0]}]") if configs else ""
    print(table)
    print()
    print(held)
    print()
    print(regret)
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        cmd = "sieve bench suite " + " ".join(shlex.quote(a) for a in sys.argv[1:])
        (args.out / "suite.json").write_text(json.dumps({"command": cmd, "rows": rows}, indent=1, default=str))
        (args.out / "suite.md").write_text(f"Regenerate: `{cmd}`\n\n{table}\n\n{held}\n\n{regret}\n",
                                           encoding="utf-8")


if __name__ == "__main__":
    main()
