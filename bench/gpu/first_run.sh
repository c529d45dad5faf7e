#!/usr/bin/env bash
# What a first run shows on the Qwen3-30B-A3B shape (Q8_0, CUDA, -ngl 99 -fa 1 -ub 2048), on one GPU:
#   bench     bench's defaults (one process, -r 5) at tg32 and pp2048, then -r 10: the cold leading
#             repetitions found inside one process (stats.cold_leading), the figure with and without;
#   doctor    doctor's checks and A/A on a full offload: what its diagnosis names;
#   windows   an in-process A/A at tg32 (about 125 ms repetitions), its windows against the engine's
#             own durations (bench/window_edges.py): is the short-window flag true, and why.
# Resumable: each step is kept under .devcache/first_run/ and skipped when done; send the same call
# again until it prints "all done". Each call stops itself before LIMIT seconds (default 540).
#   carry: .whl .carry          calls: 2 on a fresh machine (the CUDA build takes about 300 s), 1 on a warm one
START=$(date +%s)
LIMIT=${LIMIT:-540}
. bench/device_env.sh
export TOKENSLEUTH_LAUNCHER=none
Q=${Q:-/dev/shm/q30.gguf}
G="-ngl 99 -fa 1 -ub 2048"
D=.devcache/first_run
mkdir -p $D
left() { echo $(( LIMIT - ($(date +%s) - START) )); }
nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv,noheader
BIN=$($T engine build $C 2>&1 | tail -1)
[ -x "$BIN/llama-bench" ] || { echo "no build: $BIN"; exit 1; }
[ -f $Q ] || $T model synth --shape qwen3-30b-a3b --quant Q8_0 --out $Q 2>&1 | tail -1
step() {  # step NAME SECONDS COMMAND...: run unless done; kept only when it ends in time
    local name=$1 need=$2; shift 2
    [ -f $D/$name.done ] && { cat $D/$name.txt; return; }
    [ "$(left)" -gt "$need" ] || { echo "out of time before $name: send the same call again"; exit 0; }
    echo "== $name"
    if timeout $(( $(left) - 15 )) "$@" > $D/$name.txt 2>&1; then touch $D/$name.done; fi
    cat $D/$name.txt
}
step bench5 60 $T bench --engine $E $C -m $Q -w tg32 -w pp2048 --json $D/bench5.json -- $G
step bench10 90 $T bench --engine $E $C -m $Q -w tg32 -w pp2048 --json $D/bench10.json -- $G -r 10
step doctor 200 $T doctor --engine $E $C --model $Q -- $G
step windows 150 $T compare $C --arm a=$E --arm b=$E --in-process --model $Q -w tg32 --max-pairs 6 --no-probe \
    --db $D/windows.sqlite --json $D/windows.json -- $G
step edges 20 python3 bench/window_edges.py --db $D/windows.sqlite
for f in bench5.json bench10.json windows.json windows.sqlite; do [ -f $D/$f ] && cp $D/$f $OUT/; done
cat $D/*.txt > $OUT/first_run.txt
ls $D/*.done | wc -l | grep -q '^5$' && echo "all done"
true
