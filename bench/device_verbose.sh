#!/usr/bin/env bash
# On the lent H200, in two calls made back to back (the machine stays warm between them):
# PHASE=build builds the CUDA engine and writes the Qwen3-30B-A3B shape (as device_scale.sh);
# PHASE=measure asks, at 30B scale:
#  1. does llama-bench's load log (-v, which the first trial of each arm now runs with, so the
#     placement needs no load of its own) change what is measured? A compare of -v against
#     no -v (pp2048, tg32, -ngl 99);
#  2. an A/A compare as a user runs it: its engine processes (trials only) and the placement
#     read from the first trials;
#  3. depth windows: llama-bench -d 4096 run by tokensleuth's own stamped reader, each stderr
#     line with its time, beside llama-bench's own per-repetition durations, and the windows
#     a bench study stored for tg32@d4096.
# Expects .whl/ and .carry/ carried along (bench/device_env.sh); the store comes back in $OUT.
set -x
DEVICE_DB=$PWD/.devcache/db.sqlite
. bench/device_env.sh
M=.devcache/q30.gguf
G="-ngl 99 -fa 1 -ub 2048"
if [ "${PHASE:-build}" = build ]; then
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
  time $T engine build $C --target llama-bench --target llama-quantize 2>&1 | tail -3 || exit 1
  time $T model synth --shape qwen3-30b-a3b --out $M
else
  timeout 300 $T compare $C --arm quiet=$E --arm verbose=$E --flags verbose=-v --model $M -w pp2048 -w tg32 \
    --band 1% --min-pairs 6 --max-pairs 8 --no-probe --json $OUT/verbose.json -- $G -r 5 2>&1 | tail -14
  /usr/bin/time -f "A/A compare: wall %e s" timeout 200 $T compare $C --arm a=$E --arm b=$E --model $M -w tg32 \
    --min-pairs 3 --max-pairs 3 --no-probe --json $OUT/aa.json -- $G -r 3 2>&1 | grep -E "Where|place|wall|trial" | tail -12
  python3 - <<'EOF'
import json, sqlite3
db = sqlite3.connect(".devcache/db.sqlite")
sid = json.load(open(__import__("os").environ["OUT"] + "/aa.json"))["study"]
argvs = [json.loads(r[0]) for r in db.execute("SELECT argv_json FROM trials WHERE study_id=?", (sid,))]
print(f"A/A: {len(argvs)} trials, {sum('-v' in a for a in argvs)} with -v")
print("placement:", db.execute("SELECT value_json FROM state WHERE study_id=? AND key='placement'", (sid,)).fetchone()[0][:600])
EOF
  BIN=$(ls -d .devcache/builds/*/bin | head -1)
  python3 - "$BIN/llama-bench" "$M" <<'EOF'
import json, sys
from tokensleuth.engines.proc import run_process
from tokensleuth.engines.llamabench import extract_windows
bench, model = sys.argv[1:3]
res = run_process([bench, "-m", model, "-ngl", "99", "-fa", "1", "-ub", "2048", "-p", "0", "-n", "32", "-d", "4096",
                   "-r", "5", "-o", "jsonl", "--progress"], timeout_s=300)
t0 = res.lines[0].t_ns if res.lines else 0
for ln in res.lines:
    if ln.stream == "err" and "llama-bench:" in ln.text or ln.stream == "out":
        print(f"{(ln.t_ns - t0) / 1e6:10.2f} ms {ln.stream} {ln.text.strip()[:90]}")
row = json.loads(res.text("out").strip().splitlines()[0])
print("llama-bench's own ms:", [round(x / 1e6, 2) for x in row["samples_ns"]])
print("windows ms:", [round((w.end_ns - w.start_ns) / 1e6, 2) for w in extract_windows(res)])
EOF
  timeout 200 $T bench $C --model $M -w tg32@d4096 -- $G -r 5 2>&1 | tail -8
  cp .devcache/db.sqlite $OUT/db.sqlite
fi
true
