#!/usr/bin/env bash
# Where the suite's CPU goes, by command, counting every process (GNU time counts only those its
# children waited for: not Ray's daemons, a container's processes, or an orphaned server):
# `perf record -a` samples both cores at 49 Hz while the suite runs (on a warm cache: builds found),
# then prints each command's share of the samples and its CPU seconds.
#   bash bench/suite_cpu_by_command.sh [PYTEST ARGS...]     (needs perf; as root, or perf_event_paranoid <= 0)
set -euo pipefail
cd "$(dirname "$0")/.."
data=${PERF_DATA:-/tmp/tokensleuth-suite-perf.data}
if [ -z "${PERF_REPORT_ONLY:-}" ]; then
    perf record -F 49 -a -o "$data" -- env CI=true .venv/bin/python -m pytest -m "not gpu" -n 2 --dist loadfile \
        --no-loadscope-reorder -q -p no:cacheprovider "$@" > "${data%.data}.log" 2>&1 || true
    tail -1 "${data%.data}.log"
fi
perf report -i "$data" --sort comm --stdio 2>/dev/null | awk -v hz=49 '
    /^# Samples:/ { n = $3; sub(/K$/, "", n); samples = ($3 ~ /K$/) ? n * 1000 : n }
    /^ +[0-9.]+%/ { pct = $1; sub(/%/, "", pct); if (pct + 0 >= 0.5) printf "%6.2f%%  %7.0f CPU s  %s\n", pct, pct / 100 * samples / hz, $2 }'
