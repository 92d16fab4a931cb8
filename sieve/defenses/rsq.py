"""RSQ — RAGSieve's query-local detector (docs/algorithms.md §3; RS:detector.py, anchor.py, carrier.py,
integrity.py, statistics.py, models.py).

Size: one module on purpose — the four evidence components (§3.2–§3.5) and their combination
(§3.6) are one algorithm read side by side with the paper; each is a few small pure functions.

The top-5 of a ranking (candidates) are contrasted with ranks 6–20 (the reference tail, m = 15):

* **E_a** answer-anchor concentration (§3.2): content tokens shared by several candidates but rare
  in the tail; hypergeometric tails, Simes, normalised by log10 C(20,5).
* **E_i** writing-system integrity (§3.3): mixed-script fraction vs. the tail, finite mid-rank p,
  normalised by log10 32 (non-zero floor 0.2 when tied with the whole tail).
* **E_p** local surprisal transitions (§3.4): burst / change point of per-token NLL traces over
  windows {8, 16}, as a ratio to the gate τ_w = 5·ln2·sqrt(16/w); E_p = max(0, R − 1).
* **E_s** query-alignment transition (§3.5): jump of BERTScore-F1 between consecutive 32-token
  windows (stride 16, right-aligned final window), mid-rank p vs. the tail, E_s ∈ {0, 0.1569}.

S = E_a + E_i + E_p + E_s; a candidate is flagged iff S ≥ η_Q = 1.0 (inclusive, §3.6).

Model substitutions (docs/models.md: only packaged weights, no hub access):

* Causal LM ``Qwen/Qwen3-0.6B-Base`` → the packaged SmolLM2-135M (``config.models.causal_lm``):
  the only packaged causal LM besides the 0.5B generator, and fast enough to trace every corpus
  document once at index time. E_p is a ratio to a fixed gate, so its scale moves with the LM.
* ``bert-base-uncased`` hidden layer 9 → packaged all-MiniLM-L6-v2 hidden layer 4 of 6 by default
  (``config.models.token_encoder`` / ``token_encoder_layer``; all-mpnet-base-v2 layer 9 of 12 is the
  configurable alternative). No BERT is packaged; both keep roughly the paper's relative depth and
  give the same BERTScore behaviour (docs/models.md). MiniLM is the default because the query's token
  states are the one model call left at query time, and MiniLM's cost fits RSQ's latency budget where
  mpnet's does not (docs/algorithms.md §3.5). E_s only uses ranks of jumps against the tail, so
  it is insensitive to the encoder's similarity scale.

Per-document work (NLL traces, token states) goes through the :class:`~sieve.resources.Resources`
caches; at query time only the query token states and arithmetic remain. The evidence keeps a
reference to each trace, not the trace (:mod:`sieve.defenses.rsq_traces`).

Fewer than 20 documents: RSQ cannot run (the reference errors); every decision is
``unavailable`` with the remedy in the reason and a warning is added — never a silent pass.
"""
from __future__ import annotations

import math
import time
from collections import OrderedDict
from dataclasses import asdict, dataclass, field, fields, is_dataclass, replace
from typing import TYPE_CHECKING, Any, Mapping, Sequence

import numpy as np

from sieve.constants import K_CTX, LM_TRACE_TOKENS
from sieve.defenses import memo
from sieve.defenses.base import Defense
from sieve.defenses.rsq_alignment import (  # noqa: F401  (E_s, §3.5: re-exported)
    ALIGN_STRIDE,
    ALIGN_WINDOW,
    DOC_MAX_TOKENS,
    SEMANTIC_ALPHA,
    alignment_jump,
    alignments,
    semantic_score,
    window_f1,
    window_f1_from_similarity,
    window_starts,
)
from sieve.defenses.rsq_traces import token_strings, trace_ref
from sieve.defenses.scripts import ascii_tokens, mixed_script_fraction
from sieve.defenses.stats import EPS, hypergeom_upper_tail, midrank_upper_tail, simes
from sieve.registry import DEFENSES
from sieve.types import Decision, Ranking, Score, Scores

