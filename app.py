"""Sieve analyst dashboard — ``streamlit run app.py``.

A thin router (``st.navigation``); each page lives in ``views/`` and calls the service layer in
:mod:`sieve.dashboard`. Not ``pages/``: a directory of that name switches Streamlit to its legacy
page-directory mode, and a deep link as the first visit (``/attack-lab``) showed "Page not found".
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
    st.Page(str(HERE / "views" / "0_overview.py"), title="Overview", icon=":material/home:", url_path="overview", default=True),
    st.Page(str(HERE / "views" / "1_corpus.py"), title="Corpus & index", icon=":material/library_books:", url_path="corpus"),
    st.Page(str(HERE / "views" / "2_explorer.py"), title="Query explorer", icon=":material/search:", url_path="explorer"),
    st.Page(str(HERE / "views" / "3_geometry.py"), title="Geometry", icon=":material/scatter_plot:", url_path="geometry"),
    st.Page(str(HERE / "views" / "4_tradeoffs.py"), title="Trade-offs", icon=":material/tune:", url_path="tradeoffs"),
    st.Page(str(HERE / "views" / "5_attack_lab.py"), title="Attack lab", icon=":material/science:", url_path="attack-lab"),
    st.Page(str(HERE / "views" / "6_alerts.py"), title="Alerts", icon=":material/notifications_active:", url_path="alerts"),
]
st.navigation(PAGES).run()
