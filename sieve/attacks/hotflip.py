"""PoisonedRAG white-box HotFlip (PR-W) against the configured retriever (docs/algorithms.md §7.2).

Goal: maximise sim = ⟨p_emb, q_emb⟩ of the poison passage to the fixed query embedding, where
p_emb is computed exactly as the retriever computes it (its tokenizer, its PyTorch model, its
pooling over the attention mask, L2 normalisation: the cosine the index ranks by).

Transformation + search (PR:src/attack.py), with the paper defaults:

* "Defaults: 30 iterations, 100 candidates … gold-init on" → ``iterations=30``, ``candidates=100``;
  "Initial trigger S = the query's tokens (gold init)".
* each iteration: forward, back-propagate to the word-embedding input, "take the gradient g at one
  uniformly random position inside the trigger span", "Candidates = the top 100 vocabulary ids by
  (embedding matrix · g)", "score each candidate by substituting it … and recomputing sim" (batched
  forward passes), "if any candidate beats the current sim, keep the argmax".

Deviations, each so that the text the retriever finally sees *is* the text that was optimised:

* **Layout.** PoisonedRAG tokenises query and payload separately with special tokens
  ([CLS] q [SEP] [CLS] p [SEP]) but the retriever later embeds the decoded *string*, i.e. the
  single-sequence layout. Sieve optimises that layout directly: the retriever's own special tokens
  around ``tokens(query + ".") ++ tokens(payload)``; the trigger span is ``tokens(query + ".")``
  (so the gold init is exactly the ``pr_b`` poison) and excludes the special positions (a flipped
  [CLS]/[SEP] would vanish on decode).
* **Constraint.** Candidates are restricted to vocabulary entries that survive a decode → encode
  round trip as themselves (no special, ``[unused]`` or ``##`` continuation pieces), unlike the
  paper's unfiltered top-100.
* **Fluent payload.** Final text = decode(trigger ids) + " " + payload, the payload *not*
  round-tripped through the tokenizer (PoisonedRAG decodes everything, which lowercases the payload
  under an uncased tokenizer). Under an uncased tokenizer the model sees the same tokens either way.
* **Honest outcome.** Similarities before/after are measured by ``retriever.encode`` on the real
  strings. If the optimised string does not beat the un-optimised ``query + "." + payload`` (a
  decode/re-encode drift), the un-optimised text is kept and ``hotflip_improved`` is false.

Cost: one retriever forward pass per candidate, so on a CPU the paper defaults cost minutes per
poison (docs/results/speed.md §3); use ``iterations``/``candidates`` to trade off
(``sieve attack --iterations --candidates``). The 5 payloads of a target are optimised separately;
volumes above 5 repeat them (same text, distinct ids).
"""
from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np

from sieve.attacks.base import Attack, AttackError, SkipTarget, target_rng
from sieve.registry import ATTACKS
from sieve.types import Target

if TYPE_CHECKING:
    from sieve.resources import Resources

_ALLOWED_CACHE: dict[tuple[int, int], Any] = {}


def _require_white_box(embedder: Any) -> None:
    missing = [a for a in ("tokenizer", "hf_model") if getattr(embedder, a, None) is None]
    if missing:
        raise AttackError(
            f"pr_w needs a white-box retriever (a PyTorch model with a tokenizer for gradients); "
            f"{getattr(embedder, 'model_id', type(embedder).__name__)!r} has no {' / '.join(missing)}. "
            "Use --retriever all-mpnet-base-v2 or all-MiniLM-L6-v2, or a black-box attack (pr_b)."
        )
    pooling = getattr(embedder, "pooling", "mean")
    if pooling not in ("mean", "cls"):
        raise AttackError(f"pr_w supports mean or cls pooling, the retriever uses {pooling!r}")


