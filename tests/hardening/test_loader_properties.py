"""Property tests (hypothesis) of everything that reads user or run files (issue 14): arbitrary
unicode — control, bidi and zero-width characters, markdown/HTML payloads — and arbitrary bytes
either load exactly as written or fail with the loader's own error naming the file; never another
exception, never a silently altered value."""
from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sieve.config import ConfigError
from sieve.corpus import DatasetError, load_dataset
from sieve.evaluation.calibrate import load_calibration
from sieve.evaluation.records import RunError, jsonable, read_records, read_run_config, write_run_config

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])

HOSTILE = st.sampled_from(["\u202e", "\u2066", "\u200b", "\ufeff", "\x00", "\x1b[31m", "\r", "\u0085",
                           "![x](http://127.0.0.1:9/x.png)", "<img src=x onerror=alert(1)>", "**b**",
                           "<script>x</script>", "[l](javascript:x)", "$$x$$", "{{x}}", "\\", '"', "\n"])
TEXT = st.lists(st.one_of(st.text(max_size=12), HOSTILE), max_size=6).map("".join)
JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | TEXT,
                    lambda c: st.lists(c, max_size=3) | st.dictionaries(TEXT, c, max_size=3), max_leaves=8)


_ROOT: list[Path] = []


@pytest.fixture(autouse=True, scope="module")
def _remove_example_dirs():
    """Every example's directory lives under one parent, removed when the module ends (hundreds of
    examples per run would otherwise stay in the temp directory)."""
    yield
    for root in _ROOT:
        shutil.rmtree(root, ignore_errors=True)
    _ROOT.clear()


def _tmp() -> Path:
    if not _ROOT:
        _ROOT.append(Path(tempfile.mkdtemp(prefix="sieve-prop-")))
    return Path(tempfile.mkdtemp(dir=_ROOT[0]))


@SETTINGS
@given(docs=st.lists(st.tuples(TEXT, TEXT, TEXT), min_size=1, max_size=6))
def test_corpus_round_trips_or_names_the_file(docs):
    d = _tmp()
    rows = [{"id": f"{i}:{a}", "text": t, "title": title} for i, (a, t, title) in enumerate(docs)]
    (d / "corpus.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    try:
        ds = load_dataset(d)
    except DatasetError as e:
        assert "corpus.jsonl" in str(e) and e.file is not None
        assert any(not r["text"].strip() or not r["id"].strip() for r in rows) or "line" in str(e)
        return
    assert [(x.id, x.text) for x in ds.documents] == [(r["id"], r["text"]) for r in rows]   # verbatim


@SETTINGS
@given(lines=st.lists(JSON, min_size=1, max_size=5), which=st.sampled_from(["corpus", "queries", "attacks",
                                                                           "targets", "qrels"]))
def test_any_json_lines_load_or_fail_with_a_dataset_error(lines, which):
    d = _tmp()
    (d / "corpus.jsonl").write_text(json.dumps({"id": "c0", "text": "a clean document"}) + "\n", encoding="utf-8")
    (d / f"{which}.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines), encoding="utf-8")
    try:
        load_dataset(d)
    except DatasetError as e:
        assert f"{which}.jsonl" in str(e)


@SETTINGS
@given(raw=st.binary(max_size=300), which=st.sampled_from(["corpus", "queries", "attacks"]))
def test_arbitrary_bytes_never_crash_the_loader(raw, which):
    d = _tmp()
    if which != "corpus":
        (d / "corpus.jsonl").write_text(json.dumps({"id": "c0", "text": "x"}) + "\n", encoding="utf-8")
    (d / f"{which}.jsonl").write_bytes(raw)
    try:
        load_dataset(d)
    except DatasetError as e:
        assert f"{which}.jsonl" in str(e) or str(d) in str(e)


@SETTINGS
@given(raw=st.binary(max_size=400))
def test_run_files_with_arbitrary_bytes_are_run_errors(raw):
    d = _tmp()
    (d / "config.json").write_bytes(raw)
    (d / "records.jsonl").write_bytes(raw + b"\n{}\n")
    for read in (lambda: read_run_config(d / "config.json"), lambda: read_records(d)):
        try:
            out = read()
        except RunError as e:
            assert "config.json" in str(e) or "records.jsonl" in str(e)
        else:
            assert isinstance(out, (dict, list))


@SETTINGS
@given(cfg=st.dictionaries(TEXT, JSON, max_size=5), pos=st.integers(min_value=0), byte=st.integers(0, 255))
def test_run_config_checksum_catches_any_single_byte_change(cfg, pos, byte):
    d = _tmp()
    p = d / "config.json"
    write_run_config(p, cfg)
    want = jsonable(cfg)   # what a run config can hold (non-finite floats become null)
    assert {k: v for k, v in read_run_config(p).items() if k not in ("sha256", "checksummed")} == want
    raw = bytearray(p.read_bytes())
    i = pos % len(raw)
    if raw[i] == byte:
        return
    raw[i] = byte
    p.write_bytes(bytes(raw))
    try:
        again = read_run_config(p)
    except RunError:
        return
    # the only undetected changes are ones that do not change the parsed value (e.g. whitespace)
    assert {k: v for k, v in again.items() if k not in ("sha256", "checksummed")} == want


@SETTINGS
@given(text=TEXT)
def test_calibration_file_loads_or_is_a_config_error(text):
    p = _tmp() / "cal.yaml"
    p.write_text(text, encoding="utf-8", errors="surrogatepass") if "\ud800" not in text else None
    if not p.exists():
        return
    try:
        out = load_calibration(p)
    except ConfigError as e:
        assert "cal.yaml" in str(e)
    else:
        assert isinstance(out, dict)


@SETTINGS
@given(existing=st.lists(st.tuples(st.sampled_from(["pr_b", "script", "diverse"]), st.sampled_from("abcde")),
                         max_size=10),
       new=st.lists(st.sampled_from("abcdef"), max_size=5, unique=True))
def test_append_merge_never_drops_a_record(existing, new):
    from sieve.attacks import merge_attacks
    from sieve.types import AttackRecord, Document

    p = _tmp() / "attacks.jsonl"
    rows = [{"query_id": q, "query": "?", "correct_answers": [], "target_answer": "t", "attack": fam,
             "documents": [{"id": f"{fam}:{q}:{i}", "text": "x"}]} for i, (fam, q) in enumerate(existing)]
    p.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    recs = [AttackRecord(q, "?", (), "t", "pr_b", (Document(f"new:{q}", "y", poison=True),)) for q in new]
    kept, replaced, written = merge_attacks(p, recs, "pr_b")
    after = [json.loads(ln) for ln in p.read_text(encoding="utf-8").splitlines()]
    others = [r for r in rows if not (r["attack"] == "pr_b" and r["query_id"] in new)]
    assert [r for r in after if r in others] == others                       # every other line kept, in order
    assert {r["query_id"] for r in after if r["attack"] == "pr_b"} == \
        {r["query_id"] for r in rows if r["attack"] == "pr_b"} | set(new)  # no target of the family lost
    assert kept == len(others) and written == len(new)
