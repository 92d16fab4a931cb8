"""Dataset readers and validation (DESIGN.md "Dataset directory format", ALGORITHMS.md §11).

Accepted inputs of :func:`load_dataset`:

* a Sieve dataset directory: ``corpus.jsonl`` (required), ``queries.jsonl``, and optionally
  ``qrels.jsonl``, ``attacks.jsonl``, ``targets.jsonl`` (Sieve extension) and ``contexts.jsonl``
  (saved rankings, RAGSieve "prepared contexts");
* a BEIR directory: ``corpus.jsonl`` / ``queries.jsonl`` with ``_id`` and ``qrels/{test,dev,train}.tsv``
  (the first that exists, in that order);
* a single corpus file: ``.jsonl``, ``.csv`` (columns ``id,text[,title]``) or ``.parquet``.

Every problem is reported with its file, line and field; up to :data:`MAX_ERRORS` problems are
collected and raised together as one :class:`DatasetError`, so a user can fix everything in one
go. Nothing half-loaded is ever returned. The user's files are only read, never written.
"""
from __future__ import annotations

import csv
import hashlib
import io
import json
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Iterator

from sieve.types import AttackRecord, Document, Query, RankedDocument, Ranking, Target

MAX_ERRORS = 20
"""At most this many problems are collected before loading stops."""

CORPUS_SUFFIXES = (".jsonl", ".csv", ".parquet")
BEIR_SPLITS = ("test", "dev", "train")
_BOOL_WORDS = {"true": True, "false": False, "1": True, "0": False, "yes": True, "no": False}


# ---------------------------------------------------------------------------------------------
# errors
# ---------------------------------------------------------------------------------------------
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


class _TooManyErrors(Exception):
    pass


class _Issues:
    """Collects problems; raises :class:`_TooManyErrors` once ``MAX_ERRORS`` are reached."""

    def __init__(self, limit: int = MAX_ERRORS):
        self.items: list[DatasetError] = []
        self.limit = limit
        self.truncated = False

    def add(self, file: str, line: int | None, field: str | None, message: str, unit: str = "line") -> None:
        self.items.append(DatasetError(file, line, field, message, unit=unit))
        if len(self.items) >= self.limit:
            self.truncated = True
            raise _TooManyErrors

    def raise_if_any(self, what: str) -> None:
        if not self.items:
            return
        if len(self.items) == 1:
            raise self.items[0]
        more = f" (stopped after the first {self.limit})" if self.truncated else ""
        first = self.items[0]
        raise DatasetError(first.file, first.line, first.field,
                           f"{len(self.items)} problems in {what}{more}:", errors=self.items)


# ---------------------------------------------------------------------------------------------
# the dataset
# ---------------------------------------------------------------------------------------------
def corpus_hash(documents: Iterable[Document]) -> str:
    """sha256 (hex) over ids, titles and texts in order: the corpus version used by index manifests.

    Equal prefixes give equal hashes of the prefix, which lets an index detect appended documents.
    """
    h = hashlib.sha256()
    for d in documents:
        for part in (d.id, d.title, d.text):
            b = part.encode("utf-8")
            h.update(len(b).to_bytes(8, "little"))
            h.update(b)
    return h.hexdigest()


