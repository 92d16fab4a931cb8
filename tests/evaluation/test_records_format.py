"""Run records format 2 (issue 15; sieve/evaluation/records.py): rankings stored once, decisions in a
verified gzip side file, every reader through ``read_records``; old runs still read the same."""
from __future__ import annotations

import gzip
import json
import math
from pathlib import Path

import numpy as np
import pytest

from evaldata import strip_latency
from sieve.evaluation import records as R
from sieve.evaluation.report import load_run
from sieve.evaluation.runner import RunError, read_records, run_eval, write_summary
from sieve.evaluation.summary import summarize_records

DEFS = ["none", "tris_l2", "rsq", "perplexity"]
DEMO_RUN = Path(__file__).resolve().parents[2] / "demo_data" / "runs" / "demo-nollm"


def _run(ds, out, res, **kw):
    return run_eval(ds, out, res, defenses=DEFS, depth=20, progress=False, **kw)


def _as_format_1(src: Path, dst: Path) -> None:
    """The same run written the way format 1 did: every field inline in records.jsonl, no side files."""
    dst.mkdir()
    cfg = R.read_run_config(src / "config.json")
    cfg.pop(R.SIDE_FILES_KEY)
    cfg["fingerprint"]["format"] = 1
    R.write_run_config(dst / "config.json", cfg)
    with open(dst / "records.jsonl", "w", encoding="utf-8") as fh:
        for rec in read_records(src):
            fh.write(json.dumps(rec, ensure_ascii=False) + "\n")


def test_format_2_stores_each_ranking_once_and_reads_whole_records(tiny_dataset, eval_resources, tmp_path):
    out = tmp_path / "run"
    _run(tiny_dataset, out, eval_resources)
    lines = [json.loads(x) for x in (out / "records.jsonl").read_text().splitlines()]
    assert all("ranking" not in x and "decisions" not in x and x["detail_ref"] for x in lines)
    pairs = {(x["query_id"], x["condition"]) for x in lines}
    ranking_rows = (out / "rankings.jsonl").read_text().splitlines()
    assert len(ranking_rows) == len(pairs) < len(lines)          # one ranking per (query, condition)
    recs = read_records(out)
    assert len(recs) == len(lines) == len(DEFS) * len(pairs)
    for rec in recs:
        assert len(rec["ranking"]) == 20 and {"id", "rank", "score", "poison"} <= set(rec["ranking"][0])
        assert [d["doc_id"] for d in rec["decisions"]] == [d["id"] for d in rec["ranking"]]
        assert set(rec["decisions"][0]) == {"doc_id", "removed", "status", "score", "threshold", "evidence",
                                            "reason", "layer"}
    rsq = [r for r in recs if r["defense"] == "rsq"][0]
    assert rsq["decisions"][0]["evidence"]["surprisal"]["trace_ref"] and rsq["info"]["refill"] == "paper"
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["fingerprint"]["format"] == 2
    assert cfg[R.SIDE_FILES_KEY][R.DETAILS]["bytes"] == (out / R.DETAILS).stat().st_size


def test_old_format_run_reads_and_summarizes_identically(tiny_dataset, eval_resources, tmp_path):
    new = tmp_path / "run"
    summary = _run(tiny_dataset, new, eval_resources)
    old = tmp_path / "old"
    _as_format_1(new, old)
    assert not (old / R.RANKINGS).exists() and not (old / R.DETAILS).exists()
    assert read_records(old) == read_records(new)
    assert write_summary(old)["results"] == write_summary(new)["results"] == summary["results"]
    cfg, s, recs = load_run(old)                  # sieve report's loader
    assert s["results"] == summary["results"] and len(recs) == len(read_records(new))
    # format 2 is smaller although nothing was dropped
    size = lambda d: sum((d / n).stat().st_size for n in R.RECORD_FILES if (d / n).exists())  # noqa: E731
    assert size(new) * 3 < size(old)


def test_shipped_compact_demo_run_still_reads():
    recs = read_records(DEMO_RUN)
    assert not (DEMO_RUN / "records.jsonl").exists() and len(recs) > 1000
    shipped = json.loads((DEMO_RUN / "summary.json").read_text(encoding="utf-8"))
    assert {(r["defense"], r["condition"]) for r in recs} >= {(r["defense"], r["attack"]) for r in shipped["results"]}
    rows = {(r["defense"], r["attack"]): r for r in summarize_records(recs)["results"]}
    for want in shipped["results"]:
        got = rows[(want["defense"], want["attack"])]
        assert got["queries"] == want["queries"]
        # scores are rounded to 6 digits in the compact file: rates are exact; AUROC can move where the
        # rounding makes or breaks ties (answer scores: up to 0.006 measured), so within 0.01
        assert got["poison_in_context_rate"] == want["poison_in_context_rate"]
        if want["auroc"] is not None:
            assert math.isclose(got["auroc"], want["auroc"], abs_tol=0.01), (want["defense"], want["attack"])


def test_damaged_side_files_are_refused_naming_the_file(tiny_dataset, eval_resources, tmp_path):
    out = tmp_path / "run"
    _run(tiny_dataset, out, eval_resources)
    rk = out / R.RANKINGS
    good = rk.read_bytes()
    rk.write_bytes(good.replace(b'"rank":1,', b'"rank":9,', 1))           # an edit in the middle
    with pytest.raises(RunError, match=r"rankings.jsonl.*(checksum mismatch|does not match)"):
        read_records(out)
    rk.write_bytes(good)
    cfg = json.loads((out / "config.json").read_text())
    del cfg[R.SIDE_FILES_KEY]                                               # checkpoint gone: lines still verified
    R.write_run_config(out / "config.json", cfg)
    rk.write_bytes(good.replace(b'"rank":1,', b'"rank":9,', 1))
    with pytest.raises(RunError, match=r"rankings.jsonl:\d+: line does not match its reference"):
        read_records(out)
    rk.write_bytes(good)
    det = out / R.DETAILS
    det.write_bytes(b"not gzip at all")
    with pytest.raises(RunError, match=r"decisions.jsonl.gz: not a gzip file"):
        read_records(out)
    det.unlink()
    with pytest.raises(RunError, match=r"records.jsonl:1: its decisions .* missing from decisions.jsonl.gz"):
        read_records(out)


