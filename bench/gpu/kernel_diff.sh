#!/usr/bin/env bash
# Two figures of the CUDA kernel tracer on a real-size shape, on one GPU (resumable: send it again
# until both print; each call stops itself before LIMIT seconds, default 540):
#   overhead  the tracer's cost, measured by a paired compare: the same CUDA build plain against
#             traced (TRACE_MODE, default kernels) at tg32 and pp2048, band 3%;
#   fusion    `profile` of one build two ways, GGML_CUDA_DISABLE_FUSION=1 against the default, at
#             tg32 and pp2048: the kernel diff, its shares of the measured difference (untraced
#             processes beside the traced ones) and busy + idle against llama-bench.
#   carry: .whl .carry (and .devstore/db.sqlite to go on with a store an earlier call returned)
#   calls: 2 on a fresh machine (the build), 1 on one warm from bench/gpu/trace_cost.sh
# SHAPE (qwen3-30b-a3b, or llama-3.1-8b), PHASES ("overhead fusion"), FLAGS ("-ngl 99 -fa 1 -ub 2048"),
# PFLAGS (the profile's, "-ngl 99 -ub 2048": it takes -t -ngl -b -ub), TRACE_MODE (kernels;
# sample:N once its records are fixed, docs/measurements.md#profile).
START=$(date +%s)
LIMIT=${LIMIT:-540}
set -x
DEVICE_DB=$PWD/.devcache/kernel_diff.sqlite
mkdir -p .devcache
[ -f "$DEVICE_DB" ] || { [ -f .devstore/db.sqlite ] && cp .devstore/db.sqlite "$DEVICE_DB" && chmod u+w "$DEVICE_DB"; }
. bench/device_env.sh
export TOKENSLEUTH_LAUNCHER=none
SHAPE=${SHAPE:-qwen3-30b-a3b}
Q=/dev/shm/$SHAPE.gguf
[ "$SHAPE" = qwen3-30b-a3b ] && [ -f /dev/shm/q30.gguf ] && Q=/dev/shm/q30.gguf
MODE=${TRACE_MODE:-kernels}
FLAGS=${FLAGS:--ngl 99 -fa 1 -ub 2048}
BIN=$($T engine build $C 2>&1 | tail -1)
[ -x "$BIN/llama-bench" ] || { echo "no build: $BIN"; exit 1; }
[ -f $Q ] || $T model synth --shape $SHAPE --quant Q8_0 --out $Q 2>&1 | tail -1
LIB=$(python3 -c "from tokensleuth.kernels.cupti import library; print(library())")
left() { echo $(( LIMIT - ($(date +%s) - START) )); }
for phase in ${PHASES:-overhead fusion}; do
    [ "$(left)" -gt 90 ] || { echo "out of time before $phase: send the same call again"; break; }
    case $phase in
    overhead)
        timeout $(( $(left) - 20 )) $T compare --arm plain=bin:$BIN --arm traced=bin:$BIN \
            --env traced:CUDA_INJECTION64_PATH=$LIB --env traced:TOKENSLEUTH_KERNELS_DIR=/tmp \
            --env traced:TOKENSLEUTH_CUPTI_MODE=$MODE --separate-processes --model $Q -w tg32 -w pp2048 \
            --band 3% --max-pairs 20 --resume --json $OUT/overhead_${SHAPE}.json -- $FLAGS 2>&1 | tail -25
        ;;
    fusion)
        # (a bin: folder names no backend, so --by kernels; profile takes no -fa: PFLAGS)
        timeout $(( $(left) - 20 )) $T profile --by kernels --engine fused=bin:$BIN --engine split=bin:$BIN \
            --env split:GGML_CUDA_DISABLE_FUSION=1 --trace-mode $MODE --processes 3 --model $Q -w tg32 -w pp2048 \
            --resume --json $OUT/fusion_${SHAPE}.json -- ${PFLAGS:--ngl 99 -ub 2048} 2>&1 | grep -v "^  \(un\)\?traced" | head -90
        ;;
    esac
done
cp "$DEVICE_DB" $OUT/db.sqlite
true
