"""Query-explorer latency (docs/design.md budget: a query renders in < 1.5 s after warm-up on the demo).

    sieve bench dashboard [--queries 20] [--condition clean|<family>] [--tiny]

Measures the explorer's service-layer call path (:func:`sieve.dashboard.service.explore`: retrieval at
depth 50, the default defenses tris + rsq + rsg_rsq + the undefended baseline, RSQ evidence) for
demo queries with warm caches: models loaded, index open, defenses fitted, and one warm-up pass over
the same queries so per-document artifacts (judge embeddings, LM traces, token states) are cached,
as they are after the dashboard's first use. Also reports the cold first pass. Prints p50/p95;
nothing is asserted.

Attack lab class mode (issue 11: "the whole demo in under a minute on 2 cores")::

    sieve bench dashboard --class-mode [--baseline /tmp/base11] [--repeats 3]

drives the Attack lab page as a teacher does (open the page, switch class mode on, click "Generate
answers") with Streamlit's AppTest in a fresh process per repeat, on the real models. Each process
starts with the caches a newcomer has after ``bash scripts/demo.sh`` and a first visit: the joined
model weights (``<cache dir>/models``, linked from the user's cache) and nothing else — no answer
cache, no artifact cache, no workspace, an empty ledger. "cold" is the wall time of the whole
process (interpreter start, imports, models, index, poisons, defenses, answers); "warm" repeats the
three clicks in a second session of the same process (models loaded, answers cached). With
``--baseline DIR`` (a ``git worktree`` of an earlier commit) the same is measured for that tree in
the same run, interleaved, and after/before ratios are printed. The load average is printed too:
the machine may be shared.

Browser timings (issue 24's newcomer flow, the Trade-offs rerun)::

    sieve bench dashboard --browser [--baseline /tmp/base] [--repeats 3] [--condition pr_b]

drives the dashboard in headless Debian chromium (selenium; ``/usr/bin/chromium`` and
``/usr/bin/chromedriver``, else one line and exit code 2) as a newcomer does after ``bash
scripts/demo.sh``: each tree's ``scripts/warm_dashboard.py`` runs once first (what demo.sh runs before
it prints the URL), then each repeat starts a fresh ``streamlit run app.py`` with an empty ledger and a
fresh browser profile and times, from the action to the moment the page is first seen finished (no
script run, no spinner): the Query explorer's first visit, a second question, an attack-condition
change (with the page's own "explorer call N ms" for each), the Attack lab opened, its dataset poisons
loaded (the default defenses prepared and applied) and the defended answers generated, then the
Trade-offs page on the shipped demo run and its rerun after RSQ's threshold is switched off. Each step
checks that the page shows what the step is for (a call time, the defense steps, a verdict, moved
metrics) and stops the bench with exit code 1 otherwise. Prints p50/max per step, the explorer calls
against docs/design.md's budgets, and after/before ratios with ``--baseline``.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np

#: The tree this file belongs to (not ``sieve.bench.ROOT``: in a class-mode child the library may come
#: from an older tree, which has no ``sieve.bench``).
ROOT = Path(__file__).resolve().parents[2]
#: ``--class-mode-child DIR`` (this file run as a script) imports the library from DIR, the tree being measured
_CHILD_ROOT = sys.argv[2] if len(sys.argv) == 3 and sys.argv[1] == "--class-mode-child" else None
if _CHILD_ROOT:
    here = Path(__file__).resolve().parent      # run as a script, this package's folder is sys.path[0]:
    sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != here]   # its modules must not shadow others
    sys.path.insert(0, _CHILD_ROOT)

from sieve.dashboard import explorer as E  # noqa: E402
from sieve.dashboard import session as S  # noqa: E402


def pct(xs: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(xs), q)) if xs else float("nan")


# ---- Attack lab class mode -----------------------------------------------------------------------
def _class_mode_child(root: str) -> int:
    """One teacher's session, twice: cold (first session of a fresh process) and warm (second)."""
    t_start = time.perf_counter()
    from streamlit.testing.v1 import AppTest

    import sieve

    assert Path(sieve.__file__).resolve().is_relative_to(Path(root).resolve()), sieve.__file__
    page = next((str(p) for p in (Path(root) / "pages" / "5_attack-lab.py", Path(root) / "views" / "5_attack_lab.py")
                 if p.exists()), str(Path(root) / "pages" / "5_attack-lab.py"))   # a baseline may predate pages/
    out: dict[str, float | str] = {}
    for phase in ("cold", "warm"):
        t0 = time.perf_counter()
        at = AppTest.from_file(page, default_timeout=900).run()
        t_open = time.perf_counter()
        at.toggle(key="lab_class").set_value(True).run()
        t_class = time.perf_counter()
        at.button(key="lab_answers").click().run()
        t_done = time.perf_counter()
        errors = [e.value for e in at.exception] + [e.value for e in at.error]
        verdicts = [c.value for c in at.caption if c.value in ("correct", "neither correct nor the target")
                    or c.value.startswith("attack succeeded")]
        if errors or not verdicts:
            print(json.dumps({"error": str(errors)[:500] or "no answers shown"}))
            return 1
        base = t_start if phase == "cold" else t0
        out.update({f"{phase}_open": t_open - base, f"{phase}_class": t_class - t_open,
                    f"{phase}_answers": t_done - t_class, f"{phase}_total": t_done - base,
                    f"{phase}_verdicts": " | ".join(verdicts)})
    print(json.dumps(out))
    return 0


