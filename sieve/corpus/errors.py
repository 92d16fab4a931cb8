"""Errors that name the file, line and field of every problem, and their collection.

Up to :data:`MAX_ERRORS` problems are collected (:class:`Issues`) and raised together as one
:class:`DatasetError`, so a user can fix everything in one go.
"""
from __future__ import annotations

import os

MAX_ERRORS = 20
"""At most this many problems are collected before loading stops."""


class DatasetError(ValueError):
    """Bad dataset input. ``file``, ``line`` (1-based, or ``None``) and ``field`` locate the problem;
    ``errors`` lists every problem found (itself included when it is a single one).

    ``str(err)`` reads like ``queries.jsonl line 7, field 'text': must be a non-empty string``.
    """

    def __init__(self, file: str | os.PathLike[str], line: int | None = None, field: str | None = None,
                 message: str = "", errors: list["DatasetError"] | None = None, unit: str = "line"):
        self.file = str(file)
        self.line = line
        self.field = field
        self.message = message
        self.unit = unit
        self.errors: list[DatasetError] = list(errors) if errors else [self]
        super().__init__(self._render())

    def location(self) -> str:
        loc = self.file
        if self.line is not None:
            loc += f" {self.unit} {self.line}"
        if self.field:
            loc += f", field {self.field!r}"
        return loc

    def _render(self) -> str:
        if len(self.errors) == 1 and self.errors[0] is self:
            return f"{self.location()}: {self.message}"
        lines = [self.message] + [f"  - {e.location()}: {e.message}" for e in self.errors]
        return "\n".join(lines)


class TooManyErrors(Exception):
    pass


class Issues:
    """Collects problems; raises :class:`TooManyErrors` once ``MAX_ERRORS`` are reached."""

    def __init__(self, limit: int = MAX_ERRORS):
        self.items: list[DatasetError] = []
        self.limit = limit
        self.truncated = False

    def add(self, file: str, line: int | None, field: str | None, message: str, unit: str = "line") -> None:
        self.items.append(DatasetError(file, line, field, message, unit=unit))
        if len(self.items) >= self.limit:
            self.truncated = True
            raise TooManyErrors

    def raise_if_any(self, what: str) -> None:
        if not self.items:
            return
        if len(self.items) == 1:
            raise self.items[0]
        more = f" (stopped after the first {self.limit})" if self.truncated else ""
        first = self.items[0]
        raise DatasetError(first.file, first.line, first.field,
                           f"{len(self.items)} problems in {what}{more}:", errors=self.items)
