"""Build every model cache the dashboard's default pages need, with one progress line per step, before
``scripts/demo.sh`` prints the dashboard's URL (a newcomer's first query then waits for nothing but
the query).

Steps: each model role the default defenses read (retriever, judge, causal LM, token encoder) is
loaded and called once — the first load joins / dequantises the packaged weights into the model cache
(``~/.cache/sieve``, ``SIEVE_CACHE_DIR``); later runs read it in seconds. Then the demo's retriever
index is opened, and the explorer's default defenses are prepared and applied to one demo question
through the dashboard's own calls (this fills the per-document artifact cache the pages read).

    .venv/bin/python scripts/warm_dashboard.py [DATASET]     # DATASET defaults to demo_data
Exit code 0 also when a step fails (the dashboard then builds that cache on first use and says so);
the failing step is reported on its line.
"""
from __future__ import annotations

import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def _line(i: int, n: int, what: str, t0: float, note: str = "") -> None:
    print(f"[warm {i}/{n}] {what}: {time.perf_counter() - t0:.1f} s" + (f" ({note})" if note else ""), flush=True)


def main(argv: list[str]) -> int:
    from sieve.runtime import configure_process_environment

    configure_process_environment()
    from sieve.constants import CLEAN
    from sieve.dashboard import session as S
    from sieve.dashboard.lab import LAB_PARAMS

    t_all = time.perf_counter()
    ds = S.load_dataset(argv[0] if argv else S.DEMO_DIR)
    res = S.make_resources(tiny=False)
    models = [("retriever", lambda: res.retriever.encode(["warm-up"], kind="query")),
              ("judge", lambda: res.judge.encode(["warm-up"])),
              ("causal LM", lambda: res.causal_lm.token_nll("warm-up text")),
              ("token encoder", lambda: res.token_encoder.token_states("warm-up text", 16))]
    specs = list(S.DEFAULT_DEFENSES)
    n = len(models) + 1 + len(specs)
    print(f"Preparing the dashboard's model caches ({n} steps; the first run on a machine takes minutes, "
          "later runs seconds)…", flush=True)
    failed = 0
    for i, (role, call) in enumerate(models, 1):
        t0 = time.perf_counter()
        try:
            call()
            mid = getattr(getattr(res, role.replace(" ", "_").replace("causal_LM", "causal_lm"), None), "model_id", "")
            _line(i, n, f"{role} {mid}".strip(), t0)
        except Exception as e:  # noqa: BLE001 - reported; the dashboard retries on first use
            failed += 1
            _line(i, n, role, t0, f"failed: {type(e).__name__}: {e}")
    t0 = time.perf_counter()
    exp = S.make_experiment(ds, res)
    exp.base_index()
    _line(len(models) + 1, n, f"retriever index of {ds.name} ({len(ds.documents)} passages)", t0)
    calibration = S.run_calibration(S.default_run_dir())
    roc = S.DEMO_DIR / "runs" / "demo-nollm"
    if S.is_demo_dataset(ds):
        calibration = S.merged_calibration(calibration, S.run_calibration(roc), S.shipped_calibration(ds.content_hash()))
    query = ds.targets[0].query if ds.targets else (ds.queries[0].text if ds.queries else "")
    for j, spec in enumerate(specs, len(models) + 2):
        t0 = time.perf_counter()
        try:
            d = S.prepare(exp, spec, CLEAN, dict(LAB_PARAMS.get(spec, {})), calibration)
            if query:
                d.apply(exp.rank(query, condition=CLEAN), res, k_ctx=5)
            _line(j, n, f"defense {spec} prepared and applied once", t0)
        except Exception as e:  # noqa: BLE001
            failed += 1
            _line(j, n, f"defense {spec}", t0, f"failed: {type(e).__name__}: {e}")
    print(f"Model caches ready in {time.perf_counter() - t_all:.1f} s" + (f" ({failed} step(s) failed)" if failed else "")
          + ".", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
