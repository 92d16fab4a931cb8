"""Calibrate, on the demo's clean questions, the thresholds the shipped runs do not hold and that cost
minutes to learn live (TRIS's L3 verifier: local-LLM calls on 24 clean rankings), and write them to
``demo_data/runs/dashboard-calibration.json`` (read by ``sieve.dashboard.session.shipped_calibration``,
used only for the same corpus).

    .venv/bin/python scripts/build_dashboard_calibration.py [SPEC ...]    # default: tris_full

Rerun after the corpus, the generator or a default model changes (the file records the corpus hash and
the models; a file for another corpus is ignored).
"""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def main(argv: list[str]) -> int:
    from sieve.runtime import configure_process_environment

    configure_process_environment()
    from sieve.constants import CLEAN
    from sieve.dashboard import session as S

    specs = argv or ["tris_full"]
    ds = S.load_dataset(S.DEMO_DIR)
    res = S.make_resources(tiny=False)
    exp = S.make_experiment(ds, res)
    out = S.SHIPPED_CALIBRATION
    try:
        doc = json.loads(out.read_text(encoding="utf-8"))
        if doc.get("corpus_sha256") != ds.content_hash():
            doc = {}
    except (OSError, ValueError):
        doc = {}
    calibrated = dict(doc.get("calibrated") or {})
    for spec in specs:
        t0 = time.perf_counter()
        learned: dict = {}
        from sieve.experiment import prepare_defense

        prepare_defense(exp, spec, condition=CLEAN, clean_budget=S.CLEAN_BUDGET, learned=learned)
        calibrated[spec] = {k: v for k, v in learned.items() if v is not None}
        print(f"{spec}: {calibrated[spec]} in {time.perf_counter() - t0:.0f} s", flush=True)
    c = res.config
    body = {"corpus_sha256": ds.content_hash(), "models": S.model_summary(res), "llm_local_model": c.llm.local_model,
            "clean_budget": S.CLEAN_BUDGET, "calibrated": calibrated,
            "built_by": "scripts/build_dashboard_calibration.py", "built_at": time.strftime("%Y-%m-%dT%H:%M:%SZ",
                                                                                         time.gmtime())}
    tmp = out.with_suffix(".tmp")
    tmp.write_text(json.dumps(body, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    tmp.replace(out)
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
