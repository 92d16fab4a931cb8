"""A deep link as the first visit of a fresh server (headless Debian chromium, tiny models).

The pages live in ``pages/`` beside ``app.py`` (the design card's layout), which starts a fresh
Streamlit server in its legacy page-directory mode. Each deep link below is opened on its own fresh
server as the very first visit: no "Page not found" dialog, the page's own title, and the sidebar of
``app.py``'s router (its page titles, not file names) → test-artifacts/screenshots/deeplink-<page>.png.
"""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from _browser import CHROMEDRIVER, CHROMIUM, chrome, full_shot, streamlit_app, wait_rendered
from _dashdata import ROOT

pytestmark = [pytest.mark.browser]

DEEP_LINKS = {"attack-lab": "Attack lab", "alerts": "Alerts — quarantine ledger", "tradeoffs": "Trade-offs"}


def test_pages_directory_layout():
    """``pages/`` at the top level beside ``app.py``; every file is named after its router url path."""
    import re

    assert (ROOT / "app.py").is_file() and (ROOT / "pages").is_dir()
    app = (ROOT / "app.py").read_text(encoding="utf-8")
    routes = re.findall(r'"pages" / "([^"]+)"\).*?url_path="([^"]+)"', app)
    assert len(routes) == len(list((ROOT / "pages").glob("*.py"))) == 7
    for file, url in routes:
        assert re.sub(r"^[0-9]*[_ -]*", "", file[:-3]) == url, (file, url)


@pytest.mark.parametrize("link", list(DEEP_LINKS))
def test_deep_link_first_visit_of_fresh_server(tmp_path, link, tiny_env):
    from selenium.webdriver.common.by import By

    if not (Path(CHROMIUM).exists() and Path(CHROMEDRIVER).exists()):
        pytest.skip("chromium/chromedriver not installed (apt-get install chromium chromium-driver)")
    env = {k: v for k, v in os.environ.items() if not k.startswith("SIEVE_DASHBOARD_")}
    env.update(tiny_env)
    env["SIEVE_DASHBOARD_LEDGER"] = str(tmp_path / "ledger.sqlite")
    with streamlit_app(env, tmp_path / "streamlit.log") as url, chrome(tmp_path / "chrome") as driver:
        driver.get(f"{url}/{link}")          # the first visit of this server
        wait_rendered(driver, timeout=300)
        body = driver.find_element(By.TAG_NAME, "body").text
        assert "Page not found" not in body
        assert DEEP_LINKS[link] in [h.text for h in driver.find_elements(By.CSS_SELECTOR, "h1")]
        nav = driver.find_element(By.CSS_SELECTOR, '[data-testid="stSidebarNav"]').text
        assert "Query explorer" in nav and "Corpus & index" in nav, f"app.py's router, not file names: {nav!r}"
        assert driver.current_url.rstrip("/").endswith(f"/{link}")
        full_shot(driver, f"deeplink-{link}")
