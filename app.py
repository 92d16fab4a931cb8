"""Sieve analyst dashboard — ``streamlit run app.py``.

A thin router (``st.navigation``); each page lives in ``pages/`` (beside this file) and calls the
service layer in :mod:`sieve.dashboard`. A ``pages/`` directory starts a fresh server in Streamlit's
legacy page-directory mode, which serves the first visit from the file names: so every file is named
after its ``url_path`` below (``5_attack-lab.py`` → ``/attack-lab``) and a deep link as the first visit
finds its page; that page's ``state.init_state()`` then switches the legacy mode off and reruns
through this router (tests/dashboard/test_browser_deeplink.py opens a deep link on a fresh server).
Test hooks: ``SIEVE_DASHBOARD_TINY=1`` (tiny in-process models) and ``SIEVE_DASHBOARD_DATASET`` /
``SIEVE_DASHBOARD_RUN`` / ``SIEVE_DASHBOARD_LEDGER``.
"""
from pathlib import Path

import streamlit as st

from sieve.runtime import configure_process_environment

configure_process_environment()   # the dashboard program's settings, before any model (torch) loads
HERE = Path(__file__).resolve().parent
LOGO = HERE / "assets" / "logo.svg"

st.set_page_config(page_title="Sieve — RAG poisoning defense", page_icon=str(LOGO) if LOGO.exists() else None,
                   layout="wide")
css = HERE / "assets" / "style.css"
if css.exists():
    st.html(f"<style>{css.read_text(encoding='utf-8')}</style>")   # our own static stylesheet only
if LOGO.exists():
    st.logo(str(LOGO))

PAGES = [
    st.Page(str(HERE / "pages" / "0_overview.py"), title="Overview", icon=":material/home:", url_path="overview", default=True),
    st.Page(str(HERE / "pages" / "1_corpus.py"), title="Corpus & index", icon=":material/library_books:", url_path="corpus"),
    st.Page(str(HERE / "pages" / "2_explorer.py"), title="Query explorer", icon=":material/search:", url_path="explorer"),
    st.Page(str(HERE / "pages" / "3_geometry.py"), title="Geometry", icon=":material/scatter_plot:", url_path="geometry"),
    st.Page(str(HERE / "pages" / "4_tradeoffs.py"), title="Trade-offs", icon=":material/tune:", url_path="tradeoffs"),
    st.Page(str(HERE / "pages" / "5_attack-lab.py"), title="Attack lab", icon=":material/science:", url_path="attack-lab"),
    st.Page(str(HERE / "pages" / "6_alerts.py"), title="Alerts", icon=":material/notifications_active:", url_path="alerts"),
]
st.navigation(PAGES).run()
