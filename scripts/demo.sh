#!/usr/bin/env bash
# Install everything (first run only; later runs reuse .venv) and start the dashboard on the
# bundled demo knowledge base. Open the printed URL (default http://localhost:8501).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh
exec .venv/bin/streamlit run app.py --server.headless true "$@"
