"""Framework-free service layer of the Streamlit dashboard (``app.py`` + ``pages/``).

* :mod:`sieve.dashboard.safe` – untrusted document text → safe display pieces (never raw HTML);
* :mod:`sieve.dashboard.service` – loaders and the call paths each page draws (no Streamlit);
* :mod:`sieve.dashboard.figures` – plotly figure builders;
* :mod:`sieve.dashboard.state` – the only Streamlit-aware module: session defaults, cached
  loaders (``st.cache_resource`` / ``st.cache_data``) and the page error guard.

No algorithm lives here or in a page: everything calls the library.
"""
