#!/usr/bin/env bash
# Install the test dependencies (Python extras + Debian chromium/chromedriver for the browser
# test), lint (ruff, mypy: configured in pyproject.toml) and run the whole test suite, real packaged
# models included. Fails if the linters or the tests fail; the tests run either way.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v chromium >/dev/null 2>&1 || ! command -v chromedriver >/dev/null 2>&1; then
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq chromium chromium-driver >/dev/null
fi
SIEVE_EXTRAS="[test]" bash scripts/install.sh
lint=0
echo "ruff check sieve tests scripts app.py pages" >&2
.venv/bin/ruff check sieve tests scripts app.py pages || lint=1
echo "mypy sieve" >&2
.venv/bin/mypy sieve || lint=1
tests=0
.venv/bin/python -m pytest "$@" || tests=$?
if [ "$lint" -ne 0 ]; then
  echo "scripts/test.sh: ruff or mypy reported problems (see above)" >&2
  [ "$tests" -ne 0 ] || tests=1
fi
exit "$tests"