class WhiteBoxScorer:
    """Similarity of token-id sequences to a fixed query vector, computed like the retriever:
    model → pooling (mean over the attention mask, or CLS) → L2 normalise → dot product."""

    def __init__(self, embedder: Any, batch_size: int = 32):
        import torch

        _require_white_box(embedder)
        self.torch = torch
        self.tokenizer = embedder.tokenizer
        self.model = embedder.hf_model
        self.model.eval()
        self.pooling: str = getattr(embedder, "pooling", "mean")
        self.max_tokens = int(getattr(embedder, "max_tokens", 0) or getattr(self.tokenizer, "model_max_length", 512))
        self.max_tokens = min(self.max_tokens, 512)
        self.word_embeddings = self.model.get_input_embeddings()
        self.batch_size = batch_size
        self.allowed = allowed_candidate_mask(self.tokenizer, self.word_embeddings.weight.shape[0])

    def _pool(self, hidden: Any) -> Any:
        pooled = hidden[:, 0] if self.pooling == "cls" else hidden.mean(dim=1)  # all-ones attention mask
        return self.torch.nn.functional.normalize(pooled, dim=-1)

    def sims(self, batch_ids: Any, q: Any) -> Any:
        """[B] similarities of equal-length id sequences ``batch_ids`` [B, L] (no gradient)."""
        torch = self.torch
        out = []
        with torch.inference_mode():
            for i in range(0, batch_ids.shape[0], self.batch_size):
                ids = batch_ids[i:i + self.batch_size]
                h = self.model(input_ids=ids, attention_mask=torch.ones_like(ids)).last_hidden_state
                out.append(self._pool(h) @ q)
        return torch.cat(out)

    def sim_and_grad(self, ids: Any, q: Any) -> tuple[float, Any]:
        """Similarity of one sequence [L] and its gradient w.r.t. the word-embedding input [L, d]."""
        torch = self.torch
        with torch.enable_grad():
            emb = self.word_embeddings(ids[None]).detach().requires_grad_(True)
            h = self.model(inputs_embeds=emb, attention_mask=torch.ones_like(ids[None])).last_hidden_state
            sim = (self._pool(h) @ q)[0]
            (grad,) = torch.autograd.grad(sim, emb)
        return float(sim.detach()), grad[0]


def allowed_candidate_mask(tokenizer: Any, vocab_size: int) -> np.ndarray:
    """bool [V]: vocabulary ids that decode to a string which re-encodes to exactly that id and
    are not special tokens (the HotFlip round-trip constraint). Cached per tokenizer."""
    key = (id(tokenizer), vocab_size)
    if key in _ALLOWED_CACHE:
        return _ALLOWED_CACHE[key]
    special = set(getattr(tokenizer, "all_special_ids", []) or [])
    n = min(vocab_size, len(tokenizer))
    texts = tokenizer.batch_decode([[i] for i in range(n)], skip_special_tokens=False,
                                   clean_up_tokenization_spaces=False)
    enc = tokenizer([t.strip() for t in texts], add_special_tokens=False)["input_ids"]
    mask = np.zeros(vocab_size, dtype=bool)
    for i, (t, e) in enumerate(zip(texts, enc)):
        mask[i] = i not in special and len(e) == 1 and e[0] == i and bool(t.strip()) and not t.startswith("##")
    _ALLOWED_CACHE[key] = mask
    return mask


