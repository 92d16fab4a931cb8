"""End-to-end: the real dashboard (``streamlit run app.py``) on the bundled demo with the real
packaged models, driven by headless Debian chromium. Every page is opened, must render without
error text, and a screenshot is saved under test-artifacts/screenshots/<page>.png."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from _browser import CHROMEDRIVER, CHROMIUM, chrome, full_shot, streamlit_app, wait_rendered

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




@pytest.mark.parametrize("name", PAGES)
def test_page_in_browser(server, driver, name):
    from selenium.webdriver.common.by import By

    driver.get(f"{server}/{name}")
    wait_rendered(driver, timeout=900)
    full_shot(driver, name)
    body = driver.find_element(By.TAG_NAME, "body").text
    assert not driver.find_elements(By.CSS_SELECTOR, '[data-testid="stException"]'), f"exception element on {name}"
    for bad in BAD_TEXT:
        assert bad not in body, f"{bad!r} on page {name}"
    assert driver.find_elements(By.CSS_SELECTOR, "h1"), f"no title on {name}"
