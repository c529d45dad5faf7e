#!/usr/bin/env bash
# The scan at the users' scale, on the lent H200 (CUDA, -ngl 99): a planted history of the real
# llama.cpp source (tests/planted.py: base, n1, culprit, n2, spin, n3, n4 — the culprit a MoE-only
# wait of MOE_US per MoE layer, the spin SPIN_US per decode call), scanned with the Qwen3-30B-A3B
# shape (Q8_0, 32.5 GB) and the Llama-3.1-8B shape (Q8_0) at tg32 and pp512. Calls on one
# warm machine, each stopped (SIGINT) SCAN_S seconds in, before the call's limit, and resumed by the next
# (three were made: the first builds with CUDA; 2 and 3 judge and bisect):
#   SCAN_S=400 bash bench/device_scan.sh; SCAN_S=530 bash bench/device_scan.sh   # the second: --resume
# (BAND=10% for a shorter run: the planted steps are far larger than 10%; SCAN_ARGS: more scan options)
# Expects .whl/ and .carry/ carried; the store, the JSON and the report come back in $OUT.
set -x
mkdir -p .devcache
export DEVICE_DB=${DEVICE_DB:-$PWD/.devcache/scan.sqlite}  # DEVICE_DB=$OUT/scan.sqlite: the store comes back even if the call is cut
. bench/device_env.sh
SPIN_US=${SPIN_US:-1000} MOE_US=${MOE_US:-50}
HIST=${HIST:-n1 culprit n2 spin n3 n4}  # HIST=culprit: base and the MoE-only culprit alone (one call)
Q=/dev/shm/q30.gguf D=/dev/shm/d8.gguf
nvidia-smi --query-gpu=name,driver_version,memory.used --format=csv
read -r REPO BASE LAST < <(python3 -c "
from tests.planted import bisect_history
repo, shas = bisect_history(tuple('$HIST'.split()), branch='scan-device', spin_us=$SPIN_US, moe_us=$MOE_US)
print(repo, shas['base'], shas['$HIST'.split()[-1]])") || exit 1
[ -f $Q ] || /usr/bin/time -f "synth: %e s" $T model synth --shape qwen3-30b-a3b --out $Q 2>&1 | tail -1
[ -f $D ] || /usr/bin/time -f "synth: %e s" $T model synth --shape llama-3.1-8b --out $D 2>&1 | tail -1
RESUME=; [ -f .devcache/scan.started ] && RESUME=--resume
touch .devcache/scan.started
start=$(date +%s)
rc=0
timeout -s INT ${SCAN_S:-420} $T scan $C --repo $REPO --from $BASE --to $LAST --model $Q --model $D -w tg32 -w pp512 \
    --band ${BAND:-5%} --samples 3 --max-pairs 10 --no-profile $RESUME ${SCAN_ARGS:-} --json $OUT/scan.json -- -ngl 99 -r 2 \
    > $OUT/scan-$(date +%H%M%S).log 2>&1 || rc=$?
tail -50 $OUT/scan-*.log | grep -v "^  " | tail -60
echo "scan: exit $rc, $(( $(date +%s) - start )) s wall this call"
[ "$TOKENSLEUTH_DB" = "$OUT/scan.sqlite" ] || python3 - <<PY
import sqlite3
src = sqlite3.connect("$TOKENSLEUTH_DB"); dst = sqlite3.connect("$OUT/scan.sqlite"); src.backup(dst)
PY
sid=$(python3 -c "import sqlite3; print(sqlite3.connect('$TOKENSLEUTH_DB').execute(\"SELECT id FROM studies WHERE kind='scan'\").fetchone()[0])")
$T report $sid > $OUT/report.txt 2>&1; tail -40 $OUT/report.txt
true
