"""PoisonedRAG white-box HotFlip (docs/algorithms.md §7.2)."""
from __future__ import annotations

import numpy as np
import pytest

from sieve.attacks import AttackError, generate_attack
from sieve.attacks.hotflip import WhiteBoxScorer, allowed_candidate_mask, special_layout
from sieve.resources import Resources
from sieve.types import Target


def test_scorer_matches_the_retriever_embedding(whitebox_embedder):
    """The optimised similarity is the retriever's own cosine (same tokens, pooling, normalisation)."""
    import torch

    tok = whitebox_embedder.tokenizer
    text = "who wrote the novel pride and prejudice.Charlotte Bronte wrote it."
    q = torch.from_numpy(whitebox_embedder.encode(["who wrote the novel pride and prejudice"])[0].copy())
    ids = torch.tensor(tok(text)["input_ids"])
    scorer = WhiteBoxScorer(whitebox_embedder)
    expected = float(whitebox_embedder.encode([text])[0] @ q.numpy())
    assert float(scorer.sims(ids[None], q)[0]) == pytest.approx(expected, abs=1e-5)
    sim, grad = scorer.sim_and_grad(ids, q)
    assert sim == pytest.approx(expected, abs=1e-5) and grad.shape == (len(ids), 32)


def test_hotflip_improves_similarity_and_reports_it(targets, whitebox_resources):
    out = generate_attack("pr_w", targets, whitebox_resources, iterations=6, candidates=12)
    emb = whitebox_resources.retriever
    for rec, t in zip(out.records, targets):
        q = emb.encode([t.query])[0]
        for d in rec.documents:
            m = d.metadata
            assert m["similarity_after"] >= m["similarity_before"]
            # reported numbers are the real retriever similarities of the real strings
            assert float(emb.encode([d.text])[0] @ q) == pytest.approx(m["similarity_after"], abs=1e-5)
            before_text = t.query + "." + t.payloads[m["payload_index"]]
            assert float(emb.encode([before_text])[0] @ q) == pytest.approx(m["similarity_before"], abs=1e-5)
            assert d.text.endswith(" " + t.payloads[m["payload_index"]])   # fluent payload kept verbatim
            assert d.text == m["trigger"] + " " + t.payloads[m["payload_index"]] or not m["hotflip_improved"]
    assert out.stats["mean_similarity_gain"] > 0
    assert out.stats["mean_similarity_gain"] == pytest.approx(
        out.stats["mean_similarity_after"] - out.stats["mean_similarity_before"], abs=1e-5)
    assert out.stats["seconds_per_target"] >= 0 and len(out.stats["per_target"]) == 2


def test_zero_iterations_keeps_the_pr_b_text(targets, whitebox_resources):
    out = generate_attack("pr_w", targets[:1], whitebox_resources, iterations=0)
    d = out.records[0].documents[0]
    assert d.metadata["flips"] == 0 and d.metadata["similarity_after"] == d.metadata["similarity_before"]


def test_candidate_mask_excludes_specials_and_continuations(whitebox_embedder):
    tok = whitebox_embedder.tokenizer
    mask = allowed_candidate_mask(tok, len(tok))
    vocab = tok.convert_ids_to_tokens(list(range(len(tok))))
    assert not any(mask[i] for i, t in enumerate(vocab) if t.startswith("[") or t.startswith("##"))
    assert mask[tok.convert_tokens_to_ids("paris")]
    assert special_layout(tok) == ([tok.cls_token_id], [tok.sep_token_id])


def test_query_longer_than_the_window_is_skipped(targets, whitebox_resources):
    long = Target("q9", " ".join(["novel"] * 80), ("a",), "b", ("payload novel",))
    out = generate_attack("pr_w", [long, targets[0]], whitebox_resources, iterations=1, candidates=4)
    assert [r.query_id for r in out.records] == ["q1"]
    assert out.skipped == [("q9", "query is 81 tokens, longer than the retriever window (64 tokens)")]


def test_black_box_retriever_is_a_clear_error(targets, tiny_resources):
    with pytest.raises(AttackError, match="pr_w needs a white-box retriever"):
        generate_attack("pr_w", targets, tiny_resources)


@pytest.mark.realmodel
def test_hotflip_against_the_real_retriever(real_retriever, targets):
    """all-mpnet-base-v2: a few iterations move the poison closer to the query; the final string is
    real text whose re-tokenisation is stable."""
    res = Resources(retriever=real_retriever, llm=None)
    out = generate_attack("pr_w", targets[:1], res, volume=1, iterations=4, candidates=16)
    d = out.records[0].documents[0]
    m = d.metadata
    assert m["similarity_after"] >= m["similarity_before"] > 0.5
    q = real_retriever.encode([targets[0].query], kind="query")[0]
    assert float(real_retriever.encode([d.text])[0] @ q) == pytest.approx(m["similarity_after"], abs=1e-4)
    tok = real_retriever.tokenizer
    trig = m["trigger"]
    assert isinstance(trig, str) and trig
    assert tok.decode(tok(trig, add_special_tokens=False)["input_ids"]) == trig.lower()
    assert np.isfinite(out.stats["seconds_per_target"])
