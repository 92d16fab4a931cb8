"""What the real-browser tests share: a `streamlit run app.py` process on a free localhost port and a
headless Debian chromium driven by selenium (tests/dashboard/test_browser.py, test_browser_flows.py)."""
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
