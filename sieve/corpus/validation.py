"""Typed field access on one input row; every problem is reported with file, line and field."""
from __future__ import annotations

from typing import Any

from sieve.corpus.errors import Issues
from sieve.types import Document

BOOL_WORDS = {"true": True, "false": False, "1": True, "0": False, "yes": True, "no": False}
"""Boolean spellings accepted in CSV cells."""


class Row:
    """Typed field access on one row; each problem goes to ``issues`` and returns ``None``."""

    def __init__(self, row: dict[str, Any], label: str, line: int, issues: Issues, unit: str = "line"):
        self.row, self.label, self.line, self.issues, self.unit = row, label, line, issues, unit
        self.ok = True

    def bad(self, fld: str | None, message: str) -> None:
        self.ok = False
        self.issues.add(self.label, self.line, fld, message, unit=self.unit)

    def ident(self, *names: str) -> str | None:
        """A required id (strings; integers are accepted and converted)."""
        for name in names:
            if name in self.row and self.row[name] is not None:
                v = self.row[name]
                if isinstance(v, bool) or not isinstance(v, (str, int)):
                    self.bad(name, f"must be a string, got {type(v).__name__}")
                    return None
                v = str(v)
                if not v.strip():
                    self.bad(name, "must be a non-empty string")
                    return None
                return v
        self.bad(names[0], "is missing" + (f" (also accepted: {', '.join(repr(n) for n in names[1:])})"
                                          if len(names) > 1 else ""))
        return None

    def text(self, name: str, required: bool = True, nonempty: bool = True) -> str | None:
        v = self.row.get(name)
        if v is None:
            if required:
                self.bad(name, "is missing")
                return None
            return ""
        if not isinstance(v, str):
            self.bad(name, f"must be a string, got {type(v).__name__}")
            return None
        if nonempty and required and not v.strip():
            self.bad(name, "must be a non-empty string")
            return None
        return v

    def str_list(self, name: str, required: bool = False, nonempty: bool = False) -> tuple[str, ...] | None:
        v = self.row.get(name)
        if v is None:
            if required:
                self.bad(name, "is missing")
                return None
            return ()
        if not isinstance(v, list) or not all(isinstance(x, str) for x in v):
            self.bad(name, "must be a list of strings")
            return None
        if nonempty and not v:
            self.bad(name, "must be a non-empty list of strings")
            return None
        return tuple(v)

    def integer(self, name: str) -> int | None:
        v = self.row.get(name)
        if v is None:
            self.bad(name, "is missing")
            return None
        if isinstance(v, bool) or not isinstance(v, int):
            if isinstance(v, float) and v.is_integer():
                return int(v)
            self.bad(name, f"must be an integer, got {v!r}")
            return None
        return v

    def number(self, name: str) -> float | None:
        v = self.row.get(name)
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            self.bad(name, "is missing" if v is None else f"must be a number, got {v!r}")
            return None
        return float(v)

    def boolean(self, name: str, default: bool = False) -> bool | None:
        v = self.row.get(name, default)
        if v is None:
            return default
        if isinstance(v, str) and v.strip().lower() in BOOL_WORDS:  # CSV cells
            return BOOL_WORDS[v.strip().lower()]
        if not isinstance(v, bool):
            self.bad(name, f"must be true or false, got {v!r}")
            return None
        return v

    def mapping(self, name: str) -> dict[str, Any]:
        v = self.row.get(name)
        if v is None:
            return {}
        if not isinstance(v, dict):
            self.bad(name, "must be a JSON object")
            return {}
        return v


def doc_from_row(r: Row, poison_default: bool = False, extra_meta: dict[str, Any] | None = None,
                 id_names: tuple[str, ...] = ("id", "_id"), field_prefix: str = "") -> Document | None:
    row = r.row
    doc_id = r.ident(*id_names)
    text = r.text("text")
    title = r.text("title", required=False)
    poison = r.boolean("poison", poison_default) if "poison" in row else poison_default
    meta = dict(r.mapping("metadata"))
    for k, v in row.items():
        if k not in {"id", "_id", "text", "title", "poison", "metadata"}:
            meta[k] = v
    if extra_meta:
        meta.update(extra_meta)
    if doc_id is None or text is None or title is None or poison is None:
        return None
    return Document(id=doc_id, text=text, title=title or "", poison=bool(poison), metadata=meta)


class NestedRow(Row):
    """A ``Row`` over a nested object (e.g. ``documents[2]``) whose field names carry the path."""

    def __init__(self, parent: Row, row: dict[str, Any], path: str):
        super().__init__(row, parent.label, parent.line, parent.issues, parent.unit)
        self.path = path

    def bad(self, fld: str | None, message: str) -> None:
        super().bad(f"{self.path}.{fld}" if fld else self.path, message)
