"""RSQ evidence by reference (docs/algorithms.md §3.4): a candidate's per-token NLL trace
stays in the artifact cache and the evidence keeps where it lives (:func:`trace_ref`);
:func:`expand_evidence` reads it back, with the token strings, for display (the Query explorer).
"""
from __future__ import annotations

from collections import OrderedDict
from typing import TYPE_CHECKING, Any

from sieve.constants import LM_TRACE_TOKENS
from sieve.types import content_hash

if TYPE_CHECKING:
    from sieve.resources import Resources

_TOKEN_STRINGS: "OrderedDict[tuple[str, str, int], list[str] | None]" = OrderedDict()


def token_strings(resources: "Resources", text: str, max_tokens: int) -> list[str] | None:
    """Token strings of the LM trace (positions 2..L) for display, from the LM's tokenizer alone
    (no forward pass, no weights loaded; memoised per model and text). ``None`` when the LM has no
    tokenizer; NLL values are always available through the trace reference."""
    key = (resources.causal_lm_id(), content_hash(text), max_tokens)
    if key in _TOKEN_STRINGS:
        _TOKEN_STRINGS.move_to_end(key)
        return _TOKEN_STRINGS[key]
    try:
        out = resources.lm_token_strings(text, max_tokens)
    except Exception:  # noqa: BLE001 - token strings are a display aid only
        out = None
    _TOKEN_STRINGS[key] = out
    if len(_TOKEN_STRINGS) > 4096:
        _TOKEN_STRINGS.popitem(last=False)
    return out


def trace_ref(resources: "Resources", text: str) -> dict[str, str]:
    """Where a candidate's NLL trace lives in the artifact cache (docs/design.md): RSQ evidence
    keeps this reference instead of the trace, so run records stay small."""
    return {"kind": f"nll@{LM_TRACE_TOKENS}", "model_id": resources.causal_lm_id(), "key": content_hash(text)}


def expand_evidence(evidence: dict[str, Any], resources: "Resources", text: str | None = None) -> dict[str, Any]:
    """A copy of RSQ ``evidence`` whose ``surprisal`` carries the trace (``nll``) and, when
    ``text`` is given, the token strings (``tokens``), read back from the artifact cache through
    ``surprisal.trace_ref``. Evidence that already holds the trace is returned unchanged; a
    reference the cache no longer holds gives an empty trace (the scores stay valid)."""
    s = evidence.get("surprisal")
    if not isinstance(s, dict) or "nll" in s or not isinstance(s.get("trace_ref"), dict):
        return evidence
    ref = s["trace_ref"]
    arr = resources.cache.get_many(str(ref.get("kind")), str(ref.get("model_id")), [str(ref.get("key"))])
    trace = arr.get(str(ref.get("key")))
    nll = [float(v) for v in trace] if trace is not None else []
    tokens = None
    if text is not None and nll and s.get("tokens") is None:
        tokens = token_strings(resources, text, LM_TRACE_TOKENS)
        if tokens is not None and len(tokens) != len(nll):
            tokens = None
    return {**evidence, "surprisal": {**s, "nll": nll, "tokens": tokens}}
