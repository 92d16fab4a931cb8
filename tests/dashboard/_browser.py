"""What the real-browser tests share: a `streamlit run app.py` process on a free localhost port, a
headless Debian chromium driven by selenium, the page-wait (:func:`wait_rendered`) and the widget
helpers every browser test uses (tests/dashboard/test_browser*.py)."""
from __future__ import annotations

import socket
import subprocess
import sys
import time
import urllib.request
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from _dashdata import ROOT

CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


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
def streamlit_app(env: dict[str, str], log_path: Path) -> Iterator[str]:
    """The dashboard served on 127.0.0.1 with ``env``; yields its URL once healthy, stops it after."""
    port = free_port()
    with open(log_path, "w") as log:
        proc = subprocess.Popen([sys.executable, "-m", "streamlit", "run", str(ROOT / "app.py"),
                                 "--server.headless", "true", "--server.port", str(port),
                                 "--server.address", "127.0.0.1"],
                                cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
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
def chrome(user_data_dir: Path) -> Iterator[object]:
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


SHOTS = ROOT / "test-artifacts" / "screenshots"


def full_shot(driver, name: str) -> None:
    """Screenshot the whole page (window grown to the page's height, capped) as SHOTS/<name>.png."""
    SHOTS.mkdir(parents=True, exist_ok=True)
    height = driver.execute_script(
        "const m = document.querySelector('[data-testid=\"stMain\"]') || document.body; return m.scrollHeight;")
    driver.set_window_size(1500, min(max(int(height) + 200, 1200), 6000))
    time.sleep(1.5)
    driver.save_screenshot(str(SHOTS / f"{name}.png"))


def wait_rendered(driver, timeout: float) -> None:
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


def select(driver, label: str, option_text: str) -> None:
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


def button(driver, text: str):
    """The button whose text is ``text``."""
    from selenium.webdriver.common.by import By

    return next(b for b in driver.find_elements(By.TAG_NAME, "button") if b.text.strip() == text)


def selectbox_text(driver, label: str) -> str:
    """What the selectbox labelled ``label`` shows."""
    from selenium.webdriver.common.by import By

    box = driver.find_element(By.CSS_SELECTOR, f'[data-testid="stSelectbox"] input[aria-label="{label}"]')
    shown = box.find_element(By.XPATH, "ancestor::*[@data-testid='stSelectbox'][1]").text.replace(label, "", 1)
    return (box.get_attribute("value") or "") + shown.strip()   # the combobox shows the value in its input


def type_into(driver, label: str, text: str, tag: str = "input") -> None:
    """Replace the text of the text input (or ``tag="textarea"``) labelled ``label`` and commit it."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    box = driver.find_element(By.CSS_SELECTOR, f'{tag}[aria-label="{label}"]')
    box.click()
    box.send_keys(Keys.CONTROL, "a")
    box.send_keys(text)
    if tag == "textarea":
        box.send_keys(Keys.CONTROL, Keys.ENTER)   # commits a text area (a rerun)
    else:
        box.send_keys(Keys.TAB)   # commits the value (a rerun)


def body_text(driver) -> str:
    from selenium.webdriver.common.by import By

    return driver.find_element(By.TAG_NAME, "body").text
