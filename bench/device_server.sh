#!/usr/bin/env bash
# Servers on the lent NVIDIA machine (one call): build the default engine with CUDA and
# llama-server, synthesize a MoE and a dense model, bench llama-server with NVML power and
# energy per request window (pp512, tg128, tg128 at 4 streams), compare llama-bench with
# llama-server on the same build, and the client's parse headroom on that machine's CPU.
# Expects .whl/ (wheels) and .carry/ (the engine sdist) carried along; outputs in $OUT.
set -x
. bench/device_env.sh
nvidia-smi --query-gpu=name,driver_version,power.draw,clocks.sm --format=csv
time $T engine build $C --target llama-bench --target llama-quantize --target llama-server || exit 1
[ -f .devcache/dense.gguf ] || $T model synth $C --arch llama --size small --out .devcache/dense.gguf
if [ "${1:-all}" != compare ]; then
  [ -f .devcache/moe.gguf ] || $T model synth $C --arch qwen3moe --size medium --out .devcache/moe.gguf
  timeout 200 $T bench $C --kind llama-server --model .devcache/moe.gguf --model .devcache/dense.gguf \
    -w pp512 -w tg128 -w tg128xc4 --json $OUT/server.json -- -ngl 99 -r 5
fi
python3 bench/client_headroom.py --runs 3 > $OUT/headroom.txt 2>&1
# one engine process per trial: each server trial loads the model, so the dense one (fast to load)
timeout 200 $T compare $C --arm bench=$E --arm server=$E --kind server=llama-server --model .devcache/dense.gguf \
  -w tg128 -w pp512 --max-pairs 8 --budget 150s --json $OUT/server_vs_bench.json -- -ngl 99 -r 3
true
