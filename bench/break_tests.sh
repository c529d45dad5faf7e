#!/usr/bin/env bash
# Each test that asserts what the code decides fails when that decision breaks. For each case, a
# copy of this checkout (its tracked and untracked files as they are now) gets one line of the
# feature broken, the test runs there against the broken code, and it must fail. Nothing in this
# checkout is changed.
#
# A breakage is a fixed string that must occur exactly once in its file, and its replacement:
# when the code moves (or a case's test is renamed), the run stops before any test and names
# the case to follow it; tests/test_break_tests.py checks that in the suite. Only a
# test that fails (pytest's "N failed") passes the check; one that passes, errors in setup or
# hangs past the limit cannot tell. The table goes to bench/results/break_tests.txt when every
# case ran; the exit status is 0 only when each breakage applied and each test failed.
#
#   bash bench/break_tests.sh [--check] [CASE …]   (default: every case; --check: only that each applies)
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-$PWD/.venv/bin/python}
OUT=bench/results/break_tests.txt
LIMIT=2400  # seconds per test: a hang guard (the planted bisect takes minutes on 2 cores)

declare -A FILE PAT REP TEST
order=()
add() { order+=("$1"); FILE[$1]=$2; PAT[$1]=$3; REP[$1]=$4; TEST[$1]=$5; }

# (the real compare's -r choice is capped at 20 on a quiet machine, where one more is invisible:
# the rule's own test on fixed components sees it)
add noise src/tokensleuth/analysis/noise.py \
    'max(R_MIN, round(r))' 'max(R_MIN, round(r) + 1)' \
    tests/test_noise.py::test_best_reps_is_cochrans_allocation_bounded
add aa-cells src/tokensleuth/studies/compare.py \
    '"comparisons": [c.to_json() for c in comps],' '"comparisons": [c.to_json() for c in comps[:1]],' \
    tests/test_compare.py::test_aa_gives_each_cell_the_rules_verdict
add pairing src/tokensleuth/drivers/verdicts/comparisons.py \
    'ct = [c[p][0] for p in pairs]' 'ct = [c[p][0] for p in reversed(pairs)]' \
    tests/test_compare.py::test_planted_slowdown_is_found_with_the_interval_of_its_pairs
add edge-stop src/tokensleuth/drivers/verdicts/pairs.py \
    'return stats.side(c.estimate, spec.edge) is None' 'return c.verdict == "unresolved"' \
    tests/test_compare.py::test_a_one_sided_question_stops_once_its_side_is_settled
add until src/tokensleuth/drivers/verdicts/pairs.py \
    'if until is not None and until(comps):' 'if until is not None and until(comps) and False:' \
    tests/test_compare.py::test_a_callers_answered_question_stops_the_rounds
add futility src/tokensleuth/drivers/verdicts/pairs.py \
    'if spec.edge is None and not stats.can_still_decide(c.estimate, spec.band, spec.max_pairs):' 'if False:' \
    tests/test_rules.py::test_the_replay_stops_where_the_driver_did
add cold-r src/tokensleuth/drivers/verdicts/pairs.py \
    'asked + n_cold if asked is not None and n_cold else None)' \
    'asked if asked is not None and n_cold else None)' \
    tests/test_cold.py::test_a_compare_adds_the_cold_repetitions_to_r
add resume src/tokensleuth/drivers/verdicts/pairs.py \
    'resume=resume or create, arms=arms)' 'resume=False, arms=arms)' \
    tests/test_compare.py::test_resume_continues_with_its_pairs
add kill-resume src/tokensleuth/drivers/verdicts/pairs.py \
    'resume=resume or create, arms=arms)' 'resume=False, arms=arms)' \
    tests/faults/test_kill_anywhere.py::test_compare_killed_anywhere
add recover src/tokensleuth/store/leases.py \
    'lost = tuple(self._recover(db, study_id))' 'lost = ()  # trials a killed run left running stay so' \
    tests/test_shared_process.py::test_a_kill_inside_a_shared_process_loses_and_duplicates_nothing
