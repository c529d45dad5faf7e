#!/usr/bin/env bash
# The main job end to end: build the default engine, synthesize a tiny MoE and a
# tiny dense model, benchmark both for real, print the table.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
T=.venv/bin/tokensleuth
mkdir -p out
$T engine build
[ -f out/moe-tiny.gguf ] || $T model synth --arch qwen3moe --size tiny --out out/moe-tiny.gguf
[ -f out/dense-tiny.gguf ] || $T model synth --arch llama --size tiny --out out/dense-tiny.gguf
$T bench --model out/moe-tiny.gguf --model out/dense-tiny.gguf --json out/bench.json -- -p 128 -n 32 -r 5
