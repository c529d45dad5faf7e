#!/usr/bin/env bash
# Set up a virtual environment with tokensleuth and the build tools it uses.
# Idempotent: a second run only checks.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v ccache >/dev/null || ! command -v ninja >/dev/null; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
        (apt-get update -qq && apt-get install -y -qq ccache ninja-build) >/dev/null 2>&1 \
            || echo "note: could not install ccache/ninja; builds will be slower" >&2
    else
        echo "note: install ccache and ninja-build for faster engine builds" >&2
    fi
fi
# podman + runc: the container arms' tests run a real container (runc: crun fails on a
# hybrid cgroup layout). Only the tests need them.
if [ "${TOKENSLEUTH_SETUP_TESTS:-1}" = 1 ] && { ! command -v podman >/dev/null || ! command -v runc >/dev/null; }; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
        (apt-get update -qq && apt-get install -y -qq podman runc) >/dev/null 2>&1 \
            || echo "note: could not install podman/runc; the container tests will be skipped" >&2
    fi
fi
# chromium + its driver: the HTML report tests open the pages in a real headless browser.
if [ "${TOKENSLEUTH_SETUP_TESTS:-1}" = 1 ] && { ! command -v chromium >/dev/null || ! command -v chromedriver >/dev/null; }; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
        (apt-get update -qq && apt-get install -y -qq chromium chromium-driver) >/dev/null 2>&1 \
            || echo "note: could not install chromium; the browser tests will be skipped" >&2
    fi
fi
if [ ! -x .venv/bin/tokensleuth ] || [ pyproject.toml -nt .venv/.installed ]; then
    python3 -m venv .venv
    .venv/bin/python -m pip install -q --disable-pip-version-check -e '.[test,fleet]'
    touch .venv/.installed
fi
