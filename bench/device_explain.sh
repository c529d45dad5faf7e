#!/usr/bin/env bash
# Issue-11 figures on the lent H200, two calls with the machine kept warm between them:
#   bash bench/device_explain.sh build     # the CUDA build and the two synthetic models
#   bash bench/device_explain.sh compare   # placement A/B and the roofline
# The tok_embd field report's situation on hardware we have: arms "default" (llama.cpp keeps
# the input embedding, token_embd, in host memory), "embd" (-ot token_embd.weight=CUDA0) and
# "ngl6" (a partial offload), compared on the dense and MoE models at tg128 and pp512. The
# report prints each arm's placement (from its load log) with the measured ratio beside it,
# and the roofline: achieved decode bandwidth against NVML's peak.
# Expects .whl/ and .carry/ carried along (bench/device_env.sh); outputs in $OUT.
set -x
. bench/device_env.sh
case "${1:-build}" in
build)
  time $T engine build $C --target llama-bench --target llama-quantize || exit 1
  $T model synth $C --arch llama --size small --out .devcache/dense.gguf
  $T model synth $C --arch qwen3moe --size medium --out .devcache/moe.gguf
  ;;
compare)
  set -o pipefail
  timeout 420 $T compare $C --arm default=$E --arm embd=$E --arm ngl6=$E --flags "default=-ngl 99" \
    --flags "embd=-ngl 99 -ot token_embd.weight=CUDA0" --flags "ngl6=-ngl 6" \
    -m .devcache/dense.gguf -m .devcache/moe.gguf -w tg128 -w pp512 --min-pairs 4 --max-pairs 8 --budget 240s \
    --json $OUT/placement.json -- -r 3 2>&1 | tee $OUT/placement-compare.md
  sid=$(python3 -c "import json; print(json.load(open('$OUT/placement.json'))['study'])")
  $T report $sid > $OUT/placement-report.md 2>&1; tail -40 $OUT/placement-report.md
  ;;
esac
true
