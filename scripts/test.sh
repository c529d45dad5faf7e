#!/usr/bin/env bash
# The test suite: real llama.cpp, built once and cached under the user cache dir.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/python -m pytest -m "not gpu" "$@"
