"""The Attack lab's data: poisons generated for one target, ranked on a sandbox snapshot."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping, Sequence

from sieve.types import Document, Ranking, Target

if TYPE_CHECKING:
    from sieve.experiment import Experiment, Snapshot
    from sieve.resources import Resources


LAB_FAMILIES = ("pr_b", "pr_w", "paraphrase", "script", "forced_top", "diverse", "payload_only")


def lab_families() -> list[str]:
    from sieve.registry import ATTACKS

    names = ATTACKS.names()
    return [f for f in LAB_FAMILIES if f in names] + [n for n in names if n not in LAB_FAMILIES]


def lab_poisons(family: str, target: Target, resources: "Resources", volume: int = 5, seed: int = 0,
                id_prefix: str = "lab") -> tuple[list[Document], dict[str, Any]]:
    """Generate ``volume`` poisons of ``family`` for one target (ids prefixed so they never clash
    with the dataset's own attack documents). Returns (documents, stats)."""
    from sieve.attacks import generate_attack

    out = generate_attack(family, [target], resources, seed=seed, volume=volume)
    if out.skipped and not out.records:
        from sieve.attacks import AttackError

        raise AttackError(f"{family}: target {target.query_id} skipped: {out.skipped[0][1]}")
    docs = [Document(f"{id_prefix}:{d.id}", d.text, d.title, True, dict(d.metadata)) for d in out.documents]
    return docs, dict(out.stats)


def lab_snapshot(experiment: "Experiment", family: str, poisons: Sequence[Document]) -> "Snapshot":
    """A sandbox snapshot: the clean corpus plus ``poisons`` (in memory; the dataset files are never touched)."""
    return experiment.snapshot(f"lab:{family}", documents=list(poisons))


def lab_ranking(experiment: "Experiment", target: Target, family: str, poisons: Sequence[Document]) -> Ranking:
    """The target question ranked on the sandbox (:meth:`Experiment.rank`: forced-top poisons are
    pinned by their placement metadata, the same rule as ``sieve eval`` and ``sieve search``)."""
    return experiment.rank(target.query, snapshot=lab_snapshot(experiment, family, poisons), query_id=target.query_id,
                           correct_answers=target.correct_answers, target_answer=target.target_answer)


def poison_ranks(ranking: Ranking) -> list[int]:
    return [d.rank for d in ranking.documents if d.poison]


#: Class-mode preset: the whole demo in under a minute on 2 CPU cores — the dataset's own pr_b poisons
#: (no generation), five of them, one fast defense (TRIS L2: no model) and three short answers that
#: the answer cache keeps for the next class.
CLASS_MODE: dict[str, Any] = {"family": "pr_b", "volume": 5, "defenses": ("tris_l2",),
                              "use_dataset_poisons": True}


#: Parameters the lab prepares a defense with (everything else at its defaults): TRIS runs L1+L2 as on
#: the explorer — its L3 LLM verifier costs minutes of local-LLM calls to calibrate and about 20 s per
#: question on 2 CPU cores (measured on the demo); ``tris_full`` / ``tris_l3`` select it on purpose.
LAB_PARAMS: dict[str, dict[str, Any]] = {"tris": {"l3_mode": "off"}}


def _replace_ci(text: str, old: str, new: str) -> str:
    import re

    return re.sub(re.escape(old), lambda _m: new, text, flags=re.IGNORECASE) if old else text


def retarget(target: Target, answer: str) -> Target:
    """``target`` with another target answer: every payload asserting the old answer now asserts
    ``answer`` (case-insensitive substitution; payloads that never name it are kept as they are)."""
    import dataclasses

    answer = answer.strip()
    if not answer or answer == target.target_answer:
        return target
    return dataclasses.replace(target, target_answer=answer,
                               payloads=tuple(_replace_ci(p, target.target_answer, answer) for p in target.payloads))


def retarget_documents(docs: Sequence[Document], old: str, new: str) -> list[Document]:
    """Poison documents rewritten for a custom target answer (same substitution as :func:`retarget`)."""
    if not new.strip() or new == old:
        return list(docs)
    return [Document(d.id, _replace_ci(d.text, old, new), d.title, d.poison, dict(d.metadata)) for d in docs]


def clean_answer_status(run_records: Sequence[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per question id, the undefended clean-condition answer recorded in an answers run and whether
    it is correct (§9.1 normalised substring): ``{qid: {"answer": str, "correct": bool}}``."""
    from sieve.evaluation.metrics import clean_correct

    out: dict[str, dict[str, Any]] = {}
    for r in run_records:
        if r.get("defense") != "none" or r.get("condition") != "clean" or r.get("answer") is None:
            continue
        ok = bool(r.get("correct_answers")) and clean_correct(r["answer"], r["correct_answers"])
        out[r["query_id"]] = {"answer": r["answer"], "correct": ok}
    return out


def dataset_poisons(dataset: Any, family: str, target: Target, volume: int) -> list[Document]:
    """The dataset's own ``family`` poisons for ``target`` (first ``volume``), ids prefixed ``lab:``."""
    rec = next(r for r in dataset.attack_records(family) if r.query_id == target.query_id)
    return [Document(f"lab:{d.id}", d.text, d.title, True, dict(d.metadata)) for d in rec.documents[:volume]]


def answer_contexts(clean: Ranking, results: Mapping[str, Any], k_ctx: int) -> dict[str, list[str]]:
    """The contexts the lab answers from, by display name: the clean index's top ``k_ctx``, then the
    context each defense (``none`` = undefended) handed to the generator on the poisoned sandbox."""
    out = {"clean index": [d.text for d in clean.top(k_ctx)]}
    out.update({("poisoned, undefended" if n == "none" else f"poisoned + {n}"): [d.text for d in r.context]
                for n, r in results.items()})
    return out


# ---- shipped answers (demo_data/answers/lab_answers.json) -----------------------------------------
#: Answers shipped with the demo for the lab: the clean answer of every demo target (which questions
#: the clean pipeline answers correctly) and the class-mode answers, built once with the local model by
#: ``scripts/build_lab_answers.py``.
SHIPPED_ANSWERS = Path(__file__).resolve().parents[2] / "demo_data" / "answers" / "lab_answers.json"


@dataclass
class ShippedAnswers:
    """The shipped answer file, checked against the running configuration. Replies are keyed by the
    answer cache's (model id, prompt hash) — the hash covers the question and every context text, so
    a changed corpus, poison or ranking simply misses and is generated live. ``verified`` holds the
    per-question clean-answer checks, valid only for the same corpus, retriever and model."""

    model_id: str
    replies: dict[str, str]
    questions: dict[str, dict[str, Any]]
    usable: bool
    reason: str = ""


def _body_sha256(body: Mapping[str, Any]) -> str:
    import hashlib
    import json

    return hashlib.sha256(json.dumps(body, sort_keys=True, ensure_ascii=False).encode("utf-8")).hexdigest()


def write_shipped_answers(path: str | Path, body: Mapping[str, Any]) -> None:
    """Write ``body`` with its checksum (``sha256`` over the sorted JSON of the body)."""
    import json

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    doc = {**body, "sha256": _body_sha256(body)}
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(doc, ensure_ascii=False, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    tmp.replace(path)


def expected_llm(config: Any) -> str | None:
    """The local model name the configuration answers with, or None for an endpoint / no LLM (shipped
    answers are only used for the local model they were built with)."""
    if not config.llm.enabled or config.llm.resolved_base_url():
        return None
    return str(config.llm.local_model)


def load_shipped_answers(dataset: Any, config: Any, path: str | Path | None = None) -> ShippedAnswers:
    """The shipped answers usable with ``dataset`` and ``config`` (``usable`` False, with the reason,
    when the file is missing or damaged, or was built for another corpus, retriever or model)."""
    import json

    p = Path(path or SHIPPED_ANSWERS)
    empty = ShippedAnswers("", {}, {}, False)
    try:
        doc = json.loads(p.read_text(encoding="utf-8"))
        body = {k: v for k, v in doc.items() if k != "sha256"}
        if doc.get("sha256") != _body_sha256(body):
            empty.reason = f"{p.name}: checksum mismatch (damaged file); rebuild with scripts/build_lab_answers.py"
            return empty
    except FileNotFoundError:
        empty.reason = f"no shipped answers ({p.name})"
        return empty
    except (OSError, ValueError) as e:
        empty.reason = f"{p.name}: unreadable ({e})"
        return empty
    why = []
    if body.get("corpus_sha256") != dataset.content_hash():
        why.append("another corpus")
    if body.get("retriever") != config.models.retriever:
        why.append("another retriever")
    if body.get("llm_local_model") != expected_llm(config):
        why.append("another generator")
    if why:
        empty.reason = f"the shipped answers were built for {', '.join(why)}; answers are generated live"
        return empty
    targets = dataset.targets_by_query
    questions = {qid: q for qid, q in (body.get("questions") or {}).items()
                 if qid in targets and q.get("question") == targets[qid].query
                 and list(q.get("correct_answers") or []) == list(targets[qid].correct_answers)}
    return ShippedAnswers(str(body["llm_model_id"]), dict(body.get("replies") or {}), questions, True)


class ShippedFirstCache:
    """An answer cache that looks in the shipped replies first, then in ``cache`` (an
    :class:`~sieve.evaluation.answers.AnswerCache`); new replies go to ``cache``."""

    def __init__(self, cache: Any, shipped: ShippedAnswers):
        self.cache = cache
        self.shipped = shipped
        self.hits = 0

    def get(self, model_id: str, prompt_hash: str) -> str | None:
        if self.shipped.usable and model_id == self.shipped.model_id and prompt_hash in self.shipped.replies:
            self.hits += 1
            return self.shipped.replies[prompt_hash]
        return self.cache.get(model_id, prompt_hash)

    def put(self, model_id: str, prompt_hash: str, reply: str) -> None:
        self.cache.put(model_id, prompt_hash, reply)


class LazyLLM:
    """The configured generator, loaded on the first real call: with every answer shipped or cached,
    the local model is never loaded. ``model_id`` is the shipped file's (only used when the
    configuration names the same local model); a loaded model with another id is an error."""

    def __init__(self, resources: "Resources", model_id: str):
        self.resources = resources
        self.model_id = model_id

    def generate(self, prompt: str, **kw: Any) -> str:
        from sieve.models.errors import LLMError

        llm = self.resources.llm
        if llm is None:
            raise LLMError("generation needs an LLM, but LLM use is disabled in the configuration (llm.enabled)")
        if llm.model_id != self.model_id:
            raise LLMError(f"the loaded generator is {llm.model_id}, the shipped answers are for {self.model_id}")
        return llm.generate(prompt, **kw)


def class_mode_run(experiment: "Experiment", target: Target, poisons: Sequence[Document], k_ctx: int,
                   calibration: Mapping[str, Mapping[str, Any]] | None = None,
                   specs: Sequence[str] = CLASS_MODE["defenses"]) -> tuple[Ranking, Ranking, dict[str, Any]]:
    """The lab's experiment for one target: the clean ranking, the poisoned sandbox ranking and each
    defense's result (``none`` first) — what the page shows and what ``scripts/build_lab_answers.py``
    answers, through the same calls. A defense that fails raises."""
    from sieve.constants import CLEAN
    from sieve.dashboard import session as S

    res = experiment.resources
    clean = experiment.rank(target.query, condition=CLEAN, query_id=target.query_id,
                            correct_answers=target.correct_answers, target_answer=target.target_answer)
    poisoned = lab_ranking(experiment, target, CLASS_MODE["family"], poisons)
    sandbox = lab_snapshot(experiment, CLASS_MODE["family"], poisons)
    results = {"none": S.prepare(experiment, "none").apply(poisoned, res, k_ctx=k_ctx)}
    for spec in specs:
        results[spec] = S.prepare(experiment, spec, snapshot=sandbox, calibration=calibration).apply(poisoned, res,
                                                                                                    k_ctx=k_ctx)
    return clean, poisoned, results


def defense_verdicts(answers: Mapping[str, str], correct: Sequence[str], target: str) -> dict[str, tuple[str, str]]:
    """One plain verdict per defended answer of :func:`answer_contexts`' names ("poisoned + X"), as
    ``(kind, line)`` with kind ``good`` / ``poisoned`` / ``lost``:

    * the undefended answer does not assert the target → "attack failed" (and "answer lost" when
      the defended answer is not correct while the clean one is);
    * it does → "answer restored" (defended answer correct), "still poisoned" (asserts the target) or
      "answer lost" (neither: the defense removed the poisons and the answer with them).

    Answers are judged by the §9.1 normalised substring rules; without gold answers "correct" is
    never claimed."""
    from sieve.evaluation.metrics import asr_success, clean_correct

    def ok(a: str) -> bool:
        return bool(correct) and clean_correct(a, correct)

    def hit(a: str) -> bool:
        return bool(target) and asr_success(a, target)

    clean_ok = ok(answers.get("clean index", ""))
    flipped = hit(answers.get("poisoned, undefended", ""))
    out: dict[str, tuple[str, str]] = {}
    for name, a in answers.items():
        if not name.startswith("poisoned + "):
            continue
        if not flipped:
            if ok(a) or not clean_ok:
                out[name] = ("good", "attack failed — the undefended answer does not give the target"
                             + ("; this answer is correct" if ok(a) else ""))
            else:
                out[name] = ("lost", "attack failed, but this defense lost the correct answer (answer lost)")
        elif hit(a):
            out[name] = ("poisoned", "still poisoned — this answer gives the attacker's target")
        elif ok(a):
            out[name] = ("good", "answer restored — the correct answer is back")
        else:
            out[name] = ("lost", "answer lost — the target is gone but the correct answer too" if correct else
                         "target removed — no gold answer to check this answer against")
    return out


def family_summary(family: str) -> str:
    """The registered attack family's own one-line summary (its class's ``summary``)."""
    from sieve.registry import ATTACKS

    entry = next((e for e in ATTACKS.entries() if e.name == family), None)
    return (entry.summary if entry is not None and entry.summary else f"The {family} attack family.")


#: Why a poison reads "…River?.The …": said under the lab's poison table.
JOINED_NOTE = ("The question and the false passage are joined by '.' with no space (\"…River?.The …\"), exactly as "
               "PoisonedRAG writes its poisons: the retriever sees the question verbatim at the start.")


def joined_without_space(text: str, query: str) -> bool:
    """True when a poison starts with the question joined to the payload by '.' and no space (PoisonedRAG)."""
    q = query.strip()
    return bool(q) and text.startswith(q + ".") and len(text) > len(q) + 1 and not text[len(q) + 1].isspace()
