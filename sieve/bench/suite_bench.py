"""The development suite (docs/algorithms.md §9.4): every dataset × family × defense, with truth-kept.

    sieve bench suite [--datasets demo,demo-faq,msmarco-gold,msmarco-gold-faq,msmarco-gold-snippet] [--defenses none,tris_l2,...]
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
from sieve.bench.outputs import claim_outputs, mentions, write_outputs
from sieve.config import SieveConfig
from sieve.constants import CLEAN
from sieve.corpus import load_dataset
from sieve.evaluation.choice import format_generation, format_suite, held_out_tables, no_regret
from sieve.evaluation.suite import DATASETS, UNTARGETED, build_suite
from sieve.evaluation.summary import _negatives, summary_row
from sieve.evaluation.truth import relevant_ids
from sieve.experiment import build_defense, prepare_defense
from sieve.experiment.workspace import make_resources, open_experiment

SHARED = ROOT.parent / "shared" / "data"
COMPONENTS = ("none", "tris_l2", "rsq", "rsg", "perplexity", "trustrag", "rsg_rsq", "answer_consistency",
              "ragdefender", "context_conflict", "promotion", "query_similarity")
#: Component rows under another configuration than the registered default (``--defenses`` takes these
#: labels too): RSQ ships the paper's fixed η_Q = 1.0, so ``prepare_defense`` sees it as calibrated and
#: its ``rsq`` row is the paper's rule, not the clean budget; ``rsq[calibrated]`` learns η_Q on the
#: calibration half like every budgeted component (docs/results/suite.md, fifth session).
COMPONENT_VARIANTS: dict[str, tuple[str, dict[str, Any]]] = {
    "rsq[calibrated]": ("rsq", {"eta_q": None}),
    "rsq_rescore[calibrated]": ("rsq_rescore", {"eta_q": None}),
    "context_conflict[min]": ("context_conflict", {"rival_weight": "min"}),
    "context_conflict[answering]": ("context_conflict", {"rival_weight": "answering"}),
    "mutual_cohesion[m4]": ("mutual_cohesion", {"neighbours": 4}),
}
#: The shipped default until the second suite session (docs/results/suite.md): every configuration
#: below is written out against it, so that a change of the default never changes what a name means.
V2: dict[str, Any] = {"ties": "conservative", "refill_factor": 3.0, "pairwise_scope": "seen",
                      "evidence": ("l2", "rsq", "rsg", "cohesion", "perplexity", "rouge"), "density_mutual": 0}
_R1 = {"refill_factor": 1.0, "pairwise_scope": "survivors"}
_MID_R1 = {**V2, **_R1, "ties": "mid"}
_NO_COHESION = ("l2", "rsq", "rsg", "perplexity", "rouge")
#: The default chosen in the second suite session (= ``mid-refill1-cohesion+conflict``); the third
#: session's entries are written out against it. The fourteenth session's default is D3 with
#: ``density_mutual`` 4 (= ``d3+mutual-density``).
D3: dict[str, Any] = {**_MID_R1, "evidence": _NO_COHESION + ("conflict",)}
#: Fusion configurations (parameters of :class:`~sieve.defenses.fusion.Fusion`); ``default`` is the
#: class's own defaults. Which were written after looking at which data: docs/results/suite.md.
FUSION_CONFIGS: dict[str, dict[str, Any]] = {
    "default": {},
    "v2": dict(V2),
    "d3": dict(D3),   # the default of the second to the thirteenth session (rows labelled fusion[default] then)
    # first session (after the held-out report of issue 23):
    "refill1": {**V2, **_R1},
    "+answer": {**V2, "evidence": V2["evidence"] + ("answer",)},
    "+similarity": {**V2, "evidence": V2["evidence"] + ("similarity",)},
    "refill1+similarity": {**V2, **_R1, "evidence": V2["evidence"] + ("similarity",)},
    "-rsg": {**V2, "evidence": ("l2", "rsq", "cohesion", "perplexity", "rouge")},
    "refill1-rsg": {**V2, **_R1, "evidence": ("l2", "rsq", "cohesion", "perplexity", "rouge")},
    # second session (after the msmarco-gold diagnosis of docs/results/suite.md):
    "mid": {**V2, "ties": "mid"},
    "mid-refill1": dict(_MID_R1),
    "mid-cohesion": {**V2, "ties": "mid", "evidence": _NO_COHESION},
    "mid-refill1-cohesion": {**_MID_R1, "evidence": _NO_COHESION},
    "mid-refill1-cohesion-seen": {**_MID_R1, "pairwise_scope": "seen", "evidence": _NO_COHESION},
    "mid+c": {**V2, "ties": "mid", "component_budget": 0.005},
    "mid-refill1+c": {**_MID_R1, "component_budget": 0.005},
    "mid-refill1-cohesion+c": {**_MID_R1, "component_budget": 0.005, "evidence": _NO_COHESION},
    "mid-refill1+conflict": {**_MID_R1, "evidence": V2["evidence"] + ("conflict",)},
    "mid-refill1-cohesion+conflict": {**_MID_R1, "evidence": _NO_COHESION + ("conflict",)},
    # third session (after measuring promotion and query similarity alone on msmarco-gold and the demo):
    "d3+similarity": {**D3, "evidence": D3["evidence"] + ("similarity",)},
    "d3+promotion": {**D3, "evidence": D3["evidence"] + ("promotion",)},
    "d3+promotion+similarity": {**D3, "evidence": D3["evidence"] + ("promotion", "similarity")},
    "d3+promotion-conflict": {**D3, "evidence": _NO_COHESION + ("promotion",)},
    # after the no-regret table showed perplexity alone dominating fusion on GPT-4 poisons (diluted in
    # the combination): each evidence also decides alone within a larger share of the budget
    "d3+c1": {**D3, "component_budget": 0.01},
    "d3+c2": {**D3, "component_budget": 0.02},
    # seventh session (after the msmarco-gold pr_b diagnosis: the gold passage removed in a refill
    # round, RSG's density among the drivers of 8 of 13 — is its density its poisons'?)
    "d3+survivor-density": {**D3, "density_scope": "survivors"},
    # (after the same diagnosis: 5 of those 12–13 gold passages "conflict" with an off-topic passage
    # of the refilled context whose generic phrase many pages state)
    "d3+conflict-min": {**D3, "conflict_weight": "min"},
    "d3+conflict-answering": {**D3, "conflict_weight": "answering"},
    # eleventh session (after measuring mutual_cohesion alone: 4 of 5 GPT-4 poisons of msmarco-gold
    # above its clean 95th percentile with the gold passage kept; over budget on the demo)
    "d3+mutual": {**D3, "evidence": D3["evidence"] + ("mutual",)},
    "d3+mutual+promotion": {**D3, "evidence": D3["evidence"] + ("mutual", "promotion")},
    # twelfth session (after a probe of m on msmarco-gold and the demo: with m = 4, every passage of a group
    # of five mutually near poisons names the other four, so no member sits at the end of a chain)
    "d3+mutual4": {**D3, "evidence": D3["evidence"] + ("mutual",), "mutual_neighbours": 4},
    "d3+mutual4+promotion": {**D3, "evidence": D3["evidence"] + ("mutual", "promotion"), "mutual_neighbours": 4},
    # (after d3+mutual4 lost the demo's true passages to mutual alone at its p-value floor: under Fisher one
    # extreme evidence weighs less against the others than under Cauchy; d3+fisher is the control)
    "d3+fisher": {**D3, "combine": "fisher"},
    "d3+mutual4+fisher": {**D3, "evidence": D3["evidence"] + ("mutual",), "mutual_neighbours": 4, "combine": "fisher"},
    # (after reading d3+mutual4's poisons left on msmarco-gold-faq pr_b: mutual p50 0.22 in their last round — a
    # refill round recomputes mutual neighbours among the survivors, so removing four poisons launders the fifth)
    "d3+mutual4+seen": {**D3, "evidence": D3["evidence"] + ("mutual",), "mutual_neighbours": 4, "pairwise_scope": "seen"},
    # thirteenth session (after reading the default's truth lost on demo-faq trigger families: 34 relevant removals
    # on pr_b, RSG's density among the drivers of 33 — a true passage dense by the company of its poisons)
    "d3+mutual4+seen+survivor-density": {**D3, "evidence": D3["evidence"] + ("mutual",), "mutual_neighbours": 4,
                                         "pairwise_scope": "seen", "density_scope": "survivors"},
    "d3+seen+survivor-density": {**D3, "pairwise_scope": "seen", "density_scope": "survivors"},
    # (after reading the same removals' evidence: ROUGE-L p <= 0.05 for 54 % of the relevant passages removed in
    # round 1 — an FAQ passage shares the question's words with every poison that repeats it)
    "d3+rouge-query": {**D3, "rouge_query": "drop"},
    "d3+mutual4+seen+rouge-query": {**D3, "evidence": D3["evidence"] + ("mutual",), "mutual_neighbours": 4,
                                    "pairwise_scope": "seen", "rouge_query": "drop"},
    # fourteenth session (after a probe of RSG's density over mutual corpus neighbours only, on the attacked snapshots
    # of all four datasets: share of relevant passages at p <= 0.05 0.32 -> 0.01 on msmarco-gold pr_b, 0.74 -> 0.22 on
    # msmarco-gold-faq pr_b, 0.55 -> 0.38 on demo-faq pr_b with m = 4; poisons 0.98 -> 0.98, 0.91 -> 0.89)
    "d3+mutual-density": {**D3, "density_mutual": 4},
    "d3+mutual-density3": {**D3, "density_mutual": 3},
    "d3+mutual-density+survivor-density": {**D3, "density_mutual": 4, "density_scope": "survivors"},
    "d3+mutual4+seen+mutual-density": {**D3, "evidence": D3["evidence"] + ("mutual",), "mutual_neighbours": 4,
                                       "pairwise_scope": "seen", "density_mutual": 4},
}


def split_clean(query_ids: list[str]) -> tuple[set[str], set[str]]:
    """(calibration, held-out) halves of the clean queries, by a hash of the id (stable across runs)."""
    calib = {q for q in query_ids if hashlib.sha256(q.encode()).digest()[0] % 2 == 0}
    return calib, set(query_ids) - calib


def _record(qid: str, cond: str, spec: str, ranking: Any, result: Any, own: set[str], rel: list[str],
            answers: tuple[list[str], str | None] = ([], None)) -> dict[str, Any]:
    return {"query_id": qid, "condition": cond, "defense": spec, "error": None,
            "correct_answers": list(answers[0]), "target_answer": answers[1],
            "ranking": [{"id": d.id, "rank": d.rank, "poison": d.poison} for d in ranking.documents],
            "own_poison_ids": sorted(own), "context_ids": [c.id for c in result.context],
            "decisions": [{"doc_id": x.doc_id, "status": x.status, "score": x.score, "removed": x.removed}
                          for x in result.decisions],
            "relevant_ids": rel, "latency_ms": result.latency_ms.get("total"), "answer": None}


def run_dataset(name: str, path: Path, cfg: Any, specs: list[str], fusion_configs: list[str], limit: int | None,
                k_ctx: int = 5, resources: Any = None, generator: Any = None,
                generate_conditions: set[str] | None = None, cross_fit_clean: bool = False) -> list[dict[str, Any]]:
    """Summary rows (plus truth-kept) of every defense on every condition of one dataset; with a
    ``generator`` (:class:`~sieve.evaluation.answers.Generator`), answers from each final context of
    the ``generate_conditions`` (all when None) give clean accuracy and ASR. With ``cross_fit_clean``
    the clean row covers every clean question: the held-out half by the defense calibrated on the
    calibration half (as without it), the calibration half by a second one calibrated on the held-out
    half — no question is answered by a detector calibrated on it. AUROC keeps the held-out half's
    scores as negatives (one detector's score scale)."""
    from tqdm.auto import tqdm

    ds = load_dataset(path)
    exp = open_experiment(ds, cfg, progress=True, resources=resources)
    res = exp.resources
    clean_q = [q for q in ds.queries]
    calib_ids, test_ids = split_clean([q.id for q in clean_q])
    rankings: dict[tuple[str, str], Any] = {}
    items: dict[str, list[tuple[str, Any, set[str], list[str], tuple[list[str], str | None]]]] = {}
    t0 = time.perf_counter()
    for q in tqdm(clean_q, desc=f"{name}: rank clean", unit="q"):
        r = exp.rank(q.text, condition=CLEAN, query_id=q.id, correct_answers=q.answers)
        rankings[(CLEAN, q.id)] = r

    def clean_item(q: Any) -> tuple[str, Any, set[str], list[str], tuple[list[str], str | None]]:
        r = rankings[(CLEAN, q.id)]
        return q.id, r, set(), relevant_ids(ds.qrels, q.id, q.answers, r), (list(q.answers), None)

    items[CLEAN] = [clean_item(q) for q in clean_q if q.id in test_ids]
    calib = [rankings[(CLEAN, q.id)] for q in clean_q if q.id in calib_ids]
    swapped = [clean_item(q) for q in clean_q if q.id in calib_ids] if cross_fit_clean else []
    for fam in ds.attack_families():
        targets = ds.attack_records(fam)[:limit or None]
        items[fam] = []
        for rec in tqdm(targets, desc=f"{name}: rank {fam}", unit="q"):
            r = exp.rank(rec.query, condition=fam, query_id=rec.query_id, correct_answers=rec.correct_answers,
                         target_answer=rec.target_answer)
            own = {d.id for d in rec.documents}
            items[fam].append((rec.query_id, r, own, relevant_ids(ds.qrels, rec.query_id, rec.correct_answers, r),
                               (list(rec.correct_answers), rec.target_answer)))
    print(f"{name}: ranked {sum(len(v) for v in items.values()) + len(calib)} queries in {time.perf_counter() - t0:.0f} s",
          flush=True)
    rows = []
    runs = ([(s, *COMPONENT_VARIANTS.get(s, (s, None))) for s in specs]
            + [(f"fusion[{c}]", "fusion", FUSION_CONFIGS[c]) for c in fusion_configs])
    for label, spec, params in runs:
        t1 = time.perf_counter()
        learned: dict[str, Any] = {}
        try:
            d = prepare_defense(exp, _defense(spec, params), clean_rankings=calib, learned=learned)
        except Exception as e:  # noqa: BLE001 - a defense that cannot run here is reported, not fatal
            print(f"{name}: {label} not prepared: {type(e).__name__}: {e}", flush=True)
            continue
        recs: dict[str, list[dict[str, Any]]] = {}
        for cond, its in items.items():
            if d.corpus_time:
                prepare_defense(exp, d, condition=cond, calibrate=False)
            answering = generator if generate_conditions is None or cond in generate_conditions else None
            recs[cond] = _records(d, its, cond, label, res, k_ctx, answering, f"{name}: {label} × {cond}")
        if d.corpus_time:
            prepare_defense(exp, d, condition=CLEAN, calibrate=False)
        neg = _negatives(recs[CLEAN])
        if swapped:
            recs[CLEAN] += _cross_fitted(exp, label, params, spec, swapped, [r for _, r, *_ in items[CLEAN]],
                                         res, k_ctx, generator if generate_conditions is None
                                         or CLEAN in generate_conditions else None)
        clean_row = summary_row(label, CLEAN, recs[CLEAN], neg)
        for cond, rr in recs.items():
            row = summary_row(label, cond, rr, neg)
            row.update(dataset=name, untargeted=cond in UNTARGETED, clean_truth_kept=clean_row.get("truth_kept"),
                       clean_removal_on_clean=clean_row.get("clean_removal_rate"),
                       clean_scored_on_clean=clean_row.get("n_scored_clean"))
            if hasattr(d, "document_threshold_"):   # fusion: how far the procedure bisection raised it
                row.update(threshold=getattr(d, "threshold", None), document_threshold=d.document_threshold_,
                           calibration_removal=list(getattr(d, "calibration_removal_", ())))
            elif learned:                           # any other component: what calibration set
                row.update(learned=dict(learned))
            rows.append(row)
        print(f"{name}: {label} in {time.perf_counter() - t1:.0f} s", flush=True)
    return rows


def _defense(spec: str, params: dict[str, Any] | None) -> Any:
    """What :func:`prepare_defense` is handed for one run: a registered name, built with ``params``
    when given (a fusion configuration, a component variant)."""
    return spec if params is None else build_defense(spec, params)


def _records(d: Any, its: list[Any], cond: str, label: str, res: Any, k_ctx: int, generator: Any,
             desc: str) -> list[dict[str, Any]]:
    """One record per item of ``its`` with ``d``'s final context (and, with a ``generator``, its answer)."""
    from tqdm.auto import tqdm

    out = []
    for qid, r, own, rel, ans in tqdm(its, desc=desc + (" (answering)" if generator is not None else ""),
                                      unit="q", leave=False):
        result = d.apply(r, res, k_ctx)
        rec = _record(qid, cond, label, r, result, own, rel, ans)
        if generator is not None:
            rec["answer"] = generator.answer(r.query, [c.text for c in result.context]).text
        out.append(rec)
    return out


def _cross_fitted(exp: Any, label: str, params: dict[str, Any] | None, spec: str, its: list[Any],
                  calibration: list[Any], res: Any, k_ctx: int, generator: Any) -> list[dict[str, Any]]:
    """Records of the calibration half's clean questions by a fresh defense calibrated on the
    held-out half (``run_dataset``'s ``cross_fit_clean``)."""
    d = prepare_defense(exp, _defense(spec, params), clean_rankings=calibration)
    return _records(d, its, CLEAN, label, res, k_ctx, generator, f"{label} × clean, other half")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--datasets", default=",".join(DATASETS))
    ap.add_argument("--defenses", default=",".join(COMPONENTS),
                    help="component rows: registered names, or a variant of COMPONENT_VARIANTS ("
                         + ", ".join(COMPONENT_VARIANTS) + ")")
    ap.add_argument("--fusion-configs", default=",".join(FUSION_CONFIGS))
    ap.add_argument("--limit", type=int, default=None, help="first N targets of every family")
    ap.add_argument("--work", type=Path, default=Path("/tmp/sieve-suite"), help="where the datasets are built")
    ap.add_argument("--shared", type=Path, default=SHARED, help="the development data (../shared/data)")
    ap.add_argument("--out", type=Path, default=None,
                    help="directory for suite.json and suite.md (files an earlier suite run wrote are replaced; "
                         "any other file of those names needs --force)")
    ap.add_argument("--force", action="store_true", help="replace suite.json / suite.md in --out even if this "
                                                          "bench did not write them")
    ap.add_argument("--reuse", action="store_true", help="use the datasets already built under --work")
    ap.add_argument("--generate", action="store_true",
                    help="answer from every final context with the local generator (clean accuracy, ASR); "
                         "answers are cached in --work/answers.sqlite")
    ap.add_argument("--cross-fit-clean", action="store_true",
                    help="measure the clean row on every clean question: each half by a defense calibrated on the "
                         "other half (twice the calibrations; what --generate uses for clean accuracy on all questions)")
    ap.add_argument("--generate-conditions", default=None,
                    help="with --generate: only these conditions (comma-separated, e.g. clean,pr_b)")
    args = ap.parse_args()
    outputs = (claim_outputs([args.out / "suite.json", args.out / "suite.md"], mentions("sieve bench suite"),
                             force=args.force) if args.out else [])   # before the run, not after it
    names = [x for x in args.datasets.split(",") if x]
    configs = [x for x in args.fusion_configs.split(",") if x]
    bad = [c for c in configs if c not in FUSION_CONFIGS]
    if bad:
        sys.exit(f"error: unknown fusion configuration(s) {', '.join(bad)}; known: {', '.join(FUSION_CONFIGS)}")
    components = [s for s in args.defenses.split(",") if s]
    unknown = [s for s in components if "[" in s and s not in COMPONENT_VARIANTS]
    if unknown:
        sys.exit(f"error: unknown component variant(s) {', '.join(unknown)}; known: {', '.join(COMPONENT_VARIANTS)}")
    cfg = SieveConfig.load(None)
    cfg.llm.enabled = False   # no LLM: TRIS L3 and TrustRAG's consolidation are skipped, as with `sieve eval --no-llm`
    res = make_resources(cfg, load_dataset(DEMO_DATA))
    shared = args.shared if (args.shared / "poisonedrag" / "msmarco.json").exists() else None
    if shared is None and any(n.startswith("msmarco") for n in names):
        print(f"note: {args.shared} not found; the msmarco datasets are skipped", flush=True)
    built = build_suite(args.work, res, demo=DEMO_DATA, shared_data=shared, datasets=names, progress=True,
                        reuse=args.reuse)
    generator = None
    if args.generate:
        import copy

        from sieve.evaluation.answers import AnswerCache, Generator
        from sieve.models.loaders import load_llm

        gen_cfg = copy.deepcopy(cfg)
        gen_cfg.llm.enabled = True     # the generator only: the defenses still run without an LLM
        generator = Generator(load_llm(gen_cfg), AnswerCache(args.work / "answers.sqlite"))
    gen_conds = set(args.generate_conditions.split(",")) if args.generate_conditions else None
    rows: list[dict[str, Any]] = []
    for name in names:
        if name in built:
            rows += run_dataset(name, built[name], cfg, components, configs, args.limit,
                                resources=res, generator=generator, generate_conditions=gen_conds,
                                cross_fit_clean=args.cross_fit_clean)
    table, gen = format_suite(rows), format_generation(rows)
    held = held_out_tables(rows, configs) if configs else ""
    regret = no_regret(rows, components, f"fusion[{configs[0]}]") if configs else ""
    print(table)
    print()
    print(held)
    print()
    print(regret)
    if gen:
        print()
        print(gen)
    if outputs:
        cmd = "sieve bench suite -- " + " ".join(shlex.quote(a) for a in sys.argv[1:])
        write_outputs({outputs[0]: json.dumps({"command": cmd, "rows": rows}, indent=1, default=str),
                       outputs[1]: f"Regenerate: `{cmd}`\n\n{table}\n\n{held}\n\n{regret}\n\n{gen}\n"})


if __name__ == "__main__":
    main()
