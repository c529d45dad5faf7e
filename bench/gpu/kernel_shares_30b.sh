#!/usr/bin/env bash
# The kernel diff's shares at the users' scale, end to end through `tokensleuth profile --by kernels`
# on bin: folders (each side traced and untraced, 3 processes), on one GPU. Resumable: send it again
# until it says "all phases measured"; each call stops itself before LIMIT seconds (default 540):
#   planted  a ~11 us busy wait planted in the MoE router kernel (topk_moe_cuda, one CUDA file changed,
#            rebuilt through ccache) against the release, Qwen3-30B-A3B Q8_0, tg32 and pp2048: the
#            planted kernel must be the only one that grew on its own time, and busy + outside must
#            hold within 5% of the untraced ms/token on both sides, so the shares are given
#   fusion   GGML_CUDA_DISABLE_FUSION=1 against the default, same shape and workloads
#   fusion8  the same on the Llama-3.1-8B shape
#   carry: .whl .carry .deb (and .devstore/db.sqlite to go on with a store an earlier call returned)
#   calls: 2 on a fresh machine
# PHASES ("planted fusion fusion8"), PFLAGS ("-ngl 99 -ub 2048"), PROCESSES (3). Writes
# <phase>.json and <phase>.txt (the command's report) and db.sqlite into $OUT.
START=$(date +%s)
LIMIT=${LIMIT:-540}
set -x
DEVICE_DB=$PWD/.devcache/kernel_shares.sqlite
mkdir -p .devcache
[ -f "$DEVICE_DB" ] || { [ -f .devstore/db.sqlite ] && cp .devstore/db.sqlite "$DEVICE_DB" && chmod u+w "$DEVICE_DB"; }
. bench/device_env.sh
export TOKENSLEUTH_LAUNCHER=none
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
git rev-parse HEAD 2>/dev/null || true
left() { echo $(( LIMIT - ($(date +%s) - START) )); }
BIN=$($T engine build $C 2>&1 | tail -1)
[ -x "$BIN/llama-bench" ] || { echo "no build: $BIN"; exit 1; }
Q30=/dev/shm/q30.gguf
[ -f $Q30 ] || $T model synth --shape qwen3-30b-a3b --quant Q8_0 --out $Q30 2>&1 | tail -1
profile() {  # phase model engines... (then --env arguments)
    local phase=$1 model=$2; shift 2
    [ "$(left)" -gt 120 ] || { echo "out of time before $phase: send the same call again"; return 1; }
    timeout $(( $(left) - 30 )) $T profile --by kernels "$@" --processes ${PROCESSES:-3} --model $model \
        -w tg32 -w pp2048 --resume --json $OUT/$phase.json -- ${PFLAGS:--ngl 99 -ub 2048} > $OUT/$phase.txt 2>&1
    local rc=$?
    grep -v "^  \(un\)\?traced" $OUT/$phase.txt | head -80
    return $rc
}
ALL=1
for phase in ${PHASES:-planted fusion fusion8}; do
    ALL=0
    case $phase in
    planted)
        P=$(planted_router_build) || break
        profile planted $Q30 --engine base=bin:$BIN --engine planted=bin:$P || break ;;
    fusion)
        profile fusion $Q30 --engine fused=bin:$BIN --engine split=bin:$BIN --env split:GGML_CUDA_DISABLE_FUSION=1 \
            || break ;;
    fusion8)
        L8=/dev/shm/l8.gguf
        [ -f $L8 ] || $T model synth --shape llama-3.1-8b --quant Q8_0 --out $L8 2>&1 | tail -1
        profile fusion8 $L8 --engine fused=bin:$BIN --engine split=bin:$BIN --env split:GGML_CUDA_DISABLE_FUSION=1 \
            || break ;;
    esac
    ALL=1
done
[ $ALL = 1 ] && echo "all phases measured"
cp "$DEVICE_DB" $OUT/db.sqlite
true
