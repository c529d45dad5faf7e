#!/usr/bin/env bash
# A/A noise, bench's cold repetitions, doctor and the memory guard on the 30B and 8B shapes, on the lent H200, in calls made back to back (the machine stays warm
# between them; the store and the models live in .devcache/, which is not carried):
#   PHASE=build30: the CUDA engine, the Qwen3-30B-A3B shape, bench of it (3 processes: the cold
#                  repetition found in the first and added to -r of the next) and an A/A
#                  compare of 5 pairs (its first trial of each arm runs with the load log, -v)
#   PHASE=more30:  the same A/A compare at 20 pairs; the Llama-3.1-8B shape, its bench and a
#                  5-pair A/A
#   PHASE=more8:   the 8B A/A at 20 pairs; doctor with the CUDA engine, the 30B shape and its flags
#   PHASE=aa-in / aa-sep: 5 A/A studies of the 30B shape at ±2% (tg32, pp2048), a pair in one
#                  process (--in-process) / a process per trial (bench/inprocess_aa.py's question)
#   PHASE=memory:  the memory guard's error on configurations it was not tuned on (8B and 30B:
#                  -ngl 99/0, -ctk q8_0 -ctv q8_0, depth 32k and 128k, -ub 512/4096, --mmap 0, -ncmoe)
#   PHASE=oss:     the same for gpt-oss-120b's shape at -ngl 0/18/99 (63 GB: the 30B and 8B removed)
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
  time timeout 250 $T doctor $C --engine $E --model $Q30 -- $G 2>&1 | tee $OUT/doctor30.txt | tail -30
  ;;
aa-in|aa-sep)
  D=$([ "$PHASE" = aa-in ] && echo --in-process || echo --separate-processes)
  for i in 1 2 3 4 5; do
    timeout 110 $T compare $C --arm a=$E --arm b=$E --model $Q30 $W --max-pairs 40 --no-probe $D \
      --json $OUT/$PHASE-$i.json -- $G 2>&1 | grep -E "^\| q30|design|pairs" | head -4
  done
  ;;
memory)
  BIN=$(ls -d .devcache/builds/*/bin | head -1)
  for m in $L8 $Q30; do
    python3 bench/memory_fit.py --bench $BIN/llama-bench --model $m --ngl 99 --ngl 0 --gpu -- -p 512 -n 0
    python3 bench/memory_fit.py --bench $BIN/llama-bench --model $m --ngl 99 --gpu -- -p 512 -n 0 -ctk q8_0 -ctv q8_0
    python3 bench/memory_fit.py --bench $BIN/llama-bench --model $m --ngl 99 --gpu -- -p 512 -n 0 -d 32768
    python3 bench/memory_fit.py --bench $BIN/llama-bench --model $m --ngl 99 --gpu -- -p 0 -n 1 -d 131072 -fa 1
    python3 bench/memory_fit.py --bench $BIN/llama-bench --model $m --ngl 99 --gpu -- -p 4096 -n 0 -ub 512
    python3 bench/memory_fit.py --bench $BIN/llama-bench --model $m --ngl 99 --gpu -- -p 4096 -n 0 -ub 4096 -b 4096
    python3 bench/memory_fit.py --bench $BIN/llama-bench --model $m --ngl 99 --gpu -- -p 512 -n 0 --mmap 0
  done 2>&1 | tee $OUT/memory_fit.txt
  python3 bench/memory_fit.py --bench $BIN/llama-bench --model $Q30 --ngl 99 --gpu -- -p 512 -n 0 -ncmoe 24 \
    2>&1 | tee -a $OUT/memory_fit.txt
  ;;
oss)
  rm -f $Q30 $L8
  BIN=$(ls -d .devcache/builds/*/bin | head -1)
  time $T model synth --shape gpt-oss-120b --quant MXFP4 --out .devcache/oss.gguf 2>&1 | tail -1
  python3 bench/memory_fit.py --bench $BIN/llama-bench --model .devcache/oss.gguf --ngl 0 --ngl 18 --ngl 99 --gpu \
    -- -p 512 -n 0 2>&1 | tee $OUT/memory_fit_oss.txt
  ;;
esac
python3 bench/windows_figures.py .devcache/db.sqlite > $OUT/figures.txt 2>&1; tail -c 6000 $OUT/figures.txt
cp .devcache/db.sqlite $OUT/db.sqlite
true
