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
def test_int8_is_used_only_within_its_tolerance(real_judge, real_config):
    """int8 either passes the probe gate (then its own model id, and top-10 agreement with PyTorch
    on demo passages ≥ 0.9 here) or is refused and the fp32 ONNX model is used."""
    cfg = SieveConfig(models=ModelsConfig(backend="onnx-int8"), cache_dir=real_config.cache_dir).validate()
    emb = load_embedder("all-MiniLM-L6-v2", cfg, role="judge")
    entry = mcache.models_dir(cfg.cache_dir) / "onnx" / "all-MiniLM-L6-v2-int8"
    info = json.loads((entry / mcache.MANIFEST).read_text())
    if not info["accepted"]:
        assert emb.model_id == real_judge.model_id and not getattr(emb, "int8", True)
        return
    assert emb.model_id == "all-MiniLM-L6-v2@onnx-int8" and info["min_cosine"] >= onnx_backend.INT8_MIN_COSINE
    passages, queries = demo(96), demo(16, "queries.jsonl")
    P_t, P_q = real_judge.encode(passages), emb.encode(passages)
    Q_t, Q_q = real_judge.encode(queries, kind="query"), emb.encode(queries, kind="query")
    top_t = np.argsort(-(Q_t @ P_t.T), axis=1)[:, :10]
    top_q = np.argsort(-(Q_q @ P_q.T), axis=1)[:, :10]
    agreement = np.mean([len(set(a) & set(b)) / 10 for a, b in zip(top_t, top_q)])
    assert agreement >= 0.9


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
    with pytest.raises(ConfigError, match="models.backend must be one of torch, onnx, onnx-int8"):
        SieveConfig(models=ModelsConfig(backend="tensorrt")).validate()
    assert SieveConfig.from_dict({"models": {"backend": "onnx"}}).models.backend == "onnx"
