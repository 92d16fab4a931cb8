"""Driving the dashboard in a real browser: a ``streamlit run app.py`` process on a free localhost port,
a headless Debian chromium driven by selenium, the page-wait (:func:`wait_rendered`) and the widget
helpers. Used by ``sieve bench dashboard --browser`` (:mod:`sieve.dashboard.bench`) and by the
browser tests (tests/dashboard/_browser.py adds what only the tests need).

selenium is imported inside the functions: it is a test/bench tool, not a dependency of the dashboard.
"""
from __future__ import annotations

import importlib.util
import re
import socket
import subprocess
import sys
import time
import urllib.request
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"
#: Seconds the page must stay finished (no script run, no spinner) before :func:`wait_rendered` returns.
QUIET_S = 3.0


def missing() -> str | None:
    """What is missing to drive a browser (one line), or None when chromium, chromedriver and selenium are there."""
    gone = [p for p in (CHROMIUM, CHROMEDRIVER) if not Path(p).exists()]
    if importlib.util.find_spec("selenium") is None:
        gone.append("the selenium package")
    if not gone:
        return None
    return ("missing " + ", ".join(gone) + " (apt-get install chromium chromium-driver; "
            "pip install -e '.[test]' for selenium)")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_health(url: str, proc: subprocess.Popen, timeout: float = 120) -> None:
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


@contextmanager
def streamlit_app(env: dict[str, str], log_path: Path, root: Path) -> Iterator[str]:
    """``root``/app.py served on 127.0.0.1 with ``env`` (cwd ``root``); yields its URL once healthy, stops it after."""
    port = free_port()
    with open(log_path, "w") as log:
        proc = subprocess.Popen([sys.executable, "-m", "streamlit", "run", str(Path(root) / "app.py"),
                                 "--server.headless", "true", "--server.port", str(port),
                                 "--server.address", "127.0.0.1"],
                                cwd=root, env=env, stdout=log, stderr=subprocess.STDOUT)
        url = f"http://127.0.0.1:{port}"
        try:
            wait_health(url, proc)
            yield url
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()


@contextmanager
def chrome(user_data_dir: Path) -> Iterator[Any]:
    """A headless chromium (selenium) with the machine's closed-network flags."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for a in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
              "--disable-background-networking", "--disable-component-update", "--disable-sync", "--no-first-run",
              f"--user-data-dir={user_data_dir}", "--window-size=1500,2200"):
        opts.add_argument(a)
    d = webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=opts)
    d.set_page_load_timeout(120)
    try:
        yield d
    finally:
        d.quit()


def wait_rendered(driver: Any, timeout: float, poll: float = 0.5) -> float:
    """Wait until the script run has finished (the app root's ``data-test-script-state`` is no longer
    initial/running), no spinner is shown, and this holds for :data:`QUIET_S` seconds. Returns the
    ``time.perf_counter()`` at which the page was first seen finished (the start of that quiet spell)."""
    from selenium.webdriver.common.by import By

    deadline = time.perf_counter() + timeout
    quiet_since = None
    while time.perf_counter() < deadline:
        states = [e.get_attribute("data-test-script-state")
                  for e in driver.find_elements(By.CSS_SELECTOR, "[data-test-script-state]")]
        spinners = driver.find_elements(By.CSS_SELECTOR, '[data-testid="stSpinner"]')
        titles = driver.find_elements(By.CSS_SELECTOR, "h1")
        done = states and all(s not in ("initial", "running", "rerunRequested") for s in states)
        now = time.perf_counter()
        if done and titles and not spinners:
            quiet_since = quiet_since or now
            if now - quiet_since > QUIET_S:
                return quiet_since
        else:
            quiet_since = None
        time.sleep(poll)
    raise TimeoutError("page did not finish rendering")


def select(driver: Any, label: str, option_text: str) -> None:
    """Pick the option containing ``option_text`` in the selectbox labelled ``label``."""
    from selenium.webdriver.common.by import By

    box = driver.find_element(By.CSS_SELECTOR, f'[data-testid="stSelectbox"] input[aria-label="{label}"]')
    box.find_element(By.XPATH, "following-sibling::button").click()
    deadline = time.time() + 20
    typed = False
    while time.time() < deadline:
        opts = [o for o in driver.find_elements(By.CSS_SELECTOR, '[role="option"]') if option_text in o.text]
        if opts:
            opts[0].click()
            return
        if not typed and time.time() > deadline - 17:   # a long list renders only its first options: filter it
            box.send_keys(option_text)
            typed = True
        time.sleep(0.3)
    raise AssertionError(f"no option {option_text!r} in {label!r}")


def find_button(driver: Any, text: str) -> Any:
    """The button whose text is ``text``."""
    from selenium.webdriver.common.by import By

    found = [b for b in driver.find_elements(By.TAG_NAME, "button") if b.text.strip() == text]
    if not found:
        raise AssertionError(f"no button {text!r} on the page")
    return found[0]



def body_text(driver: Any) -> str:
    from selenium.webdriver.common.by import By

    return str(driver.find_element(By.TAG_NAME, "body").text)


def metric_texts(driver: Any) -> list[str]:
    """The text of every metric card on the page, in page order."""
    from selenium.webdriver.common.by import By

    return [str(m.text) for m in driver.find_elements(By.CSS_SELECTOR, '[data-testid="stMetric"]')]


def explorer_call_ms(text: str) -> int | None:
    """The Query explorer's own timing of its last call ("explorer call N ms") in a page's text; None if absent."""
    m = re.search(r"explorer call (\d+) ms", text)
    return int(m.group(1)) if m else None


def threshold_switch(driver: Any, spec: str, timeout: float = 20) -> Any:
    """On the Trade-offs page: the "<threshold> on" toggle of defense ``spec``'s knob expander (opened if
    closed, scrolled into view) — the last toggle in it."""
    from selenium.webdriver.common.by import By

    def summary(e: Any) -> str:
        return str(e.find_element(By.TAG_NAME, "summary").text)

    exp = next((e for e in driver.find_elements(By.CSS_SELECTOR, '[data-testid="stExpander"]')
                if spec in summary(e).split()), None)   # the summary is the defense's name (and an icon)
    if exp is None:
        raise AssertionError(f"no knob expander for {spec!r} on the page")
    if exp.find_element(By.TAG_NAME, "details").get_attribute("open") is None:
        driver.execute_script("arguments[0].scrollIntoView({block: 'center'});", exp)
        exp.find_element(By.TAG_NAME, "summary").click()
    deadline = time.time() + timeout
    while not exp.find_elements(By.CSS_SELECTOR, '[data-testid="stCheckbox"] label') and time.time() < deadline:
        time.sleep(0.5)
    toggles = exp.find_elements(By.CSS_SELECTOR, '[data-testid="stCheckbox"] label')
    if not toggles:
        raise AssertionError(f"no threshold toggle in {spec!r}'s expander")
    switch = toggles[-1]
    driver.execute_script("arguments[0].scrollIntoView({block: 'center'});", switch)
    time.sleep(0.5)
    return switch
