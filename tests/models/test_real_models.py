"""The real packaged models (one load each per session via the conftest ``real_*`` fixtures).

Expected values are facts about the world the models should know (docs/models.md checks); each test
compares two alternatives rather than asserting raw scores.
"""
from __future__ import annotations

import numpy as np
import pytest

pytestmark = pytest.mark.realmodel

QUERY = "What is the capital of Australia?"
CANBERRA = "Canberra is the capital city of Australia, located in the Australian Capital Territory."
SYDNEY = "Sydney is the largest city in Australia and home to the famous Sydney Opera House."


def _check_embedder(emb, dim: int) -> None:
    q = emb.encode([QUERY], kind="query")
    d = emb.encode([CANBERRA, SYDNEY], kind="passage")
    assert q.shape == (1, dim) and d.shape == (2, dim)
    assert q.dtype == np.float32 and d.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(np.vstack([q, d]), axis=1), 1.0, atol=1e-5)
    scores = (d @ q.T).ravel()
    assert scores[0] > scores[1], f"{emb.model_id}: Canberra {scores[0]:.3f} <= Sydney {scores[1]:.3f}"


def test_mpnet_retriever_ranks_canberra_first(real_retriever):
    assert real_retriever.model_id == "all-mpnet-base-v2" and real_retriever.max_tokens == 384
    assert real_retriever.pooling == "mean" and real_retriever.hf_model is not None
    _check_embedder(real_retriever, 768)


def test_mpnet_truncates_to_max_seq_length(real_retriever):
    long = CANBERRA + " " + " ".join(["filler"] * 400)
    a, b = real_retriever.encode([long, long + " more text that lies beyond the limit"])
    assert float(a @ b) == pytest.approx(1.0, abs=1e-5)   # everything after 384 tokens is ignored


def test_minilm_judge_ranks_canberra_first(real_judge):
    assert real_judge.model_id == "all-MiniLM-L6-v2" and real_judge.max_tokens == 256
    _check_embedder(real_judge, 384)


def test_e5_ranks_canberra_first_and_uses_prefixes(real_config):
    from sieve.models import load_embedder

    e5 = load_embedder("multilingual-e5-small", real_config)
    assert "prefixes" in e5.model_id and not hasattr(e5, "hf_model")
    _check_embedder(e5, 384)
    # the query/passage prefixes make the two kinds differ for the same text
    assert float(e5.encode([QUERY], kind="query")[0] @ e5.encode([QUERY], kind="passage")[0]) < 0.999


def test_smollm2_prefers_paris(real_lm):
    assert real_lm.model_id == "smollm2-135m"
    paris = real_lm.answer_nll(" Paris", "The capital of France is")
    berlin = real_lm.answer_nll(" Berlin", "The capital of France is")
    assert paris < berlin
    tokens, nll = real_lm.token_nll("The Eiffel Tower is located in Paris, France.")
    assert len(tokens) == len(nll) > 5 and nll.dtype == np.float32 and (nll >= 0).all()
    # no BOS is added: the first token of the text gets no loss
    ids = real_lm.tokenizer("The Eiffel Tower is located in Paris, France.", add_special_tokens=False)["input_ids"]
    assert len(nll) == len(ids) - 1
    batched = real_lm.token_nll_many(["The Eiffel Tower is located in Paris, France.", "Short one."])
    np.testing.assert_allclose(batched[0][1], nll, atol=1e-3)


@pytest.mark.parametrize("name,layer,dim", [("all-MiniLM-L6-v2", 4, 384), ("all-mpnet-base-v2", 9, 768)])
def test_token_encoder_bertscore_paraphrase_beats_unrelated(real_config, real_token_encoder, name, layer, dim):
    from sieve.models import load_token_encoder

    enc = load_token_encoder(name, layer, real_config)
    assert enc.model_id == f"{name}@layer{layer}"
    if (name, layer) == (real_config.models.token_encoder, real_config.models.token_encoder_layer):
        assert enc is real_token_encoder        # loaded once per process
    ref = enc.token_states("The Eiffel Tower is located in Paris, France.", 256)
    para = enc.token_states("The Eiffel Tower stands in Paris, France.", 256)
    other = enc.token_states("Bananas are rich in potassium and dietary fiber.", 256)
    assert ref.shape[1] == dim and ref.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(ref, axis=1), 1.0, atol=1e-5)
    # 10 content tokens; [CLS]/[SEP] dropped
    assert ref.shape[0] == len(enc.tokenizer("The Eiffel Tower is located in Paris, France.",
                                             add_special_tokens=False)["input_ids"])
    assert enc.token_states("word " * 400, 256).shape[0] == 254   # truncation before dropping specials

    def f1(a, b):
        sim = a @ b.T
        p, r = sim.max(axis=0).mean(), sim.max(axis=1).mean()
        return 2 * p * r / (p + r)

    assert f1(ref, para) > f1(ref, other) + 0.3


def test_local_llm_nll_prefers_paris_and_answers_from_context(real_llm):
    assert real_llm.model_id == "local:qwen2.5-coder-0.5b" and real_llm.supports_nll
    assert real_llm.nll(" Paris", "The capital of France is") < real_llm.nll(" Berlin", "The capital of France is")
    context = "Context: The Zorblat Festival is held every year in the town of Kettlewick.\n"
    answer = real_llm.generate(context + "Question: Where is the Zorblat Festival held?\nAnswer:",
                               system="Answer the question with a short phrase only.", max_tokens=16)
    assert isinstance(answer, str) and answer.strip()
    assert "kettlewick" in answer.lower()