@dataclass
class Dataset:
    """A loaded, validated dataset. ``contexts`` are saved rankings (``contexts.jsonl``)."""

    path: Path
    name: str
    documents: list[Document]
    queries: list[Query] = field(default_factory=list)
    qrels: dict[str, dict[str, int]] = field(default_factory=dict)
    attacks: list[AttackRecord] = field(default_factory=list)
    targets: list[Target] = field(default_factory=list)
    contexts: list[Ranking] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._docs = {d.id: d for d in self.documents}
        self._queries = {q.id: q for q in self.queries}

    def doc_by_id(self, doc_id: str) -> Document:
        try:
            return self._docs[doc_id]
        except KeyError:
            raise KeyError(f"unknown document id {doc_id!r} in dataset {self.name!r}") from None

    def query_by_id(self, query_id: str) -> Query:
        try:
            return self._queries[query_id]
        except KeyError:
            raise KeyError(f"unknown query id {query_id!r} in dataset {self.name!r}") from None

    def attack_families(self) -> list[str]:
        """Attack family names in order of first appearance in ``attacks.jsonl``."""
        return list(dict.fromkeys(a.attack for a in self.attacks))

    def attack_records(self, family: str) -> list[AttackRecord]:
        recs = [a for a in self.attacks if a.attack == family]
        if not recs:
            avail = ", ".join(self.attack_families()) or "none (no attacks.jsonl)"
            raise KeyError(f"unknown attack family {family!r} in dataset {self.name!r}; available: {avail}")
        return recs

    def attack_documents(self, family: str) -> list[Document]:
        """All poison documents of ``family`` (every target's), ``poison=True``, metadata
        {query_id, attack, target_answer}: the injection set of one attack condition (DESIGN.md)."""
        return [d for rec in self.attack_records(family) for d in rec.documents]

    @property
    def targets_by_query(self) -> dict[str, Target]:
        return {t.query_id: t for t in self.targets}

    def content_hash(self) -> str:
        """Corpus version: :func:`corpus_hash` of the documents in order."""
        return corpus_hash(self.documents)

    def summary(self) -> str:
        parts = [f"{len(self.documents)} documents", f"{len(self.queries)} queries"]
        if self.qrels:
            parts.append(f"{sum(len(v) for v in self.qrels.values())} qrels")
        if self.attacks:
            parts.append(f"{len(self.attacks)} attack records ({', '.join(self.attack_families())})")
        if self.targets:
            parts.append(f"{len(self.targets)} targets")
        if self.contexts:
            parts.append(f"{len(self.contexts)} saved contexts")
        return ", ".join(parts)


# ---------------------------------------------------------------------------------------------
# low-level readers: yield (line_no, row dict) and report problems to _Issues
# ---------------------------------------------------------------------------------------------
def _iter_jsonl(path: Path, label: str, issues: _Issues) -> Iterator[tuple[int, dict[str, Any]]]:
    try:
        raw = path.read_bytes()
    except OSError as e:
        issues.add(label, None, None, f"cannot read file: {e.strerror or e}")
        return
    for i, bline in enumerate(raw.split(b"\n"), start=1):
        if i == 1 and bline.startswith(b"\xef\xbb\xbf"):
            bline = bline[3:]
        bline = bline.rstrip(b"\r")
        if not bline.strip():
            continue
        try:
            sline = bline.decode("utf-8")
        except UnicodeDecodeError as e:
            issues.add(label, i, None, f"not valid UTF-8 (byte 0x{bline[e.start]:02x} at column {e.start + 1})")
            continue
        try:
            row = json.loads(sline)
        except json.JSONDecodeError as e:
            issues.add(label, i, None, f"invalid JSON: {e.msg} (column {e.colno})")
            continue
        if not isinstance(row, dict):
            issues.add(label, i, None, f"must be a JSON object, got {type(row).__name__}")
            continue
        yield i, row


def _iter_csv(path: Path, label: str, issues: _Issues, delimiter: str = ",") -> Iterator[tuple[int, dict[str, Any]]]:
    try:
        raw = path.read_bytes()
    except OSError as e:
        issues.add(label, None, None, f"cannot read file: {e.strerror or e}")
        return
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        line = raw[: e.start].count(b"\n") + 1
        issues.add(label, line, None, f"not valid UTF-8 (byte 0x{raw[e.start]:02x})")
        return
    reader = csv.DictReader(io.StringIO(text, newline=""), delimiter=delimiter)
    if not reader.fieldnames:
        issues.add(label, 1, None, "missing header row")
        return
    for row in reader:
        if None in row:  # more cells than header columns
            issues.add(label, reader.line_num, None, f"has more cells than the header ({len(reader.fieldnames)})")
            continue
        yield reader.line_num, {k: v for k, v in row.items() if v is not None}


