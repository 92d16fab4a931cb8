"""The attack protocol: a named, registered recipe that turns attack targets into poison documents.

TextAttack discipline: each recipe is *goal* (make the retriever rank a passage asserting
``target_answer`` into the top-k for ``query``) + *transformation* (how the trigger is built)
+ *search* (none for template attacks, HotFlip for ``pr_w``), and each default sits next to the
sentence of the paper that sets it (docs/algorithms.md §7).

    out = ATTACKS.create("pr_b").generate(targets, resources, seed=0, volume=5)
    out.records   # list[AttackRecord], one per target (one line of attacks.jsonl)
    out.skipped   # list[(query_id, reason)]
    out.stats     # family-specific numbers (e.g. pr_w similarity gains)

Document ids follow RAGSieve's form ``attack:<name>:<query_id>:<j>`` (RS:data/demo/attacks.jsonl),
j = 0..volume-1. Injection volume 1–20 per target; beyond the 5 payloads they repeat with
distinct ids (RAGSieve "10 = the 5 passages repeated with distinct ids", §7.4), payload index
``j % n_payloads``. Because a document depends only on (seed, query_id, payload index), the first
v documents of a volume-20 record are exactly the volume-v record (see
:func:`sieve.attacks.placement.with_volume`).

This module also holds the ``attacks.jsonl`` writer/merger (docs/design.md dataset format, §11.2).
"""
from __future__ import annotations

import hashlib
import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Iterable, Sequence

import numpy as np

from sieve.params import Params
from sieve.types import AttackRecord, Document, Target

if TYPE_CHECKING:
    from sieve.resources import Resources

#: Injection volume bounds (RAGSieve covers 1/3/5/10; Sieve allows 1..20 as TRIS nq_bb20 does).
MIN_VOLUME, MAX_VOLUME = 1, 20


class AttackError(ValueError):
    """Bad attack input or an attack that cannot run with the given resources (one clear line)."""


class SkipTarget(Exception):
    """Raised inside a recipe to skip one target with a recorded reason."""


@dataclass
class AttackOutput:
    """Result of :meth:`Attack.generate`."""

    attack: str
    records: list[AttackRecord]
    skipped: list[tuple[str, str]] = field(default_factory=list)
    stats: dict[str, Any] = field(default_factory=dict)

    @property
    def documents(self) -> list[Document]:
        return [d for r in self.records for d in r.documents]


def validate_volume(volume: int) -> int:
    """Injection volume must be an int in 1..20; raises :class:`AttackError` otherwise."""
    if isinstance(volume, bool) or not isinstance(volume, (int, np.integer)) or not MIN_VOLUME <= int(volume) <= MAX_VOLUME:
        raise AttackError(f"injection volume must be an integer in {MIN_VOLUME}..{MAX_VOLUME}, got {volume!r}")
    return int(volume)


def volume_slots(n_payloads: int, volume: int) -> list[tuple[int, int]]:
    """(j, payload_index) for j = 0..volume-1: payloads repeat cyclically beyond ``n_payloads``."""
    validate_volume(volume)
    if n_payloads < 1:
        raise AttackError("a target needs at least one payload")
    return [(j, j % n_payloads) for j in range(volume)]


def poison_id(attack: str, query_id: str, j: int) -> str:
    """RAGSieve document id form ``attack:<name>:<query_id>:<j>``."""
    return f"attack:{attack}:{query_id}:{j}"


def target_rng(seed: int, query_id: str, *extra: int) -> np.random.Generator:
    """A generator that depends only on (seed, query_id, extra): results do not change with the
    order of targets, ``--limit`` or the volume."""
    h = int.from_bytes(hashlib.blake2b(query_id.encode("utf-8"), digest_size=8).digest(), "little")
    return np.random.default_rng([int(seed) & 0xFFFFFFFF, h & 0xFFFFFFFF, h >> 32, *[int(x) for x in extra]])


def normalize_text(s: str) -> str:
    """Lowercase, collapse whitespace, strip surrounding punctuation (used for equality checks)."""
    return " ".join(s.lower().replace("\u00a0", " ").split()).strip(" .?!,;:\"'")


