#!/usr/bin/env bash
# Lint (ruff), types (mypy --strict), then the test suite: real llama.cpp, built once and
# cached under the user cache dir.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
.venv/bin/ruff check src tests bench
.venv/bin/python -m mypy          # --strict on src, tests and bench (pyproject.toml)
exec .venv/bin/python -m pytest -m "not gpu" "$@"
