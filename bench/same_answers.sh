#!/usr/bin/env bash
# A refactor must not change an answer: the same compare, bisect, decompose and scan on the planted
# repository (tests/planted.py: base + a busy wait per decode call), run by the code at OLD
# (default: this session's start) and by the working tree, with one venv and one build cache.
# Prints each run's verdicts and whether the JSON of the two has the same keys, everywhere.
#   bash bench/same_answers.sh [OLD_REV]
set -euo pipefail
cd "$(dirname "$0")/.."
OLD=${1:-00aa983}
PY=$PWD/.venv/bin/python
W=$(mktemp -d)
trap 'git worktree remove --force "$W/old" >/dev/null 2>&1 || true; rm -rf "$W"' EXIT
git worktree add -q --detach "$W/old" "$OLD"
REPO=$($PY -c 'from tests.planted import planted_repo; print(planted_repo())')
MODEL=$($PY -c '
from tests.conftest import _model
from tokensleuth.sources import DEFAULT_ENGINE
from tokensleuth.sources.build import BuildCache
c = BuildCache(); print(_model(c.get(DEFAULT_ENGINE), c.llama_tree(DEFAULT_ENGINE), "llama"))')
git -C "$REPO" format-patch -q -1 HEAD -o "$W/patches"
run() {  # run WHICH(old|new) NAME ARGS…
    local which=$1 name=$2; shift 2
    local src=$PWD/src; [ "$which" = old ] && src=$W/old/src
    PYTHONPATH=$src TOKENSLEUTH_DB=$W/$which.sqlite TOKENSLEUTH_SPIN_US=1500 \
        $PY -m tokensleuth.cli "$1" --json "$W/$which-$name.json" "${@:2}" > "$W/$which-$name.txt" 2>&1 \
        || { echo "$which $name failed:"; tail -3 "$W/$which-$name.txt"; }
}
for which in old new; do
    run $which compare compare --arm "base=git:$REPO@HEAD~1" --arm "spin=git:$REPO@HEAD" --model "$MODEL" \
        -w tg32 --max-pairs 10 -- -r 3 -t 1
    run $which bisect bisect --repo "$REPO" --good HEAD~1 --bad HEAD --model "$MODEL" -w tg32 --max-pairs 10 \
        -- -r 3 -t 1
    run $which decompose decompose --repo "$REPO" --base HEAD~1 --patches "$W"/patches/*.patch --model "$MODEL" \
        -w tg32 --max-pairs 10 --no-output-check -- -r 3 -t 1
    run $which scan scan --repo "$REPO" --from HEAD~1 --to HEAD --model "$MODEL" -w tg32 --max-pairs 10 \
        --samples 2 --no-profile -- -r 3 -t 1
done
$PY - "$W" <<'EOF'
import json, sys
from pathlib import Path
w = Path(sys.argv[1])
def keys(o, at=""):
    if isinstance(o, dict):
        return {f"{at}.{k}" for k in o} | {x for k, v in o.items() for x in keys(v, f"{at}.{k}")}
    if isinstance(o, list):
        return {x for v in o for x in keys(v, f"{at}[]")}
    return set()
def answer(name, o):
    if name == "compare":
        return [(c["workload"], c["candidate"], c["verdict"]) for c in o.get("comparisons", [])]
    if name == "bisect":
        return (o.get("status"), o.get("first_bad"), o.get("verified"))
    if name == "scan":
        return (o.get("status"), [(s.get("first_bad"), s.get("direction"), s.get("cause")) for s in o.get("steps", [])],
                len(o.get("undecided", [])))
    return (o.get("status"), [(s.get("patch"), s.get("decision")) for s in o.get("steps", [])])
for name in ("compare", "bisect", "decompose", "scan"):
    got = {}
    for which in ("old", "new"):
        p = w / f"{which}-{name}.json"
        got[which] = json.loads(p.read_text()) if p.exists() else {}
        print(f"{name:9} {which}: {answer(name, got[which])}")
    ko, kn = keys(got["old"]), keys(got["new"])
    same = "NO JSON" if not (ko and kn) else "same keys" if ko == kn else f"keys differ: only old {sorted(ko - kn)[:6]}, only new {sorted(kn - ko)[:6]}"
    print(f"{name:9} JSON: {same} ({len(kn)} paths)")
EOF
