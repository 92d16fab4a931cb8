"""ONNX Runtime backend vs PyTorch on the real packaged models (issue 15, sieve/models/onnx_backend.py).

Exports happen once into the model cache (MiniLM only here: mpnet's export is benchmarked in
``sieve bench models``, not exported in CI)."""
from __future__ import annotations

import json
import logging
from pathlib import Path

import numpy as np
import pytest

from sieve.config import ConfigError, ModelsConfig, SieveConfig
from sieve.models import cache as mcache
from sieve.models import onnx_backend
from sieve.models.loaders import load_embedder, load_token_encoder

DEMO = Path(__file__).resolve().parents[2] / "demo_data"
pytestmark = pytest.mark.skipif(not onnx_backend.available(), reason="onnxruntime not installed")


def demo(n: int, name: str = "corpus.jsonl") -> list[str]:
    return [json.loads(line)["text"] for line in (DEMO / name).read_text(encoding="utf-8").splitlines()[:n]]


@pytest.fixture(scope="module")
def onnx_config(real_config) -> SieveConfig:
    return SieveConfig(models=ModelsConfig(backend="onnx"), cache_dir=real_config.cache_dir).validate()


@pytest.mark.realmodel
def test_onnx_embedder_matches_pytorch_per_vector(real_judge, onnx_config):
    onnx = load_embedder("all-MiniLM-L6-v2", onnx_config, role="judge")
    assert isinstance(onnx, onnx_backend.OnnxSentenceEmbedder) and onnx.model_id == real_judge.model_id
    texts = demo(24) + ["", "x"]
    a, b = real_judge.encode(texts), onnx.encode(texts)
    assert a.shape == b.shape
    assert float((a * b).sum(1).min()) >= onnx_backend.MIN_COSINE
    q_a, q_b = real_judge.encode(["who painted the mona lisa"], kind="query"), onnx.encode(["who painted the mona lisa"], kind="query")
    assert float((q_a * q_b).sum()) >= onnx_backend.MIN_COSINE
    entry = mcache.models_dir(onnx_config.cache_dir) / "onnx" / "all-MiniLM-L6-v2-fp32"
    info = json.loads((entry / mcache.MANIFEST).read_text())
    assert info["accepted"] and info["min_cosine"] >= 0.999 and "model.onnx" in info["sha256"]


@pytest.mark.realmodel
def test_onnx_token_encoder_matches_pytorch_per_token(real_token_encoder, onnx_config):
    m = onnx_config.models
    onnx = load_token_encoder(m.token_encoder, m.token_encoder_layer, onnx_config)
    assert isinstance(onnx, onnx_backend.OnnxTokenEncoder) and onnx.model_id == real_token_encoder.model_id
    texts = demo(12)
    for x, y in zip(real_token_encoder.token_states_many(texts, 256), onnx.token_states_many(texts, 256)):
        assert x.shape == y.shape
        assert float((x * y).sum(1).min()) >= onnx_backend.MIN_COSINE


@pytest.mark.realmodel
def test_int8_is_gated_by_retrieval_agreement_on_the_shipped_probe(real_judge, real_config, caplog):
    """The int8 gate measures recall@10 agreement with PyTorch on the shipped probe (not only the
    cosine): the manifest's value matches an independent measurement (the int8 graph against the
    sentence-transformers judge), and int8 is used iff agreement ≥ 0.99 and cosine ≥ 0.99; a refusal
    is one warning line naming the agreement, and the fp32 ONNX model is used instead."""
    cfg = SieveConfig(models=ModelsConfig(backend="onnx-int8"), cache_dir=real_config.cache_dir).validate()
    with caplog.at_level(logging.WARNING, logger="sieve.models"):
        emb = load_embedder("all-MiniLM-L6-v2", cfg, role="judge")
    entry = mcache.models_dir(cfg.cache_dir) / "onnx" / "all-MiniLM-L6-v2-int8"
    info = json.loads((entry / mcache.MANIFEST).read_text())
    assert info["gate"] == onnx_backend.INT8_GATE
    assert (info["probe_queries"], info["probe_passages"]) == (64, 192)
    queries, passages = onnx_backend.retrieval_probe()
    sess = onnx_backend._session(entry / "model.onnx")
    q_i = onnx_backend._session_outputs(sess, real_judge.tokenizer, queries, real_judge.max_tokens)
    p_i = onnx_backend._session_outputs(sess, real_judge.tokenizer, passages, real_judge.max_tokens)
    agree = onnx_backend.topk_agreement(real_judge.encode(queries, kind="query"), real_judge.encode(passages), q_i, p_i)
    assert abs(agree - info["recall_at_10_agreement"]) <= 0.02, (agree, info)
    ok = info["recall_at_10_agreement"] >= onnx_backend.INT8_MIN_AGREEMENT and info["min_cosine"] >= onnx_backend.INT8_MIN_COSINE
    assert info["accepted"] is ok
    if ok:
        assert emb.model_id == "all-MiniLM-L6-v2@onnx-int8" and emb.int8
        return
    assert emb.model_id == real_judge.model_id and not emb.int8 and emb.backend == "onnx"
    refusal = [r.getMessage() for r in caplog.records if "refused" in r.getMessage()]
    assert len(refusal) == 1 and "\n" not in refusal[0]
    if info["recall_at_10_agreement"] < onnx_backend.INT8_MIN_AGREEMENT:
        assert f"recall@10 agreement with PyTorch {info['recall_at_10_agreement']:.3f} < 0.99" in refusal[0]


