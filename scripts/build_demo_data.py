#!/usr/bin/env python3
"""Build the bundled demo dataset from its sources.

    python scripts/build_demo_data.py          # demo_data/source/*.json -> demo_data/*.jsonl + data card table

Each ``demo_data/source/<topic>.json`` holds one topic written by the Sieve authors: passages,
questions with gold answers and relevant passages, and one attack target with five poison
payloads. This script validates every file and writes the dataset directory format of
docs/design.md (corpus.jsonl, queries.jsonl, qrels.jsonl) plus targets.jsonl, and regenerates the
"false facts" table of demo_data/README.md between its markers. Attack documents
(attacks.jsonl) come from ``python scripts/build_demo_attacks.py``.
"""
from __future__ import annotations

import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEMO = ROOT / "demo_data"
VOICES = ("encyclopedia", "news", "textbook", "forum", "qa")
BEGIN, END = "<!-- false-facts:begin -->", "<!-- false-facts:end -->"


def words(s: str) -> int:
    return len(s.split())


def main() -> int:
    sources = sorted((DEMO / "source").glob("*.json"))
    if not sources:
        print("no demo_data/source/*.json files", file=sys.stderr)
        return 2
    corpus, queries, qrels, targets, problems = [], [], [], [], []
    seen_docs: set[str] = set()
    seen_q: set[str] = set()
    categories: dict[str, int] = {}
    for path in sources:
        try:
            t = json.loads(path.read_text(encoding="utf-8"))
        except json.JSONDecodeError as e:
            problems.append(f"{path.name}: invalid JSON: {e}")
            continue
        name = path.name
        categories[t.get("category", "?")] = categories.get(t.get("category", "?"), 0) + 1
        texts = {}
        for p in t["passages"]:
            if p["id"] in seen_docs:
                problems.append(f"{name}: duplicate passage id {p['id']}")
            seen_docs.add(p["id"])
            n = words(p["text"])
            if not 40 <= n <= 200:
                problems.append(f"{name}: passage {p['id']} has {n} words (40-200)")
            texts[p["id"]] = p["text"]
            corpus.append({"id": p["id"], "title": p.get("title", ""), "text": p["text"]})
        for q in t["questions"]:
            if q["id"] in seen_q:
                problems.append(f"{name}: duplicate question id {q['id']}")
            seen_q.add(q["id"])
            queries.append({"id": q["id"], "text": q["text"], "answers": q["answers"]})
            for d in q["relevant"]:
                if d not in texts:
                    problems.append(f"{name}: question {q['id']} relevant id {d} is not a passage of the topic")
                qrels.append({"query_id": q["id"], "document_id": d, "score": 1})
            if not any(a.lower() in texts.get(d, "").lower() for a in q["answers"] for d in q["relevant"]):
                problems.append(f"{name}: no answer of {q['id']} occurs in its relevant passages")
        tg = t["target"]
        q = next((q for q in t["questions"] if q["id"] == tg["question_id"]), None)
        if q is None:
            problems.append(f"{name}: target question {tg['question_id']} not found")
            continue
        payloads = [p["text"] for p in tg["payloads"]]
        if len(payloads) != 5:
            problems.append(f"{name}: target needs 5 payloads, has {len(payloads)}")
        for p in payloads:
            if tg["target_answer"] not in p:
                problems.append(f"{name}: payload lacks the target answer verbatim: {p[:60]}...")
            if q["answers"][0].lower() in p.lower():
                problems.append(f"{name}: payload mentions the correct answer: {p[:60]}...")
        targets.append({
            "query_id": q["id"], "query": q["text"], "correct_answers": q["answers"],
            "target_answer": tg["target_answer"], "payloads": payloads,
            "voices": [p.get("voice", "") for p in tg["payloads"]],
        })
    if problems:
        print("\n".join(problems), file=sys.stderr)
        print(f"{len(problems)} problem(s); nothing written", file=sys.stderr)
        return 1

    def dump(name: str, rows: list[dict]) -> None:
        tmp = DEMO / (name + ".tmp")
        with tmp.open("w", encoding="utf-8") as f:
            for r in rows:
                f.write(json.dumps(r, ensure_ascii=False) + "\n")
        tmp.replace(DEMO / name)

    dump("corpus.jsonl", corpus)
    dump("queries.jsonl", queries)
    dump("qrels.jsonl", qrels)
    dump("targets.jsonl", targets)

    card = DEMO / "README.md"
    if card.exists():
        text = card.read_text(encoding="utf-8")
        rows = ["| question | correct answer | false target answer (asserted by the poison payloads) |", "|---|---|---|"]
        for t in targets:
            rows.append(f"| {t['query']} | {t['correct_answers'][0]} | {t['target_answer']} |")
        table = "\n".join(rows)
        text = re.sub(re.escape(BEGIN) + ".*?" + re.escape(END), BEGIN + "\n" + table + "\n" + END, text, flags=re.S)
        card.write_text(text, encoding="utf-8")
    print(f"{len(sources)} topics, {len(corpus)} passages, {len(queries)} questions, "
          f"{len(targets)} targets; categories: {categories}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
