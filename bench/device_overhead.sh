#!/usr/bin/env bash
# Measuring overhead on a machine with spare cores (the lent 16-core H200 host, CPU
# backend): each layer of tokensleuth against bare llama-bench, engine on 4 threads.
# Expects .whl/ (wheels) and .carry/ (the engine sdist) carried; writes to $OUT.
set -x
DEVICE_DB=$PWD/.devcache/db.sqlite
. bench/device_env.sh
nproc; lscpu | grep -E "Model name|^CPU\(s\)"
time python3 -m tokensleuth.cli engine build || exit 1
ROUNDS=${ROUNDS:-30}
python3 bench/overhead_parts.py --rounds "$ROUNDS" --flags "-p 128 -n 128 -r 10 -t 4" | tee $OUT/overhead_parts_h200.txt
