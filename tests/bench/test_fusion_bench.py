"""`sieve bench fusion --latency-only` (sieve/bench/fusion_bench.py): only the warm latency of the default
detector, beside RSQ alone on the same rankings, and no family table of 0/0 rates."""
from __future__ import annotations

import json
import re
import sys

import pytest

from sieve.bench import fusion_bench
from sieve.evaluation.metrics import percentiles


@pytest.mark.realmodel
def test_latency_only_prints_and_writes_the_latency_beside_rsq(tmp_path, monkeypatch, capsys):
    out = tmp_path / "bench"
    monkeypatch.setattr(sys, "argv", ["fusion_bench", "--latency-only", "--calib", "16", "--clean-test", "8",
                                      "--latency-queries", "4", "--latency-condition", "pr_b", "--out", str(out)])
    fusion_bench.main()
    text = capsys.readouterr().out
    assert "no attack targets scored (--limit 0 or --latency-only)" in text
    m = re.search(r"\(pr_b rankings, n=4\): fusion p50 ([\d.]+) ms, p95 ([\d.]+) ms; RSQ alone p50 ([\d.]+) ms, "
                  r"p95 ([\d.]+) ms; ratio p50 ([\d.]+)×, p95 ([\d.]+)×", text)
    assert m, text[-2000:]
    printed = list(map(float, m.groups()))
    saved = json.loads((out / "fusion_bench.json").read_text(encoding="utf-8"))
    assert saved["families"] == {"default": {}} and saved["lofo"] == []
    fus, rsq = saved["latency_ms"]["fusion"], saved["latency_ms"]["rsq"]
    assert len(fus) == len(rsq) == 4 and all(t > 0 for t in fus + rsq)
    f50, f95 = percentiles(fus)
    b50, b95 = percentiles(rsq)
    # the printed line is the saved timings' percentiles (1 decimal) and their ratios (2 decimals)
    assert printed == [round(f50, 1), round(f95, 1), round(b50, 1), round(b95, 1),
                       round(f50 / b50, 2), round(f95 / b95, 2)]
    assert "## Latency" in (out / "fusion_bench.md").read_text(encoding="utf-8")
