"""End-to-end: the real dashboard (``streamlit run app.py``) on the bundled demo with the real
packaged models, driven by headless Debian chromium. Every page is opened, must render without
error text, and a screenshot is saved under test-artifacts/screenshots/<page>.png."""
from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from _browser import CHROMEDRIVER, CHROMIUM, chrome, full_shot, streamlit_app

PAGES = ["overview", "corpus", "explorer", "geometry", "tradeoffs", "attack-lab", "alerts"]
BAD_TEXT = ("Traceback", "Something went wrong", "Error:", "StreamlitAPIException")

pytestmark = [pytest.mark.browser, pytest.mark.realmodel]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    if not (Path(CHROMIUM).exists() and Path(CHROMEDRIVER).exists()):
        pytest.skip("chromium/chromedriver not installed (apt-get install chromium chromium-driver; scripts/test.sh does)")
    env = {k: v for k, v in os.environ.items() if not k.startswith("SIEVE_DASHBOARD_")}
    env["SIEVE_DASHBOARD_LEDGER"] = str(tmp_path_factory.mktemp("ledger") / "ledger.sqlite")
    with streamlit_app(env, tmp_path_factory.mktemp("log") / "streamlit.log") as url:
        yield url


@pytest.fixture(scope="module")
def driver(tmp_path_factory):
    with chrome(tmp_path_factory.mktemp("chrome")) as d:
        yield d


def _wait_rendered(driver, timeout: float) -> None:
    """Wait until the script run has finished (the app root's ``data-test-script-state`` is no longer
    initial/running), no spinner is shown, and this holds for a few seconds."""
    from selenium.webdriver.common.by import By

    deadline = time.time() + timeout
    quiet_since = None
    while time.time() < deadline:
        states = [e.get_attribute("data-test-script-state")
                  for e in driver.find_elements(By.CSS_SELECTOR, "[data-test-script-state]")]
        spinners = driver.find_elements(By.CSS_SELECTOR, '[data-testid="stSpinner"]')
        titles = driver.find_elements(By.CSS_SELECTOR, "h1")
        done = states and all(s not in ("initial", "running", "rerunRequested") for s in states)
        if done and titles and not spinners:
            quiet_since = quiet_since or time.time()
            if time.time() - quiet_since > 3:
                return
        else:
            quiet_since = None
        time.sleep(0.5)
    raise TimeoutError("page did not finish rendering")


@pytest.mark.parametrize("name", PAGES)
def test_page_in_browser(server, driver, name):
    from selenium.webdriver.common.by import By

    driver.get(f"{server}/{name}")
    _wait_rendered(driver, timeout=900)
    full_shot(driver, name)
    body = driver.find_element(By.TAG_NAME, "body").text
    assert not driver.find_elements(By.CSS_SELECTOR, '[data-testid="stException"]'), f"exception element on {name}"
    for bad in BAD_TEXT:
        assert bad not in body, f"{bad!r} on page {name}"
    assert driver.find_elements(By.CSS_SELECTOR, "h1"), f"no title on {name}"