def test_interrupted_side_file_resumes_to_the_same_summary(tiny_dataset, eval_resources, tmp_path):
    out = tmp_path / "run"
    full = _run(tiny_dataset, out, eval_resources)
    lines = (out / "records.jsonl").read_text().splitlines(keepends=True)
    text = gzip.decompress((out / R.DETAILS).read_bytes()).decode()
    det_lines = text.splitlines(keepends=True)
    # killed while writing record 6: 5 header lines, 5 detail lines flushed, the 6th detail half written
    (out / "records.jsonl").write_text("".join(lines[:5]))
    import zlib

    z = zlib.compressobj(6, zlib.DEFLATED, 31)
    data = b""
    for ln in det_lines[:5]:
        data += z.compress(ln.encode()) + z.flush(zlib.Z_SYNC_FLUSH)
    data += z.compress(det_lines[5][: len(det_lines[5]) // 2].encode()) + z.flush(zlib.Z_SYNC_FLUSH)
    (out / R.DETAILS).write_bytes(data)                                     # no gzip trailer
    rk = (out / R.RANKINGS).read_text().splitlines(keepends=True)
    (out / R.RANKINGS).write_text("".join(rk[:2]))
    cfg = json.loads((out / "config.json").read_text())
    empty = {"bytes": 0, "sha256": __import__("hashlib").sha256(b"").hexdigest()}
    cfg[R.SIDE_FILES_KEY] = {R.RANKINGS: empty, R.DETAILS: empty}           # the checkpoint taken at the start
    R.write_run_config(out / "config.json", cfg)
    assert len(read_records(out, repair=False)) == 5                         # readable as it is
    again = _run(tiny_dataset, out, eval_resources)
    assert strip_latency(again) == strip_latency(full)
    assert (out / "records.jsonl").read_text().splitlines(keepends=True)[:5] == lines[:5]
    assert len(read_records(out)) == len(lines)


def test_dumps_is_json_of_jsonable():
    from dataclasses import dataclass

    @dataclass
    class D:
        a: float
        b: tuple

    objs = [{"x": np.float32(0.5), "y": np.arange(3), "z": {3, 1, 2}, "w": D(1.5, (np.int64(2), "s"))},
            {"nan": float("nan"), "inf": np.float64("inf"), "arr": np.array([1.0, np.nan])},
            {1: "int key", "p": Path("/a/b"), "t": (1, 2), "n": None, "b": np.bool_(True)},
            ["é", {"nested": [np.int32(4), {frozenset({"b", "a"})}]}]]
    for o in objs:
        for compact in (False, True):
            want = json.dumps(R.jsonable(o), ensure_ascii=False, allow_nan=False,
                              separators=(",", ":") if compact else None)
            assert R.dumps(o, compact=compact) == want
        # the side files' encoder: the same values for a reader (text may differ: 1e-5 vs 1e-05)
        assert json.loads(R.dumps_bytes(o)) == json.loads(want)


def test_dumps_bytes_values_equal_dumps_on_awkward_values():
    import math

    objs = [{"big": 2**70, "neg": -(2**64), "f": 1e-5, "g": 1e16, "tiny": 5e-324, "round": 0.1 + 0.2},
            {"s": "\u2028 \x7f \x00 \"q\" \\ é 😀", "k": {(1, 2): "tuple key"}},
            [np.float32(1 / 3), np.float16(0.1), np.int8(-3), np.uint64(2**63), math.pi, -0.0, True, None],
            {"nested": [{"ninf": -math.inf}, set(), frozenset([3]), np.zeros((2, 2), np.float32)]}]
    for o in objs:
        assert json.loads(R.dumps_bytes(o)) == json.loads(R.dumps(o, compact=True))


def test_summary_held_in_memory_equals_the_summary_read_back(tiny_dataset, eval_resources, tmp_path):
    """sieve eval summarises the records it holds (summary_record of each) instead of re-reading
    the files: the rows equal those computed from the whole records on disk, also after a resume."""
    from sieve.evaluation.summary import summary_record

    out = tmp_path / "run"
    defs = ["none", "tris", "trustrag", "rsq", "perplexity", "rsg"]
    held = run_eval(tiny_dataset, out, eval_resources, defenses=defs, depth=20, progress=False, limit=3)
    whole = read_records(out)
    assert summarize_records([summary_record(r) for r in whole])["results"] == summarize_records(whole)["results"]
    assert held["results"] == write_summary(out)["results"]
    assert any(r["auroc"] is not None for r in held["results"])   # the rows measure something
    lines = (out / "records.jsonl").read_text(encoding="utf-8").splitlines(keepends=True)
    (out / "records.jsonl").write_text("".join(lines[: len(lines) // 2]), encoding="utf-8")   # half done
    again = run_eval(tiny_dataset, out, eval_resources, defenses=defs, depth=20, progress=False, limit=3)
    assert len(read_records(out)) == len(whole)
    assert strip_latency(again) == strip_latency(write_summary(out))
    assert strip_latency(again) == strip_latency(held)