@ATTACKS.register
class HotFlipAttack(Attack):
    """PoisonedRAG PR-W: gold-initialised HotFlip trigger + fluent payload (see module docstring).

    ``iterations`` (paper 30), ``candidates`` (paper 100), ``batch_size`` for candidate forwards.
    """

    name = "pr_w"
    summary = "PoisonedRAG white-box: HotFlip-optimised trigger against the retriever + payload"
    paper = "PoisonedRAG (Zou et al., USENIX Sec 2025) white-box, docs/algorithms.md §7.2"
    needs = ("retriever",)

    # parameters, stored as attributes by Params.__init__ (declared for type checkers)
    iterations: int
    candidates: int
    batch_size: int

    def __init__(self, iterations: int = 30, candidates: int = 100, batch_size: int = 32) -> None:
        if int(iterations) < 0:
            raise ValueError(f"iterations must be >= 0, got {iterations}")
        if int(candidates) < 1:
            raise ValueError(f"candidates must be >= 1, got {candidates}")
        super().__init__(iterations=int(iterations), candidates=int(candidates), batch_size=int(batch_size))

    def prepare(self, targets: Sequence[Target], resources: "Resources") -> None:
        self._retriever = resources.retriever
        self._scorer = WhiteBoxScorer(self._retriever, batch_size=self.batch_size)
        self._stats.update({"retriever": self._retriever.model_id, "iterations": self.iterations,
                            "candidates": self.candidates, "per_target": []})

    def build(self, target: Target, payload_indices: list[int], resources: "Resources",
              seed: int) -> dict[int, tuple[str, dict[str, Any]]]:
        torch = self._scorer.torch
        tok = self._scorer.tokenizer
        t0 = time.perf_counter()
        trigger_src = target.query.strip() + "."
        trig_ids = tok(trigger_src, add_special_tokens=False)["input_ids"]
        window = self._scorer.max_tokens
        prefix, suffix = special_layout(tok)
        if len(trig_ids) + len(prefix) + len(suffix) >= window:
            raise SkipTarget(f"query is {len(trig_ids)} tokens, longer than the retriever window ({window} tokens)")
        q = torch.from_numpy(self._retriever.encode([target.query.strip()], kind="query")[0].copy())
        allowed = torch.from_numpy(self._scorer.allowed)
        befores = self._retriever.encode([trigger_src + target.payloads[p].strip() for p in payload_indices])
        out: dict[int, tuple[str, dict[str, Any]]] = {}
        for k, p in enumerate(payload_indices):
            payload = target.payloads[p].strip()
            pay_ids = tok(payload, add_special_tokens=False)["input_ids"]
            body = (trig_ids + pay_ids)[:window - len(prefix) - len(suffix)]  # truncation like the retriever's
            full = prefix + body + suffix
            start = len(prefix)
            ids = torch.tensor(full, dtype=torch.long)
            span = np.arange(start, start + len(trig_ids))
            rng = target_rng(seed, target.query_id, p)
            sim, flips = self._search(ids, span, q, allowed, rng)
            trigger_text = tok.decode(ids[span].tolist(), skip_special_tokens=True,
                                      clean_up_tokenization_spaces=True).strip()
            text = trigger_text + " " + payload
            before = float(befores[k] @ q.numpy())
            after = float(self._retriever.encode([text])[0] @ q.numpy())
            improved = after > before
            if not improved:
                text, after, trigger_text = trigger_src + payload, before, target.query.strip()
            out[p] = (text, {"trigger": trigger_text, "similarity_before": round(before, 6),
                             "similarity_after": round(after, 6), "optimised_similarity": round(sim, 6),
                             "flips": flips, "hotflip_improved": improved,
                             "iterations": self.iterations, "candidates": self.candidates,
                             "retriever": self._retriever.model_id})
        seconds = time.perf_counter() - t0
        for p in out:
            out[p][1]["seconds_per_target"] = round(seconds, 3)
        self._stats["per_target"].append({
            "query_id": target.query_id,
            "similarity_before": [out[p][1]["similarity_before"] for p in payload_indices],
            "similarity_after": [out[p][1]["similarity_after"] for p in payload_indices],
            "seconds": round(seconds, 3)})
        return out

    def _search(self, ids: Any, span: np.ndarray, q: Any, allowed: Any,
                rng: np.random.Generator) -> tuple[float, int]:
        """HotFlip coordinate ascent in place on ``ids``; returns (final sim, accepted flips)."""
        torch = self._scorer.torch
        E = self._scorer.word_embeddings.weight
        sim, grad = self._scorer.sim_and_grad(ids, q)
        flips = 0
        n_cand = min(self.candidates, int(allowed.sum()))
        for _ in range(self.iterations):
            pos = int(span[rng.integers(len(span))])
            with torch.inference_mode():
                scores = E @ grad[pos]
                scores = scores.masked_fill(~allowed, float("-inf"))
                scores[ids[pos]] = float("-inf")
                cand = torch.topk(scores, n_cand).indices
            batch = ids.repeat(len(cand), 1)
            batch[:, pos] = cand
            cand_sims = self._scorer.sims(batch, q)
            best = int(torch.argmax(cand_sims))
            if float(cand_sims[best]) > sim:
                ids[pos] = cand[best]
                flips += 1
                sim, grad = self._scorer.sim_and_grad(ids, q)
        return sim, flips

    def finish_stats(self, stats: dict[str, Any]) -> None:
        per = stats.get("per_target", [])
        if per:
            gains = [a - b for t in per for a, b in zip(t["similarity_after"], t["similarity_before"])]
            stats["mean_similarity_before"] = round(float(np.mean([b for t in per for b in t["similarity_before"]])), 6)
            stats["mean_similarity_after"] = round(float(np.mean([a for t in per for a in t["similarity_after"]])), 6)
            stats["mean_similarity_gain"] = round(float(np.mean(gains)), 6)
            stats["improved_fraction"] = round(float(np.mean([g > 0 for g in gains])), 4)
            stats["seconds_per_target"] = round(float(np.mean([t["seconds"] for t in per])), 3)


def special_layout(tokenizer: Any) -> tuple[list[int], list[int]]:
    """(leading, trailing) special-token ids the tokenizer wraps a single sequence in."""
    probe = tokenizer("hello", add_special_tokens=False)["input_ids"]
    full = tokenizer("hello")["input_ids"]
    i = _find(full, probe)
    return full[:i], full[i + len(probe):]


def _find(seq: list[int], sub: list[int]) -> int:
    for i in range(len(seq) - len(sub) + 1):
        if seq[i:i + len(sub)] == sub:
            return i
    raise AttackError("could not locate the trigger tokens in the tokenised passage")
