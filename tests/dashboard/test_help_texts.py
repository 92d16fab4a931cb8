"""Every metric and evidence label on the Query explorer and Trade-offs pages has help text in plain
words (issue 11 item 5): each ``st.metric`` has ``help``; each column of each table that shows metrics
or evidence carries a help tooltip (or sits in a glossary table of terms and meanings)."""
from __future__ import annotations

import json

from streamlit.testing.v1 import AppTest

from _dashdata import page

TIMEOUT = 180
GLOSSARY_COLUMNS = {"term", "meaning"}


def _column_help(df_el) -> dict[str, str]:
    cfg = json.loads(df_el.proto.columns or "{}")
    return {k: (v or {}).get("help", "") for k, v in cfg.items()}


def _missing_help(at: AppTest, skip: set[str] = frozenset()) -> list[str]:
    missing = [f"metric {m.label!r}" for m in at.metric if not (m.help or "").strip()]
    for i, d in enumerate(at.dataframe):
        cols = [str(c) for c in d.value.columns]
        if set(cols) <= GLOSSARY_COLUMNS | {"value"} and "meaning" in cols:
            continue                                   # a glossary/evidence table: the meaning is a column
        helps = _column_help(d)
        missing += [f"table {i} column {c!r}" for c in cols if c not in skip and not helps.get(c, "").strip()]
    return missing


def test_tradeoffs_every_metric_and_column_has_help(dash_env):
    at = AppTest.from_file(page("4_tradeoffs.py"), default_timeout=TIMEOUT).run()
    assert not at.exception
    assert len(at.metric) == 4 and at.dataframe
    assert _missing_help(at) == []
    for s in at.slider:
        assert s.help, f"slider {s.label!r} explains its direction"
    assert any("removes a passage when its score ≥ this value" in s.label for s in at.slider)


def test_explorer_every_metric_and_evidence_column_has_help(dash_env):
    at = AppTest.from_file(page("2_explorer.py"), default_timeout=TIMEOUT).run()
    at.selectbox(key="x_condition").set_value("pr_b").run()
    assert not at.exception
    # the ranked table (decisions and margins) and the RSQ evidence table; context / decision lists are
    # plain lists of documents whose columns are explained by the ranked table's help
    ranked = at.dataframe[0]
    assert "rsq margin" in ranked.value.columns
    helps = _column_help(ranked)
    assert all(helps.get(c) for c in ranked.value.columns), {c: helps.get(c) for c in ranked.value.columns}
    rsq = next(d for d in at.dataframe if "E_a" in d.value.columns)
    rh = _column_help(rsq)
    for term in ("E_a", "E_i", "E_p", "E_s", "S", "p_a", "p_i", "J", "p_s"):
        assert rh.get(term), term
    assert "margin" in helps["rsq margin"].lower() and "threshold" in helps["rsq margin"]


def test_glossary_terms_say_range_and_direction():
    from sieve.dashboard.runs import METRIC_HELP
    from sieve.experiment.explain import TERMS

    for name, text in {**TERMS, **METRIC_HELP}.items():
        assert len(text) > 30, name
    for name in ("E_a", "E_i", "E_p", "E_s", "D", "p", "p_a", "p_s", "J", "priority"):
        assert "(" in TERMS[name] and ("suspicious" in TERMS[name] or "Higher" in TERMS[name]), name
    for name in ("poison_in_context_rate", "asr", "clean_removal_rate", "clean_acc", "auroc"):
        assert "0–1" in METRIC_HELP[name] and ("better" in METRIC_HELP[name]), name


def test_explorer_shows_the_fusion_evidence_with_help(dash_env):
    """The fused detector's decision is explained in the Decisions tab: each evidence with its value,
    its p-value against clean passages and what it means (sieve/dashboard/glossary.py FUSION_HELP: the
    library's FUSION_TERMS with the dashboard's corrections)."""
    from sieve.dashboard.glossary import FUSION_HELP as FUSION_TERMS
    from sieve.defenses.fusion import EVIDENCE

    assert set(EVIDENCE) | {"p"} <= set(FUSION_TERMS)
    at = AppTest.from_file(page("2_explorer.py"), default_timeout=TIMEOUT).run()
    at.multiselect(key="x_defenses").set_value(["fusion"]).run()
    at.selectbox(key="x_condition").set_value("pr_b").run()
    assert not at.exception
    table = next(d for d in at.dataframe if {"evidence", "p", "meaning"} <= set(d.value.columns))
    assert set(table.value["evidence"]) <= set(FUSION_TERMS) and len(table.value) >= 3
    from sieve.dashboard.tables import as_missing

    assert all(0.0 <= p <= 1.0 for p in as_missing(table.value)["p"].dropna())   # a missing p is shown blank
    helps = _column_help(table)
    assert all(helps.get(c) for c in ("evidence", "value", "p", "meaning")), helps
    decisions = next(d for d in at.dataframe if {"defense", "reason", "margin"} <= set(d.value.columns))
    dh = _column_help(decisions)
    assert all(dh.get(c) for c in decisions.value.columns), dh