def test_topk_agreement_counts_shared_top_k():
    rng = np.random.default_rng(0)
    P = rng.normal(size=(30, 8))
    Q = rng.normal(size=(4, 8))
    assert onnx_backend.topk_agreement(Q, P, Q, P) == 1.0
    assert onnx_backend.topk_agreement(Q, P, Q * 3.0, P * 0.5) == 1.0          # cosine: scale does not matter
    order = np.argsort(-(Q[:1] / np.linalg.norm(Q[:1])) @ (P / np.linalg.norm(P, axis=1, keepdims=True)).T)[0]
    P2 = P.copy()
    P2[order[:3]] = -P[order[:3]]                                                # 3 of query 0's top 10 leave it
    assert onnx_backend.topk_agreement(Q[:1], P, Q[:1], P2) == 0.7
    assert onnx_backend.topk_agreement(Q, P, Q, -P) < 0.5


def test_int8_refusal_is_one_line_naming_the_measurement():
    info = {"recall_at_10_agreement": 0.93, "required_agreement": 0.99, "min_cosine": 0.992, "required_cosine": 0.99,
            "probe_queries": 64, "probe_passages": 192, "accepted": False}
    msg = onnx_backend.refusal_message("all-MiniLM-L6-v2-int8", info)
    assert msg == ("int8 ONNX model all-MiniLM-L6-v2-int8 refused: recall@10 agreement with PyTorch 0.930 < 0.99 "
                   "on the shipped retrieval probe (64 queries × 192 passages); minimum cosine 0.992")
    info.update(recall_at_10_agreement=0.995, min_cosine=0.85)
    assert "minimum cosine to PyTorch 0.85 < 0.99" in onnx_backend.refusal_message("x", info)


def test_backend_falls_back_to_pytorch_without_onnxruntime(monkeypatch, caplog):
    class Torchish:
        model_id = "m"

    monkeypatch.setattr(onnx_backend, "available", lambda: False)
    t = Torchish()
    with caplog.at_level(logging.WARNING):
        assert onnx_backend.wrap_embedder(t, "onnx", Path("/nonexistent")) is t
    assert "onnxruntime is not installed" in caplog.text
    assert onnx_backend.wrap_embedder(t, "torch", Path("/nonexistent")) is t


def test_backend_is_validated():
    with pytest.raises(ConfigError, match="models.backend must be one of torch, onnx, onnx-int8, torch-bf16"):
        SieveConfig(models=ModelsConfig(backend="tensorrt")).validate()
    assert SieveConfig.from_dict({"models": {"backend": "onnx"}}).models.backend == "onnx"


def test_bf16_is_refused_without_bf16_hardware(monkeypatch, caplog):
    """A CPU without AMX-BF16 / AVX512-BF16 would emulate bfloat16 (slower than fp32): refused in one
    line, the fp32 PyTorch embedder is used."""
    class Torchish:
        model_id = "m"

    monkeypatch.setattr(onnx_backend, "_cpu_flags", lambda: {"avx2", "avx512f"})
    assert onnx_backend.bf16_hardware() is None
    t = Torchish()
    with caplog.at_level(logging.WARNING, logger="sieve.models"):
        assert onnx_backend.wrap_embedder(t, "torch-bf16", Path("/nonexistent")) is t
    msgs = [r.getMessage() for r in caplog.records]
    assert len(msgs) == 1 and "bf16 backend refused: this CPU has no AMX-BF16" in msgs[0] and "\n" not in msgs[0]
    monkeypatch.setattr(onnx_backend, "_cpu_flags", lambda: {"avx512f", "avx512_bf16"})
    assert onnx_backend.bf16_hardware() == "avx512_bf16"


@pytest.mark.realmodel
@pytest.mark.skipif(onnx_backend.bf16_hardware() is None, reason="CPU has no bfloat16 matrix instructions")
def test_bf16_retriever_is_gated_by_agreement_with_fp32(real_retriever, tmp_path, monkeypatch):
    """The real mpnet retriever in bfloat16, gated on a small slice of the shipped probe (24 queries ×
    48 passages, for CI time; the product gate uses all 64 × 192): the manifest's agreement equals an
    independent measurement, the model id changes iff accepted, and vectors stay close to fp32."""
    queries, passages = onnx_backend.retrieval_probe()
    monkeypatch.setattr(onnx_backend, "retrieval_probe", lambda: (queries[:24], passages[:48]))
    try:
        emb = onnx_backend.Bf16SentenceEmbedder(real_retriever, tmp_path)
    except onnx_backend.ModelError as e:   # refused: the reason is the measured agreement or cosine, in one line
        assert "\n" not in str(e) and ("agreement" in str(e) or "cosine" in str(e))
        return
    gate = emb.gate
    assert gate["accepted"] and gate["probe_queries"] == 24 and gate["probe_passages"] == 48
    assert emb.model_id == real_retriever.model_id + "@bf16" and emb.backend == "torch-bf16"
    ref_q, ref_p = real_retriever.encode(queries[:24], kind="query"), real_retriever.encode(passages[:48])
    q, p = emb.encode(queries[:24], kind="query"), emb.encode(passages[:48])
    assert q.dtype == np.float32 and np.allclose(np.linalg.norm(p, axis=1), 1.0, atol=1e-5)
    assert abs(onnx_backend.topk_agreement(ref_q, ref_p, q, p) - gate["recall_at_10_agreement"]) <= 1e-6
    cos = (p * ref_p).sum(1)
    assert cos.min() >= onnx_backend.INT8_MIN_COSINE and abs(cos.min() - gate["min_cosine"]) < 0.01
    assert not np.allclose(p, ref_p, atol=1e-6)            # really computed in reduced precision
    entry = mcache.models_dir(tmp_path) / "gates"
    assert [d.name.split("-bf16-")[0] for d in entry.iterdir() if not d.name.startswith(".")] == [real_retriever.model_id]
