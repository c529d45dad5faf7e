#!/usr/bin/env bash
# The CUDA kernel tracer's cost and sums on the Qwen3-30B-A3B shape (Q8_0), per recording mode,
# against untraced processes of the same CUDA build (bench/gpu/trace_cost.py). Resumable: send it
# again until it prints its table; each call stops itself before LIMIT seconds (default 540).
#   carry: .whl .carry          (wheels for the GPU machine's Python, and the engine sdist)
#   calls: 2-3 on a fresh machine (the CUDA build alone takes about 300 s), 1 on a warm one
# MODES (default plain,kernels,graphs,sample:16), PROCESSES (3), WORKLOADS ("tg32 pp2048"),
# FLAGS ("-ngl 99 -fa 1 -ub 2048"). Writes trace_cost.jsonl and trace_cost.txt into $OUT, and the
# names nvcc gives one static kernel built in two folders (unit_tags.txt: kernels/__init__.canonical).
START=$(date +%s)
LIMIT=${LIMIT:-540}
set -x
. bench/device_env.sh
export TOKENSLEUTH_LAUNCHER=none
Q=${Q:-/dev/shm/q30.gguf}
STATE=.devcache/trace_cost.jsonl
nvidia-smi --query-gpu=name,driver_version,clocks.sm,power.draw --format=csv
nvcc --version | tail -2
python3 --version
BIN=$($T engine build $C 2>&1 | tail -1)
[ -x "$BIN/llama-bench" ] || { echo "no build: $BIN"; exit 1; }
[ -f $Q ] || /usr/bin/time -f "synth: %e s" $T model synth --shape qwen3-30b-a3b --quant Q8_0 --out $Q 2>&1 | tail -2
if [ ! -f $OUT/unit_tags.txt ] && command -v nvcc >/dev/null; then
    for d in a b; do
        mkdir -p /tmp/unit/$d && printf 'static __device__ float op_add(float a, float b) { return a + b; }\ntemplate <float (*op)(float, float)> __global__ void k_bin(float *x) { x[threadIdx.x] = op(x[threadIdx.x], 1.0f); }\nnamespace { __global__ void topk(float *x) { x[0] = 0; } }\nvoid go(float *x) { k_bin<op_add><<<1, 32>>>(x); topk<<<1, 1>>>(x); }\n' > /tmp/unit/$d/binbcast.cu
        (cd /tmp/unit/$d && nvcc -c -arch=sm_90 binbcast.cu -o k.o && cuobjdump -symbols k.o | grep -o '_Z[A-Za-z0-9_]*' | sort -u) >> $OUT/unit_tags.txt
    done
    c++filt < $OUT/unit_tags.txt > $OUT/unit_tags_demangled.txt
fi
LEFT=$(( LIMIT - ($(date +%s) - START) ))
W=""; for w in ${WORKLOADS:-tg32 pp2048}; do W="$W -w $w"; done
python3 bench/gpu/trace_cost.py --bin "$BIN" --model $Q $W --modes ${MODES:-plain,kernels,graphs,sample:16} \
    --processes ${PROCESSES:-3} --out $STATE --deadline $(( LEFT - 40 )) -- ${FLAGS:--ngl 99 -fa 1 -ub 2048} 2>&1 \
    | tee $OUT/trace_cost.txt | tail -60
cp $STATE $OUT/trace_cost.jsonl
true
