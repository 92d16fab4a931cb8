"""Real-browser checks of issue 24's remaining view items (headless Debian chromium, tiny models, a
fresh ledger per test), each with a screenshot under test-artifacts/screenshots/:

* your own corpus: upload a 3-document .jsonl on *Corpus & index* → a success message and the sidebar
  names the upload; the *Query explorer* (reached by its navigation link, same session) offers typed
  queries only, says in a visible error that fusion cannot run and how to fix it, and after the analyst
  types clean questions and presses Calibrate fusion runs; the answers are not called "neither correct
  nor the target" → upload-own-corpus.png;
* Geometry after an audit: the corpus map's legend names the documents the ledger excludes, and the
  sidebar shows the condition picked on this run (not the previous one) → geometry-ledger-marks.png;
* Query explorer: the ranking's fusion/rsq margin cells of not-examined documents are blank, the
  anchors shown are whole words → explorer-blank-margins.png.
"""
from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from _browser import (
    CHROMEDRIVER,
    CHROMIUM,
    body_text,
    button,
    chrome,
    full_shot,
    select,
    streamlit_app,
    type_into,
    wait_rendered,
)

pytestmark = [pytest.mark.browser]


def _nav(driver, path: str) -> None:
    """Follow the sidebar's navigation link to ``/path`` (the same session, unlike driver.get)."""
    from selenium.webdriver.common.by import By

    link = next(a for a in driver.find_elements(By.CSS_SELECTOR, '[data-testid="stSidebarNav"] a')
                if (a.get_attribute("href") or "").rstrip("/").endswith("/" + path))
    link.click()
    time.sleep(0.5)
    wait_rendered(driver, timeout=300)


def _alerts(driver) -> list[str]:
    from selenium.webdriver.common.by import By

    return [e.text for e in driver.find_elements(By.CSS_SELECTOR, '[data-testid="stAlert"]')]


def _sidebar(driver) -> str:
    from selenium.webdriver.common.by import By

    return driver.find_element(By.CSS_SELECTOR, '[data-testid="stSidebar"]').text


def _radio(driver, option: str) -> None:
    from selenium.webdriver.common.by import By

    label = next(e for e in driver.find_elements(By.CSS_SELECTOR, '[data-testid="stRadio"] label')
                 if e.text.strip() == option)
    label.click()
    time.sleep(0.5)
    wait_rendered(driver, timeout=300)


UPLOAD = [{"id": "mine-0", "title": "Rivers", "text": "The Amazon river flows through Brazil and Peru into the Atlantic."},
          {"id": "mine-1", "title": "Coffee", "text": "Coffee was first domesticated in Ethiopia, the legend of Kaldi says."},
          {"id": "mine-2", "title": "Chess", "text": "In chess the knight moves in an L shape and can jump over pieces."}]


def test_upload_switches_every_page_and_a_failing_defense_says_how_to_fix_it(tiny_server, tmp_path):
    from selenium.webdriver.common.by import By

    from sieve.dashboard.explorer import NO_GOLD_VERDICT

    url, driver = tiny_server
    corpus = tmp_path / "mine.jsonl"
    corpus.write_text("".join(json.dumps(r) + "\n" for r in UPLOAD), encoding="utf-8")
    driver.get(f"{url}/corpus")
    wait_rendered(driver, timeout=300)
    _radio(driver, "Upload a corpus file")
    driver.find_element(By.CSS_SELECTOR, '[data-testid="stFileUploader"] input[type="file"]').send_keys(str(corpus))
    time.sleep(1.5)
    wait_rendered(driver, timeout=120)
    button(driver, "Load upload").click()
    time.sleep(0.5)
    wait_rendered(driver, timeout=300)
    assert any("Loaded mine.jsonl: 3 documents, 0 questions" in a for a in _alerts(driver)), _alerts(driver)
    assert "upload: mine" in _sidebar(driver), _sidebar(driver)
    assert "Record these" not in body_text(driver), "no 'Record these flags' with 0 flags"
    assert "nothing to record in the quarantine ledger" in body_text(driver)
    full_shot(driver, "upload-corpus-loaded")
    driver.set_window_size(1500, 2200)

    _nav(driver, "explorer")
    body = body_text(driver)
    assert "Pick a question" not in body and "Type a query" in body
    errors = [a for a in _alerts(driver) if "cannot run on this corpus" in a]
    assert any(a.startswith("fusion cannot run on this corpus") and "Calibrate" in a for a in errors), _alerts(driver)
    box = driver.find_element(By.CSS_SELECTOR, 'input[aria-label="Your query"]')
    assert box.get_attribute("value") == "", "no demo query carried over"
    type_into(driver, "Your query", "Where does the Amazon river flow?")
    wait_rendered(driver, timeout=300)
    type_into(driver, "Clean questions (one per line)",
              "What was first domesticated in Ethiopia?\nHow does the knight move in chess?", tag="textarea")
    wait_rendered(driver, timeout=120)
    button(driver, "Calibrate").click()
    time.sleep(0.5)
    wait_rendered(driver, timeout=300)
    assert not [a for a in _alerts(driver) if "cannot run on this corpus" in a], _alerts(driver)
    assert "fusion — 0 poison(s) in context" in body_text(driver)
    button(driver, "Generate answers").click()
    time.sleep(0.5)
    wait_rendered(driver, timeout=300)
    body = body_text(driver)
    assert NO_GOLD_VERDICT in body and "neither correct nor the target" not in body
    full_shot(driver, "upload-own-corpus")
    driver.set_window_size(1500, 2200)
    _nav(driver, "geometry")
    assert "upload: " in _sidebar(driver) and "Where does the Amazon river flow?" in (
        driver.find_element(By.CSS_SELECTOR, 'input[aria-label="Query (shared with the Query explorer)"]')
        .get_attribute("value") or "")