add diagnosis src/tokensleuth/drivers/verdicts/compare.py \
    'if any(c.verdict == "unresolved" for c in comps):' 'if False:' \
    tests/test_diagnose_real.py::test_threads_on_every_cpu_beside_a_busy_process_are_named_and_the_fix_is_measured
add no-regression src/tokensleuth/drivers/hunts/bisect/verdicts.py \
    'if verdicts == {"same"}:' 'if verdicts == {"same", "never"}:' \
    tests/test_bisect_endpoints.py::test_only_same_everywhere_is_no_regression
add controls src/tokensleuth/drivers/hunts/bisect/verdicts.py \
    'if control_verdicts and all(v == "same" for v in control_verdicts):' \
    'if control_verdicts and all(v == "never" for v in control_verdicts):' \
    tests/test_bisect.py::test_bisect_finds_the_planted_moe_regression_and_resumes
add one-sided src/tokensleuth/drivers/hunts/bisect/steps.py \
    'if len(sides) == 1 and None not in sides:' 'if sides == {"never"}:' \
    tests/test_bisect.py::test_candidates_are_judged_on_the_cells_that_regressed
add confounded src/tokensleuth/drivers/verdicts/comparisons.py \
    'comp.verdict = stats.verdict(hull, spec.band)' 'comp.verdict = comp.verdict' \
    tests/test_confounded_decisions.py::test_a_verdict_a_busy_neighbour_steered_waits
add judge-waits src/tokensleuth/drivers/verdicts/judge.py \
    '"edge": edge, "confounders": "wait",' '"edge": edge, "confounders": "said",' \
    tests/test_bisect.py::test_no_regression_between_endpoints
add fleet-pairs src/tokensleuth/executors/base.py \
    'key: tuple[str, str, int] | int = (j.model, j.workload, j.pair) if j.pair >= 0 else -j.trial_id - 1' \
    'key: tuple[str, str, int] | int = -j.trial_id - 1' \
    tests/test_fleet.py::test_parallel_bisect_on_two_machines_finds_the_culprit
# the kernel diff (analysis/kernel_diff.py, analysis/kernels.py): each share computed, the union not the sum, the 1% rule,
# the interval, own time, a withheld table everywhere, sampled records that cross the next launch
add share-rest src/tokensleuth/analysis/kernel_diff.py \
    'out["gaps_share" if untraced else "unexplained_share"] = rest' \
    'out["gaps_share" if untraced else "unexplained_share"] = 0.0' \
    tests/kernels/test_figures.py::test_each_share_is_computed_and_can_be_told_from_a_constant
add share-sum src/tokensleuth/analysis/kernel_diff.py \
    '"kernels", "busy_ms_per_token"), ("outside"' '"kernels", "kernel_ms_per_token"), ("outside"' \
    tests/kernels/test_figures.py::test_each_share_is_computed_and_can_be_told_from_a_constant
add records-rule src/tokensleuth/analysis/kernels.py \
    'RECORDS = 0.01' 'RECORDS = 0.20' \
    tests/kernels/test_figures.py::test_the_records_rule_withholds_at_one_percent_not_at_twenty
add share-interval src/tokensleuth/analysis/stats.py \
    'return float(lo), float(hi)' 'return 0.0, 2.0' \
    tests/kernels/test_figures.py::test_each_share_is_computed_and_can_be_told_from_a_constant
add own-time src/tokensleuth/analysis/kernels.py \
    'credit[lead] += nxt - t' 'credit[lead] += 0' \
    tests/kernels/test_figures.py::test_a_kernel_that_grew_only_beside_a_slowed_one_is_named_so_below_it
add beside-verdict src/tokensleuth/analysis/kernel_diff.py \
    'verdict = f"{verdict} beside others"' 'verdict = verdict' \
    tests/kernels/test_figures.py::test_a_kernel_that_grew_only_beside_a_slowed_one_is_named_so_below_it
