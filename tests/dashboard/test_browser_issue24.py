"""Real-browser checks of issue 24's flows (headless Debian chromium, tiny models, fresh ledger):

* Alerts: after an audit and a decision the alert selector shows the new state (a keyed selectbox
  kept showing the label it was first drawn with: "· open ·" above "state confirmed"), the reason box
  is empty for the next decision, and Export CSV does not clear the message above it
  → test-artifacts/screenshots/alerts-after-confirm.png.
* The newcomer's flow on the demo with the real models (explorer, a second question, a condition
  change, the lab's defaults and verdicts) and the Trade-offs threshold switch on the shipped run.

How long these take is measured by `sieve bench dashboard --browser`, not here.
"""
from __future__ import annotations

import os
import re
import time
from pathlib import Path

import pytest

from _browser import (
    CHROMEDRIVER,
    CHROMIUM,
    body_text,
    button,
    chrome,
    explorer_call_ms,
    full_shot,
    metric_texts,
    select,
    selectbox_text,
    streamlit_app,
    threshold_switch,
    type_into,
    wait_rendered,
)

pytestmark = [pytest.mark.browser]


def test_alerts_label_reason_box_and_export_in_browser(tiny_server):
    from selenium.webdriver.common.by import By

    url, driver = tiny_server
    driver.get(f"{url}/alerts")
    wait_rendered(driver, timeout=300)
    assert "Audit and record flags" in body_text(driver), "an empty ledger shows the audit box open"
    select(driver, "Snapshot", "pr_b")
    wait_rendered(driver, timeout=300)
    button(driver, "Audit and record flags").click()
    wait_rendered(driver, timeout=300)
    assert "new alerts" in body_text(driver)
    button(driver, "Export CSV").click()
    time.sleep(2)
    wait_rendered(driver, timeout=120)
    assert "new alerts" in body_text(driver), "exporting does not clear the message"

    before = selectbox_text(driver, "Alert")
    assert "· open ·" in before, before
    doc = before.split(" · ")[0].strip()
    type_into(driver, "Reason for the decision", "poison, checked by hand")
    wait_rendered(driver, timeout=120)
    button(driver, "Confirm (keep quarantined)").click()
    wait_rendered(driver, timeout=120)
    after = selectbox_text(driver, "Alert")
    assert after.startswith(doc) and "· confirmed ·" in after and "· open ·" not in after, after
    assert "state confirmed" in body_text(driver)
    reason = driver.find_element(By.CSS_SELECTOR, 'input[aria-label="Reason for the decision"]')
    assert reason.get_attribute("value") == "", "the confirm reason does not carry over to a rollback"
    full_shot(driver, "alerts-after-confirm")


# ---- real models on the demo: the newcomer's flow (issue 24 "Must show") ---------------------------
def _explorer_call(body: str) -> int:
    ms = explorer_call_ms(body)
    assert ms is not None, "the explorer shows its call time under the ranking"
    return ms


def _top20_poisons(body: str) -> int:
    m = re.search(r"Top-20 holds (\d+) poison\(s\)", body)
    assert m, "the explorer says how many poisons the top 20 holds"
    return int(m.group(1))


