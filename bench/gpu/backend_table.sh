#!/usr/bin/env bash
# The field report's backend table at its own scale on the lent H200: one release
# built for CUDA and for Vulkan, compared on the Qwen3-30B-A3B shape (Q8_0) at pp and tg, with
# t/s, CPU ms/token, busy cores, GPU clock, busy %, power and tokens/joule per arm; once as
# llama-bench arms and once as llama-server arms measured through /completion (fixed-length
# generations, cache_prompt off). Calls sent back to back, the machine kept warm between them:
#   PHASE=build   bash bench/gpu/backend_table.sh   # both builds side by side, and the model
#   PHASE=bench   bash bench/gpu/backend_table.sh   # the llama-bench form
#   PHASE=server  bash bench/gpu/backend_table.sh   # the llama-server form
# Expects .whl/, .carry/ and .vk/ (Debian's Vulkan loader, headers, glslc and the libglvnd
# .debs, as bench/device_vulkan.sh lists them) carried along; outputs in $OUT.
DEVICE_DB=$PWD/.devcache/db.sqlite
mkdir -p .devcache
. bench/device_env.sh
. bench/device_vulkan_env.sh
CU="-DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90"
Q8=$PWD/.devcache/q30-q8_0.gguf
q() { printf '"%s", ' "$@" | sed 's/, $//'; }
study() {  # KIND WORKLOADS: the CUDA and the Vulkan build as arms of one compare
  { printf 'models = ["%s"]\nworkloads = [%s]\nmax_pairs = %s\nband = "2%%"\n' "$Q8" "$2" "${PAIRS:-6}"
    for arm in "cuda:$CU" "vulkan:$VK_CMAKE"; do
      printf '[[arms]]\nname = "%s"\nsource = "%s"\ncmake = [%s]\nkind = "%s"\nflags = "-ngl 99 -fa 1"\n' \
        "${arm%%:*}" "$E" "$(q ${arm#*:})" "$1"
    done; } > /tmp/backend.toml
  cat /tmp/backend.toml
}
case "${PHASE:-build}" in
build)
  T0=$(date +%s)
  (time $T engine build $C --target llama-bench --target llama-server --target llama-quantize) > $OUT/build-cuda.log 2>&1 &
  sleep 20
  (time $T engine build $(for f in $VK_CMAKE; do echo --cmake $f; done) --target llama-bench --target llama-server --target llama-quantize) > $OUT/build-vulkan.log 2>&1 &
  [ -f $Q8 ] || python3 bench/timed.py "synth Q8_0" $T model synth --shape qwen3-30b-a3b --quant Q8_0 --out $Q8 2>&1 | tail -2
  wait
  tail -3 $OUT/build-cuda.log $OUT/build-vulkan.log; echo "build phase: $(( $(date +%s) - T0 )) s"
  ;;
bench)
  study llama-bench '"pp2048", "tg128"'
  timeout 560 $T compare --study /tmp/backend.toml --json $OUT/backend_bench.json 2>&1 | tee $OUT/backend_bench.md | tail -60
  ;;
server)
  study llama-server '"pp2048", "tg128"'
  timeout 560 $T compare --study /tmp/backend.toml --json $OUT/backend_server.json 2>&1 | tee $OUT/backend_server.md | tail -60
  ;;
esac
cp "$DEVICE_DB" $OUT/db.sqlite
true