add withheld-rows src/tokensleuth/analysis/kernel_diff.py \
    'out["rows"] = []' 'out["rows"] = rows' \
    tests/kernels/test_figures.py::test_a_withheld_table_names_no_kernel_anywhere
add sample-cross src/tokensleuth/analysis/kernels.py \
    'm &= ~late' 'm &= m' \
    tests/kernels/test_h100_traces.py::test_sample_16_records_cross_the_next_launch_and_are_withheld_everywhere
add compare-note src/tokensleuth/drivers/verdicts/comparisons.py \
    'if self.clean_verdict == self.verdict:' 'if True:' \
    tests/test_confounded_decisions.py::test_a_verdict_a_busy_neighbour_steered_waits
add bin-backends src/tokensleuth/sources/configure.py \
    'found += _linked_backends(folder / program)' 'found += []' \
    tests/sources/test_backends.py::test_a_static_program_answers_by_what_it_links
add store-race src/tokensleuth/store/database.py \
    'if "locked" not in str(exc) or time.monotonic() + delay > deadline:' 'if True:' \
    tests/test_store_race.py::test_processes_opening_a_new_store_together_all_open_it
add name-tags src/tokensleuth/kernels/__init__.py \
    'return _ANONYMOUS.sub("", _UNIT_TAG.sub("", name))' 'return name' \
    tests/kernels/test_h100_traces.py::test_a_kernel_of_one_source_has_one_name_whatever_the_build_path
add argv-join src/tokensleuth/engines/llamabench/argv.py \
    'if name in given:' 'if False:' \
    tests/test_arm_flags.py::test_an_arms_flag_is_passed_once_with_its_value
add arm-flags src/tokensleuth/trials/arms.py \
    '"flags": lambda a: _options(spec.flags_of(a)),' '"flags": lambda a: _options(a.flags),' \
    tests/test_arm_differences.py::test_the_flags_are_each_arms_after_the_one_join
add repro-command src/tokensleuth/studies/compare.py \
    '("--separate-processes", spec.separate_processes),' '("--separate-processes", False),' \
    tests/test_arm_differences.py::test_the_command_that_reproduces_a_study_is_read_back_as_its_identity
add issue-once src/tokensleuth/pages/issue.py \
    'if obj.get("summary") and str(obj["summary"]) not in md:' 'if obj.get("summary"):' \
    tests/report/test_html.py::test_bench_page_and_issue_markdown
# sentences that compare two answers (docs/measurements.md): the words follow the comparison
add bisect-verified src/tokensleuth/drivers/hunts/bisect/answer.py \
    'result["verified"] = all(c.verdict == want for c' 'result["verified"] = all(c.verdict != "same" for c' \
    tests/test_bisect.py::test_the_first_bad_is_said_verified_only_where_its_parent_against_it_gives_the_regression
add scan-done src/tokensleuth/drivers/hunts/scan/result.py \
    'status = "done" if not undecided else' 'status = "done" if undecided is not None else' \
    tests/test_scan.py::test_every_interval_is_said_decided_only_where_none_is_undecided
add scan-unsampled src/tokensleuth/drivers/hunts/scan/result.py \
    'gaps = [q - p - 1 for p, q, _ in same]' 'gaps = [q - p - 1 for p, q in zip(pts, pts[1:], strict=False)]' \
    tests/test_scan.py::test_the_longest_unsampled_interval_is_one_judged_the_same_never_an_unresolved_one
add scan-none-same src/tokensleuth/drivers/hunts/scan/result.py \
    '"longest_unsampled": max(gaps) if gaps else None,' '"longest_unsampled": max(gaps, default=0),' \
    tests/test_scan.py::test_the_longest_unsampled_interval_is_one_judged_the_same_never_an_unresolved_one
add scan-spent src/tokensleuth/drivers/hunts/scan/state.py \
    'self.keep_spent()  # (a kill after this line loses none of what was spent)' 'pass' \
    tests/test_scan.py::test_a_killed_scan_counts_the_builds_and_time_it_spent_before_its_next_verdict