@pytest.mark.realmodel
def test_newcomer_flow_on_the_demo(tmp_path):
    """A fresh server on the demo, clicked as a newcomer does: the explorer's first visit answers the first
    target question on the clean corpus (its gold answer shown, no poison in the top 20, a call time, fusion
    among the defaults), a second question shows that question's answer, pr_b brings poisons into its top
    20, and the lab's dataset poisons get each default defense prepared and a verdict line per defended
    answer. How long each step takes is `sieve bench dashboard --browser`'s job."""
    from _dashdata import ROOT
    from sieve.corpus import load_dataset
    from sieve.dashboard.session import DEFAULT_DEFENSES

    if not (Path(CHROMIUM).exists() and Path(CHROMEDRIVER).exists()):
        pytest.skip("chromium/chromedriver not installed")
    first, second = load_dataset(ROOT / "demo_data").targets[:2]
    env = {k: v for k, v in os.environ.items() if not k.startswith("SIEVE_DASHBOARD_")}
    env["SIEVE_DASHBOARD_LEDGER"] = str(tmp_path / "ledger.sqlite")
    with streamlit_app(env, tmp_path / "streamlit.log") as url, chrome(tmp_path / "chrome") as driver:
        driver.get(f"{url}/explorer")
        wait_rendered(driver, timeout=900)
        body = body_text(driver)
        _explorer_call(body)
        assert selectbox_text(driver, "Question").startswith(first.query_id)
        assert f"Correct answer: {', '.join(first.correct_answers)}" in body
        assert _top20_poisons(body) == 0, "the first visit is on the clean corpus"
        assert "fusion" in body, "the explorer's defaults include fusion"
        full_shot(driver, "explorer-first-query-fusion")
        driver.set_window_size(1500, 2200)

        select(driver, "Question", f"{second.query_id} —")
        wait_rendered(driver, timeout=300)
        body = body_text(driver)
        _explorer_call(body)
        assert f"Correct answer: {', '.join(second.correct_answers)}" in body
        assert f"Correct answer: {', '.join(first.correct_answers)}" not in body

        select(driver, "Attack condition", "pr_b")
        wait_rendered(driver, timeout=300)
        body = body_text(driver)
        _explorer_call(body)
        assert _top20_poisons(body) > 0, "pr_b's poisons for this target rank in its top 20"

        driver.get(f"{url}/attack-lab")
        wait_rendered(driver, timeout=900)
        button(driver, "Load the dataset's poisons").click()
        wait_rendered(driver, timeout=900)
        steps = re.search(r"Defense steps: (.*)", body_text(driver))
        assert steps, "the lab lists the defense steps it ran"
        assert [n for n in DEFAULT_DEFENSES if f"{n} prepared in " not in steps.group(1)] == [], steps.group(1)
        button(driver, "Generate answers (clean, poisoned, defended)").click()
        wait_rendered(driver, timeout=900)
        full_shot(driver, "attack-lab-defaults-verdicts")
        body = body_text(driver)
        verdict = r"(answer restored|still poisoned|answer lost|attack failed)"
        missing = [n for n in DEFAULT_DEFENSES if not re.search(rf"poisoned \+ {n}: {verdict}", body)]
        assert missing == [], f"no verdict line for {missing}"


# ---- Trade-offs on the shipped demo run (no model is loaded by this page) --------------------------
def test_tradeoffs_small_n_no_delta_and_threshold_rerun_in_browser(tmp_path):
    """Switching RSQ's threshold off on the n = 6 demo run: every metric names its n, the switch moves RSQ's
    metrics, the ASR card shows no delta from the handful of answered queries (the page says so), and the
    reset button restores the recorded values → test-artifacts/screenshots/tradeoffs-small-n.png. (The
    rerun's time: `sieve bench dashboard --browser`.)"""
    from selenium.webdriver.common.by import By

    if not (Path(CHROMIUM).exists() and Path(CHROMEDRIVER).exists()):
        pytest.skip("chromium/chromedriver not installed")

    env = {k: v for k, v in os.environ.items() if not k.startswith("SIEVE_DASHBOARD_")}
    env["SIEVE_DASHBOARD_LEDGER"] = str(tmp_path / "ledger.sqlite")
    with streamlit_app(env, tmp_path / "streamlit.log") as url, chrome(tmp_path / "chrome") as driver:
        driver.get(f"{url}/tradeoffs")
        wait_rendered(driver, timeout=600)
        select(driver, "Defense", "rsq")
        wait_rendered(driver, timeout=300)
        select(driver, "Attack", "pr_b")
        wait_rendered(driver, timeout=300)
        labels = [e.text for e in driver.find_elements(By.CSS_SELECTOR, '[data-testid="stMetricLabel"]')]
        assert labels and all(" · n = " in t for t in labels), labels
        recorded = metric_texts(driver)
        assert not driver.find_elements(By.CSS_SELECTOR, '[data-testid="stMetricDelta"]'), "recorded values: no delta"
        threshold_switch(driver, "rsq").click()   # off = this threshold removes nothing: every RSQ metric moves
        wait_rendered(driver, timeout=300)
        moved = metric_texts(driver)
        assert len(moved) == len(recorded) and moved != recorded, "switching the threshold off moves the metrics"
        for m in driver.find_elements(By.CSS_SELECTOR, '[data-testid="stMetric"]'):
            n = int(re.search(r"n = (\d+)", m.text).group(1))
            if m.find_elements(By.CSS_SELECTOR, '[data-testid="stMetricDelta"]'):
                assert n >= 5, f"a delta from n = {n}: {m.text!r}"
        assert "`" not in body_text(driver), "no literal markdown"
        full_shot(driver, "tradeoffs-small-n")
        driver.set_window_size(1500, 2200)
        button(driver, "Reset to the run's thresholds").click()
        wait_rendered(driver, timeout=300)
        assert not driver.find_elements(By.CSS_SELECTOR, '[data-testid="stMetricDelta"]'), "reset: recorded values"
        assert metric_texts(driver) == recorded, "reset restores the recorded values"
