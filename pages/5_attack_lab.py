"""Attack lab (classroom): poison one question in a sandbox copy of the index and watch the ranks,
the undefended answer and each defense respond. The demo files are never modified."""
import pandas as pd
import streamlit as st

from sieve.dashboard import figures as F
from sieve.dashboard import explorer as E
from sieve.dashboard import lab as L
from sieve.dashboard import session as S
from sieve.experiment import prepare_defense
from sieve.dashboard import state
from sieve.dashboard.safe import snippet
from sieve.types import Target

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
    if ds.targets:
        labels = {t.query_id: f"{t.query_id} — {snippet(t.query, 80)}" for t in ds.targets}
        qid = st.selectbox("Question to attack", list(labels), format_func=lambda q: labels[q], key="lab_target")
        target = ds.targets_by_query[qid]
    else:
        st.info("This dataset has no targets.jsonl; describe a target by hand.")
        q = st.text_input("Question", key="lab_q")
        ta = st.text_input("False target answer", key="lab_ta")
        payload = st.text_area("Poison passage asserting the target answer", key="lab_payload")
        if not (q.strip() and ta.strip() and payload.strip()):
            st.stop()
        target = Target("lab-q", q, (), ta, (payload,))
    st.caption(f"Correct answer: {', '.join(target.correct_answers) or 'n/a'} · the attacker wants: **{target.target_answer}**")

    families = L.lab_families()
    c1, c2, c3 = st.columns([2, 2, 1])
    family = c1.selectbox("Attack family", families, key="lab_family")
    volume = c2.slider("Injection volume (poisons)", 1, 20, 5, key="lab_volume")
    seed = c3.number_input("Seed", 0, 10_000, 0, key="lab_seed")
    st.caption(FAMILY_HELP.get(family, ""))
    in_file = family in ds.attack_families() and any(r.query_id == target.query_id for r in ds.attack_records(family))
    b1, b2 = st.columns(2)
    sandbox_key = "lab_sandbox"
    if b1.button("Generate poisons", type="primary", key="lab_generate"):
        with st.spinner(f"Generating {volume} {family} poisons…"):
            docs, stats = L.lab_poisons(family, target, state.resources(), volume=volume, seed=int(seed))
        st.session_state[sandbox_key] = {"family": family, "qid": target.query_id, "docs": docs, "stats": stats}
    if in_file and b2.button("Load the dataset's poisons", key="lab_load"):
        rec = next(r for r in ds.attack_records(family) if r.query_id == target.query_id)
        from sieve.types import Document

        docs = [Document(f"lab:{d.id}", d.text, d.title, True, dict(d.metadata)) for d in rec.documents[:volume]]
        st.session_state[sandbox_key] = {"family": family, "qid": target.query_id, "docs": docs, "stats": {}}
    box = st.session_state.get(sandbox_key)
    if not box or box["qid"] != target.query_id:
        st.info("Generate poisons (or load the dataset's own) to start the experiment.")
        st.stop()

    poisons = box["docs"]
    st.write(f"**{len(poisons)} poison passages** ({box['family']}) — shown verbatim:")
    st.dataframe(pd.DataFrame([{"id": d.id, "text": d.text} for d in poisons]), hide_index=True, width="stretch")

    exp = state.experiment()
    res = state.resources()
    clean_r = exp.rank(target.query, condition=S.CLEAN, query_id=target.query_id,
                       correct_answers=target.correct_answers, target_answer=target.target_answer)
    pois_r = L.lab_ranking(exp, target, box["family"], poisons)
    sandbox = L.lab_snapshot(exp, box["family"], poisons)
    st.plotly_chart(F.rank_strip({"clean index": clean_r, "poisoned sandbox": pois_r}), width="stretch")
    ranks = L.poison_ranks(pois_r)
    in_top5 = sum(1 for r in ranks if r <= 5)
    st.metric("poisons in the top-5", f"{in_top5} / {len(poisons)}",
              help="ranks of the poisons in the sandbox: " + ", ".join(map(str, ranks[:20])))

    st.subheader("How the defenses respond")
    from sieve.registry import DEFENSES

    specs = st.multiselect("Defenses", [n for n in DEFENSES.names() if n != "none"],
                           default=[d for d in ("tris", "rsq", "rsg_rsq") if d in DEFENSES.names()], key="lab_defs")
    k_ctx = int(st.session_state["k_ctx"])
    results = {"none": prepare_defense(exp, "none").apply(pois_r, res, k_ctx=k_ctx)}
    rows = []
    for spec in specs:
        try:
            d = prepare_defense(exp, spec, snapshot=sandbox, calibration=state.calibration(),
                                clean_limit=S.DASHBOARD_CALIBRATION_QUERIES)
            r = d.apply(pois_r, res, k_ctx=k_ctx)
        except Exception as e:  # noqa: BLE001
            st.warning(f"{spec}: {state.friendly(e)}")
            continue
        results[spec] = r
    for name, r in results.items():
        removed = set(r.removed_ids)
        rows.append({"defense": "undefended" if name == "none" else name,
                     "poisons removed": sum(1 for d in poisons if d.id in removed),
                     "clean removed": sum(1 for d in pois_r.documents if d.id in removed and not d.poison),
                     "poisons left in context": sum(1 for d in r.context if d.poison),
                     "fallback": r.fallback_used})
    st.dataframe(pd.DataFrame(rows), hide_index=True, width="stretch")

    if st.button("Generate answers (clean, poisoned, defended)", key="lab_answers"):
        with st.spinner("Generating answers with the local model…"):
            try:
                ctxs = {"clean index": [d.text for d in clean_r.top(k_ctx)]}
                ctxs.update({("poisoned, undefended" if n == "none" else f"poisoned + {n}"): [d.text for d in r.context]
                             for n, r in results.items()})
                st.session_state["lab_answer_store"] = (box["family"], target.query_id,
                                                   E.generate_answers(res, target.query, ctxs))
            except Exception as e:  # noqa: BLE001
                state.show_error("Generation failed", e)
    ans = st.session_state.get("lab_answer_store")
    if ans and ans[0] == box["family"] and ans[1] == target.query_id:
        cols = st.columns(len(ans[2]))
        for col, (name, text) in zip(cols, ans[2].items()):
            with col:
                st.write(f"**{name}**")
                st.text(text)
                st.caption(E.answer_verdict(text, target.correct_answers, target.target_answer))
    st.caption("Everything here lives in memory: the sandbox index is a copy, the dataset files are untouched.")
