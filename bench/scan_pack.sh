#!/usr/bin/env bash
# A scan of a packed release history (`tokensleuth history pack … --out BUNDLE`) on this machine's
# CPU, as the lent GPU machine scans it (bench/gpu/release_scan_30b.sh), in a store of its own:
#   bash bench/scan_pack.sh BUNDLE FROM TO BAND [extra scan options…]
# The MoE model is the qwen3-moe-mini shape (Qwen3-30B-A3B's proportions, 0.6 GB, Q8_0), the
# dense control the tiny llama; pp256 + tg32 at -t 1. TOKENSLEUTH_DB (default
# out/scan_pack.sqlite) is the store; run it again with --resume after a kill, on this machine
# or with the store carried to another (TOKENSLEUTH_CACHE elsewhere: builds are made again,
# nothing measured is measured again). Prints the scan's report, builds, engine time and wall.
set -euo pipefail
cd "$(dirname "$0")/.."
BUNDLE=${1:?BUNDLE}; FROM=${2:?FROM}; TO=${3:?TO}; BAND=${4:?BAND}; shift 4
mkdir -p out
export TOKENSLEUTH_DB=${TOKENSLEUTH_DB:-$PWD/out/scan_pack.sqlite}
T=.venv/bin/tokensleuth
[ -f out/moe-mini.gguf ] || $T model synth --shape qwen3-moe-mini --quant Q8_0 --out out/moe-mini.gguf
[ -f out/dense.gguf ] || $T model synth --arch llama --size tiny --out out/dense.gguf
start=$(date +%s)
rc=0
$T scan --repo "$BUNDLE" --from "$FROM" --to "$TO" --model out/moe-mini.gguf --control-model out/dense.gguf \
    -w pp256 -w tg32 --band "$BAND" --samples 8 --json out/scan_pack.json "$@" -- -t 1 -r 2 || rc=$?
echo "scan $FROM → $TO at ±$BAND: exit $rc, $(( $(date +%s) - start )) s wall"
.venv/bin/python - "$TOKENSLEUTH_DB" <<'PY'
import sqlite3, sys
db = sqlite3.connect(sys.argv[1])
n, s = db.execute("SELECT COUNT(*), COALESCE(SUM(t1_ns - t0_ns), 0) / 1e9 FROM trials WHERE t1_ns IS NOT NULL").fetchone()
print(f"store: {n} trials stored, {s:.0f} s of their engine time (the level rounds are not stored trials: "
      "the report's cost counts them)")
PY
exit $rc
