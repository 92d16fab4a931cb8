"""``--since`` as a metadata filter: audit the documents of an ingestion batch named by their metadata.

``sieve audit SOURCE --since EXPR`` takes either an earlier audit's snapshot id (``S-…``, recorded in
the ledger) or a filter on the documents' metadata (README "Audit a vector store")::

    meta:FIELD OP VALUE        e.g.  meta:ingested_at>=2026-11-30T00:00
    FIELD OP VALUE             the same without the prefix (a snapshot id starts with ``S-``)

``OP`` is one of ``>=``, ``<=``, ``>``, ``<``, ``=`` (or ``==``), ``!=``. The value's form decides the
comparison, once for the whole filter:

* a number (``1764460800``, ``3.5``) — numeric; a document's value must be a number or a numeric string;
* an ISO-8601 date or time (``2026-11-30``, ``2026-11-30T00:00``, ``…Z``, ``…+01:00``) — as
  instants; a document's value may be ISO text or a number of seconds since the epoch; a time
  without a zone is read as UTC;
* ``true`` / ``false`` — booleans (``=`` and ``!=`` only);
* anything else, or a value in quotes (``meta:batch="2026-11-30"``) — text, compared as strings.

Documents without the field do not match. A malformed expression, a field no document has, or a
document whose value cannot be compared (``"soon"`` against a date) is a :class:`FilterError`, one line
naming the expression (and the document).
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Sequence

from sieve.types import Document

OPS = (">=", "<=", "!=", "==", ">", "<", "=")
PREFIX = "meta:"
SNAPSHOT_PREFIX = "S-"
_EXPR = re.compile(r"^\s*(?P<field>[^<>=!\s][^<>=!]*?)\s*(?P<op>>=|<=|!=|==|>|<|=)\s*(?P<value>.*?)\s*$", re.S)
_NUMBER = re.compile(r"^[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?$")
_ISO = re.compile(r"^\d{4}-\d{2}-\d{2}([T ]\d{2}(:\d{2}(:\d{2}(\.\d+)?)?)?)?(Z|[+-]\d{2}:?\d{2})?$")
FORMS = "a snapshot id (S-…) nor a metadata filter meta:FIELD OP VALUE (OP one of >= <= > < = !=)"


class FilterError(ValueError):
    """A ``--since`` filter that cannot be applied; the message is one line for users."""


@dataclass(frozen=True)
class MetadataFilter:
    """``FIELD OP VALUE`` with the value's kind (``number``, ``time``, ``bool``, ``text``) and the
    parsed value; :meth:`matches` applies it to one document."""

    field: str
    op: str
    raw: str
    kind: str
    value: Any
    text: str = ""             # the expression as given

    def __str__(self) -> str:
        return self.text or f"{PREFIX}{self.field}{self.op}{self.raw}"

    def matches(self, doc: Document) -> bool:
        """True when ``doc`` has the field and its value satisfies the filter; :class:`FilterError`
        when the value cannot be compared with the filter's kind."""
        if self.field not in doc.metadata or doc.metadata[self.field] is None:
            return False
        got = _coerce(doc.metadata[self.field], self.kind)
        if got is None:
            raise FilterError(f"--since {self}: document {doc.id!r} has {self.field}="
                              f"{doc.metadata[self.field]!r}, which is not {_KIND_WORDS[self.kind]}")
        return _compare(got, self.op, self.value)


_KIND_WORDS = {"number": "a number", "time": "a date/time (ISO 8601, or seconds since the epoch)",
               "bool": "true or false", "text": "text"}


def is_snapshot_id(text: str) -> bool:
    """``--since`` names a recorded snapshot (``S-…``) rather than a metadata filter."""
    return text.strip().startswith(SNAPSHOT_PREFIX) and not any(op in text for op in OPS)


def parse_filter(text: str) -> MetadataFilter:
    """Parse ``[meta:]FIELD OP VALUE`` (module docstring); :class:`FilterError` when malformed."""
    body = text.strip()
    if body.lower().startswith(PREFIX):
        body = body[len(PREFIX):]
    m = _EXPR.match(body)
    if m is None:
        raise FilterError(f"--since {text!r} is neither {FORMS}")
    field, op, raw = m.group("field").strip(), m.group("op"), m.group("value")
    if op == "==":
        op = "="
    if not raw:
        raise FilterError(f"--since {text!r}: no value after {op!r} (write meta:{field}{op}VALUE)")
    if raw[0] in "\"'" and len(raw) >= 2 and raw[-1] == raw[0]:
        kind, value = "text", raw[1:-1]
    elif _NUMBER.match(raw):
        kind, value = "number", float(raw)
    elif _ISO.match(raw):
        t = _instant(raw)
        if t is None:
            raise FilterError(f"--since {text!r}: {raw!r} is not a valid date/time")
        kind, value = "time", t
    elif raw.lower() in ("true", "false"):
        kind, value = "bool", raw.lower() == "true"
        if op not in ("=", "!="):
            raise FilterError(f"--since {text!r}: booleans compare with = or != only")
    else:
        kind, value = "text", raw
    return MetadataFilter(field, op, raw, kind, value, text.strip())


def select(documents: Sequence[Document], flt: MetadataFilter) -> list[int]:
    """Rows of ``documents`` matching ``flt``; :class:`FilterError` when no document has the field
    (the message lists the metadata fields the documents do have)."""
    rows = [i for i, d in enumerate(documents) if flt.matches(d)]
    if not rows and not any(flt.field in d.metadata for d in documents):
        fields = sorted({k for d in documents for k in d.metadata})
        shown = ", ".join(fields[:12]) + (f", … ({len(fields)} fields)" if len(fields) > 12 else "")
        raise FilterError(f"--since {flt}: no document has the metadata field {flt.field!r}; fields: "
                          f"{shown or 'none (the documents carry no metadata)'}")
    return rows


def _instant(text: str) -> float | None:
    s = text.strip().replace(" ", "T", 1)
    if s.endswith(("Z", "z")):
        s = s[:-1] + "+00:00"
    if re.search(r"[+-]\d{4}$", s) and "T" in s:
        s = s[:-2] + ":" + s[-2:]
    if len(s) == 13 and "T" in s:            # 2026-11-30T00: hours only
        s += ":00"
    try:
        t = datetime.fromisoformat(s)
    except ValueError:
        return None
    if t.tzinfo is None:
        t = t.replace(tzinfo=timezone.utc)
    return t.timestamp()


def _coerce(v: Any, kind: str) -> Any:
    if kind == "text":
        return v if isinstance(v, str) else str(v)
    if kind == "bool":
        if isinstance(v, bool):
            return v
        return {"true": True, "false": False}.get(str(v).strip().lower())
    if isinstance(v, bool):
        return None
    if isinstance(v, (int, float)):
        return float(v) if math.isfinite(v) else None
    if not isinstance(v, str):
        return None
    s = v.strip()
    if _NUMBER.match(s):
        return float(s)
    if kind == "time" and _ISO.match(s):
        return _instant(s)
    return None


def _compare(a: Any, op: str, b: Any) -> bool:
    if op == "=":
        return bool(a == b)
    if op == "!=":
        return bool(a != b)
    if op == ">=":
        return bool(a >= b)
    if op == "<=":
        return bool(a <= b)
    if op == ">":
        return bool(a > b)
    return bool(a < b)
