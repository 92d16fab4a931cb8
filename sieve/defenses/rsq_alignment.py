"""RSQ's query-alignment transition E_s (docs/algorithms.md §3.5): the window-F1 profile of a document's
token states against the query's, its largest jump, and the score of that jump against the tail's.

Split from ``sieve/defenses/rsq.py`` (which re-exports these names) because the alignment is the one
RSQ stage worth memoising per query: a refill round scores mostly the same 20 documents again.
"""
from __future__ import annotations

import math
from collections import OrderedDict
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np

from sieve.constants import TOKEN_STATE_TOKENS
from sieve.defenses import memo
from sieve.defenses.stats import EPS

if TYPE_CHECKING:
    from sieve.resources import Resources

SEMANTIC_ALPHA = 0.05
ALIGN_WINDOW = 32
ALIGN_STRIDE = 16
DOC_MAX_TOKENS = TOKEN_STATE_TOKENS  # part of the token-state cache key


def window_starts(length: int, width: int = ALIGN_WINDOW, stride: int = ALIGN_STRIDE) -> list[int]:
    """Window starts over document tokens: one window if L ≤ width; else 0, stride, … ≤ L − width,
    plus a right-aligned final window at L − width if not already present (§3.5)."""
    if length <= width:
        return [0]
    starts = list(range(0, length - width + 1, stride))
    if starts[-1] != length - width:
        starts.append(length - width)
    return starts


def window_f1(query_states: np.ndarray, doc_states: np.ndarray,
              width: int = ALIGN_WINDOW, stride: int = ALIGN_STRIDE) -> np.ndarray:
    """BERTScore F1 (no idf, no rescaling) of the query against each document window (§3.5).

    Precision = mean over window tokens of the max similarity to any query token; recall = mean
    over query tokens of the max similarity to any window token; F1 = 2PR / max(P + R, 1e-8).
    Returns an empty array if the query or the document is empty.
    """
    q = np.asarray(query_states, dtype=np.float32)
    d = np.asarray(doc_states, dtype=np.float32)
    if q.shape[0] == 0 or d.shape[0] == 0:
        return np.zeros(0, np.float32)
    return window_f1_from_similarity(q @ d.T, width, stride)


def window_f1_from_similarity(sim: np.ndarray, width: int = ALIGN_WINDOW, stride: int = ALIGN_STRIDE) -> np.ndarray:
    """:func:`window_f1` given the cosine matrix ``sim`` = query tokens × document tokens (vectorised)."""
    Lq, L = sim.shape
    if Lq == 0 or L == 0:
        return np.zeros(0, np.float32)
    if L <= width:
        prec = sim.max(axis=0).mean(keepdims=True).astype(np.float64)
        rec = sim.max(axis=1).mean(keepdims=True).astype(np.float64)
    else:
        starts = np.asarray(window_starts(L, width, stride))
        col_best = sim.max(axis=0).astype(np.float64)    # each doc token's best query match
        c = np.concatenate(([0.0], np.cumsum(col_best)))
        prec = (c[starts + width] - c[starts]) / width
        win = np.lib.stride_tricks.sliding_window_view(sim, width, axis=1)[:, starts, :]  # [Lq, W, width]
        rec = win.max(axis=2).mean(axis=0).astype(np.float64)
    return (2 * prec * rec / np.maximum(prec + rec, 1e-8)).astype(np.float32)


def alignment_jump(f1: np.ndarray) -> tuple[float, int | None]:
    """J = max |F1_{j+1} − F1_j| and the index j+1 of the window after the largest jump (§3.5)."""
    if f1.size < 2:
        return 0.0, None
    diffs = np.abs(np.diff(f1.astype(np.float64)))
    j = int(np.argmax(diffs))
    return float(diffs[j]), j + 1


def semantic_score(p: float, alpha: float = SEMANTIC_ALPHA) -> float:
    """E_s = max(0, ln(α / max(ε, min(1, p))) / ln(1/α)) (§3.5)."""
    return max(0.0, math.log(alpha / max(EPS, min(1.0, p))) / math.log(1.0 / alpha))


_BLAS_CONTROLLER: Any = None


def _single_thread_blas() -> Any:
    """Context limiting BLAS to one thread (threadpoolctl, a scikit-learn dependency); no-op without it."""
    global _BLAS_CONTROLLER
    try:
        if _BLAS_CONTROLLER is None:
            from threadpoolctl import ThreadpoolController

            _BLAS_CONTROLLER = ThreadpoolController()
        return _BLAS_CONTROLLER.limit(limits=1, user_api="blas")
    except ImportError:  # pragma: no cover
        import contextlib

        return contextlib.nullcontext()


#: Per-query memo of each document's alignment (F1 profile, jump, token count) against the query:
#: a refill round scores mostly the same 20 documents again (sieve/defenses/memo.py, scope "query").
_ALIGNMENTS: "OrderedDict[tuple[Any, ...], tuple[Any, tuple[np.ndarray, tuple[float, int | None], int]]]" = OrderedDict()
_ALIGNMENTS_SIZE = 4096


def alignments(resources: "Resources", query: str, qstates: np.ndarray, texts: Sequence[str]
               ) -> tuple[list[np.ndarray], list[tuple[float, int | None]], list[int]]:
    """The §3.5 window-F1 profile, its jump and the token count of every text against the query;
    the texts not memoised for this query are aligned in one matrix product, on one BLAS thread (a
    product this small is dominated by thread hand-off, docs/results/speed.md §3)."""
    def align(todo: list[int]) -> list[tuple[np.ndarray, tuple[float, int | None], int]]:
        states = [np.asarray(x, np.float32)
                  for x in resources.token_states_many([texts[i] for i in todo], DOC_MAX_TOKENS)]
        lengths = [int(x.shape[0]) for x in states]
        if qstates.shape[0] and sum(lengths):
            with _single_thread_blas():
                sim_all = qstates @ np.concatenate([x for x in states if x.shape[0]], axis=0).T
        else:
            sim_all = np.zeros((qstates.shape[0], 0), np.float32)
        bounds = np.concatenate(([0], np.cumsum(lengths)))
        f1s = [window_f1_from_similarity(sim_all[:, bounds[j]:bounds[j + 1]]) for j in range(len(todo))]
        return [(f1, alignment_jump(f1), n) for f1, n in zip(f1s, lengths)]

    rows = memo.fill(_ALIGNMENTS, _ALIGNMENTS_SIZE, [(id(resources), query, t) for t in texts], resources, align)
    return [r[0] for r in rows], [r[1] for r in rows], [r[2] for r in rows]
