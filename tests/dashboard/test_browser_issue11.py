"""Real-browser screenshots of the issue-11 flows fixed last (headless Debian chromium):

* Query explorer, tiny models: an alert that was confirmed and then rolled back — the document's
  ledger state and rsg_rsq's reason use the ledger's one wording ("restored (quarantine rolled
  back)") → test-artifacts/screenshots/explorer-rolled-back.png;
* Attack lab, real models on the demo: class mode on a question the clean pipeline answers correctly
  (shipped, checked answers), "Generate answers" → the undefended answer flips, TRIS L2's does not
  → test-artifacts/screenshots/attack-lab-class-mode.png.
"""
from __future__ import annotations

import os
import re
import time
from pathlib import Path

import pytest

from _browser import CHROMEDRIVER, CHROMIUM, SHOTS, chrome, full_shot, select, streamlit_app, wait_rendered
from _dashdata import write_tiny_dataset, write_tiny_run

pytestmark = [pytest.mark.browser]


def _need_chromium() -> None:
    if not (Path(CHROMIUM).exists() and Path(CHROMEDRIVER).exists()):
        pytest.skip("chromium/chromedriver not installed (apt-get install chromium chromium-driver)")


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    _need_chromium()
    with chrome(tmp_path_factory.mktemp("chrome-issue11")) as d:
        yield d




def _full_shot(driver, name: str) -> None:
    full_shot(driver, name)
    driver.set_window_size(1500, 2200)


def test_explorer_rolled_back_alert_reads_restored(tmp_path_factory, browser):
    from selenium.webdriver.common.by import By

    from sieve.ledger import Flag, Ledger

    _need_chromium()
    tmp = tmp_path_factory.mktemp("rolled-back")
    ds = write_tiny_dataset(tmp / "ds")
    run = write_tiny_run(ds, tmp / "run")
    ledger = tmp / "ledger.sqlite"
    with Ledger(ledger) as led:
        led.add_flags([Flag("attack:pr_b:q-chess:1", "h", 1.0, 0.5, {"branch": "integrity"}, "mixed scripts")],
                      detector="rsg", corpus_id="pr_b", corpus_hash="x", index_version="y")
        a = led.alerts()[0]
        led.transition(a.alert_id, "confirmed", "t", "poison")
        led.transition(a.alert_id, "rolled_back", "t", "restored for the screenshot")
    env = {k: v for k, v in os.environ.items() if not k.startswith("SIEVE_DASHBOARD_")}
    env.update(SIEVE_DASHBOARD_TINY="1", SIEVE_DASHBOARD_DATASET=str(ds), SIEVE_DASHBOARD_RUN=str(run),
               SIEVE_DASHBOARD_LEDGER=str(ledger))
    with streamlit_app(env, tmp / "streamlit.log") as url:
        browser.get(f"{url}/explorer")
        wait_rendered(browser, timeout=300)
        select(browser, "Attack condition", "pr_b")
        wait_rendered(browser, timeout=300)
        select(browser, "Question", "q-chess")
        wait_rendered(browser, timeout=300)
        select(browser, "Document", "attack:pr_b:q-chess:1")
        wait_rendered(browser, timeout=300)
        tab = next(t for t in browser.find_elements(By.CSS_SELECTOR, '[role="tab"]') if t.text.strip() == "Decisions")
        tab.click()
        time.sleep(2)
        body = browser.find_element(By.TAG_NAME, "body").text
        assert "Quarantine ledger: restored (quarantine rolled back)" in body
        assert "Quarantine is active" not in body, "a rolled-back alert excludes nothing"
        doc = browser.find_element(By.XPATH, "//*[starts-with(normalize-space(.), 'Quarantine ledger:')]")
        browser.execute_script("arguments[0].scrollIntoView({block: 'start'});", doc)
        time.sleep(1)
        SHOTS.mkdir(parents=True, exist_ok=True)
        browser.save_screenshot(str(SHOTS / "explorer-rolled-back.png"))


@pytest.mark.realmodel
def test_attack_lab_class_mode_flips_in_browser(tmp_path_factory, browser):
    from selenium.webdriver.common.by import By

    _need_chromium()
    tmp = tmp_path_factory.mktemp("class-mode")
    env = {k: v for k, v in os.environ.items() if not k.startswith("SIEVE_DASHBOARD_")}
    env["SIEVE_DASHBOARD_LEDGER"] = str(tmp / "ledger.sqlite")
    with streamlit_app(env, tmp / "streamlit.log") as url:
        browser.get(f"{url}/attack-lab")      # a deep link as the very first visit (a teacher's shared link)
        wait_rendered(browser, timeout=600)
        assert "Page not found" not in browser.find_element(By.TAG_NAME, "body").text
        toggle = next(e for e in browser.find_elements(By.CSS_SELECTOR, '[data-testid="stCheckbox"] label')
                      if "Class mode" in e.text)
        toggle.click()
        wait_rendered(browser, timeout=600)
        btn = next(b for b in browser.find_elements(By.TAG_NAME, "button")
                   if "Generate answers (clean, poisoned, defended)" in b.text)
        btn.click()
        wait_rendered(browser, timeout=600)
        body = browser.find_element(By.TAG_NAME, "body").text
        assert "✓ The clean pipeline answers correctly" in body
        assert "in class mode the undefended answer flips to the target" in body
        assert "attack succeeded (asserts the target answer)" in body
        assert body.count("\ncorrect\n") >= 1, "the clean (and defended) answer is correct"
        _full_shot(browser, "attack-lab-class-mode")
        shipped = re.search(r"(\d+) of (\d+) came from the answers shipped with the demo", body)
        assert shipped and int(shipped.group(2)) >= 3 and shipped.group(1) == shipped.group(2), \
            "every class-mode answer comes from the shipped file (the generator is never needed)"