add unity-relocatable src/tokensleuth/sources/configure.py \
    '"-DCMAKE_UNITY_BUILD_RELOCATABLE=ON",' '"-DCMAKE_UNITY_BUILD_RELOCATABLE=OFF",' \
    tests/sources/test_build_reuse.py::test_the_next_commit_recompiles_only_what_changed
add scan-spent-thread src/tokensleuth/drivers/hunts/scan/state.py \
    'if threading.get_ident() == self.thread:' 'if True:' \
    tests/test_scan.py::test_a_killed_scan_counts_the_builds_and_time_it_spent_before_its_next_verdict
add split-why src/tokensleuth/drivers/hunts/scan/refine.py \
    '"undecided": "undecided"}.get(' '"undecided": "the same"}.get(' \
    tests/test_scan.py::test_a_split_says_the_same_only_of_an_interval_whose_stored_verdict_is_the_same
add spread-words src/tokensleuth/drivers/verdicts/causes.py \
    'agree within {between:.1%}"))' 'agree within {within:.1%}"))' \
    tests/test_diagnose.py::test_the_spreads_are_said_with_each_figure_in_its_place
add trace-cost src/tokensleuth/analysis/traces.py \
    '"slower": lo > 0}' '"slower": d > 0}' \
    tests/kernels/test_figures.py::test_the_trace_cost_is_said_from_the_traced_and_untraced_ms_per_token_where_the_trace_slowed_the_program
# (name-tags above leaves the tags in; this one strips past them: two kernels read as one)
add name-overstrip src/tokensleuth/kernels/__init__.py \
    '[0-9a-f]{8}::")' '[0-9a-f]{8}::[a-z_]*")' \
    tests/kernels/test_tracers.py::test_one_kernel_built_in_two_folders_has_one_name_and_two_kernels_keep_two
add judge-stored src/tokensleuth/drivers/verdicts/judge.py \
    'known = self.answered(a, b, models, band, max_pairs, fresh, edge)' 'known = None' \
    tests/test_judge_stored.py::test_a_finished_comparison_is_read_back_on_a_fresh_cache_without_building
add judge-stored-open src/tokensleuth/drivers/verdicts/judge.py \
    'or any(still_open(c, spec) for c in comps):' 'or False:' \
    tests/test_judge_stored.py::test_a_finished_comparison_is_read_back_on_a_fresh_cache_without_building
add scan-lazy src/tokensleuth/drivers/hunts/scan/refine.py \
    'if i in measured:  #' 'if False:  #' \
    tests/test_scan.py::test_a_finished_scan_resumed_with_a_later_end_measures_only_the_new_part
add bisect-ends-stored src/tokensleuth/drivers/hunts/bisect/answer.py \
    'known = bis.answered(0, len(cands) - 1, spec["models"], spec["band"], spec["max_pairs"])' \
    'known = None' \
    tests/test_bisect.py::test_bisect_finds_the_planted_moe_regression_and_resumes
add profile-include src/tokensleuth/sources/configure.py \
    'cfg.append("-UCMAKE_PROJECT_INCLUDE")' 'pass' \
    tests/sources/test_build_reuse.py::test_the_next_commit_recompiles_only_what_changed
# the quantiles and the drift's line from scipy.special: scipy.stats's own floats; no module loads scipy.stats
add quantile-edge src/tokensleuth/analysis/stats.py \
    'return -math.inf if q == 0 else float(special.stdtrit(df, q))' 'return float(special.stdtrit(df, q))' \
    tests/test_stats.py::test_the_quantiles_are_scipy_stats_own_floats
add line-fit src/tokensleuth/analysis/stats.py \
    'tiny = 1.0e-20' 'tiny = 1.0e-12' \
    tests/test_stats.py::test_the_line_fit_is_linregress_own
