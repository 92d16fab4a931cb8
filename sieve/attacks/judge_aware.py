"""``judge_aware``: the TRIS paper's Level-2 adaptive attacker (docs/algorithms.md §7.8).

The attacker knows the defense: TRIS L1 keeps only the judge-space majority cluster of the ranking
(§2.2), so a poison must be retrieved **and** look like the clean majority to the judge. Objective of
one poison text x for query q::

    J(x) = cos_retriever(x, q) + weight · cos_judge(x, c_major)

where ``c_major`` is the centroid of the majority cluster that 2-means (random_state 42, n_init 10,
as L1) finds among the query's ``neighbours`` nearest clean corpus passages in judge space (the
attacker's simulation of L1 on the clean neighbourhood; read from the dataset directory ``data``).

Search: the HotFlip machinery of ``sieve/attacks/hotflip.py`` (gold-initialised trigger = the query
tokens + ".", candidates = top ``candidates`` vocabulary ids by the retriever gradient at a random
trigger position, round-trip-safe ids only), but each candidate is scored by the joint J (retriever
forward + judge encoding of the decoded text) and a flip is kept only if J improves. Candidate
generation uses the retriever gradient alone: the judge has another tokenizer, so its gradient does
not live on the same token positions.

Cost cut (2 CPU cores): one trigger per target, optimised on the target's first payload and shared
by its poisons (poison j = trigger + " " + payload j); ``iterations`` × ``candidates`` joint
evaluations per target. Before/after values of both terms are measured on the final strings and
recorded in every poison's metadata; if the optimised text does not beat the un-optimised one on J,
the un-optimised ``query + "." + payload`` is kept (``hotflip_improved`` false).
"""
from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np

from sieve.attacks.base import Attack, AttackError, SkipTarget, target_rng
from sieve.attacks.hotflip import WhiteBoxScorer, special_layout
from sieve.attacks.sources import require_data
from sieve.registry import ATTACKS
from sieve.types import Target

if TYPE_CHECKING:
    from sieve.resources import Resources


def majority_centroid(X: np.ndarray, random_state: int = 42) -> tuple[np.ndarray, int, int]:
    """(unit centroid of the larger 2-means cluster, its size, n) over judge vectors ``X``."""
    from sklearn.cluster import KMeans

    if len(X) < 3:
        c = X.mean(axis=0)
        return c / max(float(np.linalg.norm(c)), 1e-12), len(X), len(X)
    km = KMeans(n_clusters=2, random_state=random_state, n_init=10).fit(X)
    sizes = np.bincount(km.labels_, minlength=2)
    big = int(np.argmax(sizes))
    c = X[km.labels_ == big].mean(axis=0)
    return c / max(float(np.linalg.norm(c)), 1e-12), int(sizes[big]), len(X)