def _iter_parquet(path: Path, label: str, issues: _Issues) -> Iterator[tuple[int, dict[str, Any]]]:
    try:
        import pyarrow.parquet as pq

        table = pq.read_table(path)
    except Exception as e:  # noqa: BLE001 - any pyarrow failure is a bad file
        issues.add(label, None, None, f"cannot read Parquet file: {e}")
        return
    for i, row in enumerate(table.to_pylist(), start=1):
        yield i, row


def _rows(path: Path, label: str, issues: _Issues) -> Iterator[tuple[int, dict[str, Any]]]:
    suffix = path.suffix.lower()
    if suffix == ".csv":
        return _iter_csv(path, label, issues)
    if suffix == ".parquet":
        return _iter_parquet(path, label, issues)
    return _iter_jsonl(path, label, issues)


# ---------------------------------------------------------------------------------------------
# field validators
# ---------------------------------------------------------------------------------------------
class _Row:
    """Typed field access on one row; each problem goes to ``issues`` and returns ``None``."""

    def __init__(self, row: dict[str, Any], label: str, line: int, issues: _Issues, unit: str = "line"):
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
        if isinstance(v, str) and v.strip().lower() in _BOOL_WORDS:  # CSV cells
            return _BOOL_WORDS[v.strip().lower()]
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


