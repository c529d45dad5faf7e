#!/usr/bin/env bash
# The memory guard on the lent H200 (one call): build the CUDA engine, write the Qwen3-30B-A3B
# shape, then bench/memory_fit.py at -ngl 99, 24 and 0 (prediction against the load log, per
# device), and `model fit` for the same three. Expects .whl/ and .carry/ (bench/device_env.sh).
set -x
. bench/device_env.sh
$T engine build $C --target llama-bench --target llama-quantize 2>&1 | tail -1 || exit 1
[ -f .devcache/q30.gguf ] || $T model synth --shape qwen3-30b-a3b --out .devcache/q30.gguf
[ -f .devcache/mini.gguf ] || $T model synth --shape qwen3-moe-mini --out .devcache/mini.gguf
b=$(dirname "$(grep -l GGML_CUDA .devcache/builds/*/build.json | head -1)")/bin
python3 bench/memory_fit.py --bench $b/llama-bench --model .devcache/q30.gguf --model .devcache/mini.gguf \
  --ngl 99 --ngl 24 --ngl 0 --gpu -- -fa 1 2>&1 | tee $OUT/memory_fit_h200.txt
for n in 99 24 0; do $T model fit .devcache/q30.gguf -- -ngl $n -fa 1 -p 512 -n 0; done 2>&1 | tee $OUT/model_fit_h200.txt
true
