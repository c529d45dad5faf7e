#!/usr/bin/env bash
# The field report's Patch Decomposition Report, on a planted series whose truth is known:
#   01 drops the vendor branch's Q6_K wait   pays on Q6_K tg, neutral on Q8_0  -> kept (PROFIT)
#   02 rewords a debug line                   neutral                           -> dropped (NEUTRAL)
#   03 is upstream's own commit               already in the base               -> skipped
#   04 plants a wait in rms_norm              slower at tg on both quants       -> dropped
#   05 sets the RMS norm's eps to 1           changes the outputs               -> dropped
#   usage: run.sh REPO Q8_0.gguf Q6_K.gguf [more tokensleuth decompose options]
#   REPO: from make-repo.sh. Models: `tokensleuth model synth --shape qwen3-30b-a3b --type q8_0`
#   and `--type q6_k` (the 35B-A3B class of the report, at 25-32 GB; Speeds are real, outputs noise).
# CMAKE picks the backend (default CUDA); a Strix Halo owner sets
#   CMAKE="-DGGML_HIP=ON -DAMDGPU_TARGETS=gfx1151"   or   CMAKE="-DGGML_VULKAN=ON"
# (the planted waits are in CUDA kernels, which HIP compiles too; a Vulkan build sees none of them:
# there every patch is neutral, which is also a truth to check). PP and TG scale the report's
# pp16384 / tg1024 to the time at hand. The report's --mmap 0 is -lm none since llama-bench's
# --load-mode (this release's llama-bench refuses --mmap; an older one takes LOAD="--mmap 0").
set -euo pipefail
[ $# -ge 3 ] || { echo "usage: $0 REPO Q8_0.gguf Q6_K.gguf [decompose options]" >&2; exit 2; }
repo=$1 q8=$2 q6=$3; shift 3
here=$(cd "$(dirname "$0")" && pwd)
cmake=()
for f in ${CMAKE:--DGGML_CUDA=ON}; do cmake+=(--cmake "$f"); done
exec ${TOKENSLEUTH:-tokensleuth} decompose --repo "$repo" --base base --patches "$here"/patches/*.patch \
  -m "$q8" -m "$q6" -w "pp${PP:-16384}" -w "tg${TG:-1024}" --band "${BAND:-1%}" "${cmake[@]}" "$@" \
  -- -ngl 99 -ctk q8_0 -ctv q8_0 -fa 1 -b 4096 -ub 2048 ${LOAD:--lm none} --no-host 1 --poll 0
