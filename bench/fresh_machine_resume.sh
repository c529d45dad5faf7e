#!/usr/bin/env bash
# What a scan resumed on a fresh machine builds: the device sessions' case (the store carried in,
# the build cache empty). A scan of the planted history's 7 commits on the tiny MoE model
# (the test suite's, tests/planted.py) from its two ends (--samples 1), so its one step is
# bisected; killed once the bisect has stored a step; resumed with an empty build cache (the
# compiler cache kept, as a device call carries it). Prints the resumed run's log and the builds
# it made: no sampled point is built for the level rounds it had, nor an endpoint for the
# comparison it had; a later comparison that runs one builds it then (here the bad end, for the
# interval after the culprit).
#
#   bash bench/fresh_machine_resume.sh        (after the suite has made its planted repo and models)
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-$PWD/.venv/bin/python}
T=$PWD/.venv/bin/tokensleuth
read -r REPO BASE END < <($PY -c "
from tests.planted import bisect_history
repo, shas = bisect_history()
print(repo, shas['base'], shas['n4'])")
CACHE=$($PY -c "from tokensleuth.core.paths import cache_dir; print(cache_dir())")
M=$(ls -t "$CACHE"/test-models/*.llamaspm-qwen3moe-tiny-Q8_0.gguf | head -1)  # (the newest engine's)
R=$(mktemp -d)
export TOKENSLEUTH_DB=$R/db.sqlite
ARGS=(scan --repo "$REPO" --from "$BASE" --to "$END" --model "$M" -w tg16 --band 30% --max-pairs 10 --samples 1
      --no-profile --json "$R/s.json")
"$T" "${ARGS[@]}" -- -r 2 -t 1 >"$R/first.log" 2>&1 &
pid=$!
steps() { sqlite3 "$TOKENSLEUTH_DB" "SELECT value_json FROM state WHERE key='steps' AND study_id IN
    (SELECT id FROM studies WHERE kind='bisect')" 2>/dev/null | $PY -c "import json,sys; t=sys.stdin.read().strip(); print(len(json.loads(t)) if t else 0)"; }
while kill -0 $pid 2>/dev/null && [ "$(steps)" -lt 1 ]; do sleep 0.3; done
kill -9 $pid 2>/dev/null || true
wait $pid 2>/dev/null || true
echo "killed after $(steps) bisect step(s) were stored"
CCACHE_DIR=$CACHE/ccache SCCACHE_DIR=$CACHE/sccache TOKENSLEUTH_CACHE=$R/fresh \
    "$T" "${ARGS[@]}" --resume -- -r 2 -t 1 >"$R/resume.log" 2>&1 || true
sed -n '1,/^## Scan/p' "$R/resume.log"
echo "builds the resumed run made in its empty cache:"
for f in "$R"/fresh/builds/*/build.json; do
    $PY -c "import json; d = json.load(open('$f')); print(' ', d['commit'][:10])"
done
rm -rf "$R"