def test_geometry_marks_the_ledger_and_the_sidebar_keeps_up(tiny_server):
    url, driver = tiny_server
    driver.get(f"{url}/alerts")
    wait_rendered(driver, timeout=300)
    select(driver, "Snapshot", "pr_b")
    wait_rendered(driver, timeout=300)
    button(driver, "Audit and record flags").click()
    time.sleep(0.5)
    wait_rendered(driver, timeout=300)
    assert "new alerts" in body_text(driver)
    _nav(driver, "geometry")
    assert "Condition: clean" in _sidebar(driver)
    select(driver, "Attack condition", "pr_b")
    time.sleep(0.5)
    wait_rendered(driver, timeout=300)
    assert "Condition: pr_b" in _sidebar(driver), "the sidebar shows the condition of this run, not the last one"
    body = body_text(driver)
    assert "ledger: excluded (open alert)" in body, "the corpus map's legend names the excluded documents"
    assert "Quarantine is active" in body
    full_shot(driver, "geometry-ledger-marks")


def test_explorer_margins_blank_and_l1_note(tiny_server):
    url, driver = tiny_server
    driver.get(f"{url}/explorer")
    wait_rendered(driver, timeout=600)
    select(driver, "Attack condition", "pr_b")
    time.sleep(0.5)
    wait_rendered(driver, timeout=300)
    assert "Condition: pr_b" in _sidebar(driver)
    body = body_text(driver)
    assert "blank where the defense did not examine the passage" in body
    if "removed (L1)" in body or "Layer 1 removed" in body:
        assert "By design, TRIS L1 keeps only the largest K-Means cluster" in body
    full_shot(driver, "explorer-blank-margins")
    driver.set_window_size(1500, 2200)
    from selenium.webdriver.common.by import By

    tab = next(t for t in driver.find_elements(By.CSS_SELECTOR, '[role="tab"]')
               if (t.get_attribute("textContent") or "").strip() == "Surprisal trace")
    driver.execute_script("arguments[0].scrollIntoView({block: 'center'});", tab)
    tab.click()
    time.sleep(2)
    body = body_text(driver)
    assert "Shaded band: the burst window" in body
    assert "— surprisal trace (R =" in body, "the plot names the document it shows"
    full_shot(driver, "explorer-surprisal-named")


@pytest.mark.realmodel
def test_tris_l1_note_on_the_demo_apollo_question(tmp_path):
    """Real models on the demo: the clean Apollo question, where TRIS L1 removes the top ranks by design;
    the note beside the result gives the shipped run's clean removal (read from its summary here too)
    → test-artifacts/screenshots/explorer-tris-l1-by-design.png."""
    from _dashdata import ROOT
    from sieve.dashboard.runs import clean_cost
    from sieve.evaluation.records import read_summary

    if not (Path(CHROMIUM).exists() and Path(CHROMEDRIVER).exists()):
        pytest.skip("chromium/chromedriver not installed")
    cost = clean_cost(read_summary(ROOT / "demo_data" / "runs" / "demo"), "tris")
    assert cost is not None
    env = {k: v for k, v in os.environ.items() if not k.startswith("SIEVE_DASHBOARD_")}
    env["SIEVE_DASHBOARD_LEDGER"] = str(tmp_path / "ledger.sqlite")
    with streamlit_app(env, tmp_path / "streamlit.log") as url, chrome(tmp_path / "chrome") as driver:
        driver.get(f"{url}/explorer")
        wait_rendered(driver, timeout=1200)
        select(driver, "Question", "q-apollo-program-2 —")
        time.sleep(0.5)
        wait_rendered(driver, timeout=900)
        body = body_text(driver)
        assert "Layer 1 removed" in body and "By design, TRIS L1" in body
        assert f"removes {cost['clean_removal_rate']:.2f} of the clean passages it examines" in body, body[:3000]
        full_shot(driver, "explorer-tris-l1-by-design")


def test_overview_run_table_on_the_demo(tmp_path):
    """The demo's Overview (no model is loaded): the run table names its run relative to the project,
    reads 'latency p50 (ms)', and fusion's row from the detection run follows it
    → test-artifacts/screenshots/overview-run-table.png."""
    from _dashdata import ROOT

    if not (Path(CHROMIUM).exists() and Path(CHROMEDRIVER).exists()):
        pytest.skip("chromium/chromedriver not installed")
    env = {k: v for k, v in os.environ.items() if not k.startswith("SIEVE_DASHBOARD_")}
    env["SIEVE_DASHBOARD_LEDGER"] = str(tmp_path / "ledger.sqlite")
    with streamlit_app(env, tmp_path / "streamlit.log") as url, chrome(tmp_path / "chrome") as driver:
        driver.get(f"{url}/overview")
        wait_rendered(driver, timeout=600)
        body = body_text(driver)
        assert "Sieve's recommended fusion, from the detection run demo_data/runs/demo-nollm" in body
        assert str(ROOT) not in body, "no absolute server path"
        assert "3. Your own corpus" in body or "Your own corpus" in body
        full_shot(driver, "overview-run-table")
