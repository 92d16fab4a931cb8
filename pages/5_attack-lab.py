"""Attack lab (classroom): poison one question in a sandbox copy of the index and watch the ranks,
the undefended answer and each defense respond. The demo files are never modified."""
import time

import pandas as pd
import streamlit as st

from sieve.dashboard import explorer as E
from sieve.dashboard import figures as F
from sieve.dashboard import lab as L
from sieve.dashboard import session as S
from sieve.dashboard import state
from sieve.dashboard import tables as T
from sieve.dashboard.safe import md, snippet
from sieve.runtime import configure_process_environment
from sieve.types import Target

configure_process_environment()   # also when this page runs on its own (AppTest, benches)

state.init_state()
state.sidebar_status()
st.title("Attack lab")

FAMILY_HELP = {
    "pr_b": "PoisonedRAG black-box: the question is copied in front of a fluent false passage, so the retriever "
            "sees a near-perfect match.",
    "pr_w": "PoisonedRAG white-box: a HotFlip trigger is optimised with the retriever's gradients (slow on CPU: "
            "about a minute per target).",
    "paraphrase": "The question is paraphrased by an LLM before being prepended (defeats exact-prefix filters).",
    "script": "A mixed-script trigger (Latin look-alike letters from other alphabets) shared by the poisons.",
    "forced_top": "The poisons are pinned above every clean passage (the retriever is taken out of the loop).",
    "diverse": "Five passages in different voices (encyclopedia, news, textbook, forum, Q&A) after the question.",
    "payload_only": "The false passages alone, with no trigger (they must win retrieval on their own).",
}

