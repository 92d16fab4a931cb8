"""Model stack benchmark: load times (fresh process vs already loaded), embedder throughput
(documents/s on this machine's cores), query-encoding latency percentiles, LM scoring speed.

    .venv/bin/python -m sieve.bench.models_bench [--docs 64] [--skip-llm]
    sieve bench models --backends --docs 192 --rounds 3 [--encoders all-mpnet-base-v2] [--skip-lm]   # issue 15

``--backends``: indexing docs/s per encoder (mpnet retriever, MiniLM judge) and backend (PyTorch
fp32, PyTorch bf16, ONNX fp32, ONNX int8 — a gated backend that refuses is listed as refused),
measured alternately in one process (rounds) so the ratios against PyTorch hold on a busy machine;
CPU ms/doc; min/mean cosine to the PyTorch vectors; recall@10 agreement with PyTorch on the shipped
probe (``sieve/models/retrieval_probe.json``: 64 queries × the first 192 demo passages); peak RSS of a
fresh process that loads the encoder on that backend. Then causal-LM traces/s one at a time (the
landed ``Resources.lm_trace`` path) vs length-sorted batches (``Resources.lm_traces``).

Each model is loaded in a fresh subprocess (so "cold" includes nothing another model loaded,
but excludes the one-off ``import torch``/``sentence_transformers`` which is reported apart).
Caches must be built already (``sieve models --build``); build times are read from their manifests.
Numbers depend on machine load; they are printed, never asserted.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys

from sieve.bench import DEMO_DATA, ROOT

CHILD = r"""
import json, sys, time
t0 = time.perf_counter()
from sieve.runtime import configure_process_environment; configure_process_environment()  # before torch loads
import torch, sentence_transformers, transformers  # noqa
import sieve.models as m
t_import = time.perf_counter() - t0
kind, name, n_docs = sys.argv[1], sys.argv[2], int(sys.argv[3])
docs = [l for l in (json.loads(x)["text"] for x in open(sys.argv[4])) if l][:n_docs]
out = {"model": name, "import_s": round(t_import, 2)}
t = time.perf_counter()
if kind == "embedder":
    obj = m.load_embedder(name)
elif kind == "causal_lm":
    obj = m.load_causal_lm(name)
elif kind == "token_encoder":
    obj = m.load_token_encoder(name, int(sys.argv[5]))
else:
    from sieve.config import SieveConfig
    obj = m.load_llm(SieveConfig())
out["cold_load_s"] = round(time.perf_counter() - t, 2)
t = time.perf_counter()
again = {"embedder": lambda: m.load_embedder(name), "causal_lm": lambda: m.load_causal_lm(name),
         "token_encoder": lambda: m.load_token_encoder(name, int(sys.argv[5])),
         "llm": lambda: m.load_llm(__import__("sieve.config").config.SieveConfig())}[kind]()
assert again is obj
out["warm_load_ms"] = round((time.perf_counter() - t) * 1000, 3)
def pct(xs, q):
    xs = sorted(xs); return xs[min(len(xs) - 1, int(q * len(xs)))]
if kind == "embedder":
    obj.encode(docs[:4])  # warm-up
    t = time.perf_counter(); obj.encode(docs, batch_size=16); dt = time.perf_counter() - t
    out["docs_per_s"] = round(len(docs) / dt, 1)
    lat = []
    for q in ["what is the capital of australia", "who painted the mona lisa", "when did world war two end",
              "which planet is called the red planet", "who wrote romeo and juliet"] * 4:
        t = time.perf_counter(); obj.encode([q], kind="query"); lat.append((time.perf_counter() - t) * 1000)
    out["query_ms_p50"] = round(pct(lat, 0.5), 1); out["query_ms_p95"] = round(pct(lat, 0.95), 1)
elif kind == "causal_lm":
    obj.token_nll(docs[0])
    t = time.perf_counter(); [obj.token_nll(d) for d in docs]; dt = time.perf_counter() - t
    out["token_nll_docs_per_s"] = round(len(docs) / dt, 1)
    t = time.perf_counter(); obj.token_nll_many(docs, batch_size=8); dt = time.perf_counter() - t
    out["token_nll_many_docs_per_s"] = round(len(docs) / dt, 1)
elif kind == "token_encoder":
    t = time.perf_counter(); obj.token_states_many(docs, 256); dt = time.perf_counter() - t
    out["token_states_docs_per_s"] = round(len(docs) / dt, 1)
