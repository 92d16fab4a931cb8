"""Build demo_data/answers/lab_answers.json: the Attack lab's shipped answers (docs/results/dashboard.md).

    nice -n 10 .venv/bin/python scripts/build_lab_answers.py [--limit N]

For every demo target (``targets.jsonl``) the local generator answers, through the same calls as the
Attack lab page (:func:`sieve.dashboard.lab.class_mode_run`, :func:`sieve.dashboard.lab.answer_contexts`):

* the clean index's top-5 — the clean answer, checked against the gold answers with the §9.1
  normalised-substring rule (docs/algorithms.md §9.1); the lab's picker marks the question
  "✓ clean answer correct" from this check;
* the class-mode contexts (the dataset's 5 ``pr_b`` poisons, undefended and behind TRIS L2).

Replies are stored by the answer cache's prompt hash (question + every context text), so a changed
corpus, poison set or ranking misses and is answered live; the file records the corpus hash,
retriever and local model and is ignored for any other (rebuild it after changing them). A resumable
build cache lives in ``<cache dir>/lab-answers-build.sqlite``.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--limit", type=int, default=None, help="only the first N targets")
    ap.add_argument("--out", default=None, help="default: demo_data/answers/lab_answers.json")
    args = ap.parse_args()

    from tqdm import tqdm

    from sieve.dashboard import lab as L
    from sieve.dashboard import session as S
    from sieve.evaluation.answers import AnswerCache, Generator
    from sieve.evaluation.metrics import asr_success, clean_correct

    ds = S.load_dataset(S.DEMO_DIR)
    res = S.make_resources(tiny=False)
    cfg = res.config
    if L.expected_llm(cfg) is None:
        print("error: the shipped answers are built with the local model; unset llm.base_url / OPENAI_BASE_URL",
              file=sys.stderr)
        return 2
    exp = S.make_experiment(ds, res, quarantine="none")   # the user's ledger never shapes shipped answers
    calib = S.run_calibration()
    gen = Generator(res.llm, AnswerCache(Path(cfg.cache_dir) / "lab-answers-build.sqlite"))
    k_ctx = 5
    targets = ds.targets[: args.limit] if args.limit else list(ds.targets)
    replies: dict[str, str] = {}
    questions: dict[str, dict] = {}
    t0 = time.perf_counter()
    for t in tqdm(targets, desc="lab answers", unit="question"):
        poisons = L.dataset_poisons(ds, L.CLASS_MODE["family"], t, int(L.CLASS_MODE["volume"]))
        clean, _, results = L.class_mode_run(exp, t, poisons, k_ctx, calib)
        answers = {}
        for name, texts in L.answer_contexts(clean, results, k_ctx).items():
            a = gen.answer(t.query, texts)
            replies[a.prompt_hash] = a.text
            answers[name] = a.text
        clean_answer = answers["clean index"]
        questions[t.query_id] = {
            "question": t.query, "correct_answers": list(t.correct_answers), "clean_answer": clean_answer,
            "correct": bool(t.correct_answers) and clean_correct(clean_answer, t.correct_answers),
            "class_mode": {n: a for n, a in answers.items() if n != "clean index"},
            "class_mode_attack_succeeds": asr_success(answers["poisoned, undefended"], t.target_answer),
        }
    body = {
        "format": 1, "built_by": "scripts/build_lab_answers.py", "k_ctx": k_ctx,
        "class_mode": {k: (list(v) if isinstance(v, tuple) else v) for k, v in L.CLASS_MODE.items()},
        "corpus_sha256": ds.content_hash(), "retriever": cfg.models.retriever,
        "llm_local_model": L.expected_llm(cfg), "llm_model_id": res.llm.model_id,
        "questions": questions, "replies": replies,
    }
    out = Path(args.out) if args.out else L.SHIPPED_ANSWERS
    L.write_shipped_answers(out, body)
    n_ok = sum(1 for q in questions.values() if q["correct"])
    n_flip = sum(1 for q in questions.values() if q["correct"] and q["class_mode_attack_succeeds"])
    print(f"wrote {out}: {len(questions)} questions, {n_ok} answered correctly on the clean index, "
          f"{n_flip} of those flip to the target under the class-mode attack; {len(replies)} replies, "
          f"{gen.calls} generated now, {time.perf_counter() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
