#!/usr/bin/env bash
# Lint (ruff), types (mypy --strict), then the test suite: real llama.cpp, built once and
# cached under the user cache dir.
set -euo pipefail
cd "$(dirname "$0")/.."
# The suite starts a thousand Python processes (tokensleuth, its helpers, the test processes): each
# compiled tokensleuth's modules and the tests' from source again where PYTHONDONTWRITEBYTECODE=1 is
# set (as on this project's machines). The run keeps their bytecode (__pycache__/, ignored by git).
unset PYTHONDONTWRITEBYTECODE
bash scripts/setup.sh venv
# The default engine (every real test's) builds while the tests' tools install and the lint and
# types run: those are one core's work, the build takes the rest (a fresh machine's 3 minutes of
# compiling start 2 minutes sooner). Found in the build cache, it takes a second.
build_log="${TMPDIR:-/tmp}/tokensleuth-test-engine.$$.log"
setsid .venv/bin/tokensleuth engine build >"$build_log" 2>&1 &  # (its own process group: a
build=$!                                                               # failed lint stops its compilers too)
trap 'kill -- "-$build" 2>/dev/null || true' EXIT
bash scripts/setup.sh
.venv/bin/ruff check src tests bench scripts
# --strict on src, tests, bench and scripts (pyproject.toml). Its cache is under the user cache dir, so
# a fresh clone checks again only the files that differ (by content): 0.4 s, not 12.
export MYPY_CACHE_DIR="${MYPY_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/tokensleuth/mypy}"
.venv/bin/python -m mypy
if wait "$build"; then
    echo "the default engine: $(tail -1 "$build_log")" >&2
    rm -f "$build_log"
else  # (the suite's engine fixture builds it again, and its failure is the tests')
    echo "note: the default engine did not build before the tests — its log: $build_log" >&2
    tail -5 "$build_log" >&2
fi
trap - EXIT
# Test processes (pytest-xdist): as many as this machine has idle cores, at most two, each running
# one test file at a time, the files with the most slow tests first. The suite's engines run one
# thread (-t 1), so two fit a quiet 2-core machine; where a core is already busy (another job, a
# build), one process runs the suite, so the suite never oversubscribes the CPU it measures on.
# TOKENSLEUTH_TEST_WORKERS=N sets the number (0 or 1: the suite in this one process).
workers="${TOKENSLEUTH_TEST_WORKERS:-$(.venv/bin/python scripts/idle_cores.py 2)}"
if [ "$workers" -gt 1 ]; then
    set -- -n "$workers" --dist loadfile --no-loadscope-reorder "$@"
fi
echo "test processes: ${workers}" >&2
exec .venv/bin/python -m pytest -m "not gpu" "$@"
