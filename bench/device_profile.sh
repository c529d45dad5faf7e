#!/usr/bin/env bash
# The per-op profile on the lent H200 (CUDA), in two calls on one warm machine:
#   bash bench/device_profile.sh ratios   # build with the profiler, write the models, node sum / llama-bench
#   bash bench/device_profile.sh fusion   # GGML_CUDA_DISABLE_FUSION=1 against the default, per node and in groups
# `ratios` builds the default engine with CUDA and the profiler target, writes the tiny MoE and
# dense models and the Qwen3-30B-A3B shape (Q8_0, 32.5 GB, to /dev/shm), and profiles each at
# tg32 and pp512 (-ngl 99): the node sum against llama-bench's ms/token of the same build. `fusion`
# profiles one build two ways on the 30B shape: node by node (the callback removes fusion, so no
# op should differ) and in groups (chains of dependent ops run whole, so the backend can fuse
# them): the groups that fusion makes faster. Expects .whl/ and .carry/ carried; JSON in $OUT.
set -x
. bench/device_env.sh
Q=/dev/shm/q30.gguf
MODELS=".devcache/moe.gguf .devcache/dense.gguf"
case "${1:-ratios}" in
ratios)
    nvidia-smi --query-gpu=name,driver_version,memory.used --format=csv
    time $T engine build $C --target llama-bench --target llama-quantize --target tokensleuth-profile 2>&1 | tail -3 || exit 1
    [ -f .devcache/moe.gguf ] || $T model synth $C --arch qwen3moe --size tiny --out .devcache/moe.gguf
    [ -f .devcache/dense.gguf ] || $T model synth $C --arch llama --size tiny --out .devcache/dense.gguf
    [ -f $Q ] || /usr/bin/time -f "synth: %e s, peak RSS %M kB" $T model synth --shape qwen3-30b-a3b --out $Q 2>&1 | tail -2
    for m in $MODELS $Q; do
        /usr/bin/time -f "profile: %e s" $T profile $C --model $m -w tg32 -w pp512 --json $OUT/ratio_$(basename $m .gguf).json -- -ngl 99 2>&1 | grep -E "^###|^graph:|profile:|error"
    done
    ;;
fusion)
    for g in "" --groups; do
        /usr/bin/time -f "profile: %e s" $T profile $C --engine fused=$E --engine split=$E \
            --env split:GGML_CUDA_DISABLE_FUSION=1 $g --model $Q -w tg32 --json $OUT/fusion${g:+_groups}.json \
            -- -ngl 99 2>&1 | grep -v "^  profile" | head -60
    done
    ;;
esac
true
