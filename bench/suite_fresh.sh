#!/usr/bin/env bash
# The whole suite as CI runs it (`bash .ci/run`) on a fresh clone and a fresh home directory:
# no build cache, no compiler cache, no pip cache, no test models (issue: CI on a fresh machine
# under 40 minutes). What a fresh machine has that this cannot take away: the system packages
# scripts/setup.sh installs with apt (already installed here: it finds them and goes on).
#
#   bash bench/suite_fresh.sh [CLONE_DIR] [HOME_DIR]
#
# Prints pytest's summary, the skips (-rs), its slowest tests and the wall time; writes the log
# to bench/results/suite_fresh.log (-v: a log cut short still names each test's result).
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
clone="${1:-/tmp/tokensleuth-fresh}"
home="${2:-/tmp/tokensleuth-freshhome}"
rm -rf "$clone" "$home"
mkdir -p "$home"
git clone -q "$here" "$clone"
log="$here/bench/results/suite_fresh.log"
start=$(date +%s)
set +e
# .ci/run is `bash scripts/test.sh -q`; the same with -v, -rs and the slowest tests
(cd "$clone" && env -u XDG_CACHE_HOME -u CCACHE_DIR -u TOKENSLEUTH_CACHE -u TOKENSLEUTH_DATA -u TOKENSLEUTH_DB HOME="$home" CI=true \
    bash scripts/test.sh -v -rs --durations=40) > "$log" 2>&1
rc=$?
set -e
end=$(date +%s)
grep -E "^(FAILED|ERROR|SKIPPED)|passed|failed|test processes" "$log" | tail -40
echo "exit $rc; wall $((end - start)) s from a fresh clone and an empty home directory ($home)"
