#!/usr/bin/env bash
# The design study of bench/device_pairing.sh on this machine's tiny models (does anything change
# at small scale?): A/A processes of both designs at tg32 and pp64 on the tiny dense and MoE
# models, -t 1. Writes bench/results/tiny-pairing/pairing.jsonl; then
#     .venv/bin/python bench/pairing_sim.py bench/results/tiny-pairing/pairing.jsonl
set -e
cd "$(dirname "$0")/.."
B=$(.venv/bin/python -c "from tokensleuth.sources.build import BuildCache; from tokensleuth.sources import DEFAULT_ENGINE; print(BuildCache().get(DEFAULT_ENGINE).bin_dir)")/llama-bench
OUT=bench/results/tiny-pairing/pairing.jsonl
mkdir -p "$(dirname $OUT)" && rm -f $OUT
for m in llama qwen3moe; do
  M=$(ls ~/.cache/tokensleuth/test-models/*-$m-tiny-Q8_0.gguf | head -1)
  for w in tg32 pp64; do
    for d in inprocess separate; do
      .venv/bin/python bench/pairing.py --bench "$B" --model "$M" --label "aa-$m" -w $w --flag=-ub --a 512 --b 512 \
        --design $d --pairs 30 --reps 4 --out $OUT -- -t 1 2>/dev/null
    done
  done
done
wc -l $OUT
