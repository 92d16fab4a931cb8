"""Regenerate demo_data/attacks.jsonl for every attack family from demo_data/targets.jsonl.

    .venv/bin/python scripts/build_demo_attacks.py                      # all families, seed 0
    .venv/bin/python scripts/build_demo_attacks.py --families pr_w --pr-w-iterations 8

One command, deterministic in ``--seed`` (pr_w and script depend only on seed and query id; the
paraphrase family uses the configured LLM — greedy local Qwen2.5-Coder-0.5B by default — and its
paraphrases are cached under the Sieve cache dir, so a rerun reproduces them). Each family's lines
are replaced in place and the other families' lines kept, so one family can be rebuilt alone.

pr_w runs HotFlip against the default retriever (all-mpnet-base-v2) with modest settings so the
whole demo builds in reasonable time on 2 CPU cores: the paper's 30 iterations × 100 candidates
cost minutes per poison there (see ``sieve/bench/attacks_bench.py`` for measured gains and s/target).
pr_w and paraphrase take tens of minutes for the 64 demo targets, the template families well
under a second (per-target times: docs/results/speed.md §3). The settings used are recorded in
every pr_w document's metadata.

The single-poison families (single_trigger, single_fluent, near_duplicate; docs/algorithms.md
§7.5–§7.7) ship with ONE poison per query (``SHIPPED_VOLUME``); every other family with five.
near_duplicate and judge_aware read the dataset's corpus and qrels (``data`` = ``--data``).
judge_aware (§7.8) runs ``--judge-aware-iterations`` × ``--judge-aware-candidates`` joint evaluations
per target with one trigger shared by the target's poisons.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from sieve.attacks import ATTACKS, load_targets, merge_attacks  # noqa: E402
from sieve.config import SieveConfig  # noqa: E402
from sieve.resources import Resources  # noqa: E402

#: Poisons per query in the shipped demo records (families not listed: 5).
SHIPPED_VOLUME = {"single_trigger": 1, "single_fluent": 1, "near_duplicate": 1}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=ROOT / "demo_data", help="dataset directory (default demo_data)")
    ap.add_argument("--families", nargs="*", default=None, help="families to build (default: every registered one)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--volume", type=int, default=None, help="poisons per target (default 5; 1 for single-poison families)")
    ap.add_argument("--pr-w-iterations", type=int, default=2, help="HotFlip iterations (paper 30)")
    ap.add_argument("--pr-w-candidates", type=int, default=8, help="HotFlip candidates per flip (paper 100)")
    ap.add_argument("--judge-aware-iterations", type=int, default=2, help="judge_aware HotFlip iterations")
    ap.add_argument("--judge-aware-candidates", type=int, default=8, help="judge_aware candidates per flip")
    ap.add_argument("--limit", type=int, default=None, help="only the first N targets (for a quick look; use --out)")
    ap.add_argument("--out", type=Path, default=None, help="attacks file to merge into (default <data>/attacks.jsonl)")
    args = ap.parse_args(argv)

    families = args.families or ATTACKS.names()
    targets = load_targets(args.data)[: args.limit]
    resources = Resources(SieveConfig.load())
    out_path = args.out or args.data / "attacks.jsonl"
    summary = {}
    for fam in families:
        params: dict = {"iterations": args.pr_w_iterations, "candidates": args.pr_w_candidates} if fam == "pr_w" else {}
        if fam == "judge_aware":
            params = {"iterations": args.judge_aware_iterations, "candidates": args.judge_aware_candidates}
        if "data" in ATTACKS.entry(fam).param_names():
            params["data"] = str(args.data)
        volume = args.volume if args.volume is not None else SHIPPED_VOLUME.get(fam, 5)
        t0 = time.perf_counter()
        out = ATTACKS.create(fam, **params).generate(targets, resources, seed=args.seed, volume=volume)
        merge_attacks(out_path, out.records, fam)
        st = {k: v for k, v in out.stats.items() if k != "per_target"}
        st["wall_seconds"] = round(time.perf_counter() - t0, 1)
        summary[fam] = st
        for qid, reason in out.skipped:
            print(f"  {fam}: skipped {qid}: {reason}", file=sys.stderr)
        print(f"{fam}: {json.dumps(st)}", flush=True)
    print(f"wrote {out_path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