@ATTACKS.register
class JudgeAwareAttack(Attack):
    """TRIS Level-2 adaptive attacker: HotFlip trigger for retriever similarity + judge-majority
    closeness (§7.8). ``iterations`` × ``candidates`` joint evaluations per target; ``weight`` of the
    judge term; ``neighbours`` clean passages simulating L1; ``data`` the dataset directory."""

    name = "judge_aware"
    summary = "TRIS L2 adaptive: HotFlip trigger optimised for retrieval and for the judge-space majority cluster"
    paper = "TRIS adaptive attacker (Level 2) on PoisonedRAG white-box HotFlip, docs/algorithms.md §7.8"
    needs = ("retriever", "judge")

    # parameters, stored as attributes by Params.__init__ (declared for type checkers)
    iterations: int
    candidates: int
    weight: float
    neighbours: int
    data: str
    batch_size: int

    def __init__(self, iterations: int = 4, candidates: int = 8, weight: float = 1.0, neighbours: int = 50,
                 data: str = "", batch_size: int = 32) -> None:
        if int(iterations) < 0:
            raise ValueError(f"iterations must be >= 0, got {iterations}")
        if int(candidates) < 1:
            raise ValueError(f"candidates must be >= 1, got {candidates}")
        if int(neighbours) < 3:
            raise ValueError(f"neighbours must be >= 3, got {neighbours}")
        super().__init__(iterations=int(iterations), candidates=int(candidates), weight=float(weight),
                         neighbours=int(neighbours), data=str(data) if data else "", batch_size=int(batch_size))

    def prepare(self, targets: Sequence[Target], resources: "Resources") -> None:
        ds = require_data(self.name, self.data)
        self._retriever = resources.retriever
        self._judge = resources.judge
        self._scorer = WhiteBoxScorer(self._retriever, batch_size=self.batch_size)
        clean = [d for d in ds.documents if not d.poison]
        if len(clean) < 3:
            raise AttackError(f"{self.name}: the dataset at {self.data} has fewer than 3 clean passages")
        self._clean_texts = [d.text for d in clean]
        self._clean_judge = resources.judge_embeddings(self._clean_texts)
        self._stats.update({"retriever": self._retriever.model_id,
                            "judge": getattr(self._judge, "model_id", "judge"),
                            "iterations": self.iterations, "candidates": self.candidates,
                            "weight": self.weight, "per_target": []})

    def _judge_cos(self, texts: list[str], c: np.ndarray) -> np.ndarray:
        v = np.asarray(self._judge.encode(texts, kind="passage"), dtype=np.float32)
        v = v / np.maximum(np.linalg.norm(v, axis=1, keepdims=True), 1e-12)
        return v @ c

    def build(self, target: Target, payload_indices: list[int], resources: "Resources",
              seed: int) -> dict[int, tuple[str, dict[str, Any]]]:
        torch = self._scorer.torch
        tok = self._scorer.tokenizer
        t0 = time.perf_counter()
        query = target.query.strip()
        qj = np.asarray(self._judge.encode([query], kind="query")[0], dtype=np.float32)
        near = np.argsort(-(self._clean_judge @ qj), kind="stable")[: self.neighbours]
        c_major, major_size, n_near = majority_centroid(self._clean_judge[near])

        trigger_src = query + "."
        trig_ids = tok(trigger_src, add_special_tokens=False)["input_ids"]
        prefix, suffix = special_layout(tok)
        window = self._scorer.max_tokens
        if len(trig_ids) + len(prefix) + len(suffix) >= window:
            raise SkipTarget(f"query is {len(trig_ids)} tokens, longer than the retriever window ({window} tokens)")
        q = torch.from_numpy(np.asarray(self._retriever.encode([query], kind="query")[0], dtype=np.float32).copy())
        allowed = torch.from_numpy(self._scorer.allowed)
        p0 = payload_indices[0]
        pay_ids = tok(target.payloads[p0].strip(), add_special_tokens=False)["input_ids"]
        body = (trig_ids + pay_ids)[: window - len(prefix) - len(suffix)]
        ids = torch.tensor(prefix + body + suffix, dtype=torch.long)
        span = np.arange(len(prefix), len(prefix) + len(trig_ids))
        rng = target_rng(seed, target.query_id)
        payload0 = target.payloads[p0].strip()

        def decode_trigger(x: Any) -> str:
            return tok.decode(x[span].tolist(), skip_special_tokens=True, clean_up_tokenization_spaces=True).strip()

        def joint_of(batch: Any) -> tuple[Any, np.ndarray]:
            rs = self._scorer.sims(batch, q)
            texts = [decode_trigger(b) + " " + payload0 for b in batch]
            js = self._judge_cos(texts, c_major)
            return rs, rs.numpy() + self.weight * js

        _, j0 = joint_of(ids[None])
        best_j = float(j0[0])
        flips = 0
        E = self._scorer.word_embeddings.weight
        n_cand = min(self.candidates, int(allowed.sum()))
        for _ in range(self.iterations):
            _, grad = self._scorer.sim_and_grad(ids, q)
            pos = int(span[rng.integers(len(span))])
            with torch.inference_mode():
                scores = (E @ grad[pos]).masked_fill(~allowed, float("-inf"))
                scores[ids[pos]] = float("-inf")
                cand = torch.topk(scores, n_cand).indices
            batch = ids.repeat(len(cand), 1)
            batch[:, pos] = cand
            _, js = joint_of(batch)
            b = int(np.argmax(js))
            if float(js[b]) > best_j:
                ids[pos] = cand[b]
                best_j = float(js[b])
                flips += 1
        trigger_text = decode_trigger(ids)

        pays = [target.payloads[p].strip() for p in payload_indices]
        opt = [trigger_text + " " + x for x in pays]
        base = [trigger_src + x for x in pays]
        rv = np.asarray(self._retriever.encode(opt + base), dtype=np.float32) @ q.numpy()
        jv = self._judge_cos(opt + base, c_major)
        n = len(pays)
        out: dict[int, tuple[str, dict[str, Any]]] = {}
        per: dict[str, Any] = {"query_id": target.query_id, "similarity_before": [], "similarity_after": [],
                               "judge_before": [], "judge_after": []}
        for k, p in enumerate(payload_indices):
            j_after = float(rv[k] + self.weight * jv[k])
            j_before = float(rv[n + k] + self.weight * jv[n + k])
            improved = j_after > j_before
            text, trig, ra, ja = ((opt[k], trigger_text, rv[k], jv[k]) if improved
                                  else (base[k], query, rv[n + k], jv[n + k]))
            meta = {"trigger": trig, "similarity_before": round(float(rv[n + k]), 6),
                    "similarity_after": round(float(ra), 6), "judge_majority_cos_before": round(float(jv[n + k]), 6),
                    "judge_majority_cos_after": round(float(ja), 6), "hotflip_improved": bool(improved),
                    "flips": flips, "iterations": self.iterations, "candidates": self.candidates,
                    "weight": self.weight, "majority_size": f"{major_size}/{n_near}",
                    "retriever": self._retriever.model_id, "judge": getattr(self._judge, "model_id", "judge")}
            out[p] = (text, meta)
            per["similarity_before"].append(meta["similarity_before"])
            per["similarity_after"].append(meta["similarity_after"])
            per["judge_before"].append(meta["judge_majority_cos_before"])
            per["judge_after"].append(meta["judge_majority_cos_after"])
        seconds = time.perf_counter() - t0
        for p in out:
            out[p][1]["seconds_per_target"] = round(seconds, 3)
        per["seconds"] = round(seconds, 3)
        self._stats["per_target"].append(per)
        return out

    def finish_stats(self, stats: dict[str, Any]) -> None:
        per = stats.get("per_target", [])
        if per:
            for key in ("similarity_before", "similarity_after", "judge_before", "judge_after"):
                stats[f"mean_{key}"] = round(float(np.mean([v for t in per for v in t[key]])), 6)
            stats["seconds_per_target"] = round(float(np.mean([t["seconds"] for t in per])), 3)