class Attack(Params):
    """Base class of every attack recipe.

    Subclasses set ``name``/``paper``/``needs`` and implement :meth:`build` (the poison texts of one
    target). The template :meth:`generate` validates targets and volume, assigns ids and metadata,
    repeats payloads for volumes above 5 and records skips.
    """

    #: Title of every poison document ("" = PoisonedRAG, which embeds the text alone).
    title: ClassVar[str] = ""

    # -- to implement ---------------------------------------------------------------------------
    def prepare(self, targets: Sequence[Target], resources: "Resources") -> None:
        """Called once before the targets (load models, fail early on unusable resources)."""

    def build(self, target: Target, payload_indices: list[int], resources: "Resources",
              seed: int) -> dict[int, tuple[str, dict[str, Any]]]:
        """Poison text + extra metadata for each distinct payload index of ``target``.
        Raise :class:`SkipTarget` to skip the target with a reason."""
        raise NotImplementedError

    def record_metadata(self) -> dict[str, Any]:
        """Extra metadata for every record of this family (e.g. placement flags)."""
        return {}

    def finish_stats(self, stats: dict[str, Any]) -> None:
        """Fill family-level ``stats`` after all targets ran."""

    # -- template -------------------------------------------------------------------------------
    def generate(self, targets: Iterable[Target], resources: "Resources", seed: int = 0, volume: int = 5,
                 progress: bool = True) -> AttackOutput:
        """Poison documents for every target (docs/algorithms.md §7); see the module docstring."""
        volume = validate_volume(volume)
        targets = list(targets)
        self._stats: dict[str, Any] = {}
        self.prepare(targets, resources)
        out = AttackOutput(attack=self.label, records=[])
        it: Iterable[Target] = targets
        if progress:
            from tqdm.auto import tqdm

            it = tqdm(targets, desc=f"attack {self.label}", unit="target")
        t0 = time.perf_counter()
        for target in it:
            problem = _target_problem(target)
            if problem:
                out.skipped.append((target.query_id, problem))
                continue
            slots = volume_slots(len(target.payloads), volume)
            try:
                built = self.build(target, sorted({p for _, p in slots}), resources, seed)
            except SkipTarget as e:
                out.skipped.append((target.query_id, str(e)))
                continue
            docs = []
            for j, p in slots:
                text, extra = built[p]
                meta = {
                    "query_id": target.query_id,
                    "attack": self.label,
                    "target_answer": target.target_answer,
                    "poison": True,
                    "payload_index": p,
                    "voice": target.voices[p] if p < len(target.voices) else "",
                    **extra,
                }
                docs.append(Document(poison_id(self.label, target.query_id, j), text, self.title, True, meta))
            out.records.append(AttackRecord(
                query_id=target.query_id, query=target.query, correct_answers=tuple(target.correct_answers),
                target_answer=target.target_answer, attack=self.label, documents=tuple(docs),
                metadata=self.record_metadata(),
            ))
        out.stats = {"targets": len(targets), "generated": len(out.records), "skipped": len(out.skipped),
                     "volume": volume, "seed": seed, "seconds": round(time.perf_counter() - t0, 3), **self._stats}
        self.finish_stats(out.stats)
        return out


def _target_problem(t: Target) -> str:
    if not t.query_id:
        return "target has no query_id"
    if not t.query or not t.query.strip():
        return "target has an empty query"
    if not t.payloads:
        return "target has no payloads"
    empty = [i for i, p in enumerate(t.payloads) if not isinstance(p, str) or not p.strip()]
    if empty:
        return f"target has empty payload(s) at index {empty}"
    if not t.target_answer or not str(t.target_answer).strip():
        return "target has an empty target_answer"
    return ""


# ---- attacks.jsonl I/O (docs/design.md dataset format, docs/algorithms.md §11.2) ---------------------------
# One writer for the whole project: sieve.corpus.attack_record_to_row + write_jsonl (atomic).
def write_attacks(path: str | os.PathLike[str], records: Sequence[AttackRecord]) -> int:
    """Write ``records`` as attacks.jsonl, atomically. Returns the number of lines."""
    from sieve.corpus import attack_record_to_row, write_jsonl

    return write_jsonl(path, (attack_record_to_row(r) for r in records))


def read_attack_lines(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """The lines of an existing attacks.jsonl (``[]`` if missing); anything malformed raises
    :class:`AttackError` naming the file, line and field (nothing is merged into a broken file)."""
    path = Path(path)
    rows: list[dict[str, Any]] = []
    if not path.exists():
        return rows
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise AttackError(f"{path}: not UTF-8 text; not merging") from None
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as e:
            raise AttackError(f"{path}:{n}: invalid JSON ({e.msg}); not merging") from None
        if not isinstance(obj, dict) or not isinstance(obj.get("attack"), str):
            raise AttackError(f"{path}:{n}: field 'attack' missing or not a string; not merging")
        rows.append(obj)
    return rows


def merge_attacks(path: str | os.PathLike[str], records: Sequence[AttackRecord],
                  family: str) -> tuple[int, int, int]:
    """Merge ``records`` of ``family`` into an attacks.jsonl atomically (the file is untouched on
    error): a line of the same family and query id is replaced in place, new targets are appended,
    every other line is kept in order — nothing is dropped (regenerating some targets of a family
    keeps its other targets). Returns (kept, replaced, written)."""
    from sieve.corpus import attack_record_to_row, write_jsonl

    rows = read_attack_lines(path)
    new = [attack_record_to_row(r) for r in records]
    by_qid = {str(r["query_id"]): r for r in new}
    out: list[dict[str, Any]] = []
    placed: set[str] = set()
    kept = replaced = 0
    for r in rows:
        qid = str(r.get("query_id"))
        if r.get("attack") == family and qid in by_qid:
            replaced += 1
            if qid not in placed:
                out.append(by_qid[qid])
                placed.add(qid)
        else:
            out.append(r)
            kept += 1
    out += [r for q, r in by_qid.items() if q not in placed]
    write_jsonl(path, out)
    return kept, replaced, len(new)


def load_targets(dataset_dir: str | os.PathLike[str]) -> list[Target]:
    """Attack targets of a dataset directory (its ``targets.jsonl``, validated by
    :func:`sieve.corpus.load_dataset`); :class:`AttackError` if it has none."""
    from sieve.corpus import load_dataset

    ds = load_dataset(dataset_dir)
    if not ds.targets:
        raise AttackError(f"{Path(dataset_dir) / 'targets.jsonl'}: no attack targets (one JSON line per target: "
                          "query_id, query, correct_answers, target_answer, payloads, voices)")
    return list(ds.targets)