def _newcomer_cache(tmp: Path) -> Path:
    """A cache directory as a newcomer has it: the joined model weights only (linked, not copied)."""
    from sieve.config import default_cache_dir

    cache = tmp / "cache"
    cache.mkdir(parents=True)
    src = default_cache_dir() / "models"
    if src.exists():
        (cache / "models").symlink_to(src, target_is_directory=True)
    return cache


def _class_mode_once(root: Path) -> dict[str, float | str]:
    import os
    import subprocess
    import tempfile

    with tempfile.TemporaryDirectory(prefix="sieve-classbench-") as tmp:
        env = {**os.environ, "PYTHONPATH": str(root), "SIEVE_CACHE_DIR": str(_newcomer_cache(Path(tmp))),
               "SIEVE_DASHBOARD_LEDGER": str(Path(tmp) / "ledger.sqlite")}
        for k in ("SIEVE_DASHBOARD_TINY", "SIEVE_DASHBOARD_DATASET", "SIEVE_DASHBOARD_RUN"):
            env.pop(k, None)
        t = time.perf_counter()
        p = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--class-mode-child", str(root)],
                           cwd=str(root), env=env, capture_output=True, text=True)
        wall = time.perf_counter() - t
    line = (p.stdout.strip().splitlines() or ["{}"])[-1]
    try:
        res = json.loads(line)
    except ValueError:
        res = {"error": (p.stderr or p.stdout)[-800:]}
    if p.returncode != 0 and "error" not in res:
        res["error"] = (p.stderr or "")[-800:]
    res["wall"] = wall
    return res


def class_mode(baseline: str | None, repeats: int) -> int:
    import os

    roots = {"after": ROOT}
    if baseline:
        roots = {"before": Path(baseline).resolve(), **roots}
    runs: dict[str, list[dict[str, float | str]]] = {k: [] for k in roots}
    loads = []
    for i in range(repeats):
        for name, root in roots.items():        # interleaved: both trees see the same machine load
            loads.append(os.getloadavg()[0])
            r = _class_mode_once(root)
            runs[name].append(r)
            if "error" in r:
                print(f"{name} repeat {i + 1}: FAILED: {r['error']}")
                return 1
            print(f"{name:6s} repeat {i + 1}: cold {float(r['wall']):6.1f} s (open {float(r['cold_open']):.1f}, "
                  f"class mode {float(r['cold_class']):.1f}, answers {float(r['cold_answers']):.1f}) · warm "
                  f"{float(r['warm_total']):5.1f} s · verdicts: {r['cold_verdicts']}", flush=True)
    print(f"\nAttack lab class mode, real models, fresh process per repeat (n = {repeats} per tree); "
          f"1-min load average during the runs: {min(loads):.2f}–{max(loads):.2f} on {os.cpu_count()} CPUs")
    med: dict[str, dict[str, float]] = {}
    for name, rs in runs.items():
        cold = [float(r["wall"]) for r in rs]
        warm = [float(r["warm_total"]) for r in rs]
        med[name] = {"cold": statistics.median(cold), "warm": statistics.median(warm)}
        print(f"{name:6s} cold p50 {pct(cold, 50):6.1f} s  max {max(cold):6.1f} s   warm p50 {pct(warm, 50):6.2f} s  "
              f"max {max(warm):6.2f} s   (budget 60 s cold; p50/budget = {pct(cold, 50) / 60:.2f})")
    if "before" in med:
        print(f"after/before: cold {med['after']['cold'] / med['before']['cold']:.2f}x, "
              f"warm {med['after']['warm'] / med['before']['warm']:.2f}x (medians)")
    return 0


