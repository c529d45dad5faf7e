#!/usr/bin/env bash
# gpt-oss-120b's shape on the lent H200, in one call: build the CUDA engine, write the shape
# (MXFP4 experts, 63.4 GB) to /dev/shm (the machine's disk is 64 GB), then for -ngl 99 and
# -ngl 18: tokensleuth's memory prediction (model fit) beside the load log's buffers
# (llama-bench -v), and the speed at pp2048 / tg32. Expects .whl/ and .carry/ carried along.
set -x
. bench/device_env.sh
M=/dev/shm/oss120.gguf
nvidia-smi --query-gpu=name,memory.total,memory.used --format=csv
time $T engine build $C --target llama-bench 2>&1 | tail -2 || exit 1
/usr/bin/time -f "synth: %e s, peak RSS %M kB" $T model synth --shape gpt-oss-120b --quant MXFP4 --out $M 2>&1 | tail -2
BIN=$(ls -d .devcache/builds/*/bin | head -1)
for NGL in 99 18; do
  $T model fit $M -w pp2048 -w tg32 -- -ngl $NGL -fa 1 2>&1 | tail -6
  timeout 120 $BIN/llama-bench -m $M -ngl $NGL -fa 1 -p 2048 -n 32 -r 2 -v -o jsonl > $OUT/oss_$NGL.jsonl 2> $OUT/oss_$NGL.err
  grep -E "model buffer size|KV buffer size|compute buffer size|REPACK" $OUT/oss_$NGL.err | head -12
  python3 -c "import json,sys; [print(r['n_prompt'], r['n_gen'], round(r['avg_ts'],1)) for r in map(json.loads, open(sys.argv[1]))]" $OUT/oss_$NGL.jsonl
done
true