else:
    ctx = "Context: " + docs[0] + "\nQuestion: what is this passage about?\nAnswer:"
    obj.nll(" it", ctx)
    lat = []
    for _ in range(5):
        t = time.perf_counter(); obj.nll(" the passage", ctx); lat.append(time.perf_counter() - t)
    out["nll_call_s_p50"] = round(pct(lat, 0.5), 3)
    t = time.perf_counter(); ans = obj.generate(ctx, system="Answer with a short phrase only.", max_tokens=16)
    out["generate_16tok_s"] = round(time.perf_counter() - t, 2)
print("RESULT " + json.dumps(out))
"""


RSS_CHILD = r"""
import json, resource, sys
sys.path.insert(0, sys.argv[3])
from sieve.config import ModelsConfig, SieveConfig
from sieve.models.loaders import load_embedder
from sieve.models.onnx_backend import retrieval_probe
m = load_embedder(sys.argv[1], SieveConfig(models=ModelsConfig(backend=sys.argv[2])))
m.encode(retrieval_probe()[1][:64], batch_size=16)
status = dict(l.split(":", 1) for l in open("/proc/self/status") if ":" in l)
print("RSS", json.dumps({"backend": getattr(m, "backend", "torch"), "rss_mb": int(status["VmRSS"].split()[0]) / 1024,
                         "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


def rss_mb(name: str, backend: str) -> str:
    """"RSS / peak RSS" (MB) of a fresh process that loads ``name`` on ``backend`` (the PyTorch model
    stays loaded too: white-box attacks use it) and encodes 64 probe passages. The peak is usually
    reached while loading the weights, the same for every backend; the resident size after encoding
    is what the backend adds."""
    r = subprocess.run([sys.executable, "-c", RSS_CHILD, name, backend, str(ROOT)], capture_output=True, text=True)
    line = next((x for x in r.stdout.splitlines() if x.startswith("RSS ")), None)
    if line is None:
        return "?"
    obj = json.loads(line[4:])
    return f"{obj['rss_mb']:.0f} / {obj['peak_mb']:.0f}"


BACKENDS = ("torch", "torch-bf16", "onnx", "onnx-int8")


def backends(n_docs: int, rounds: int, names: list[str]) -> None:
    """Table: encoder × backend (precision) → docs/s, ratio to PyTorch fp32 in the same run, CPU ms/doc,
    min/mean cosine to the PyTorch vectors, recall@10 agreement on the shipped probe, peak RSS."""
    import os
    import time

    import numpy as np

    from sieve.config import ModelsConfig, SieveConfig
    from sieve.models import batching
    from sieve.models.loaders import load_embedder
    from sieve.models.onnx_backend import retrieval_probe, topk_agreement

    queries, probe = retrieval_probe()
    texts = (probe + [json.loads(x)["text"] for x in open(DEMO_DATA / "corpus.jsonl", encoding="utf-8")][192:])[:n_docs]
    print(f"load average {os.getloadavg()[0]:.1f}; {len(texts)} demo passages (the probe's {len(probe)} first), "
          f"{len(queries)} probe queries; {rounds} alternating rounds; docs/s = median over rounds; "
          f"{batching.threads()} threads")
    print(f"{'encoder':<20} {'backend':<11} {'precision':<22} {'docs/s':>7} {'x torch':>8} {'CPU ms/doc':>11} "
          f"{'min cos':>8} {'mean cos':>9} {'recall@10 agr':>14} {'RSS / peak MB':>17}")
    for name in names:
        role = "retriever" if name == "all-mpnet-base-v2" else "judge"
        models, notes = {}, {}
        for b in BACKENDS:
            m = load_embedder(name, SieveConfig(models=ModelsConfig(backend=b)), role=role)
            if getattr(m, "backend", "torch") != ("torch" if b == "torch" else b):
                notes[b] = f"refused -> {getattr(m, 'backend', 'torch')} (see the warning above)"
                continue
            models[b] = m
        for m in models.values():
            m.encode(texts[:4])
        speed: dict[str, list[float]] = {b: [] for b in models}
        cpu: dict[str, list[float]] = {b: [] for b in models}
        vecs: dict[str, np.ndarray] = {}
        for _ in range(rounds):
            for b, m in models.items():
                t, c = time.perf_counter(), time.process_time()
                vecs[b] = m.encode(texts, batch_size=32 if b == "torch" else 16)
                speed[b].append(len(texts) / (time.perf_counter() - t))
                cpu[b].append((time.process_time() - c) * 1000 / len(texts))
        qv = {b: m.encode(queries, kind="query") for b, m in models.items()}
        k = min(len(texts), len(probe))
        base = float(np.median(speed["torch"]))
        precision = {"torch": "fp32", "torch-bf16": "bf16 (oneDNN)", "onnx": "fp32 (ORT_ENABLE_ALL)",
                     "onnx-int8": "int8 dyn. per-channel"}
        for b in BACKENDS:
            if b not in models:
                print(f"{name:<20} {b:<11} {notes.get(b, '')}")
                continue
            cos = np.concatenate([(qv[b] * qv["torch"]).sum(1), (vecs[b] * vecs["torch"]).sum(1)])
            agree = topk_agreement(qv["torch"], vecs["torch"][:k], qv[b], vecs[b][:k])
            v = float(np.median(speed[b]))
            print(f"{name:<20} {b:<11} {precision[b]:<22} {v:7.1f} {v / base:7.2f}x {np.median(cpu[b]):11.1f} "
                  f"{cos.min():8.5f} {cos.mean():9.5f} {agree:14.4f} {rss_mb(name, b):>17}")
        del models, vecs
    print(f"load average after {os.getloadavg()[0]:.1f}")


def lm_traces(n_docs: int, rounds: int) -> None:
    import time

    import numpy as np

    from sieve.config import SieveConfig
    from sieve.models import batching
    from sieve.models.loaders import load_causal_lm

    texts = [json.loads(x)["text"] for x in open(DEMO_DATA / "corpus.jsonl", encoding="utf-8")][:n_docs]
    lm = load_causal_lm("smollm2-135m", SieveConfig())
    sample = texts[:48]
    lm.token_nll(sample[0])
    single, batched = [], []
    for _ in range(rounds):
        t = time.perf_counter()
        for x in sample:
            lm.token_nll(x, 512)
        single.append(len(sample) / (time.perf_counter() - t))
        t = time.perf_counter()
        batching.lm_traces(lm, sample, 512)
        batched.append(len(sample) / (time.perf_counter() - t))
    s1, s2 = float(np.median(single)), float(np.median(batched))
    print(f"LM traces smollm2-135m one at a time {s1:6.1f} traces/s   batched (length-sorted, "
          f"{batching.batch_size(batching.LM_BATCH)}/batch) {s2:6.1f} traces/s   {s2 / s1:4.2f}x")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--docs", type=int, default=64, help="documents from demo_data/corpus.jsonl")
    ap.add_argument("--skip-llm", action="store_true")
    ap.add_argument("--backends", action="store_true", help="encoder backends and batched LM traces (issue 15)")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--encoders", default="all-mpnet-base-v2,all-MiniLM-L6-v2", help="--backends: encoders to compare")
    ap.add_argument("--skip-lm", action="store_true", help="--backends: skip the LM-trace comparison")
    args = ap.parse_args()
    if args.backends:
        backends(args.docs, args.rounds, [x for x in args.encoders.split(",") if x])
        if not args.skip_lm:
            lm_traces(args.docs, args.rounds)
        return
    corpus = DEMO_DATA / "corpus.jsonl"
    jobs = [("embedder", "all-mpnet-base-v2"), ("embedder", "all-MiniLM-L6-v2"),
            ("embedder", "multilingual-e5-small"), ("causal_lm", "smollm2-135m"),
            ("token_encoder", "all-mpnet-base-v2", "9"), ("token_encoder", "all-MiniLM-L6-v2", "4")]
    if not args.skip_llm:
        jobs.append(("llm", "qwen2.5-coder-0.5b"))
    for job in jobs:
        cmd = [sys.executable, "-c", CHILD, job[0], job[1], str(args.docs), str(corpus), *job[2:]]
        r = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
        line = next((x for x in r.stdout.splitlines() if x.startswith("RESULT ")), None)
        label = f"{job[0]}:{job[1]}" + (f"@{job[2]}" if len(job) > 2 else "")
        if line is None:
            print(f"{label}: FAILED\n{r.stderr[-2000:]}")
            continue
        res = json.loads(line[7:])
        print(f"{label:<40} " + "  ".join(f"{k}={v}" for k, v in res.items() if k != "model"))
    from sieve.config import SieveConfig
    from sieve.models.cache import MANIFEST, entry_size, models_dir

    mdir = models_dir(SieveConfig().cache_dir)
    for entry in sorted(p for p in mdir.iterdir() if p.is_dir() and not p.name.startswith(".")):
        info = json.loads((entry / MANIFEST).read_text()) if (entry / MANIFEST).exists() else {}
        extra = {k: v for k, v in info.items() if k not in ("files",)}
        print(f"cache {entry.name:<24} {entry_size(entry) / 1e6:8.1f} MB  {extra}")


if __name__ == "__main__":
    main()