with state.page_guard("Attack lab"):
    st.markdown(
        "**How knowledge poisoning works.** A RAG system answers from the few passages its retriever ranks "
        "highest. An attacker who can add passages to the knowledge base writes a handful that (1) look "
        "extremely relevant to one question and (2) assert a false answer. If they reach the top-5, the "
        "language model usually repeats the false answer. Here you poison a question in a *sandbox* copy "
        "of the index, then watch where the poisons rank and how each defense reacts."
    )
    ds = state.dataset()
    class_mode = st.toggle("Class mode (the whole demo in under a minute)", value=False, key="lab_class",
                           help="Uses the dataset's own pr_b poisons (no generation), 5 poisons, the TRIS L2 "
                                "defense (no model) and the answers shipped with the demo for every demo question "
                                "(demo_data/answers/lab_answers.json; a custom target answer is answered live, then "
                                "cached). Questions whose attack flips the answer are listed first.")
    shipped = state.shipped_answers()
    checked: dict = {}
    if len(shipped.questions) < len(ds.targets):   # questions the shipped file does not cover: the answers run
        try:
            run_records = state.run(st.session_state["run_dir"]).records
        except Exception:  # noqa: BLE001 - no answers run: questions are simply not pre-checked
            run_records = []
        checked = L.clean_answer_status(run_records)
    checked.update({qid: {"answer": q["clean_answer"], "correct": bool(q["correct"]),
                          "flips": bool(q.get("class_mode_attack_succeeds"))} for qid, q in shipped.questions.items()})
    if ds.targets:
        good = [t for t in ds.targets if checked.get(t.query_id, {}).get("correct")]
        if class_mode:   # questions whose class-mode attack is known to flip the answer come first
            good.sort(key=lambda t: not checked[t.query_id].get("flips", False))
        only_good = st.toggle(f"Only questions the clean pipeline answers correctly ({len(good):d} of "
                              f"{len(ds.targets):d} checked correct)",
                              value=bool(good), key="lab_only_good", disabled=not good,
                              help="Checked by answering each question from the clean index's top-5 with the local "
                                   "model and matching the gold answers (normalised substring, docs/algorithms.md "
                                   "§9.1): the demo ships these answers (demo_data/answers/lab_answers.json); other "
                                   "questions fall back to the answers run of the Trade-offs page. A flip only tells "
                                   "a story when the clean answer is right.")
        if not shipped.usable and shipped.reason:
            st.caption(f"Shipped answers not used: {md(shipped.reason)}.")
        pool = good if (only_good and good) else list(ds.targets)

        def _mark(qid: str) -> str:
            c = checked.get(qid)
            return "✓ clean answer correct" if c and c["correct"] else ("✗ clean answer wrong" if c else "not checked")

        labels = {t.query_id: f"{snippet(t.query, 80)} — {_mark(t.query_id)}" for t in pool}
        qid = st.selectbox("Question to attack", list(labels), format_func=lambda q: labels[q],
                           key="lab_target_class" if class_mode else "lab_target")   # class mode starts on a flip
        target = ds.targets_by_query[qid]
    else:
        st.info("This dataset has no targets.jsonl; describe a target by hand.")
        q = st.text_input("Question", key="lab_q")
        ta = st.text_input("False target answer", key="lab_ta")
        payload = st.text_area("Poison passage asserting the target answer", key="lab_payload")
        if not (q.strip() and ta.strip() and payload.strip()):
            st.stop()
        target = Target("lab-q", q, (), ta, (payload,))
    st.caption("Question (verbatim):")
    st.text(target.query)
    c = checked.get(target.query_id)
    if c is not None:
        st.caption(("✓ The clean pipeline answers correctly: " if c["correct"] else
                    "✗ The clean pipeline already answers wrongly — pick another question for a clear flip: ")
                   + md(snippet(c["answer"], 160))
                   + (" · in class mode the undefended answer flips to the target" if class_mode and c.get("flips")
                      else ""))
    original_answer = target.target_answer
    custom = st.text_input("Target answer the attacker wants", value=original_answer, key=f"lab_custom_{target.query_id}",
                           help="Change it to make the poisons assert your own false answer (the payloads' answer "
                                "is substituted).")
    target = L.retarget(target, custom)
    st.caption(f"Correct answer: {md(', '.join(target.correct_answers) or 'n/a')} · the attacker wants: "
               f"**{md(target.target_answer)}**")

    families = L.lab_families()
    c1, c2, c3 = st.columns([2, 2, 1])
    if class_mode:
        family, volume, seed = L.CLASS_MODE["family"], L.CLASS_MODE["volume"], 0
        c1.caption(f"Class mode: family {md(family)}, {volume:d} poisons from the dataset")
    else:
        family = c1.selectbox("Attack family", families, key="lab_family")
        volume = c2.slider("Injection volume (poisons)", 1, 20, 5, key="lab_volume")
        seed = c3.number_input("Seed", 0, 10_000, 0, key="lab_seed")
    st.caption(md(FAMILY_HELP.get(family) or L.family_summary(family)))
    in_file = family in ds.attack_families() and any(r.query_id == target.query_id for r in ds.attack_records(family))
    b1, b2 = st.columns(2)
    sandbox_key = "lab_sandbox"
    box_id = (family, target.query_id, target.target_answer)

    def load_dataset_poisons() -> None:
        docs = L.retarget_documents(L.dataset_poisons(ds, family, target, volume), original_answer,
                                    target.target_answer)
        st.session_state[sandbox_key] = {"id": box_id, "family": family, "qid": target.query_id, "docs": docs,
                                         "stats": {}}

    if class_mode and in_file and (st.session_state.get(sandbox_key) or {}).get("id") != box_id:
        load_dataset_poisons()
    if not class_mode and b1.button("Generate poisons", type="primary", key="lab_generate"):
        with st.status(f"Generating {volume:d} {md(family)} poisons…", expanded=False) as status:
            t0 = time.perf_counter()
            docs, stats = L.lab_poisons(family, target, state.resources(), volume=volume, seed=int(seed))
            status.update(label=f"Generated {len(docs):d} poisons in {time.perf_counter() - t0:.1f} s", state="complete")
        st.session_state[sandbox_key] = {"id": box_id, "family": family, "qid": target.query_id, "docs": docs,
                                         "stats": stats}
    if in_file and not class_mode and b2.button("Load the dataset's poisons", key="lab_load"):
        load_dataset_poisons()
    box = st.session_state.get(sandbox_key)
    if not box or box["id"] != box_id:
        st.info("Generate poisons (or load the dataset's own) to start the experiment.")
        st.stop()

    poisons = box["docs"]
    st.write(f"**{len(poisons):d} poison passages** ({md(box['family'])}) — shown verbatim:")
    st.dataframe(pd.DataFrame([{"id": d.id, "text": d.text} for d in poisons]), hide_index=True, width="stretch",
                 column_config={"text": st.column_config.TextColumn("text", width="large"),
                                "id": T.id_column("id", [d.id for d in poisons])})
    if any(L.joined_without_space(d.text, target.query) for d in poisons):
        st.caption(L.JOINED_NOTE)
    with st.expander("Full poison texts"):
        for d in poisons:
            st.caption(md(d.id))
            st.text(d.text)

    exp = state.experiment()
    res = state.resources()
    with st.status("Ranking the question on the clean index and on the poisoned sandbox…", expanded=False) as status:
        clean_r = exp.rank(target.query, condition=S.CLEAN, query_id=target.query_id,
                           correct_answers=target.correct_answers, target_answer=target.target_answer)
        pois_r = L.lab_ranking(exp, target, box["family"], poisons)
        sandbox = L.lab_snapshot(exp, box["family"], poisons)
        status.update(label="Ranked", state="complete")
    st.plotly_chart(F.rank_strip({"clean index": clean_r, "poisoned sandbox": pois_r}), width="stretch")
    ranks = L.poison_ranks(pois_r)
    in_top5 = sum(1 for r in ranks if r <= 5)
    st.metric("poisons in the top-5", f"{in_top5} / {len(poisons)}",
              help="How many poisons the retriever ranks among the 5 passages the generator reads (0 is best "
                   "for the defender). Ranks of the poisons: " + md(", ".join(str(int(r)) for r in ranks[:20])))

    st.subheader("How the defenses respond")
    from sieve.registry import DEFENSES

    if class_mode:
        specs = list(L.CLASS_MODE["defenses"])
    else:   # the selection lives outside the widget too: class mode does not draw it, and it must survive
        offered = [n for n in DEFENSES.names() if n != "none"]
        saved = st.session_state.setdefault("lab_specs", [d for d in S.DEFAULT_DEFENSES if d in offered])
        specs = st.multiselect("Defenses", offered, default=[d for d in saved if d in offered], key="lab_defs",
                               help="Sieve's recommended detector (fusion) and the papers' methods by default. "
                                    "Prepared defenses are kept for this process: the first preparation of a "
                                    "defense takes seconds to a minute, later ones return at once.")
        st.session_state["lab_specs"] = list(specs)
    k_ctx = int(st.session_state["k_ctx"])
    results = {"none": S.prepare(exp, "none").apply(pois_r, res, k_ctx=k_ctx)}
    rows = []
    step_times: dict[str, tuple[float, float]] = {}
    bar = st.progress(0.0, text="Preparing defenses…") if specs else None
    for j, spec in enumerate(specs):
        if bar is not None:
            bar.progress(j / len(specs), text=f"Preparing {md(spec)} ({j + 1:d} of {len(specs):d}; kept for later "
                                              "runs) and applying it to the poisoned ranking…")
        try:
            t_prep = time.perf_counter()
            d = state.lab_defense(spec, box["family"], poisons, sandbox)
            t_apply = time.perf_counter()
            r = d.apply(pois_r, res, k_ctx=k_ctx)
            step_times[spec] = (t_apply - t_prep, time.perf_counter() - t_apply)
        except Exception as e:  # noqa: BLE001
            st.warning(f"{md(spec)}: " + state.friendly(e))
            continue
        results[spec] = r
    if bar is not None:
        bar.empty()
    for name, r in results.items():
        removed = set(r.removed_ids)
        rows.append({"defense": "undefended" if name == "none" else name,
                     "poisons removed": sum(1 for d in poisons if d.id in removed),
                     "clean removed": sum(1 for d in pois_r.documents if d.id in removed and not d.poison),
                     "poisons left in context": sum(1 for d in r.context if d.poison),
                     "fallback": r.fallback_used})
    st.dataframe(pd.DataFrame(rows), hide_index=True, width="stretch")
    if "tris" in specs:
        st.caption("tris here is TRIS L1+L2 (its L3 LLM verifier is off, as on the Query explorer: minutes to "
                   "calibrate and about 20 s per question on 2 CPU cores); select tris_full for L3.")
    if step_times:
        st.caption("Defense steps: " + md(" · ".join(f"{n} prepared in {p:.1f} s, applied in {a:.1f} s"
                                                     for n, (p, a) in step_times.items())))
    st.caption("The context each defense hands to the generator (poisons marked):")
    ctx_tabs = st.tabs([("undefended" if n == "none" else md(n)) for n in results])
    for tab, r in zip(ctx_tabs, results.values()):
        with tab:
            st.dataframe(pd.DataFrame([{"poison": "yes" if d.poison else "", "rank": d.rank, "id": d.id, "text": d.text}
                                       for d in r.context]), hide_index=True, width="stretch",
                         column_config={"text": st.column_config.TextColumn("text", width="large"),
                                        "id": T.id_column("id", [d.id for d in r.context])})

    if st.button("Generate answers (clean, poisoned, defended)", key="lab_answers"):
        ctxs = L.answer_contexts(clean_r, results, k_ctx)
        out: dict = {}
        counts: dict[str, int] = {}
        bar = st.progress(0.0, text="Generating answers (shipped and cached answers return at once; the local "
                                    "model loads only for a new context)…")
        t0 = time.perf_counter()

        def step(j: int, n: int, name: str) -> None:
            bar.progress(j / n, text=f"Answering from the context: {md(name)} ({j + 1:d} of {n:d})…")

        try:
            out = E.generate_answers(res, target.query, ctxs, shipped=shipped, on_step=step, stats=counts)
        except Exception as e:  # noqa: BLE001
            state.show_error("Generation failed", e)
        finally:
            bar.empty()
        if out:
            st.session_state["lab_answer_store"] = (box_id, out, time.perf_counter() - t0, counts)
    ans = st.session_state.get("lab_answer_store")
    if ans and ans[0] == box_id:
        current = L.answer_contexts(clean_r, results, k_ctx)   # only the defenses selected now
        shown = {n: t for n, t in ans[1].items() if n in current}
        verdicts = L.defense_verdicts(shown, target.correct_answers, target.target_answer)
        undefended = shown.get("poisoned, undefended")
        if undefended is not None and not verdicts and not E.answer_verdict(
                undefended, target.correct_answers, target.target_answer).startswith("attack succeeded"):
            st.info("Attack failed: the undefended answer does not give the attacker's target.")
        for name, (kind, line) in verdicts.items():
            show = st.success if kind == "good" else st.warning
            show(f"**{md(name)}**: {md(line)}")
        cols = st.columns(len(shown))
        for col, (name, text) in zip(cols, shown.items()):
            with col:
                st.write(f"**{md(name)}**")
                st.text(text)
                st.caption(E.answer_verdict(text, target.correct_answers, target.target_answer))
        missing = [n for n in current if n not in shown]
        if missing:
            st.caption("Not answered yet (selected after the answers were generated): " + md(", ".join(missing))
                       + " — press Generate answers again.")
        st.caption(f"Answers took {ans[2]:.1f} s; {ans[3].get('shipped', 0):d} of {ans[3].get('answers', 0):d} came "
                   "from the answers shipped with the demo (shipped and cached answers return at once).")
    st.caption("Everything here lives in memory: the sandbox index is a copy, the dataset files are untouched.")
