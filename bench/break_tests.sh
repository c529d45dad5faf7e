#!/usr/bin/env bash
# Each rewritten test fails when its feature breaks: for each case, a worktree of HEAD gets
# one line of the feature broken (sed), the test runs there against the broken code, and
# the line printed says whether it failed (it must). Nothing in this checkout is changed.
# Run: bash bench/break_tests.sh [CASE …]   (default: every case below)
set -uo pipefail
cd "$(dirname "$0")/.."
PY=$PWD/.venv/bin/python
declare -A FILE SED TEST
FILE[noise]=src/tokensleuth/noise.py
SED[noise]='s/max(R_MIN, round(r))/max(R_MIN, round(r) + 1)/'
TEST[noise]=tests/test_noise.py::test_compare_without_r_chooses_its_repetitions
FILE[aa-cells]=src/tokensleuth/compare.py
SED[aa-cells]='s/"comparisons": \[c.to_json() for c in comps\]/"comparisons": [c.to_json() for c in comps[:1]]/'
TEST[aa-cells]=tests/test_compare.py::test_aa_is_never_a_finding
FILE[no-regression]=src/tokensleuth/bisect.py
SED[no-regression]='s/    if verdicts == {"same"}:/    if verdicts == {"same", "never"}:/'
TEST[no-regression]=tests/test_bisect.py::test_no_regression_between_endpoints
FILE[kill-resume]=src/tokensleuth/compare.py
SED[kill-resume]='s/resume=resume or create, arms=arms)/resume=False, arms=arms)/'
TEST[kill-resume]=tests/faults/test_kill_anywhere.py::test_compare_killed_anywhere
FILE[fleet-pairs]=src/tokensleuth/executors/__init__.py
SED[fleet-pairs]='s/key: tuple\[str, str, int\] | int = (j.model, j.workload, j.pair) if j.pair >= 0 else -j.trial_id - 1/key: tuple[str, str, int] | int = -j.trial_id - 1/'
TEST[fleet-pairs]=tests/test_fleet.py::test_parallel_bisect_on_two_machines_finds_the_culprit
FILE[one-sided]=src/tokensleuth/bisect.py
SED[one-sided]='s/            if len(sides) == 1 and None not in sides:/            if sides == {"never"}:/'
TEST[one-sided]=tests/test_bisect.py::test_candidates_are_judged_on_the_cells_that_regressed
cases=("$@")
[ ${#cases[@]} -eq 0 ] && cases=(noise aa-cells no-regression kill-resume fleet-pairs one-sided)
bad=0
for c in "${cases[@]}"; do
    wt=$(mktemp -d)/wt
    git worktree add -q --detach "$wt" HEAD
    before=$(md5sum "$wt/${FILE[$c]}")
    sed -i "${SED[$c]}" "$wt/${FILE[$c]}"
    if [ "$(md5sum "$wt/${FILE[$c]}")" = "$before" ]; then
        echo "$c: the breakage did not apply to ${FILE[$c]}"; bad=1
    else
        line=$(cd "$wt" && git diff -U0 | grep '^+ ' | head -1 | sed 's/^+ *//')
        if (cd "$wt" && PYTHONPATH=$wt/src:$wt CI=true timeout 1500 "$PY" -m pytest -q -x -p no:cacheprovider \
                "${TEST[$c]}" >"$wt/../log" 2>&1); then
            echo "$c: ${TEST[$c]} PASSED with ${FILE[$c]}: $line — it cannot tell"; bad=1
        else
            echo "$c: ${TEST[$c]} fails with ${FILE[$c]}: $line ($(grep -m1 -E '^E ' "$wt/../log" | cut -c1-110))"
        fi
    fi
    git worktree remove --force "$wt"
done
exit $bad