add stats-at-load src/tokensleuth/drivers/verdicts/causes.py \
    'from tokensleuth.analysis.stats import line_fit' 'from tokensleuth.analysis.stats import line_fit; import scipy.stats' \
    tests/test_stats.py::test_no_module_imports_scipy_stats_when_loaded
# a new store's existence asked before its write permission; ggml kept from git; the tokenizer cut
add store-new-file src/tokensleuth/store/files.py \
    'if not path.is_file():' 'if False:' \
    tests/test_store_race.py::test_a_store_created_by_another_process_during_the_write_check_is_writable
add ggml-git src/tokensleuth/sources/configure.py \
    'cfg.append(f"-DGIT_EXE={true}")' 'pass' \
    tests/sources/test_build_reuse.py::test_the_next_commit_recompiles_only_what_changed
add vocab-cut src/tokensleuth/models/synth.py \
    'val = val[:size]' 'val = list(val)' \
    tests/models/test_models.py::test_a_tokenizer_cut_to_its_first_tokens_makes_a_model_the_engine_runs
# a kernel window read short left out; what held a scan's interval open; a withheld cell's note
add whole-windows src/tokensleuth/analysis/kernels.py \
    'if f >= 1 - RECORDS]' 'if True]' \
    tests/kernels/test_figures.py::test_a_window_read_short_is_left_out_and_one_read_whole_is_kept
add open-why src/tokensleuth/drivers/hunts/scan/result.py \
    'if c.get("steered") and c["verdict"] == "unresolved"]' 'if c.get("confounded")]' \
    tests/test_scan.py::test_an_interval_a_confounder_held_open_says_so_and_no_other_does
add withheld-note src/tokensleuth/drivers/verdicts/comparisons.py \
    'if self.steered and self.clean is None:' 'if False:' \
    tests/test_confounded_decisions.py::test_too_few_clean_pairs_give_no_interval_to_answer_with
# a bisect's answer worded by the direction it followed; an sdist from the index only with its hash
add bisect-direction src/tokensleuth/studies/bisect.py \
    'return "change" if ratio is None else "slowdown" if ratio < 1 else "speed-up"' 'return "regression"' \
    tests/test_bisect.py::test_the_answer_names_the_direction_the_bisect_followed
add sdist-hash src/tokensleuth/sources/fetch.py \
    'if want is None or h.hexdigest() != want:' 'if False:' \
    tests/sources/test_fetch_index.py::test_a_file_list_that_does_not_give_the_sdist_leaves_nothing_and_pip_is_asked

