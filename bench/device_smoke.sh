#!/usr/bin/env bash
# The GPU path end to end on the lent H200, in one call: the default engine built with CUDA,
# a synthetic MoE and a dense model, bench with NVML attribution (power, tokens/joule), and a
# short compare of CUDA op fusion on/off (a real engine change: fusion off is slower). Run after
# a change to how the engine is started or watched. Expects .whl/ and .carry/ carried
# (bench/device_env.sh); the JSON and the store come back in $OUT.
set -x
. bench/device_env.sh
nvidia-smi --query-gpu=name,driver_version,power.draw,clocks.sm --format=csv
time $T engine build $C 2>&1 | tail -3 || exit 1
time $T model synth $C --arch qwen3moe --size medium --out .devcache/moe.gguf 2>&1 | tail -1
time $T model synth $C --arch llama --size small --out .devcache/dense.gguf 2>&1 | tail -1
$T bench $C --model .devcache/moe.gguf --model .devcache/dense.gguf --json $OUT/bench.json -- -ngl 99 -p 2048 -n 128 -r 5
timeout 150 $T compare $C --arm fused=$E --arm nofuse=$E --env nofuse:GGML_CUDA_DISABLE_FUSION=1 \
  --model .devcache/moe.gguf -w tg128 --max-pairs 8 --budget 100s --json $OUT/compare.json -- -ngl 99 -r 3
true