def _doc_from_row(r: _Row, poison_default: bool = False, extra_meta: dict[str, Any] | None = None,
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


class _Nested(_Row):
    """A ``_Row`` over a nested object (e.g. ``documents[2]``) whose field names carry the path."""

    def __init__(self, parent: _Row, row: dict[str, Any], path: str):
        super().__init__(row, parent.label, parent.line, parent.issues, parent.unit)
        self.path = path

    def bad(self, fld: str | None, message: str) -> None:
        super().bad(f"{self.path}.{fld}" if fld else self.path, message)


# ---------------------------------------------------------------------------------------------
# file loaders
# ---------------------------------------------------------------------------------------------
def _load_documents(path: Path, label: str, issues: _Issues) -> list[Document]:
    unit = "row" if path.suffix.lower() == ".parquet" else "line"
    docs: list[Document] = []
    first_line: dict[str, int] = {}
    for line, row in _rows(path, label, issues):
        r = _Row(row, label, line, issues, unit)
        doc = _doc_from_row(r)
        if doc is None:
            continue
        if doc.id in first_line:
            r.bad("id" if "id" in row else "_id",
                  f"duplicate id {doc.id!r} (first on {unit} {first_line[doc.id]})")
            continue
        first_line[doc.id] = line
        docs.append(doc)
    return docs


def _load_queries(path: Path, label: str, issues: _Issues) -> list[Query]:
    queries: list[Query] = []
    first_line: dict[str, int] = {}
    for line, row in _iter_jsonl(path, label, issues):
        r = _Row(row, label, line, issues)
        qid = r.ident("id", "_id")
        text = r.text("text")
        answers = r.str_list("answers")
        if qid is None or text is None or answers is None:
            continue
        if qid in first_line:
            r.bad("id" if "id" in row else "_id", f"duplicate id {qid!r} (first on line {first_line[qid]})")
            continue
        first_line[qid] = line
        queries.append(Query(qid, text, answers))
    return queries


def _add_qrel(r: _Row, qrels: dict[str, dict[str, int]], qid: str | None, did: str | None, score: int | None,
              query_ids: set[str] | None, doc_ids: set[str], fields: tuple[str, str]) -> None:
    if qid is None or did is None or score is None:
        return
    if query_ids is not None and qid not in query_ids:
        r.bad(fields[0], f"unknown query id {qid!r} (not in queries.jsonl)")
        return
    if did not in doc_ids:
        r.bad(fields[1], f"unknown document id {did!r} (not in the corpus)")
        return
    qrels.setdefault(qid, {})[did] = score


def _load_qrels_jsonl(path: Path, label: str, issues: _Issues, query_ids: set[str] | None,
                      doc_ids: set[str]) -> dict[str, dict[str, int]]:
    qrels: dict[str, dict[str, int]] = {}
    for line, row in _iter_jsonl(path, label, issues):
        r = _Row(row, label, line, issues)
        _add_qrel(r, qrels, r.ident("query_id"), r.ident("document_id"), r.integer("score"),
                  query_ids, doc_ids, ("query_id", "document_id"))
    return qrels


def _load_qrels_tsv(path: Path, label: str, issues: _Issues, query_ids: set[str] | None,
                    doc_ids: set[str]) -> dict[str, dict[str, int]]:
    """BEIR ``qrels/<split>.tsv``: header ``query-id  corpus-id  score``."""
    qrels: dict[str, dict[str, int]] = {}
    rows = _iter_csv(path, label, issues, delimiter="\t")
    for line, row in rows:
        r = _Row(row, label, line, issues)
        missing = [c for c in ("query-id", "corpus-id", "score") if c not in row]
        if missing:
            r.bad(missing[0], "column is missing (BEIR header: query-id, corpus-id, score)")
            return qrels
        raw = str(row["score"]).strip()
        try:
            score: int | None = int(raw)
        except ValueError:
            r.bad("score", f"must be an integer, got {raw!r}")
            score = None
        _add_qrel(r, qrels, r.ident("query-id"), r.ident("corpus-id"), score, query_ids, doc_ids,
                  ("query-id", "corpus-id"))
    return qrels


def _parse_attack_row(r: _Row, query_ids: set[str] | None) -> AttackRecord | None:
    qid = r.ident("query_id")
    query = r.text("query")
    correct = r.str_list("correct_answers")
    target = r.text("target_answer")
    family = r.text("attack")
    docs_raw = r.row.get("documents")
    if not isinstance(docs_raw, list) or not docs_raw:
        r.bad("documents", "must be a non-empty list of {id, text, title?} objects")
        return None
    if qid is not None and query_ids is not None and qid not in query_ids:
        r.bad("query_id", f"unknown query id {qid!r} (not in queries.jsonl)")
        return None
    if None in (qid, query, correct, target, family):
        return None
    docs: list[Document] = []
    for j, d in enumerate(docs_raw):
        if not isinstance(d, dict):
            r.bad(f"documents[{j}]", "must be a JSON object")
            continue
        doc = _doc_from_row(_Nested(r, d, f"documents[{j}]"), poison_default=True,
                            extra_meta={"query_id": qid, "attack": family, "target_answer": target},
                            id_names=("id",))
        if doc is not None:
            # the attack file is the ground truth of what is poison
            docs.append(Document(doc.id, doc.text, doc.title, True, doc.metadata))
    if len(docs) != len(docs_raw):
        return None
    meta = {k: v for k, v in r.row.items()
            if k not in {"query_id", "query", "correct_answers", "target_answer", "attack", "documents"}}
    return AttackRecord(qid, query, correct, target, family, tuple(docs), meta)  # type: ignore[arg-type]


def _load_attacks(path: Path, label: str, issues: _Issues, query_ids: set[str] | None,
                  corpus_ids: set[str]) -> list[AttackRecord]:
    records: list[AttackRecord] = []
    seen: dict[tuple[str, str], int] = {}  # (family, doc id) -> line
    for line, row in _iter_jsonl(path, label, issues):
        r = _Row(row, label, line, issues)
        rec = _parse_attack_row(r, query_ids)
        if rec is None:
            continue
        ok = True
        for j, d in enumerate(rec.documents):
            if d.id in corpus_ids:
                r.bad(f"documents[{j}].id", f"id {d.id!r} collides with a corpus document id")
                ok = False
            elif (rec.attack, d.id) in seen:
                r.bad(f"documents[{j}].id", f"duplicate id {d.id!r} in attack family {rec.attack!r} "
                                            f"(first on line {seen[(rec.attack, d.id)]})")
                ok = False
            else:
                seen[(rec.attack, d.id)] = line
        if ok:
            records.append(rec)
    return records


def _load_targets(path: Path, label: str, issues: _Issues, query_ids: set[str] | None) -> list[Target]:
    targets: list[Target] = []
    first_line: dict[str, int] = {}
    for line, row in _iter_jsonl(path, label, issues):
        r = _Row(row, label, line, issues)
        qid = r.ident("query_id")
        query = r.text("query")
        correct = r.str_list("correct_answers")
        target = r.text("target_answer")
        payloads = r.str_list("payloads", required=True, nonempty=True)
        voices = r.str_list("voices")
        if None in (qid, query, correct, target, payloads, voices):
            continue
        if query_ids is not None and qid not in query_ids:
            r.bad("query_id", f"unknown query id {qid!r} (not in queries.jsonl)")
            continue
        if qid in first_line:
            r.bad("query_id", f"duplicate target for query {qid!r} (first on line {first_line[qid]})")  # type: ignore[index]
            continue
        first_line[qid] = line  # type: ignore[index]
        targets.append(Target(qid, query, correct, target, payloads, voices))  # type: ignore[arg-type]
    return targets


def _load_contexts(path: Path, label: str, issues: _Issues) -> list[Ranking]:
    rankings: list[Ranking] = []
    for line, row in _iter_jsonl(path, label, issues):
        r = _Row(row, label, line, issues)
        qid = r.ident("query_id")
        query = r.text("query")
        condition = r.text("condition", required=False) or "clean"
        correct = r.str_list("correct_answers")
        target = r.text("target_answer", required=False)
        docs_raw = row.get("documents")
        if not isinstance(docs_raw, list):
            r.bad("documents", "must be a list of {id, rank, text, poison, similarity} objects")
            continue
        docs: list[RankedDocument] = []
        for j, d in enumerate(docs_raw):
            if not isinstance(d, dict):
                r.bad(f"documents[{j}]", "must be a JSON object")
                continue
            n = _Nested(r, d, f"documents[{j}]")
            did = n.ident("id", "document_id")
            rank = n.integer("rank")
            text = n.text("text", nonempty=False)
            poison = n.boolean("poison")
            sim = n.number("similarity") if "similarity" in d else (n.number("score") if "score" in d else 0.0)
            title = n.text("title", required=False)
            if None in (did, rank, text, poison, sim, title):
                continue
            if rank != len(docs) + 1:
                n.bad("rank", f"ranks must be 1, 2, 3, ... in order; expected {len(docs) + 1}, got {rank}")
                continue
            docs.append(RankedDocument(did, text, rank, sim, bool(poison), title or ""))  # type: ignore[arg-type]
        if not r.ok or None in (qid, query, correct):
            continue
        rankings.append(Ranking(query, docs, qid, condition, correct, target or ""))  # type: ignore[arg-type]
    return rankings


# ---------------------------------------------------------------------------------------------
# public entry points
# ---------------------------------------------------------------------------------------------
def _guard(fn: Any, *args: Any) -> Any:
    """Run a loader; stopping at MAX_ERRORS is not an error of its own."""
    try:
        return fn(*args)
    except _TooManyErrors:
        return None


def load_corpus_file(path: str | os.PathLike[str]) -> list[Document]:
    """Read one corpus file (``.jsonl``, ``.csv`` with ``id,text[,title]``, or ``.parquet``)."""
    p = Path(path)
    if not p.is_file():
        raise DatasetError(p, None, None, "corpus file not found")
    if p.suffix.lower() not in CORPUS_SUFFIXES:
        raise DatasetError(p, None, None, f"unsupported corpus file type {p.suffix!r}; use one of "
                                          f"{', '.join(CORPUS_SUFFIXES)}")
    issues = _Issues()
    docs = _guard(_load_documents, p, p.name, issues) or []
    if not issues.items and not docs:
        issues.items.append(DatasetError(p.name, None, None, "the corpus is empty (no documents)"))
    issues.raise_if_any(str(p))
    return docs


def load_attacks(path: str | os.PathLike[str], query_ids: set[str] | None = None,
                 corpus_ids: set[str] | frozenset[str] = frozenset()) -> list[AttackRecord]:
    """Read an ``attacks.jsonl`` file. ``query_ids`` (if given) must contain every target query;
    attack document ids must not collide with ``corpus_ids`` nor repeat within a family."""
    p = Path(path)
    if not p.is_file():
        raise DatasetError(p, None, None, "attacks file not found")
    issues = _Issues()
    recs = _guard(_load_attacks, p, p.name, issues, query_ids, set(corpus_ids)) or []
    issues.raise_if_any(str(p))
    return recs


def _find_corpus(root: Path) -> Path | None:
    for suffix in CORPUS_SUFFIXES:
        p = root / f"corpus{suffix}"
        if p.is_file():
            return p
    return None


def load_dataset(path: str | os.PathLike[str]) -> Dataset:
    """Load and validate a dataset directory, a BEIR directory or a single corpus file.

    Raises :class:`DatasetError` listing every problem found (up to :data:`MAX_ERRORS`).
    """
    p = Path(path)
    if not p.exists():
        raise DatasetError(p, None, None, "no such file or directory")
    if p.is_file():
        docs = load_corpus_file(p)
        return Dataset(path=p, name=p.stem, documents=docs)

    corpus_path = _find_corpus(p)
    if corpus_path is None:
        raise DatasetError(p, None, None, "no corpus.jsonl (or corpus.csv / corpus.parquet) in this directory")

    issues = _Issues()
    docs: list[Document] = []
    queries: list[Query] = []
    qrels: dict[str, dict[str, int]] = {}
    attacks: list[AttackRecord] = []
    targets: list[Target] = []
    contexts: list[Ranking] = []
    try:
        docs = _load_documents(corpus_path, corpus_path.name, issues)
        if not docs and not issues.items:
            issues.add(corpus_path.name, None, None, "the corpus is empty (no documents)")
        doc_ids = {d.id for d in docs}
        query_ids: set[str] | None = None
        if (p / "queries.jsonl").is_file():
            queries = _load_queries(p / "queries.jsonl", "queries.jsonl", issues)
            query_ids = {q.id for q in queries}
        if (p / "qrels.jsonl").is_file():
            qrels = _load_qrels_jsonl(p / "qrels.jsonl", "qrels.jsonl", issues, query_ids, doc_ids)
        else:
            for split in BEIR_SPLITS:
                tsv = p / "qrels" / f"{split}.tsv"
                if tsv.is_file():
                    qrels = _load_qrels_tsv(tsv, f"qrels/{split}.tsv", issues, query_ids, doc_ids)
                    break
        if (p / "attacks.jsonl").is_file():
            attacks = _load_attacks(p / "attacks.jsonl", "attacks.jsonl", issues, query_ids, doc_ids)
        if (p / "targets.jsonl").is_file():
            targets = _load_targets(p / "targets.jsonl", "targets.jsonl", issues, query_ids)
        if (p / "contexts.jsonl").is_file():
            contexts = _load_contexts(p / "contexts.jsonl", "contexts.jsonl", issues)
    except _TooManyErrors:
        pass
    issues.raise_if_any(f"dataset {p}")
    return Dataset(path=p, name=p.resolve().name, documents=docs, queries=queries, qrels=qrels,
                   attacks=attacks, targets=targets, contexts=contexts)


# ---------------------------------------------------------------------------------------------
# writing (used by the attack factory and exports; never on the user's input files)
# ---------------------------------------------------------------------------------------------
def write_jsonl(path: str | os.PathLike[str], rows: Iterable[dict[str, Any]]) -> int:
    """Write ``rows`` as JSON lines atomically (temp file + rename). Returns the number of rows."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{p.name}.", suffix=".tmp", dir=p.parent)
    n = 0
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as f:
            for row in rows:
                f.write(json.dumps(row, ensure_ascii=False))
                f.write("\n")
                n += 1
        os.replace(tmp, p)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    return n


def attack_record_to_row(rec: AttackRecord) -> dict[str, Any]:
    """The ``attacks.jsonl`` line of ``rec`` (inverse of the loader)."""
    docs = []
    for d in rec.documents:
        meta = {k: v for k, v in d.metadata.items()}
        row: dict[str, Any] = {"id": d.id, "text": d.text}
        if d.title:
            row["title"] = d.title
        if meta:
            row["metadata"] = meta
        docs.append(row)
    return {"query_id": rec.query_id, "query": rec.query, "correct_answers": list(rec.correct_answers),
            "target_answer": rec.target_answer, "attack": rec.attack, "documents": docs, **rec.metadata}