check=0
[ "${1:-}" = --check ] && { check=1; shift; }
cases=("$@")
[ ${#cases[@]} -eq 0 ] && cases=("${order[@]}")
for c in "${cases[@]}"; do
    [ -n "${FILE[$c]:-}" ] || { echo "no case $c (cases: ${order[*]})" >&2; exit 2; }
done

# every breakage must still apply, once, before anything runs
stale=0
declare -A LINE
for c in "${cases[@]}"; do
    n=$(grep -cF -- "${PAT[$c]}" "${FILE[$c]}" 2>/dev/null)
    if [ "${n:-0}" != 1 ]; then
        echo "STALE $c: ${FILE[$c]} holds ${n:-no file, 0} line(s) with: ${PAT[$c]}" >&2
        stale=1
    else
        LINE[$c]=$(grep -nF -- "${PAT[$c]}" "${FILE[$c]}" | cut -d: -f1)
    fi
done
[ $stale = 0 ] || { echo "bench/break_tests.sh: follow the moved code in the cases above" >&2; exit 2; }

sed_pat() { printf '%s' "$1" | sed 's/[][\.*^$/]/\\&/g'; }
sed_rep() { printf '%s' "$1" | sed 's/[\/&]/\\&/g'; }

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# one snapshot of the checkout for every case: an edit meanwhile does not mix into the run
mkdir "$work/snap"
git ls-files -z -co --exclude-standard | tar --null --ignore-failed-read -T - -cf - 2>/dev/null | tar -xf - -C "$work/snap"
rev=$(git describe --always --dirty 2>/dev/null)
"$PY" -c "import pytest" 2>/dev/null || { echo "bench/break_tests.sh: $PY has no pytest — run bash scripts/setup.sh \
(it makes .venv) or give PY=a python with the project and its test extras installed" >&2; exit 2; }
# ... and Ray, for the fleet case
"$PY" -c "import ray" 2>/dev/null || { echo "bench/break_tests.sh: $PY has no ray — the fleet case needs it \
(bash scripts/setup.sh installs it)" >&2; exit 2; }
# every case's test must exist: a renamed one stops the run like moved code
tests=()
for c in "${cases[@]}"; do tests+=("${TEST[$c]}"); done
if ! (cd "$work/snap" && PYTHONPATH=$work/snap/src:$work/snap "$PY" -m pytest -q --collect-only -p no:cacheprovider \
        -p no:xdist "${tests[@]}" >"$work/log" 2>&1); then
    grep -E "^ERROR|not found" "$work/log" >&2 || tail -5 "$work/log" >&2
    echo "bench/break_tests.sh: a case names a test that is not there (above)" >&2
    exit 2
fi
head="# bash bench/break_tests.sh$([ $check = 1 ] && echo ' --check') at $rev, $(date -u +%Y-%m-%dT%H:%MZ), $(nproc) CPUs"
[ $check = 1 ] && head="$head: each breakage applies once to the source; no test ran"
echo "$head"

rows=()
bad=0
for c in "${cases[@]}"; do
    wt=$work/wt
    rm -rf "$wt"
    if [ $check = 1 ]; then  # (only the one file is edited and read: a copy of it, not of the checkout)
        mkdir -p "$(dirname "$wt/${FILE[$c]}")" && cp -a "$work/snap/${FILE[$c]}" "$wt/${FILE[$c]}"
    else
        cp -a "$work/snap" "$wt"
    fi
    f=$wt/${FILE[$c]}
    sed -i "s/$(sed_pat "${PAT[$c]}")/$(sed_rep "${REP[$c]}")/" "$f"
    where="${FILE[$c]#src/tokensleuth/}:${LINE[$c]}"
    if [ "$(grep -cF -- "${REP[$c]}" "$f")" != "$(( $(grep -cF -- "${REP[$c]}" "$work/snap/${FILE[$c]}") + 1 ))" ]; then
        result="NOT APPLIED (sed left the line as it was)"; bad=1
    elif ! "$PY" -m py_compile "$f" 2>"$work/log"; then
        result="BROKEN PYTHON ($(tail -1 "$work/log" | cut -c1-80))"; bad=1
    elif [ $check = 1 ]; then
        result="applies"
    else
        (cd "$wt" && PYTHONPATH=$wt/src:$wt CI=true timeout "$LIMIT" "$PY" -m pytest -q -x -p no:cacheprovider \
            -p no:xdist "${TEST[$c]}" >"$work/log" 2>&1)
        rc=$?
        if [ $rc = 1 ] && grep -qE '[0-9]+ failed' "$work/log"; then
            result="fails: $(grep -m1 -E '^E ' "$work/log" | sed 's/^E *//' | cut -c1-100)"
        elif [ $rc = 0 ]; then
            result="PASSED — cannot tell"; bad=1
        elif [ $rc = 124 ]; then
            result="TIMED OUT after ${LIMIT} s — cannot tell"; bad=1
        else
            result="ERROR (pytest exit $rc: $(tail -1 "$work/log" | cut -c1-80)) — cannot tell"; bad=1
        fi
    fi
    row=$(printf '%-13s %-30s %s\n    %s' "$c" "$where" "$result" "${TEST[$c]}")
    echo "$row"
    rows+=("$row")
done

if [ ${#cases[@]} -eq ${#order[@]} ] && [ $check = 0 ]; then
    { echo "$head"; printf '%s\n' "${rows[@]}"; } > "$OUT"
    echo "wrote $OUT"
fi
exit $bad
