#!/usr/bin/env bash
# Issue 39, items 1 and 2, on the lent H200, in calls made back to back (the machine stays warm
# between them; the store and the models live in .devcache/, which is not carried):
#   PHASE=build30: the CUDA engine, the Qwen3-30B-A3B shape, bench of it (3 processes: the cold
#                  repetition found in the first and added to -r of the next) and an A/A
#                  compare of 5 pairs (its first trial of each arm runs with the load log, -v)
#   PHASE=more30:  the same A/A compare at 20 pairs; the Llama-3.1-8B shape, its bench and a
#                  5-pair A/A
#   PHASE=more8:   the 8B A/A at 20 pairs
# Each call ends with bench/windows_figures.py over the store: every trial's largest edge error
# and every cell's busy cores, CPU ms/token and J/token, and their spread over the studies.
# Expects .whl/ and .carry/ carried along (bench/device_env.sh); the store comes back in $OUT.
set -x
DEVICE_DB=$PWD/.devcache/db.sqlite
. bench/device_env.sh
Q30=.devcache/q30.gguf
L8=.devcache/l8.gguf
G="-ngl 99 -fa 1 -ub 2048"
W="-w pp2048 -w tg32"
aa() {  # model pairs json
  timeout 560 $T compare $C --arm a=$E --arm b=$E --model "$1" $W --band 2% --min-pairs "$2" --max-pairs "$2" \
    --no-probe --json "$OUT/$3" -- $G -r 5 2>&1 | tail -12
}
case "${PHASE:-build30}" in
build30)
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm --format=csv
  time $T engine build $C --target llama-bench --target llama-quantize 2>&1 | tail -3 || exit 1
  time $T model synth --shape qwen3-30b-a3b --out $Q30 2>&1 | tail -1
  time $T bench $C --model $Q30 --trials 3 --json $OUT/bench30.json -- $G -p 2048 -n 32 -r 5 2>&1 | tail -12
  time aa $Q30 5 aa30_5.json
  ;;
more30)
  time aa $Q30 20 aa30_20.json
  time $T model synth --shape llama-3.1-8b --out $L8 2>&1 | tail -1
  time $T bench $C --model $L8 --trials 3 --json $OUT/bench8.json -- $G -p 2048 -n 32 -r 5 2>&1 | tail -12
  time aa $L8 5 aa8_5.json
  ;;
more8)
  time aa $L8 20 aa8_20.json
  ;;
esac
python3 bench/windows_figures.py .devcache/db.sqlite > $OUT/figures.txt 2>&1; tail -c 6000 $OUT/figures.txt
cp .devcache/db.sqlite $OUT/db.sqlite
true
