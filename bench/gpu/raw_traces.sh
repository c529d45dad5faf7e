#!/usr/bin/env bash
# Raw CUDA kernel traces at the users' scale, kept for replay: the tracer's own files and each
# process's kept windows, with untraced processes beside them (bench/gpu/trace_cost.py --keep), so
# the kernel analysis (busy against the untraced ms/token, each kernel's own time apart from its
# time beside others, sample:N's records) can be run on them anywhere. Resumable: send it again
# until it says "all arms measured"; each call stops itself before LIMIT seconds (default 540).
#   carry: .whl .carry .deb      (wheels, the engine sdist, Debian's ccache for the planted rebuild)
#   calls: 2 on a fresh machine (the CUDA build takes 180-300 s)
# Arms, in order (ARMS to choose): base (Qwen3-30B-A3B Q8_0: plain, kernels, sample:16; tg32 and
# pp2048), nofuse (GGML_CUDA_DISABLE_FUSION=1), planted (a ~11 us busy wait planted in the MoE
# router kernel, topk_moe_cuda: a second build, one CUDA file changed), l8 (Llama-3.1-8B Q8_0).
# Writes trace_cost.jsonl, trace_cost.txt and raw_<arm>.tar.xz (split into 15 MB parts where
# larger) into $OUT; bench/trace_replay.py reads them.
START=$(date +%s)
LIMIT=${LIMIT:-540}
set -x
. bench/device_env.sh
export TOKENSLEUTH_LAUNCHER=none
STATE=.devcache/raw_traces.jsonl
KEEP=.devcache/raw
FLAGS=${FLAGS:--ngl 99 -fa 1 -ub 2048}
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
git rev-parse HEAD 2>/dev/null || true
left() { echo $(( LIMIT - ($(date +%s) - START) )); }
BIN=$($T engine build $C 2>&1 | tail -1)
[ -x "$BIN/llama-bench" ] || { echo "no build: $BIN"; exit 1; }
Q30=/dev/shm/q30.gguf
[ -f $Q30 ] || /usr/bin/time -f "synth: %e s" $T model synth --shape qwen3-30b-a3b --quant Q8_0 --out $Q30 2>&1 | tail -2
measured() { grep -c "\"label\": \"$1\"" $STATE 2>/dev/null || echo 0; }
arm() {  # label bin model workloads modes [env]
    local label=$1 bin=$2 model=$3 ws=$4 modes=$5 env=$6 W="" E=""
    for w in $ws; do W="$W -w $w"; done
    [ -n "$env" ] && E="--env $env"
    [ "$(left)" -gt 100 ] || { echo "out of time before $label: send the same call again"; return 1; }
    python3 bench/gpu/trace_cost.py --bin "$bin" --model $model $W --modes $modes --processes 2 \
        --label $label $E --keep $KEEP --out $STATE --deadline $(( $(left) - 80 )) -- $FLAGS 2>&1 | tail -30
    (cd $KEEP && ls -d ${label}_* >/dev/null 2>&1 && tar -cJf - ${label}_* | split -b 15M -d - $OUT/raw_$label.tar.xz.)
    local want=$(( $(echo $ws | wc -w) * $(echo $modes | tr , ' ' | wc -w) * 2 ))
    [ "$(measured $label)" -ge $want ] || { echo "$label: $(measured $label) of $want processes: send the same call again"; return 1; }
}
ALL=1
for a in ${ARMS:-base nofuse planted l8}; do
    ALL=0
    case $a in
    base) arm base "$BIN" $Q30 "tg32 pp2048" plain,kernels,sample:16 || { ALL=0; break; } ;;
    nofuse) arm nofuse "$BIN" $Q30 "tg32 pp2048" plain,kernels GGML_CUDA_DISABLE_FUSION=1 || { ALL=0; break; } ;;
    planted)
        P=$(planted_router_build) || { ALL=0; break; }
        arm planted "$P" $Q30 "tg32 pp2048" plain,kernels || { ALL=0; break; } ;;
    l8)
        L8=/dev/shm/l8.gguf
        [ -f $L8 ] || $T model synth --shape llama-3.1-8b --quant Q8_0 --out $L8 2>&1 | tail -1
        arm l8 "$BIN" $L8 "tg32 pp2048" plain,kernels || { ALL=0; break; } ;;
    esac
    ALL=1
done
[ $ALL = 1 ] && echo "all arms measured"
cp $STATE $OUT/trace_cost.jsonl 2>/dev/null
python3 - <<'PY' > $OUT/trace_cost.txt 2>&1 || true
import json, sys
sys.argv = ["x"]
sys.path.insert(0, "bench/gpu")
import trace_cost
rows = [json.loads(x) for x in open(".devcache/raw_traces.jsonl")]
for label in dict.fromkeys(r.get("label", "") for r in rows):
    print(f"== {label}")
    trace_cost.summary([r for r in rows if r.get("label", "") == label])
PY
cat $OUT/trace_cost.txt
ls -la $OUT
true