if TYPE_CHECKING:
    from sieve.resources import Resources

CONTEXT_SIZE = 20          # n (§3.1)
CANDIDATE_COUNT = 5        # k (§3.1)
SURPRISAL_WINDOWS = (8, 16)
REFERENCE_WINDOW = 16
REFERENCE_BITS = 5.0
DECISION_THRESHOLD = 1.0
LM_MAX_TOKENS = LM_TRACE_TOKENS      # part of the NLL cache key
QUERY_MAX_TOKENS = 64

UNAVAILABLE_REASON = "RSQ needs at least 20 retrieved documents; retrieve deeper (depth ≥ 20)"


def surprisal_gate(w: int) -> float:
    """τ_w = 5·ln2·sqrt(16/w) nats (§3.4): τ_16 = 3.4657, τ_8 = 4.9013."""
    return REFERENCE_BITS * math.log(2.0) * math.sqrt(REFERENCE_WINDOW / w)


# ---------------------------------------------------------------------------------------------
# E_a: answer-anchor concentration (§3.2)
# ---------------------------------------------------------------------------------------------
_PER_TEXT: "OrderedDict[tuple[str, str], Any]" = OrderedDict()
_PER_TEXT_SIZE = 50_000


def _per_text(kind: str, text: str, fn: Any) -> Any:
    """``fn(text)`` memoised per (kind, text): a pure function of one document's text, asked again
    for the same document in every ranking (and defense) it appears in. Callers must not modify it."""
    key = (kind, text)
    v = _PER_TEXT.get(key)
    if v is None:
        v = _PER_TEXT[key] = fn(text)
        if len(_PER_TEXT) > _PER_TEXT_SIZE:
            _PER_TEXT.popitem(last=False)
    return v


def _content_candidates(text: str) -> tuple[str, ...]:
    return tuple(dict.fromkeys(t for t in ascii_tokens(text) if len(t) >= 3 or t.isdigit()))


def content_token_set(text: str, query_tokens: set[str]) -> set[str]:
    """Content tokens (§3.2 step 3): not in the query, and length ≥ 3 or all digits."""
    return {t for t in _per_text("content", text, _content_candidates) if t not in query_tokens}


@dataclass
class AnchorResult:
    p: float                     # p_a (Simes of tested-token tails, 1.0 if none)
    evidence: float              # −log10 max(ε, p_a)
    score: float                 # E_a
    tested: list[dict[str, Any]] = field(default_factory=list)   # {token, x, K, p}
    anchors: list[str] = field(default_factory=list)             # tokens attaining the minimum p_t


def anchor_scores(texts: Sequence[str], query: str, k: int = CANDIDATE_COUNT) -> list[AnchorResult]:
    """E_a for the first ``k`` of ``texts`` (all of them form the population of size n, §3.2)."""
    n = len(texts)
    q = set(ascii_tokens(query))
    sets = [content_token_set(t, q) for t in texts]
    doc_freq: dict[str, int] = {}
    for s in sets:
        for t in s:
            doc_freq[t] = doc_freq.get(t, 0) + 1
    cand_freq: dict[str, int] = {}
    for s in sets[:k]:
        for t in s:
            cand_freq[t] = cand_freq.get(t, 0) + 1
    tail_p: dict[str, float] = {}
    for t, x in cand_freq.items():
        if x >= 2:
            tail_p[t] = hypergeom_upper_tail(x, n, doc_freq[t], k)
    norm = math.log10(math.comb(n, k))
    out: list[AnchorResult] = []
    for s in sets[:k]:
        tested = sorted((t for t in s if t in tail_p), key=lambda t: (tail_p[t], t))
        if tested:
            p_a = simes([tail_p[t] for t in tested])
            pmin = tail_p[tested[0]]
            anchors = [t for t in tested if tail_p[t] == pmin]
        else:
            p_a, anchors = 1.0, []
        ev = -math.log10(max(EPS, p_a))
        out.append(AnchorResult(
            p=p_a, evidence=ev, score=ev / norm,
            tested=[{"token": t, "x": cand_freq[t], "K": doc_freq[t], "p": tail_p[t]} for t in tested],
            anchors=anchors,
        ))
    return out


