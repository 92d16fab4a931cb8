"""Framework-free service layer of the Streamlit dashboard (``app.py`` + ``pages/``).

* :mod:`sieve.dashboard.safe` – untrusted document text → safe display pieces (never raw HTML);
* :mod:`sieve.dashboard.session` – modes, paths, models, dataset and its experiment (every page);
* :mod:`sieve.dashboard.explorer`, :mod:`.geometry`, :mod:`.runs`, :mod:`.lab`, :mod:`.alerts` – one
  module per page's needs (Query explorer, Geometry, Trade-offs, Attack lab, Corpus/Alerts), each
  calling the library through :mod:`sieve.experiment`;
* :mod:`sieve.dashboard.figures` – plotly figure builders;
* :mod:`sieve.dashboard.state` – the only Streamlit-aware module: session defaults, cached
  loaders (``st.cache_resource`` / ``st.cache_data``) and the page error guard.

No algorithm lives here or in a page: everything calls the library.
"""
