#!/usr/bin/env bash
# Install everything (first run only; later runs reuse .venv) and start the dashboard on the
# bundled demo knowledge base. Open the printed URL (default http://127.0.0.1:8501).
# The dashboard listens on 127.0.0.1 only; set SIEVE_DASHBOARD_ADDRESS (e.g. 0.0.0.0) to expose it on
# purpose. Datasets can be opened from demo_data and ~/.local/share/sieve/datasets
# (SIEVE_DASHBOARD_ROOTS, separated by ':', to choose other folders).
set -euo pipefail
cd "$(dirname "$0")/.."
SIEVE_EXTRAS="${SIEVE_EXTRAS:-[dashboard]}" bash scripts/install.sh   # the dashboard is an extra
exec .venv/bin/streamlit run app.py --server.headless true --server.address "${SIEVE_DASHBOARD_ADDRESS:-127.0.0.1}" "$@"
