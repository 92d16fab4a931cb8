"""Real-browser flows (headless Debian chromium) on a dashboard started with the tiny in-process
models (``SIEVE_DASHBOARD_TINY``):

* hostile text: document ids, answers and an attack-family name carrying HTML/markdown images that
  point at a local HTTP server; every page is loaded and the server must count **0** requests
  (issue 14);
* Geometry: clicking a point on the corpus map selects it and the page settles — no rerun loop
  (issue 11).

Screenshots go to test-artifacts/screenshots/ (hostile-<page>.png, geometry-click-*.png).
"""
from __future__ import annotations

import http.server
import json
import os
import threading
import time
from pathlib import Path

import pytest

from _browser import CHROMEDRIVER, CHROMIUM, SHOTS, chrome, streamlit_app, wait_rendered
from _dashdata import write_tiny_dataset, write_tiny_run

pytestmark = [pytest.mark.browser]


class _Counter(http.server.BaseHTTPRequestHandler):
    hits: list[str] = []

    def do_GET(self) -> None:   # the http.server API's name
        type(self).hits.append(self.path)
        self.send_response(200)
        self.send_header("Content-Type", "image/png")
        self.end_headers()

    def log_message(self, *args) -> None:
        pass


@pytest.fixture(scope="module")
def trap():
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Counter)
    th = threading.Thread(target=srv.serve_forever, daemon=True)
    th.start()
    _Counter.hits = []
    yield f"http://127.0.0.1:{srv.server_address[1]}", _Counter.hits
    srv.shutdown()


def _hostile(base: str) -> dict[str, str]:
    return {
        "img": f'<img src="{base}/img-id.png">',
        "md": f"![x]({base}/md-id.png)",
        "answer": f"Greenland ![a]({base}/md-answer.png) <img src={base}/img-answer.png>",
        "family": f"pr_b<img src={base}/img-family.png>",
    }


