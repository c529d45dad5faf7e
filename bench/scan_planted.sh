#!/usr/bin/env bash
# Issue 43 item 0 on the real engine: the scan of the planted 25-commit history the scan test
# uses (tests/planted.SCAN_HISTORY: an all-model slowdown, a MoE-only one, llama-bench's -ub
# default 512 -> 8, the slowdown taken out, an output change, a commit that does not build,
# neutral commits), on this machine's CPU with the tiny MoE and dense models, at the band asked:
#   bash bench/scan_planted.sh BAND [extra scan options…]
# Prints the scan's report, its builds, verdicts and wall time, and which planted steps it named.
# A store of its own per band (out/scan_planted_BAND.sqlite); after a kill, the same command
# with --resume goes on.
# SPIN_US and MOE_US size the plants (default 100 us per decode call and 25 us per MoE layer:
# 10-20% steps on this machine's 0.55 ms token, the size the issue's planted history had; the
# scan test's own are 6000 and 1000).
set -euo pipefail
cd "$(dirname "$0")/.."
export SPIN_US=${SPIN_US:-100} MOE_US=${MOE_US:-25}
BAND=${1:?BAND, e.g. 2%}; shift
mkdir -p out
export TOKENSLEUTH_DB=$PWD/out/scan_planted_${BAND%\%}_${SPIN_US}.sqlite
T=.venv/bin/tokensleuth
[ -f out/moe.gguf ] || $T model synth --arch qwen3moe --size tiny --out out/moe.gguf
[ -f out/dense.gguf ] || $T model synth --arch llama --size tiny --out out/dense.gguf
read -r REPO BASE TO < <(.venv/bin/python - <<'PY'
from tests.planted import SCAN_HISTORY, bisect_history
import os
spin, moe = int(os.environ["SPIN_US"]), int(os.environ["MOE_US"])
repo, shas = bisect_history(SCAN_HISTORY, branch=f"scan-spin{spin}", spin_us=spin, moe_us=moe)
print(repo, shas["base"], shas[SCAN_HISTORY[-1]])
PY
)
start=$(date +%s)
rc=0
$T scan --repo "$REPO" --from "$BASE" --to "$TO" --model out/moe.gguf --model out/dense.gguf -w pp64 -w tg8 \
    --band "$BAND" --samples 4 --json "out/scan_planted_${BAND%\%}.json" "$@" -- -r 2 -t 1 || rc=$?
echo "scan at ±$BAND: exit $rc, $(( $(date +%s) - start )) s wall"
.venv/bin/python - "out/scan_planted_${BAND%\%}.json" "$REPO" <<'PY'
import json, subprocess, sys
from tests.planted import SCAN_HISTORY, bisect_history
r = json.load(open(sys.argv[1]))
import os
spin, moe = int(os.environ["SPIN_US"]), int(os.environ["MOE_US"])
_, shas = bisect_history(SCAN_HISTORY, branch=f"scan-spin{spin}", spin_us=spin, moe_us=moe)
name = {sha[:10]: n for n, sha in shas.items()}
planted = {"spin", "culprit", "ubatch", "unspin"}
found = {name.get(s["first_bad"], s["first_bad"]): (s["direction"], s["cause"]) for s in r["steps"]}
print("planted steps:", ", ".join(f"{n} {'found ' + '/'.join(found[n]) if n in found else 'MISSED'}" for n in sorted(planted)))
print("false steps:", [n for n in found if n not in planted] or "none")
print("undecided:", [f"{name.get(u['from'], u['from'])} → {name.get(u['to'], u['to'])}" for u in r["undecided"]] or "none")
res = r.get("resolution") or {}
import sqlite3
engine_s = sqlite3.connect(os.environ["TOKENSLEUTH_DB"]).execute(  # the store is this scan's alone
    "SELECT COALESCE(SUM(t1_ns - t0_ns), 0) / 1e9 FROM trials WHERE t1_ns IS NOT NULL").fetchone()[0]
print(f"builds: {r.get('builds')} | engine time: {engine_s:.0f} s in all runs of this store | wall: {r.get('wall_s', 0):.0f} s")
print("resolution:", {k: res[k] for k in list(res)[:6]})
PY
exit $rc
