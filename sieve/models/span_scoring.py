"""Length-normalised log-probabilities of short answer spans after a shared prompt (docs/algorithms.md §14.1).

``span_logprobs(lm, prefix, spans)`` returns, for every span, the mean log p (nats/token) of the
span's tokens following ``prefix``: the prefix is tokenised once and the span (with a leading space,
the natural continuation of ``"Answer:"``) separately, as in ``HFCausalLM.answer_nll``.

* **Batched** (a transformers model, :class:`sieve.models.causal_lm.HFCausalLM`): one forward pass
  over the prefix with the key/value cache kept; the spans then run as one right-padded batch
  (length-sorted, at most ``batch_size`` rows) on a copy of that cache repeated per row, so the
  prefix is computed once however many spans it has. Equal to :func:`span_logprobs_reference` (the
  whole prefix + span in one uncached pass, one span at a time) within 1e-4
  (tests/defenses/test_answer_spans.py).
* **Any other causal LM** (the tiny in-process models of :mod:`sieve.models.tiny`): one
  ``answer_nll(span, prefix)`` call per span, negated.

A span with no tokens gets ``nan``. Prompts longer than :data:`~sieve.models.causal_lm.MAX_CONTEXT_TOKENS`
keep their last tokens (the question and ``Answer:`` sit at the end).
"""
from __future__ import annotations

import copy
import inspect
from typing import Any, Sequence

import numpy as np

from sieve.models.causal_lm import MAX_CONTEXT_TOKENS

SPAN_BATCH = 16
"""Spans per forward pass over one cached prefix (spans are a few tokens: padding is cheap)."""
MAX_SPAN_TOKENS = 16
"""Tokens of a span that are scored (longer spans are truncated; answers are short)."""


def _hf(lm: Any) -> bool:
    return getattr(lm, "model", None) is not None and getattr(lm, "tokenizer", None) is not None


def _ids(lm: Any, text: str) -> list[int]:
    return list(lm.tokenizer(text, add_special_tokens=False)["input_ids"])


def _cache_kw(model: Any) -> tuple[str, bool]:
    """The forward keyword of the key/value cache (``cache`` in newer transformers, formerly
    ``past_key_values``) and whether ``logits_to_keep`` is accepted."""
    params = inspect.signature(model.forward).parameters
    return ("cache" if "cache" in params else "past_key_values"), "logits_to_keep" in params


def _encode(lm: Any, prefix: str, spans: Sequence[str]) -> tuple[list[int], list[list[int]]]:
    pre = _ids(lm, prefix)[-MAX_CONTEXT_TOKENS:]
    return pre, [_ids(lm, " " + s.strip())[:MAX_SPAN_TOKENS] if s.strip() else [] for s in spans]


def span_logprobs(lm: Any, prefix: str, spans: Sequence[str], batch_size: int = SPAN_BATCH) -> np.ndarray:
    """Mean log p (nats/token, ≤ 0) of each span after ``prefix`` (module docstring), float64 [n]."""
    spans = list(spans)
    out = np.full(len(spans), np.nan)
    if not spans:
        return out
    if not _hf(lm):
        for i, s in enumerate(spans):
            if s.strip():
                out[i] = -float(lm.answer_nll(s.strip(), prefix))
        return out
    import torch

    pre, enc = _encode(lm, prefix, spans)
    if not pre:   # nothing to condition on: the uncached path handles it
        return span_logprobs_reference(lm, prefix, spans)
    todo = sorted((i for i in range(len(spans)) if enc[i]), key=lambda i: len(enc[i]))
    if not todo:
        return out
    pad = lm.tokenizer.pad_token_id if lm.tokenizer.pad_token_id is not None else 0
    with torch.inference_mode():
        kw, keep = _cache_kw(lm.model)
        first = lm.model(input_ids=torch.tensor([pre]), use_cache=True, **({"logits_to_keep": 1} if keep else {}))
        last = torch.log_softmax(first.logits[0, -1].float(), dim=-1)   # predicts each span's first token
        past = getattr(first, "cache", None)
        past = first.past_key_values if past is None else past
        for start in range(0, len(todo), max(1, batch_size)):
            batch = todo[start:start + batch_size]
            longest = max(len(enc[i]) for i in batch)
            lps = {i: [float(last[enc[i][0]])] for i in batch}
            if longest > 1:   # the last span token predicts nothing we score: feed tokens 1..L-1
                width = longest - 1
                ids = torch.full((len(batch), width), pad, dtype=torch.long)
                mask = torch.zeros((len(batch), len(pre) + width), dtype=torch.long)
                mask[:, : len(pre)] = 1
                for row, i in enumerate(batch):
                    n = len(enc[i]) - 1
                    if n:
                        ids[row, :n] = torch.tensor(enc[i][:n])
                        mask[row, len(pre): len(pre) + n] = 1
                cache = copy.deepcopy(past)
                cache.batch_repeat_interleave(len(batch))
                pos = torch.arange(len(pre), len(pre) + width).unsqueeze(0).expand(len(batch), -1)
                logits = lm.model(input_ids=ids, attention_mask=mask, position_ids=pos, use_cache=True,
                                  **{kw: cache}).logits.float()
                logp = torch.log_softmax(logits, dim=-1)
                for row, i in enumerate(batch):
                    lps[i] += [float(logp[row, j - 1, enc[i][j]]) for j in range(1, len(enc[i]))]
            for i in batch:
                out[i] = float(np.mean(lps[i]))
    return out


def span_logprobs_reference(lm: Any, prefix: str, spans: Sequence[str]) -> np.ndarray:
    """:func:`span_logprobs` one span at a time, each as one uncached pass over prefix + span (the
    reference the batched path is tested against)."""
    spans = list(spans)
    out = np.full(len(spans), np.nan)
    if not _hf(lm):
        return span_logprobs(lm, prefix, spans)
    import torch

    pre, enc = _encode(lm, prefix, spans)
    for i, span in enumerate(enc):
        ctx, ans = (pre, span) if pre else (span[:1], span[1:])
        if not ans:
            continue
        with torch.inference_mode():
            logits = lm.model(input_ids=torch.tensor([ctx + ans])).logits.float()[0]
        logp = torch.log_softmax(logits[len(ctx) - 1: -1], dim=-1)
        out[i] = float(logp.gather(-1, torch.tensor(ans).unsqueeze(-1)).mean())
    return out