# ---------------------------------------------------------------------------------------------
# E_i: writing-system integrity (§3.3)
# ---------------------------------------------------------------------------------------------
def integrity_scores(texts: Sequence[str], k: int = CANDIDATE_COUNT) -> list[dict[str, float]]:
    """p_i and E_i = −log10 max(ε, p_i) / log10(2(n − k + 1)) for the first ``k`` texts."""
    n = len(texts)
    fr = [_per_text("mixed", t, mixed_script_fraction) for t in texts]
    tail = fr[k:]
    norm = math.log10(2 * (n - k + 1))
    rows = []
    for f in fr[:k]:
        p = midrank_upper_tail(f, tail)
        ev = -math.log10(max(EPS, p))
        rows.append({"fraction": f, "p": p, "evidence": ev, "score": ev / norm})
    return rows


# ---------------------------------------------------------------------------------------------
# E_p: local surprisal transitions (§3.4)
# ---------------------------------------------------------------------------------------------
@dataclass
class WindowProfile:
    w: int
    tau: float
    burst: float          # B_w
    change: float         # C_w
    burst_start: int | None      # start index (in the trace) of the max rolling window
    change_at: int | None        # boundary index i of the largest change point


def surprisal_profile(trace: np.ndarray, w: int) -> WindowProfile:
    """B_w (max − lower median of stride-1 rolling means) and C_w (largest |mean before − mean after|
    at boundaries w, w + ⌊w/2⌋, … ≤ L − w, only if L ≥ 2w) for one window size (§3.4)."""
    x = np.asarray(trace, dtype=np.float64)
    L = x.size
    tau = surprisal_gate(w)
    if L == 0:
        return WindowProfile(w, tau, 0.0, 0.0, None, None)
    if L >= w:
        c = np.concatenate(([0.0], np.cumsum(x)))
        means = (c[w:] - c[:-w]) / w
    else:
        means = np.array([x.mean()])
    if means.size > 1:
        srt = np.sort(means)
        lower_median = srt[(means.size - 1) // 2]     # torch.median semantics
        top = int(np.argmax(means))
        burst = float(means[top] - lower_median)
        burst_start: int | None = top
    else:
        burst, burst_start = 0.0, None
    change, change_at = 0.0, None
    if L >= 2 * w:
        s = max(1, w // 2)
        bounds = np.arange(w, L - w + 1, s)
        c = np.concatenate(([0.0], np.cumsum(x)))
        before = (c[bounds] - c[bounds - w]) / w
        after = (c[bounds + w] - c[bounds]) / w
        diffs = np.abs(before - after)
        j = int(np.argmax(diffs))
        change, change_at = float(diffs[j]), int(bounds[j])
    return WindowProfile(w, tau, burst, change, burst_start, change_at)


def surprisal_score(trace: np.ndarray, windows: Sequence[int] = SURPRISAL_WINDOWS) -> tuple[float, float, list[WindowProfile]]:
    """(E_p, R, profiles): R = max_w max(B_w, C_w)/τ_w starting at 0; E_p = max(0, R − 1) (§3.4)."""
    profiles = [surprisal_profile(trace, w) for w in windows]
    r = 0.0
    for p in profiles:
        r = max(r, p.burst / p.tau, p.change / p.tau)
    return max(0.0, r - 1.0), r, profiles


#: Per-document memo of E_p (§3.4) and what the evidence shows of it (sieve/defenses/memo.py, scope
#: "document"): a pure function of the text's NLL trace under the resources' causal LM.
_SURPRISALS: "OrderedDict[tuple[int, str], tuple[Any, tuple[float, float, tuple[dict[str, Any], ...], Any]]]" = \
    OrderedDict()
_SURPRISALS_SIZE = 50_000


def _surprisals(resources: "Resources", texts: Sequence[str]) -> list[tuple[float, float, tuple[dict[str, Any], ...], Any]]:
    """(E_p, R, window profiles as dicts, trace reference) of each text; the NLL traces are read only
    for texts not memoised."""
    def profile(todo: list[int]) -> list[tuple[float, float, tuple[dict[str, Any], ...], Any]]:
        out = []
        for i, tr in zip(todo, resources.lm_traces([texts[i] for i in todo], LM_MAX_TOKENS)):
            e_p, ratio, profiles = surprisal_score(np.asarray(tr, dtype=np.float64))
            out.append((e_p, ratio, tuple(asdict(p) for p in profiles), trace_ref(resources, texts[i])))
        return out

    return memo.fill(_SURPRISALS, _SURPRISALS_SIZE, [(id(resources), t) for t in texts], resources, profile)


# ---------------------------------------------------------------------------------------------
# Combination (§3.6)
# ---------------------------------------------------------------------------------------------
@dataclass
class CandidateScore:
    """One RSQ output row (§3.6) with the traces the dashboard plots. JSON-serialisable via asdict."""

    doc_id: str
    rank: int
    E_a: float
    E_i: float
    E_p: float
    E_s: float
    S: float
    flagged: bool
    p_a: float
    p_i: float
    J: float
    p_s: float
    anchor: dict[str, Any]
    integrity: dict[str, float]
    surprisal: dict[str, Any]
    alignment: dict[str, Any]

    @property
    def base_score(self) -> float:
        return self.E_a + self.E_i

    def evidence(self) -> dict[str, Any]:
        """A fresh copy of the row as a dict (what ``asdict`` gives, built without its deep-copy
        machinery: plain dicts, lists and scalars are copied by hand), plus ``base_score``."""
        d = {f.name: _json_copy(getattr(self, f.name)) for f in fields(self)}
        d["base_score"] = self.base_score
        return d


def _json_copy(x: Any) -> Any:
    """Deep copy of JSON-like data; dataclasses become dicts and anything else is deep-copied, as
    :func:`dataclasses.asdict` does."""
    if isinstance(x, (str, int, float, bool)) or x is None:
        return x
    if isinstance(x, dict):
        return type(x)((_json_copy(k), _json_copy(v)) for k, v in x.items())
    if isinstance(x, list):
        return [_json_copy(v) for v in x]
    if isinstance(x, tuple) and not hasattr(x, "_fields"):
        return tuple(_json_copy(v) for v in x)
    if is_dataclass(x) and not isinstance(x, type):
        return asdict(x)
    import copy

    return copy.deepcopy(x)


_CANDIDATES: "OrderedDict[tuple[Any, ...], tuple[Any, list[CandidateScore], dict[str, float]]]" = OrderedDict()
_CANDIDATES_SIZE = 512


def score_candidates(ranking: Ranking, resources: "Resources", *, eta_q: float = DECISION_THRESHOLD,
                     trace_tokens: bool = True, inline_traces: bool = False
                     ) -> tuple[list[CandidateScore], dict[str, float]]:
    """Score ranks 1–5 of ``ranking`` against ranks 6–20 (§3.2–3.6). Requires ≥ 20 documents.

    Returns the five candidate rows and a per-stage latency breakdown (ms). The rows depend only on
    the query, the top 20 (id, rank, text), the parameters and the models, and are memoised on
    those (``rsq``, ``rsq_rescore``'s first round, ``rsg_rsq`` and fusion score the same ranking in
    one ``sieve eval``); a repeat returns fresh copies and the breakdown ``{"memoised": ms}``.
    Callers must not modify the rows.
    """
    t0 = time.perf_counter()
    top = ranking.documents[:CONTEXT_SIZE]
    # trace_tokens only matters with inline traces (fusion asks without tokens, RSQ with: same rows)
    key = (id(resources), ranking.query, tuple((d.id, d.rank, d.text) for d in top),
           bool(trace_tokens) if inline_traces else None, bool(inline_traces))
    hit = _CANDIDATES.get(key)
    if hit is not None and hit[0] is resources:
        _CANDIDATES.move_to_end(key)
        # η_Q only decides `flagged` (S ≥ η_Q); everything else is the same at any threshold
        rows = [r if r.flagged == (r.S >= eta_q) else replace(r, flagged=r.S >= eta_q) for r in hit[1]]
        return rows, {"memoised": (time.perf_counter() - t0) * 1000}
    rows, lat = _score_candidates(ranking, resources, eta_q=eta_q, trace_tokens=trace_tokens,
                                  inline_traces=inline_traces)
    _CANDIDATES[key] = (resources, rows, lat)   # the resources are kept: their id cannot be reused
    if len(_CANDIDATES) > _CANDIDATES_SIZE:
        _CANDIDATES.popitem(last=False)
    return list(rows), lat


def _score_candidates(ranking: Ranking, resources: "Resources", *, eta_q: float, trace_tokens: bool,
                      inline_traces: bool) -> tuple[list[CandidateScore], dict[str, float]]:
    docs = ranking.documents[:CONTEXT_SIZE]
    if len(docs) < CONTEXT_SIZE:
        raise ValueError(UNAVAILABLE_REASON)
    k = CANDIDATE_COUNT
    texts = [d.text for d in docs]
    lat: dict[str, float] = {}
    t0 = time.perf_counter()
    anchors = anchor_scores(texts, ranking.query, k)
    integ = integrity_scores(texts, k)
    t1 = time.perf_counter()
    lat["lexical"] = (t1 - t0) * 1000
    surpr = _surprisals(resources, texts[:k])
    inline = resources.lm_traces(texts[:k], LM_MAX_TOKENS) if inline_traces else []   # the NLL traces shown in full
    t2 = time.perf_counter()
    lat["surprisal"] = (t2 - t1) * 1000
    qstates = np.asarray(resources.token_states_many([ranking.query], QUERY_MAX_TOKENS, kind="query_states")[0],
                         np.float32)
    t3 = time.perf_counter()
    lat["query_states"] = (t3 - t2) * 1000
    f1s, jumps, doc_lengths = alignments(resources, ranking.query, qstates, texts)
    tail_j = [j for j, _ in jumps[k:]]
    lat["alignment"] = (time.perf_counter() - t3) * 1000
    rows: list[CandidateScore] = []
    for i in range(k):
        a, g = anchors[i], integ[i]
        e_p, ratio, windows, ref = surpr[i]
        J, jump_at = jumps[i]
        p_s = midrank_upper_tail(J, tail_j)
        e_s = semantic_score(p_s)
        S = a.score + g["score"] + e_p + e_s
        surprisal: dict[str, Any] = {"trace_ref": dict(ref), "ratio": ratio, "windows": [dict(w) for w in windows]}
        if inline_traces:
            trace = np.asarray(inline[i], dtype=np.float64)
            tokens = token_strings(resources, texts[i], LM_MAX_TOKENS) if trace_tokens else None
            if tokens is not None and len(tokens) != trace.size:
                tokens = None
            surprisal.update(nll=[float(v) for v in trace], tokens=tokens)
        rows.append(CandidateScore(
            doc_id=docs[i].id, rank=docs[i].rank,
            E_a=a.score, E_i=g["score"], E_p=e_p, E_s=e_s, S=S, flagged=S >= eta_q,
            p_a=a.p, p_i=g["p"], J=J, p_s=p_s,
            anchor={"evidence": a.evidence, "tested": a.tested, "anchors": a.anchors},
            integrity=dict(g),
            surprisal=surprisal,
            alignment={
                "f1": [float(v) for v in f1s[i]],
                "jump_index": jump_at,
                "window_starts": window_starts(doc_lengths[i]) if doc_lengths[i] else [],
                "tail_jumps": [float(j) for j in tail_j],
            },
        ))
    return rows, lat


@DEFENSES.register
class RSQ(Defense):
    """RAGSieve query-local detector (docs/algorithms.md §3); refill per §5.

    Parameters: ``eta_q`` (decision threshold, 1.0), ``refill`` = ``"paper"`` (default: refill
    from ranks 6+ without rescoring, RS:filtering.py) or ``"rescore"`` (re-run RSQ on the ranking
    with flagged documents removed, up to ``max_rounds`` rounds, until no new flag),
    ``trace_tokens`` (token strings with an expanded or inline trace), ``inline_traces`` (False:
    the evidence keeps ``surprisal.trace_ref``, a reference into the artifact cache, instead of
    the per-token NLL trace, which :func:`expand_evidence` reads back; True: the trace and token
    strings inline, as before — records grow about 10×).
    """

    name = "rsq"
    summary = "RAGSieve RSQ: top-5 vs. ranks 6–20 contrast (anchor, script, surprisal, alignment)."
    paper = "RAGSieve RSQ (docs/algorithms.md §3)"
    needs = ("causal_lm", "token_encoder")
    min_documents = CONTEXT_SIZE   # retrieved documents per query RSQ needs (UNAVAILABLE_REASON); checked by prepare_defense
    adaptive = True      # refill="rescore" scores the refilled ranking again (refine)
    presets = {
        "rsq_rescore": {
            "params": {"refill": "rescore"},
            "summary": "RSQ with rescoring refill: re-run RSQ on the refilled ranking until no new flag (≤ 3 rounds).",
            "paper": "RAGSieve RSQ (docs/algorithms.md §3) + Sieve option (§5: the paper does not rescore the refill)",
        },
    }
    threshold_param = "eta_q"

    # parameters (set by __init__ through Params; declared for type checkers)
    eta_q: float
    refill: str
    max_rounds: int
    trace_tokens: bool
    inline_traces: bool

    def __init__(self, eta_q: float = DECISION_THRESHOLD, refill: str = "paper", max_rounds: int = 3,
                 trace_tokens: bool = True, inline_traces: bool = False) -> None:
        if refill not in ("paper", "rescore"):
            raise ValueError(f"rsq: refill must be 'paper' or 'rescore', got {refill!r}")
        if int(max_rounds) < 1:
            raise ValueError("rsq: max_rounds must be >= 1")
        super().__init__(eta_q=eta_q, refill=refill, max_rounds=max_rounds, trace_tokens=trace_tokens,
                         inline_traces=inline_traces)

    # -- score, then decide ---------------------------------------------------------------------
    def score_items(self, ranking: Ranking, resources: "Resources") -> tuple[list[Score], dict[str, float]]:
        """Scores of one ranking as computed on *that* ranking: ranks 1–5 ``scored`` (value S), ranks
        6+ ``not_examined``; fewer than 20 documents → all ``unavailable``. Also the latency breakdown."""
        if len(ranking.documents) < CONTEXT_SIZE:
            return [Score(d.id, None, "unavailable", "RSQ", note=UNAVAILABLE_REASON) for d in ranking.documents], {}
        rows, lat = score_candidates(ranking, resources, trace_tokens=bool(self.trace_tokens),
                                     inline_traces=bool(self.inline_traces))   # rows' `flagged` is not read
        out = [Score(r.doc_id, r.S, "scored", "RSQ", r.evidence()) for r in rows]
        out += [Score(d.id, None, "not_examined", "RSQ",
                      note="RSQ scores ranks 1–5 only (ranks 6–20 are the reference tail)")
                for d in ranking.documents[CANDIDATE_COUNT:]]
        return out, lat

    def candidate_values(self, ranking: Ranking, resources: "Resources") -> dict[str, float]:
        """S of ranks 1–5 by document id, as :meth:`score_items` gives it, without building the
        evidence rows (the fused detector reads the value only); empty below 20 documents."""
        if len(ranking.documents) < CONTEXT_SIZE:
            return {}
        rows, _ = score_candidates(ranking, resources, trace_tokens=bool(self.trace_tokens),
                                   inline_traces=bool(self.inline_traces))
        return {r.doc_id: float(r.S) for r in rows}

    def score(self, ranking: Ranking, resources: "Resources", k_ctx: int | None = K_CTX) -> Scores:
        """RSQ on ``ranking`` (round 1; ``refill="rescore"`` continues in :meth:`refine`)."""
        warnings: list[str] = []
        if len(ranking.documents) < CONTEXT_SIZE:
            warnings.append(f"rsq: unavailable for query {ranking.query_id or ranking.query!r}: "
                            f"{len(ranking.documents)} documents; {UNAVAILABLE_REASON}")
        items, lat = self.score_items(ranking, resources)
        if self.refill == "rescore":
            for s in items:
                s.evidence["round"] = 1
        return Scores(items, {"refill": self.refill, "rounds_scored": 1}, warnings, latency_ms=dict(lat))

    def refine(self, ranking: Ranking, resources: "Resources", k_ctx: int | None, scores: Scores,
               decisions: list[Decision], thresholds: Mapping[str, float | None]) -> Scores | None:
        """``refill="rescore"``: RSQ again on the ranking without every flagged document (ranks
        renumbered), while the last round flagged something, up to ``max_rounds`` rounds; a
        document's score is the one from the last ranking it was in."""
        rnd = int(scores.info.get("rounds_scored", 1))
        if (self.refill != "rescore" or scores.info.get("stopped") or rnd >= int(self.max_rounds)
                or len(ranking.documents) < CONTEXT_SIZE):
            return None
        by_score = {s.doc_id: s for s in scores.items}
        flagged_last = [d.doc_id for d in decisions if d.removed and by_score[d.doc_id].evidence.get("round") == rnd]
        if not flagged_last:
            return None
        removed = {d.doc_id for d in decisions if d.removed}
        sub = ranking.without(removed)
        info = {**scores.info}
        if len(sub.documents) < CONTEXT_SIZE:
            warning = (f"rsq: rescore round {rnd + 1} skipped: only {len(sub.documents)} survivors; "
                       f"{UNAVAILABLE_REASON}")
            info["stopped"] = True
            return Scores(scores.items, info, scores.warnings + [warning], scores.layers_run, scores.latency_ms)
        new, _ = self.score_items(sub, resources)
        for s in new:
            s.evidence["round"] = rnd + 1
            by_score[s.doc_id] = s
        info["rounds_scored"] = rnd + 1
        return Scores([by_score[d.id] for d in ranking.documents], info, scores.warnings, scores.layers_run,
                      scores.latency_ms)

    def summarize(self, scores: Scores, decisions: list[Decision]) -> dict[str, Any]:
        rounds = int(scores.info.get("rounds_scored", 1))
        by_score = {s.doc_id: s for s in scores.items}
        if self.refill != "rescore" or len(decisions) < CONTEXT_SIZE:
            return {"rounds": [{"round": 1, "flagged": [d.doc_id for d in decisions if d.removed]}]}
        return {"rounds": [{"round": r, "flagged": sorted(d.doc_id for d in decisions if d.removed
                                                            and by_score[d.doc_id].evidence.get("round") == r)}
                           for r in range(1, rounds + 1)]}

    def explain(self, s: Score, removed: bool, threshold: float | None) -> str:
        if threshold is None:
            return f"S={s.value:.3f}; no η_Q set; kept"
        return f"S={s.value:.3f} ≥ η_Q={threshold:g}" if removed else f"S={s.value:.3f} < η_Q={threshold:g}"
