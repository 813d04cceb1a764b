#!/usr/bin/env bash
# The test command of the README: a fresh virtual environment with the test extras, then pytest.
# PostgreSQL tests start their own throwaway server from the system's PostgreSQL binaries.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${VENV:-.venv}
python3 -m venv "$VENV"
"$VENV/bin/pip" install -q --upgrade pip
"$VENV/bin/pip" install -q -e ".[test]"
export TUNESEARCH_CACHE=${TUNESEARCH_CACHE:-$(mktemp -d)/tunesearch}
# test files spread over the cores (pytest-xdist), each file whole on one worker so its
# module-scoped builds run once; at most 4 workers; TEST_WORKERS=0 runs all in this process
"$VENV/bin/python" -m pytest -q -n "${TEST_WORKERS:-auto}" --maxprocesses 4 --dist loadfile "$@"
