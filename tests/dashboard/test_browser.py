"""End-to-end: the real dashboard (``streamlit run app.py``) on the bundled demo with the real
packaged models, driven by headless Debian chromium. Every page is opened, must render without
error text, and a screenshot is saved under test-artifacts/screenshots/<page>.png."""
from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from _dashdata import ROOT

CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"
PAGES = ["overview", "corpus", "explorer", "geometry", "tradeoffs", "attack-lab", "alerts"]
SHOTS = ROOT / "test-artifacts" / "screenshots"
BAD_TEXT = ("Traceback", "Something went wrong", "Error:", "StreamlitAPIException")

pytestmark = [pytest.mark.browser, pytest.mark.realmodel]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_health(url: str, proc: subprocess.Popen, timeout: float = 120) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"streamlit exited with {proc.returncode}")
        try:
            with urllib.request.urlopen(url + "/_stcore/health", timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            time.sleep(0.5)
    raise TimeoutError("streamlit did not become healthy")


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    if not (Path(CHROMIUM).exists() and Path(CHROMEDRIVER).exists()):
        pytest.skip("chromium/chromedriver not installed (apt-get install chromium chromium-driver; scripts/test.sh does)")
    port = _free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("SIEVE_DASHBOARD_")}
    env["SIEVE_DASHBOARD_LEDGER"] = str(tmp_path_factory.mktemp("ledger") / "ledger.sqlite")
    log = open(tmp_path_factory.mktemp("log") / "streamlit.log", "w")
    proc = subprocess.Popen([sys.executable, "-m", "streamlit", "run", str(ROOT / "app.py"), "--server.headless", "true",
                             "--server.port", str(port), "--server.address", "127.0.0.1"],
                            cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_health(url, proc)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()


@pytest.fixture(scope="module")
def driver(tmp_path_factory):
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for a in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
              "--disable-background-networking", "--disable-component-update", "--disable-sync", "--no-first-run",
              f"--user-data-dir={tmp_path_factory.mktemp('chrome')}", "--window-size=1500,2200"):
        opts.add_argument(a)
    d = webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=opts)
    d.set_page_load_timeout(120)
    yield d
    d.quit()


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
    SHOTS.mkdir(parents=True, exist_ok=True)
    height = driver.execute_script(
        "const m = document.querySelector('[data-testid=\"stMain\"]') || document.body; return m.scrollHeight;")
    driver.set_window_size(1500, min(max(int(height) + 200, 1200), 6000))
    time.sleep(1.5)
    driver.save_screenshot(str(SHOTS / f"{name}.png"))
    body = driver.find_element(By.TAG_NAME, "body").text
    assert not driver.find_elements(By.CSS_SELECTOR, '[data-testid="stException"]'), f"exception element on {name}"
    for bad in BAD_TEXT:
        assert bad not in body, f"{bad!r} on page {name}"
    assert driver.find_elements(By.CSS_SELECTOR, "h1"), f"no title on {name}"