# ---- Browser timings: issue 24's newcomer flow and the Trade-offs rerun ---------------------------
#: The timed steps, in the order a repeat runs them: name → the printed row's label.
BROWSER_STEPS = {
    "server": "server start → healthy",
    "explorer_first": "Query explorer, first visit (wall)",
    "explorer_first_call": "  its explorer call (page's own)",
    "explorer_second": "second question picked (wall)",
    "explorer_second_call": "  its explorer call (page's own)",
    "explorer_condition": "attack condition changed (wall)",
    "explorer_condition_call": "  its explorer call (page's own)",
    "lab_open": "Attack lab opened",
    "lab_poisons": "dataset's poisons loaded, defenses applied",
    "lab_answers": "defended answers generated",
    "tradeoffs_open": "Trade-offs opened, rsq + condition picked",
    "tradeoffs_rerun": "Trade-offs rerun, rsq threshold off",
}
#: docs/design.md "Performance budgets" (seconds): first explorer query in a fresh process ≤ 2 s, later
#: queries well under 1 s.
BROWSER_BUDGETS = {"explorer_first_call": 2.0, "explorer_second_call": 1.0, "explorer_condition_call": 1.0}
VERDICT_WORDS = ("answer restored", "still poisoned", "answer lost", "attack failed", "Attack failed")


def _call_s(text: str) -> float:
    from sieve.dashboard.browser import explorer_call_ms

    ms = explorer_call_ms(text)
    if ms is None:
        raise AssertionError("the Query explorer shows no call time ('explorer call N ms')")
    return ms / 1000


def _browser_once(root: Path, tmp: Path, second_qid: str, condition: str) -> dict[str, float | str]:
    """One newcomer's visit on a fresh server of ``root``: step name → seconds, or ``error`` (and ``step``)."""
    import os

    from sieve.dashboard import browser as B

    env = {k: v for k, v in os.environ.items() if not k.startswith("SIEVE_DASHBOARD_")}
    env.update({"SIEVE_DASHBOARD_LEDGER": str(tmp / "ledger.sqlite"), "PYTHONPATH": str(root)})
    out: dict[str, float | str] = {}
    step = "server"
    try:
        t0 = time.perf_counter()
        with B.streamlit_app(env, tmp / "streamlit.log", root) as url:
            out["server"] = time.perf_counter() - t0
            with B.chrome(tmp / "chrome") as d:
                def timed(name: str, action, timeout: float = 900) -> str:
                    nonlocal step
                    step = name
                    t = time.perf_counter()
                    action()
                    out[name] = B.wait_rendered(d, timeout, poll=0.2) - t
                    return B.body_text(d)

                body = timed("explorer_first", lambda: d.get(f"{url}/explorer"))
                out["explorer_first_call"] = _call_s(body)
                body = timed("explorer_second", lambda: B.select(d, "Question", f"{second_qid} —"), 300)
                out["explorer_second_call"] = _call_s(body)
                body = timed("explorer_condition", lambda: B.select(d, "Attack condition", condition), 300)
                out["explorer_condition_call"] = _call_s(body)
                timed("lab_open", lambda: d.get(f"{url}/attack-lab"))
                body = timed("lab_poisons", lambda: B.find_button(d, "Load the dataset's poisons").click())
                if "Defense steps: " not in body:
                    raise AssertionError("the Attack lab shows no defense steps after loading the poisons")
                body = timed("lab_answers", lambda: B.find_button(d, "Generate answers (clean, poisoned, defended)").click())
                if not any(w in body for w in VERDICT_WORDS):
                    raise AssertionError("the Attack lab shows no verdict after generating the answers")
                out["verdicts"] = " | ".join(ln for ln in body.splitlines() if any(w in ln for w in VERDICT_WORDS[:3]))

                def tradeoffs_open() -> None:
                    d.get(f"{url}/tradeoffs")
                    B.wait_rendered(d, 600, poll=0.2)
                    B.select(d, "Defense", "rsq")
                    B.wait_rendered(d, 300, poll=0.2)
                    B.select(d, "Attack", condition)

                timed("tradeoffs_open", tradeoffs_open)
                before = B.metric_texts(d)
                switch = B.threshold_switch(d, "rsq")
                timed("tradeoffs_rerun", switch.click, 300)
                if B.metric_texts(d) == before:
                    raise AssertionError("switching rsq's threshold off moved no metric on Trade-offs")
    except Exception as e:  # noqa: BLE001  (any failure of a step, of either tree, is reported, not raised)
        out["error"], out["step"] = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}", step
    return out


