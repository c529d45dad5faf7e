#!/usr/bin/env bash
# Noise controls on the lent H200 (one call): build the CUDA engine, a dense model, then
# bench/noise_controls.py with every process on the GPU (-ngl 99).
# Expects .whl/ and .carry/ carried along (bench/device_env.sh); output in $OUT.
set -x
. bench/device_env.sh
$T engine build $C --target llama-bench --target llama-quantize 2>&1 | tail -2 || exit 1
$T model synth $C --arch llama --size small --out .devcache/dense.gguf
b=$(dirname "$(grep -l GGML_CUDA .devcache/builds/*/build.json | head -1)")/bin
timeout ${NOISE_S:-270} python3 bench/noise_controls.py --processes ${N:-12} --bench $b/llama-bench \
  --model .devcache/dense.gguf --base "-p 0 -n 128 -r 3 -t 1 -ngl 99" 2>&1 | tee $OUT/noise_controls_h200.txt
true
