#!/usr/bin/env bash
# Set up a virtual environment with tokensleuth and the build tools it uses.
# Idempotent: a second run only checks. `bash scripts/setup.sh venv`: the build tools and the
# virtual environment only (the tests' tools, browser, container and peers come with a plain run).
set -euo pipefail
cd "$(dirname "$0")/.."
# a test dependency that cannot be installed: under CI=true the run stops here, naming it
# (a green CI must have run every test); elsewhere its tests skip, with the reason
need() {
    if [ "${CI:-}" = true ]; then
        echo "error: could not install $1 — CI needs it; install it by hand or fix the package source" >&2
        exit 1
    fi
    echo "note: could not install $1; those tests will be skipped (pytest -rs lists them)" >&2
}
if ! command -v ccache >/dev/null || ! command -v ninja >/dev/null; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
        (apt-get update -qq && apt-get install -y -qq ccache ninja-build) >/dev/null 2>&1 \
            || { [ "${TOKENSLEUTH_SETUP_TESTS:-1}" = 1 ] && need "ccache/ninja (builds, and the compiler-cache test)"; } \
            || echo "note: could not install ccache/ninja; builds will be slower" >&2
    elif [ "${TOKENSLEUTH_SETUP_TESTS:-1}" = 1 ] && ! command -v ccache >/dev/null; then
        need "ccache (the compiler-cache test; apt-get as root installs it)"
    else
        echo "note: install ccache and ninja-build for faster engine builds" >&2
    fi
fi
# The main job needs tokensleuth alone; the tests add their tools and Ray (the fleet's tests).
# .venv/.installed says which was installed: a test run after the demo adds what it lacks.
# (pip byte-compiles what it installs. Without it, under PYTHONDONTWRITEBYTECODE=1 — which this
# project's machines set — nothing compiled later is kept: every tokensleuth process compiled numpy,
# typer, rich … again, 1.1 CPU-s a start instead of 0.55.)
if [ ! -x .venv/bin/tokensleuth ] || [ pyproject.toml -nt .venv/.installed ]; then
    python3 -m venv .venv
    .venv/bin/python -m pip install -q --disable-pip-version-check -e .
    echo main > .venv/.installed
fi
# `setup.sh venv`: only the above (scripts/test.sh builds the default engine while the rest installs)
[ "${1:-}" = venv ] && exit 0
# The tests' and the fleet's packages (pyproject.toml's extras), added beside it: tokensleuth itself
# is not installed again (scripts/test.sh's engine build runs it meanwhile). Not byte-compiled here
# (nor the peers' below): scripts/test.sh lets Python keep what the tests import, a fraction of it.
if [ "${TOKENSLEUTH_SETUP_TESTS:-1}" = 1 ] && [ "$(cat .venv/.installed)" != tests ]; then
    .venv/bin/python -c 'import tomllib; x = tomllib.load(open("pyproject.toml", "rb"))["project"]["optional-dependencies"]
print("\n".join(x["test"] + x["fleet"]))' > .venv/extras.txt
    .venv/bin/python -m pip install -q --disable-pip-version-check --no-compile -r .venv/extras.txt
    echo tests > .venv/.installed
fi
# podman + runc: the container arms' tests run a real container (runc: crun fails on a
# hybrid cgroup layout). Only the tests need them.
if [ "${TOKENSLEUTH_SETUP_TESTS:-1}" = 1 ] && { ! command -v podman >/dev/null || ! command -v runc >/dev/null; }; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
        (apt-get update -qq && apt-get install -y -qq podman runc) >/dev/null 2>&1 \
            || need "podman/runc (the container tests)"
    else
        need "podman/runc (the container tests; apt-get as root installs them)"
    fi
fi
# chromium + its driver: the HTML report tests open the pages in a real headless browser.
if [ "${TOKENSLEUTH_SETUP_TESTS:-1}" = 1 ] && { ! command -v chromium >/dev/null || ! command -v chromedriver >/dev/null; }; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
        (apt-get update -qq && apt-get install -y -qq chromium chromium-driver) >/dev/null 2>&1 \
            || need "chromium/chromium-driver (the HTML report, issue and site tests)"
    else
        need "chromium/chromium-driver (the HTML report tests; apt-get as root installs them)"
    fi
fi
# AIPerf and llama-benchy, the peers of the server figures (bench/peer_check.py and its test), in an
# environment of their own as their users install them: their pins (rich 14, psutil 7.0) conflict with
# ours. Kept under the user cache dir, keyed by the pinned file's hash, so a fresh clone reuses it.
if [ "${TOKENSLEUTH_SETUP_TESTS:-1}" = 1 ]; then
    peer="${TOKENSLEUTH_PEER_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/tokensleuth/peer-venv}"
    want="$(sha256sum bench/requirements-peer.txt | cut -d' ' -f1)"
    if [ "$(cat "$peer/.installed" 2>/dev/null)" != "$want" ]; then
        { rm -rf "$peer" && python3 -m venv "$peer" \
            && "$peer/bin/python" -m pip install -q --disable-pip-version-check --no-compile -r bench/requirements-peer.txt \
            && echo "$want" > "$peer/.installed"; } || need "AIPerf and llama-benchy (bench/requirements-peer.txt: the peer check's test)"
    fi
fi
# CUPTI's headers of CUDA 12.1, 12.9 and 13.0 (NVIDIA's wheels): the CUDA tracer is compiled against
# each in the tests (no GPU needed to compile it)
if [ "${TOKENSLEUTH_SETUP_TESTS:-1}" = 1 ]; then
    .venv/bin/python scripts/cuda_headers.py || need "CUPTI headers from NVIDIA's wheels (the CUDA tracer's compile tests)"
fi