def _warm(root: Path) -> float | None:
    """``root``'s scripts/warm_dashboard.py (what scripts/demo.sh runs before the URL): seconds, None if absent."""
    import os
    import subprocess

    script = root / "scripts" / "warm_dashboard.py"
    if not script.exists():
        return None
    env = {k: v for k, v in os.environ.items() if not k.startswith("SIEVE_DASHBOARD_")}
    env["PYTHONPATH"] = str(root)
    t = time.perf_counter()
    subprocess.run([sys.executable, str(script)], cwd=root, env=env, capture_output=True, text=True)
    return time.perf_counter() - t


def browser_mode(baseline: str | None, repeats: int, condition: str) -> int:
    import os
    import tempfile

    from sieve.dashboard import browser as B

    why = B.missing()
    roots = {"after": ROOT}
    if baseline:
        roots = {"before": Path(baseline).resolve(), **roots}
    why = why or next((f"no dashboard at {r} (app.py missing): browser timings need a source checkout"
                       for r in roots.values() if not (r / "app.py").exists()), None)
    if why:
        print(f"sieve bench dashboard --browser: {why}")
        return 2
    ds = S.load_dataset(S.DEMO_DIR)
    second = ds.targets[1].query_id
    for name, root in roots.items():
        w = _warm(root)
        print(f"{name:6s} scripts/warm_dashboard.py: " + (f"{w:.1f} s" if w is not None else "absent, skipped"),
              flush=True)
    runs: dict[str, list[dict[str, float | str]]] = {k: [] for k in roots}
    loads = []
    for i in range(repeats):
        for name, root in roots.items():        # interleaved: both trees see the same machine load
            loads.append(os.getloadavg()[0])
            with tempfile.TemporaryDirectory(prefix="sieve-browserbench-") as tmp:
                r = _browser_once(root, Path(tmp), second, condition)
            runs[name].append(r)
            if "error" in r:
                print(f"{name} repeat {i + 1}: FAILED at {r['step']}: {r['error']}")
                return 1
            print(f"{name:6s} repeat {i + 1}: " + ", ".join(f"{k} {float(r[k]):.2f}" for k in BROWSER_STEPS)
                  + " s", flush=True)
    print(f"\nDashboard in headless chromium, demo data, condition {condition}, fresh server per repeat "
          f"(n = {repeats} per tree); wall = action → page first seen finished; 1-min load average during the "
          f"runs: {min(loads):.2f}–{max(loads):.2f} on {os.cpu_count()} CPUs")
    print(f"verdicts (last repeat): {runs['after'][-1].get('verdicts', '')}")
    head = "".join(f" {n + ' p50':>11s} {n + ' max':>11s}" for n in runs)
    print(f"{'step (s)':44s}{head}   ratio")
    for k, label in BROWSER_STEPS.items():
        cells, p50 = "", {}
        for name, rs in runs.items():
            xs = [float(r[k]) for r in rs]
            p50[name] = pct(xs, 50)
            cells += f" {p50[name]:11.2f} {max(xs):11.2f}"
        if "before" in p50:
            ratio = f"after/before {p50['after'] / p50['before']:.2f}x" if p50["before"] > 0 else "after/before n/a"
        elif k in BROWSER_BUDGETS:
            ratio = f"p50/budget {p50['after'] / BROWSER_BUDGETS[k]:.2f} (budget {BROWSER_BUDGETS[k]:g} s)"
        else:
            ratio = ""
        print(f"{label:44s}{cells}   {ratio}")
    return 0


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument("--class-mode", action="store_true", help="time the Attack lab's class mode (see above)")
    mode.add_argument("--browser", action="store_true",
                      help="time the newcomer flow and the Trade-offs rerun in headless chromium (see above)")
    ap.add_argument("--baseline", default=None,
                    help="with --class-mode or --browser: a worktree of the commit to compare with")
    ap.add_argument("--repeats", type=int, default=3,
                    help="with --class-mode or --browser: fresh processes (servers) per tree")
    ap.add_argument("--queries", type=int, default=20)
    ap.add_argument("--condition", default=None, help="default: the first attack family, else clean "
                                                      "(with --browser: pr_b)")
    ap.add_argument("--dataset", default=str(S.DEMO_DIR))
    ap.add_argument("--tiny", action="store_true", help="tiny in-process models (plumbing check only)")
    return ap


