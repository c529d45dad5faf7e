#!/usr/bin/env bash
# The exit drain (engines/exitdrain.py) on the lent H200, in one call (about 600 s): what it costs a
# llama-perplexity run at -ngl 99, where the CUDA runtime keeps threads of its own, on a small
# MoE and on the Qwen3-30B-A3B shape (Q8_0); and the lost statistics beside a busy core with
# and without it. Expects .whl/ and .carry/ carried along (bench/device_env.sh).
set -x
. bench/device_env.sh
time $T engine build $C --target llama-bench --target llama-quantize --target llama-perplexity 2>&1 | tail -2 || exit 1
$T model synth $C --arch qwen3moe --size medium --out .devcache/moe.gguf 2>&1 | tail -1
python3 bench/lost_tail.py --cmake=-DGGML_CUDA=ON --cmake=-DCMAKE_CUDA_ARCHITECTURES=90 --model .devcache/moe.gguf --flags="-ngl 99" --runs 5 2>&1 | tee $OUT/drain_moe.txt
time $T model synth --shape qwen3-30b-a3b --out .devcache/q30.gguf 2>&1 | tail -1
python3 bench/lost_tail.py --cmake=-DGGML_CUDA=ON --cmake=-DCMAKE_CUDA_ARCHITECTURES=90 --model .devcache/q30.gguf --flags="-ngl 99" --runs 3 --quiet-only 2>&1 | tee $OUT/drain_q30.txt
true
