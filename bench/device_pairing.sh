#!/usr/bin/env bash
# The design study of in-process pairing (issue 20 item 9) on the lent H200, in three calls made
# back to back (the machine stays warm between them). PHASE=build builds the CUDA engine and
# writes the Qwen3-30B-A3B shape (Q8_0, 32.5 GB); PHASE=aa collects A/A processes of both designs
# (bench/pairing.py: separate processes per arm as today, and A,B,B,A in one process) at tg32 and
# pp2048; PHASE=ab a flag A/B of both designs (-ub 2048 vs 512 at pp2048, --poll 50 vs 0 at tg32),
# a build A/B (GGML_CUDA_DISABLE_FUSION=1, separate processes only: an environment cannot change
# inside a process) and -v against none (does the load log the first trial runs with cost
# anything at 30B?). Every process goes to $OUT/pairing.jsonl as it ends; bench/pairing_sim.py
# reads them here. Expects .whl/ and .carry/ carried along (bench/device_env.sh).
set -x
DEVICE_DB=$PWD/.devcache/db.sqlite
. bench/device_env.sh
M=.devcache/q30.gguf
G="-ngl 99 -fa 1"
P="python3 bench/pairing.py --model $M --reps 4 --out $OUT/pairing.jsonl"
case "${PHASE:-build}" in
build)
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
  time $T engine build $C --target llama-bench 2>&1 | tail -3 || exit 1
  time $T model synth --shape qwen3-30b-a3b --out $M 2>&1 | tail -2
  ls -d .devcache/builds/*/bin ;;
aa)
  B=$(ls -d .devcache/builds/*/bin | head -1)/llama-bench
  $P --bench $B --label aa -w tg32 --flag=-ub --a 2048 --b 2048 --design inprocess --pairs 16 --budget-s 120 -- $G
  $P --bench $B --label aa -w tg32 --flag=-ub --a 2048 --b 2048 --design separate --pairs 16 --budget-s 170 -- $G
  $P --bench $B --label aa -w pp2048 --flag=-ub --a 2048 --b 2048 --design inprocess --pairs 12 --budget-s 100 -- $G
  $P --bench $B --label aa -w pp2048 --flag=-ub --a 2048 --b 2048 --design separate --pairs 12 --budget-s 140 -- $G ;;
ab)
  B=$(ls -d .devcache/builds/*/bin | head -1)/llama-bench
  $P --bench $B --label ub -w pp2048 --flag=-ub --a 2048 --b 512 --design inprocess --pairs 8 --budget-s 70 -- $G
  $P --bench $B --label ub -w pp2048 --flag=-ub --a 2048 --b 512 --design separate --pairs 8 --budget-s 90 -- $G
  $P --bench $B --label poll -w tg32 --flag=--poll --a 50 --b 0 --design inprocess --pairs 8 --budget-s 65 -- $G -ub 2048
  $P --bench $B --label poll -w tg32 --flag=--poll --a 50 --b 0 --design separate --pairs 8 --budget-s 85 -- $G -ub 2048
  $P --bench $B --label fusion -w tg32 --env-b GGML_CUDA_DISABLE_FUSION=1 --design separate --pairs 10 --budget-s 110 -- $G -ub 2048
  $P --bench $B --label verbose -w tg32 --args-b=-v --design separate --pairs 8 --budget-s 90 -- $G -ub 2048 ;;
esac
true