def main() -> int:
    if len(sys.argv) == 3 and sys.argv[1] == "--class-mode-child":
        return _class_mode_child(sys.argv[2])
    ap = parser()
    args = ap.parse_args()
    if args.repeats < 1:
        ap.error("--repeats must be at least 1")
    if args.class_mode:
        return class_mode(args.baseline, args.repeats)
    if args.browser:
        return browser_mode(args.baseline, args.repeats, args.condition or "pr_b")

    t0 = time.perf_counter()
    ds = S.load_dataset(args.dataset)
    res = S.make_resources(tiny=args.tiny, corpus_texts=[d.text for d in ds.documents])
    exp = S.make_experiment(ds, res)
    cond = args.condition or (ds.attack_families()[0] if ds.attack_families() else S.CLEAN)
    calib = S.run_calibration()
    defs = {"none": S.prepare(exp, "none", cond)}
    for spec in S.DEFAULT_DEFENSES:   # the explorer's defaults (TRIS with L3 off, as the page's default)
        params = {"l3_mode": "off"} if spec == "tris" else {}
        defs[spec] = S.prepare(exp, spec, cond, params, calib)
    setup = time.perf_counter() - t0
    if cond == S.CLEAN:
        qs = [(q.id, q.text) for q in ds.queries[: args.queries]]
    else:
        qs = [(r.query_id, r.query) for r in ds.attack_records(cond)][: args.queries]
    cold, warm = [], []
    for qid, q in qs:
        t = time.perf_counter()
        E.explore(exp, q, cond, defs, qid)
        cold.append((time.perf_counter() - t) * 1000)
    stages: dict[str, list[float]] = {}
    for qid, q in qs:
        t = time.perf_counter()
        r = E.explore(exp, q, cond, defs, qid)
        warm.append((time.perf_counter() - t) * 1000)
        for k, v in r.timings_ms.items():
            stages.setdefault(k, []).append(v)
    print(f"dataset {ds.name}: {len(ds.documents)} documents, condition {cond}, {len(qs)} queries, "
          f"models {'tiny' if args.tiny else 'packaged'}; setup (models, index, fit) {setup:.1f} s")
    print(f"cold first pass  p50 {pct(cold, 50):8.1f} ms   p95 {pct(cold, 95):8.1f} ms")
    print(f"warm explorer    p50 {pct(warm, 50):8.1f} ms   p95 {pct(warm, 95):8.1f} ms   "
          f"(budget 1500 ms; p95/budget = {pct(warm, 95) / 1500:.2f})")
    print("warm stages p50: " + ", ".join(f"{k} {statistics.median(v):.1f} ms" for k, v in stages.items() if k != "total"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
