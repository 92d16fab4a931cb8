#!/usr/bin/env bash
# Install everything (first run only; later runs reuse .venv) and start the dashboard on the
# bundled demo knowledge base. Open the printed URL (default http://127.0.0.1:8501).
# The dashboard listens on 127.0.0.1 only; set SIEVE_DASHBOARD_ADDRESS (e.g. 0.0.0.0) to expose it on
# purpose. Datasets can be opened from demo_data and ~/.local/share/sieve/datasets
# (SIEVE_DASHBOARD_ROOTS, separated by ':', to choose other folders).
set -euo pipefail
cd "$(dirname "$0")/.."
SIEVE_EXTRAS="${SIEVE_EXTRAS:-[dashboard]}" bash scripts/install.sh   # the dashboard is an extra
# Build every model cache the default pages need (a line per model), start the server, run its default
# pages once in a server-side session (models, experiment and default defenses then stay loaded for
# every visitor) and only then print the URL. SIEVE_SKIP_WARM=1 starts the server at once instead (the
# pages then prepare on first use and say what they are preparing).
ADDRESS="${SIEVE_DASHBOARD_ADDRESS:-127.0.0.1}"
PORT="${SIEVE_DASHBOARD_PORT:-8501}"
if [ -n "${SIEVE_SKIP_WARM:-}" ]; then
  exec .venv/bin/streamlit run app.py --server.headless true --server.address "$ADDRESS" --server.port "$PORT" "$@"
fi
.venv/bin/python scripts/warm_dashboard.py || echo "warm-up failed; the dashboard builds its caches on first use" >&2
LOG="$(mktemp -t sieve-dashboard.XXXXXX.log)"
.venv/bin/streamlit run app.py --server.headless true --server.address "$ADDRESS" --server.port "$PORT" "$@" \
  >"$LOG" 2>&1 &
SERVER=$!
trap 'kill "$SERVER" 2>/dev/null; wait "$SERVER" 2>/dev/null; rm -f "$LOG"' EXIT INT TERM
.venv/bin/python - "$PORT" "$SERVER" <<'PY' || { echo "--- dashboard server log:" >&2; cat "$LOG" >&2; exit 1; }
import os, sys, time, urllib.request
port, pid = sys.argv[1], int(sys.argv[2])
for _ in range(480):
    try:
        os.kill(pid, 0)
    except OSError:
        sys.exit("the dashboard server exited")
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/_stcore/health", timeout=2) as r:
            if r.status == 200:
                sys.exit(0)
    except OSError:
        time.sleep(0.5)
sys.exit("the dashboard server did not start within 4 minutes")
PY
.venv/bin/python scripts/warm_server.py "http://127.0.0.1:$PORT" \
  || echo "server warm-up failed; the pages prepare on first use (server log: $LOG)" >&2
echo ""
echo "  Sieve dashboard ready: http://$ADDRESS:$PORT   (Ctrl-C stops it; server log: $LOG)"
echo ""
wait "$SERVER"
