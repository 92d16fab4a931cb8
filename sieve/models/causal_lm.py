"""Causal LM for token surprisal (RSQ E_p, perplexity filter) and the local likelihood verifier.

Weights are stored in the cache as safetensors (possibly bf16 to halve disk); computation is
always float32 on CPU (docs/algorithms.md §3.1: "fp32 on CPU").
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

import numpy as np

from sieve.constants import LM_TRACE_TOKENS

MAX_CONTEXT_TOKENS = 2048   # answer_nll keeps the last tokens of long contexts


class HFCausalLM:
    """A transformers ``AutoModelForCausalLM`` in float32 (protocol :class:`~sieve.models.protocols.CausalLM`)."""

    def __init__(self, path: Path, model_id: str, model: Any = None, tokenizer: Any = None):
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self.path = Path(path)
        self.model_id = model_id
        if tokenizer is None:
            tokenizer = AutoTokenizer.from_pretrained(str(path), local_files_only=True)
        if model is None:
            model = AutoModelForCausalLM.from_pretrained(str(path), dtype=torch.float32, local_files_only=True)
        self.tokenizer = tokenizer
        self.model = model
        self.model.to(torch.float32).eval()
        if self.tokenizer.pad_token_id is None:   # §3.4: EOS doubles as pad
            self.tokenizer.pad_token = self.tokenizer.eos_token

    # -- scoring -----------------------------------------------------------------------------------
    def _ids(self, text: str, max_tokens: int | None = None) -> list[int]:
        ids = self.tokenizer(text, add_special_tokens=False)["input_ids"]
        return ids[:max_tokens] if max_tokens else ids

    def token_nll(self, text: str, max_tokens: int = LM_TRACE_TOKENS) -> tuple[list[str], np.ndarray]:
        """NLL (nats) of tokens 2..L of ``text`` given their prefix; no BOS, no padding (docs/algorithms.md §3.4).

        Truncates to ``max_tokens`` (:data:`sieve.constants.LM_TRACE_TOKENS` in RSQ). Fewer than 2 tokens → empty trace.
        """
        return self.token_nll_many([text], max_tokens=max_tokens, batch_size=1)[0]

    def token_nll_many(self, texts: Sequence[str], max_tokens: int = LM_TRACE_TOKENS,
                       batch_size: int = 8, tokens: bool = True) -> list[tuple[list[str], np.ndarray]]:
        """Batched :meth:`token_nll`: length-sorted batches with right padding and an attention
        mask, so every text gets its unpadded trace (equal to the one-at-a-time trace within 1e-4,
        tests/models/test_batching.py; docs/algorithms.md §3.4). ``tokens=False`` skips decoding
        the token strings (an empty list per text)."""
        import torch

        encoded = [self._ids(t, max_tokens) for t in texts]
        results: list[tuple[list[str], np.ndarray] | None] = [None] * len(texts)
        order = sorted(range(len(texts)), key=lambda i: len(encoded[i]))
        pad = self.tokenizer.pad_token_id
        for start in range(0, len(order), max(1, batch_size)):
            batch = order[start:start + batch_size]
            longest = max(len(encoded[i]) for i in batch)
            if longest < 2:
                for i in batch:
                    results[i] = ([], np.zeros(0, np.float32))
                continue
            ids = torch.full((len(batch), longest), pad, dtype=torch.long)
            mask = torch.zeros((len(batch), longest), dtype=torch.long)
            for row, i in enumerate(batch):
                ids[row, : len(encoded[i])] = torch.tensor(encoded[i])
                mask[row, : len(encoded[i])] = 1
            with torch.inference_mode():
                logits = self.model(input_ids=ids, attention_mask=mask).logits.float()
            logp = torch.log_softmax(logits[:, :-1], dim=-1)
            nll = -logp.gather(-1, ids[:, 1:].unsqueeze(-1)).squeeze(-1)
            for row, i in enumerate(batch):
                n = len(encoded[i])
                trace = nll[row, : max(0, n - 1)].numpy().astype(np.float32)
                strings = [self.tokenizer.decode([t]) for t in encoded[i][1:]] if tokens else []
                results[i] = (strings, trace)
        return [r if r is not None else ([], np.zeros(0, np.float32)) for r in results]

    def answer_nll(self, answer: str, context: str) -> float:
        """Mean NLL (nats/token) of ``answer``'s tokens following ``context`` (docs/models.md likelihood
        verifier). Answer and context are tokenised separately and concatenated; an empty answer
        scores 0.0. Contexts longer than 2048 tokens keep their last tokens."""
        import torch

        ans = self._ids(answer)
        if not ans:
            return 0.0
        ctx = self._ids(context)[-MAX_CONTEXT_TOKENS:]
        if not ctx:   # nothing to condition on: score tokens 2..L of the answer
            ctx, ans = ans[:1], ans[1:]
            if not ans:
                return 0.0
        ids = torch.tensor([ctx + ans])
        with torch.inference_mode():
            logits = self.model(input_ids=ids).logits.float()[0]
        logp = torch.log_softmax(logits[len(ctx) - 1: -1], dim=-1)
        nll = -logp.gather(-1, torch.tensor(ans).unsqueeze(-1)).squeeze(-1)
        return float(nll.mean())

    # -- generation --------------------------------------------------------------------------------
    def chat_prompt_ids(self, prompt: str, system: str | None = None) -> list[int]:
        messages = ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": prompt}]
        if getattr(self.tokenizer, "chat_template", None):
            out = self.tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
            if isinstance(out, dict) or hasattr(out, "keys"):
                out = out["input_ids"]
            return list(out)
        text = (f"{system}\n\n" if system else "") + f"{prompt}\n"
        return self._ids(text)

    def generate(self, prompt: str, system: str | None = None, max_new_tokens: int = 64) -> str:
        """Greedy completion of a chat turn (the model's chat template)."""
        import torch

        ids = self.chat_prompt_ids(prompt, system)[-MAX_CONTEXT_TOKENS:]
        input_ids = torch.tensor([ids])
        with torch.inference_mode():
            out = self.model.generate(
                input_ids=input_ids, attention_mask=torch.ones_like(input_ids),
                max_new_tokens=max_new_tokens, do_sample=False,
                pad_token_id=self.tokenizer.pad_token_id,
            )
        return self.tokenizer.decode(out[0, len(ids):], skip_special_tokens=True).strip()

    def __repr__(self) -> str:
        return f"HFCausalLM({self.model_id!r})"