def _make_hostile_dataset(root: Path, base: str) -> Path:
    ds = write_tiny_dataset(root)
    h = _hostile(base)
    rows = [json.loads(x) for x in (ds / "attacks.jsonl").read_text(encoding="utf-8").splitlines()]
    for r in rows:
        r["attack"] = h["family"]
        if r["query_id"] == "q-coffee":
            r["target_answer"] = h["answer"]
            r["documents"][1]["id"] = "attack:" + h["img"]
            r["documents"][2]["id"] = "attack:" + h["md"]
    (ds / "attacks.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    tg = [json.loads(x) for x in (ds / "targets.jsonl").read_text(encoding="utf-8").splitlines()]
    for t in tg:
        if t["query_id"] == "q-coffee":
            t["target_answer"] = h["answer"]
            t["correct_answers"] = [f"Ethiopia <img src={base}/img-correct.png>"]
    (ds / "targets.jsonl").write_text("".join(json.dumps(t) + "\n" for t in tg), encoding="utf-8")
    corpus = [json.loads(x) for x in (ds / "corpus.jsonl").read_text(encoding="utf-8").splitlines()]
    corpus[0]["id"] = "coffee-" + h["img"]
    corpus[1]["id"] = "coffee-" + h["md"]
    (ds / "corpus.jsonl").write_text("".join(json.dumps(c) + "\n" for c in corpus), encoding="utf-8")
    (ds / "qrels.jsonl").write_text("", encoding="utf-8")
    return ds


@pytest.fixture(scope="module")
def hostile_server(tmp_path_factory, trap):
    if not (Path(CHROMIUM).exists() and Path(CHROMEDRIVER).exists()):
        pytest.skip("chromium/chromedriver not installed (apt-get install chromium chromium-driver)")
    base, _ = trap
    tmp = tmp_path_factory.mktemp("hostile")
    ds = _make_hostile_dataset(tmp / "ds", base)
    run = write_tiny_run(ds, tmp / "run")
    ledger = tmp / "ledger.sqlite"
    from sieve.ledger import Flag, Ledger

    with Ledger(ledger) as led:      # alerts whose document ids are hostile
        h = _hostile(base)
        led.add_flags([Flag("attack:" + h["img"], "h1", 1.0, 0.5, {"branch": "topology"}, h["md"]),
                       Flag("coffee-" + h["md"], "h2", 1.0, 0.5, {"branch": "integrity"}, h["img"])],
                      detector="rsg", corpus_id=h["family"], corpus_hash="x", index_version="y")
    env = {k: v for k, v in os.environ.items() if not k.startswith("SIEVE_DASHBOARD_")}
    env.update(SIEVE_DASHBOARD_TINY="1", SIEVE_DASHBOARD_DATASET=str(ds), SIEVE_DASHBOARD_RUN=str(run),
               SIEVE_DASHBOARD_LEDGER=str(ledger))
    with streamlit_app(env, tmp / "streamlit.log") as url:
        yield url


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    with chrome(tmp_path_factory.mktemp("chrome-flows")) as d:
        yield d


def _shot(driver, name: str) -> None:
    SHOTS.mkdir(parents=True, exist_ok=True)
    driver.save_screenshot(str(SHOTS / f"{name}.png"))


def test_hostile_text_makes_no_outside_request(hostile_server, browser, trap):
    from selenium.webdriver.common.by import By

    base, hits = trap
    for name in ("overview", "corpus", "explorer", "geometry", "tradeoffs", "attack-lab", "alerts"):
        browser.get(f"{hostile_server}/{name}")
        wait_rendered(browser, timeout=300)
        time.sleep(1.0)
        _shot(browser, f"hostile-{name}")
        assert not browser.find_elements(By.CSS_SELECTOR, '[data-testid="stException"]'), name
    body = browser.find_element(By.TAG_NAME, "body").text
    assert "img src" in body or "![x]" in body, "the hostile strings are shown as text"
    time.sleep(2.0)
    assert hits == [], f"the page fetched {hits} from the counting server"


def test_geometry_click_selects_point_and_settles(hostile_server, browser):
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By

    browser.get(f"{hostile_server}/geometry")
    wait_rendered(browser, timeout=300)
    charts = browser.find_elements(By.CSS_SELECTOR, ".js-plotly-plot")
    assert len(charts) >= 2
    corpus_map = charts[-1]
    browser.execute_script("arguments[0].scrollIntoView({block: 'center'});", corpus_map)
    time.sleep(1.0)

    def picker_value() -> str:
        """The selected document as the page shows it: the picker's value and the document text."""
        sel = browser.find_elements(By.CSS_SELECTOR, '[data-testid="stSelectbox"]')[-1]
        shown = sel.find_elements(By.CSS_SELECTOR, '[data-baseweb="select"]')
        texts = browser.find_elements(By.CSS_SELECTOR, '[data-testid="stText"]')
        return (shown[0].text if shown else "") + " | " + (texts[-1].text if texts else "")

    before = picker_value()
    points = [p for p in corpus_map.find_elements(By.CSS_SELECTOR, ".scatterlayer .trace .points path")
              if p.is_displayed() and p.size.get("width", 0) > 0]
    assert len(points) >= 10
    clicked = False
    for p in points[3:12]:        # a few candidates: a plain document point
        try:
            ActionChains(browser).move_to_element(p).pause(0.3).click().perform()
            clicked = True
            break
        except Exception:  # noqa: BLE001 - overlapped marker: try the next point
            continue
    assert clicked
    wait_rendered(browser, timeout=120)        # raises TimeoutError if the page never settles
    _shot(browser, "geometry-click-after")
    after = picker_value()
    assert after != before, "the clicked point became the selected document"
    # settled: no script run for several seconds (an endless rerun loop would keep the app running)
    states = []
    for _ in range(8):
        states += [e.get_attribute("data-test-script-state")
                   for e in browser.find_elements(By.CSS_SELECTOR, "[data-test-script-state]")]
        time.sleep(0.5)
    assert not any(s in ("running", "rerunRequested") for s in states), states
