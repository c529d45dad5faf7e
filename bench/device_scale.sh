#!/usr/bin/env bash
# Truth at scale on the lent H200, in two calls made back to back (the machine stays warm
# between them): PHASE=build builds the CUDA engine and writes the Qwen3-30B-A3B shape
# straight as Q8_0 blocks (time and peak RSS); PHASE=measure runs an A/A compare of the
# 30B shape at -ngl 99 (pp2048 and tg32, -r 5: are there cold repetitions, what are the
# noise components), ending unresolved at ±0.5% so the diagnosis and its threads probe run
# at this scale. Expects .whl/ and .carry/ carried along (bench/device_env.sh); the store
# comes back in $OUT (db.sqlite) for bench/cold_figures.py.
set -x
DEVICE_DB=$PWD/.devcache/db.sqlite
. bench/device_env.sh
M=.devcache/q30.gguf
if [ "${PHASE:-build}" = build ]; then
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
  nproc; free -g | head -2; df -h . | tail -1
  time $T engine build $C --target llama-bench --target llama-quantize 2>&1 | tail -3 || exit 1
  python3 - <<'EOF' 2>&1 | tee $OUT/synth_h200.txt
import resource, subprocess, sys, time
t0 = time.monotonic()
p = subprocess.run([sys.executable, "-m", "tokensleuth.cli", "model", "synth", "--shape", "qwen3-30b-a3b",
                    "--out", ".devcache/q30.gguf"], capture_output=True, text=True)
print(p.stdout.strip(), p.stderr.strip()[-500:])
print(f"qwen3-30b-a3b Q8_0: wall {time.monotonic() - t0:.1f} s, peak RSS "
      f"{resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024:.0f} MiB")
EOF
  $T model info $M | head -9
else
  timeout 480 $T compare $C --arm a=$E --arm b=$E --model $M -w pp2048 -w tg32 --band 0.5% \
    --min-pairs 6 --max-pairs 6 --json $OUT/aa30b.json -- -ngl 99 -fa 1 -ub 2048 -r 5 2>&1 | tail -40
  cp .devcache/db.sqlite $OUT/db.sqlite
fi
true
