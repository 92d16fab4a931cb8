"""What the real-browser tests share: the dashboard served by `streamlit run app.py` on a free localhost
port, a headless Debian chromium driven by selenium, the page-wait (:func:`wait_rendered`) and the
widget helpers every browser test uses (tests/dashboard/test_browser*.py). The server, browser, wait
and widget helpers live in :mod:`sieve.dashboard.browser` (``sieve bench dashboard --browser`` drives
the same pages); the screenshot and text-input helpers are the tests' own."""
from __future__ import annotations

import time
from contextlib import AbstractContextManager
from pathlib import Path

from _dashdata import ROOT
from sieve.dashboard import browser as _b
from sieve.dashboard.browser import (  # noqa: F401  (re-exported for the tests)
    CHROMEDRIVER,
    CHROMIUM,
    body_text,
    chrome,
    explorer_call_ms,
    metric_texts,
    select,
    threshold_switch,
    wait_rendered,
)
from sieve.dashboard.browser import find_button as button  # noqa: F401  (the tests' name for it)


def streamlit_app(env: dict[str, str], log_path: Path) -> AbstractContextManager[str]:
    """This checkout's dashboard served on 127.0.0.1 with ``env``; yields its URL once healthy, stops it after."""
    return _b.streamlit_app(env, log_path, ROOT)


SHOTS = ROOT / "test-artifacts" / "screenshots"


def full_shot(driver, name: str) -> None:
    """Screenshot the whole page (window grown to the page's height, capped) as SHOTS/<name>.png."""
    SHOTS.mkdir(parents=True, exist_ok=True)
    height = driver.execute_script(
        "const m = document.querySelector('[data-testid=\"stMain\"]') || document.body; return m.scrollHeight;")
    driver.set_window_size(1500, min(max(int(height) + 200, 1200), 6000))
    time.sleep(1.5)
    driver.save_screenshot(str(SHOTS / f"{name}.png"))


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
