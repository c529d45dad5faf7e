#!/usr/bin/env bash
# The whole suite, as CI runs it, while another process keeps one core busy the whole time
# (issue: the suite must tell the truth on a loaded machine, not only on a quiet one).
#
#   bash bench/suite_busy.sh [CLONE_DIR]
#
# Runs in a fresh clone of this checkout (default /tmp/tokensleuth-busy) so the working tree is
# untouched; prints pytest's summary, its slowest tests and the wall time, and writes the log to
# bench/results/suite_busy.log (-v: a log cut short still names each test's result, a failure too).
# scripts/test.sh counts idle cores before pytest starts: beside the busy one it runs one test
# process (the log's 'test processes:' line); TOKENSLEUTH_TEST_WORKERS=2 forces two (oversubscribed).
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
clone="${1:-/tmp/tokensleuth-busy}"
rm -rf "$clone"
git clone -q "$here" "$clone"
python3 -c 'while 1: pass' &
busy=$!
trap 'kill $busy 2>/dev/null || true' EXIT
start=$(date +%s)
set +e
(cd "$clone" && CI=true bash scripts/test.sh -v --durations=25) > "$here/bench/results/suite_busy.log" 2>&1
rc=$?
set -e
end=$(date +%s)
kill $busy 2>/dev/null || true
grep -E "^(FAILED|ERROR|SKIPPED)|passed|failed" "$here/bench/results/suite_busy.log" | tail -40
echo "exit $rc; wall $((end - start)) s with one core kept busy (python3 -c 'while 1: pass')"
