#!/usr/bin/env bash
# Lint (ruff), types (mypy --strict), then the test suite: real llama.cpp, built once and
# cached under the user cache dir.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
.venv/bin/ruff check src tests bench
.venv/bin/python -m mypy          # --strict on src, tests and bench (pyproject.toml)
# Two test processes (pytest-xdist), each running one test file at a time, the files with the
# most slow tests first. The suite's engines run one thread (-t 1), so two fit a 2-core machine,
# and every verdict the tests assert holds with the other core busy (bench/suite_busy.sh).
# TOKENSLEUTH_TEST_WORKERS=0 runs the suite in this one process.
exec .venv/bin/python -m pytest -m "not gpu" -n "${TOKENSLEUTH_TEST_WORKERS:-2}" --dist loadfile \
    --no-loadscope-reorder "$@"
