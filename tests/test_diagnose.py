"""diagnose: the noise's cause from synthetic trial tables (pure), and the prescription's words."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats as sps

from tokensleuth.analysis.confounders import busy_names
from tokensleuth.drivers.verdicts.causes import Diagnosis, Finding, Proc, classify, where_work_runs
from tokensleuth.drivers.verdicts.diagnose import Probe, prescribe, rerun_command
from tokensleuth.engines.llamabench.argv import with_threads

LEVEL = math.log(100.0)


def table(levels: list[float], reps: int = 5, within: float = 0.01, seed: int = 0) -> list[Proc]:
    """Processes alternating A/B, one second apart, each ``reps`` repetitions around its level."""
    rng = np.random.default_rng(seed)
    return [Proc("AB"[i % 2], "m\x00tg32\x000", float(i), tuple(LEVEL + lv + rng.normal(0, within, reps)))
            for i, lv in enumerate(levels)]


def normal(n: int, sd: float, seed: int = 1) -> list[float]:
    return list(np.random.default_rng(seed).normal(0, sd, n))


def test_between_dominated_noise_is_named_with_both_spreads() -> None:
    d = classify(table(normal(20, 0.15)), cpus=2)
    assert d.codes() == ["between"]
    assert 0.06 < d.between_cv < 0.25 and 0.005 < d.within_cv < 0.015  # sampled: 20 levels at 15%
    assert "processes differ by" in d.findings[0].seen


def test_no_spread_is_said_where_none_was_measured() -> None:
    """One process a cell, or one repetition a process: neither spread is measured, so no sentence
    compares them (it said "processes differ by 0.0% while repetitions agree within 0.0%")."""
    one_each = [Proc("AB"[i], f"m\x00tg{i}\x000", float(i), (LEVEL, LEVEL + 0.01, LEVEL - 0.01)) for i in range(2)]
    one_rep = table(normal(8, 0.1), reps=1)
    for procs in (one_each, one_rep):
        d = classify(procs, cpus=2)
        assert not {"between", "within"} & set(d.codes()), d.findings
    # two processes of two repetitions in one cell: measured, and said
    assert {"between", "within"} & set(classify(table([0.0, 0.2, 0.0, 0.2], reps=2), cpus=2).codes())


def test_within_dominated_noise_says_repetitions_spread() -> None:
    d = classify(table(normal(20, 0.002), within=0.08), cpus=2)
    assert d.codes() == ["within"]


def planted(between: float, within: float, n: int = 12, reps: int = 5) -> list[Proc]:
    """n processes an arm whose spreads are exactly ``between`` and ``within`` (noise.components'
    method of moments): levels at normal quantiles scaled so their variance is between² +
    within²/reps, each process's repetitions evenly spaced with SD ``within`` (rotated, so that no
    repetition is always the first)."""
    z = sps.norm.ppf((np.arange(n) + 0.5) / n)
    levels = z * math.sqrt((between ** 2 + within ** 2 / reps) / z.var(ddof=1))
    steps = np.arange(reps) - (reps - 1) / 2
    dev = within * steps / steps.std(ddof=1)
    procs: list[Proc] = []
    for k, arm in enumerate("AB"):
        for i, lv in enumerate(np.random.default_rng(k).permutation(levels)):
            procs.append(Proc(arm, "m\x00tg32\x000", float(len(procs)), tuple(LEVEL + lv + np.roll(dev, i))))
    return procs


@pytest.mark.parametrize("between, said", [
    (0.02, "repetitions inside a process spread 8.0% while processes agree within 2.0%"),
    (0.05, "processes differ by 5.0% (repetitions inside one spread 8.0%, averaged over 5)"),
    (0.10, "processes differ by 10.0% while repetitions agree within 8.0%"),
])
def test_the_spreads_are_said_with_each_figure_in_its_place(between: float, said: str) -> None:
    """Repetitions spread 8% inside each process; the processes' own spread is planted below, near
    and beyond it. Each sentence names the spread that dominates (between² against within²/5)
    with its figure, and the other with its own."""
    d = classify(planted(between, 0.08), cpus=2)
    assert d.between_cv == pytest.approx(between, abs=1e-6) and d.within_cv == pytest.approx(0.08)
    assert [f.seen for f in d.findings] == [said]


def test_two_process_levels_are_bimodal() -> None:
    rng = np.random.default_rng(3)
    slow = set(rng.choice(20, 6, replace=False))
    levels = [(-0.25 if i in slow else 0.0) + rng.normal(0, 0.01) for i in range(20)]
    d = classify(table(levels), cpus=2)
    assert d.cause == "bimodal", d
    assert "6 of 20 in the slow one" in d.findings[0].seen
    apart = int(d.findings[0].seen.split("levels ")[1].split("%")[0])
    assert 24 <= apart <= 32  # e^0.25 - 1 = 28%, from sampled levels


@pytest.mark.parametrize("seed", range(5))
def test_one_normal_mode_is_not_called_bimodal(seed: int) -> None:
    assert "bimodal" not in classify(table(normal(20, 0.1, seed)), cpus=2).codes()


def test_a_level_that_moves_with_time_is_drift_not_two_modes() -> None:
    levels = [-0.01 * i + e for i, e in enumerate(normal(30, 0.01))]
    d = classify(table(levels), cpus=2)
    assert d.cause == "drift" and "bimodal" not in d.codes()
    assert "-25" in d.findings[0].seen or "-26" in d.findings[0].seen  # 29 s at -1%/s: e^-0.29 - 1


def test_stalled_repetitions_and_busy_neighbours_come_first() -> None:
    procs = table(normal(20, 0.1))
    procs = [Proc(p.arm, p.cell, p.t0, p.log_tps, 2, ("python3",) if i % 2 else (), 1 if i % 3 == 0 else 0)
             for i, p in enumerate(procs)]
    d = classify(procs, cpus=2)
    assert d.codes()[:3] == ["busy-process", "threads", "stall"]
    assert d.busy == ("python3",)
    assert "python3 used a core beside 10 of 20" in d.findings[0].seen
    assert "2 engine threads on 2 CPUs" in d.findings[1].seen
    assert "stalled repetitions in 7 of 20" in d.findings[2].seen


def test_threads_below_the_cpus_are_not_a_finding() -> None:
    procs = [Proc(p.arm, p.cell, p.t0, p.log_tps, 1) for p in table(normal(20, 0.1))]
    assert "threads" not in classify(procs, cpus=2).codes()
    assert "threads" not in classify(procs, cpus=1).codes()  # one CPU: no thread fewer to give


def test_a_full_gpu_offload_names_the_gpu_not_the_threads() -> None:
    """doctor on the 30B shape with -ngl 99: 16 threads on 16 CPUs, yet every layer on the GPU:
    the threads are not named (nor probed), the GPU's busy share is."""
    procs = [Proc(p.arm, p.cell, p.t0, p.log_tps, 16, where="gpu", gpu_busy=93.0) for p in table(normal(20, 0.005))]
    d = classify(procs, cpus=16)
    assert "threads" not in d.codes() and "gpu" in d.codes()
    assert "every layer ran on the GPU (93% busy" in d.findings[d.codes().index("gpu")].seen
    # no busy share measured (windows too short for it): the finding says where, not how busy
    bare = [Proc(p.arm, p.cell, p.t0, p.log_tps, 16, where="gpu") for p in procs]
    (gpu,) = [f for f in classify(bare, cpus=16).findings if f.code == "gpu"]
    assert gpu.seen == "every layer ran on the GPU: the CPU threads mostly wait on it"
    # the same processes with the work split between CPU and GPU, or on the CPU: threads named
    for where in ("split", "cpu"):
        split = [Proc(p.arm, p.cell, p.t0, p.log_tps, 16, where=where) for p in procs]
        assert "threads" in classify(split, cpus=16).codes() and "gpu" not in classify(split, cpus=16).codes()


def test_where_the_work_runs_is_read_from_the_engine_row() -> None:
    assert where_work_runs({"backends": "CUDA", "n_gpu_layers": 99}) == "gpu"
    assert where_work_runs({"backends": "CUDA", "n_gpu_layers": -1}) == "gpu"
    assert where_work_runs({"backends": "CUDA", "n_gpu_layers": 49}, n_layer=48) == "gpu"
    assert where_work_runs({"backends": "CUDA", "n_gpu_layers": 40}, n_layer=48) == "split"
    assert where_work_runs({"backends": "CUDA", "n_gpu_layers": 99, "n_cpu_moe": 20}) == "split"
    assert where_work_runs({"backends": "Vulkan", "n_gpu_layers": 0}) == "cpu"
    assert where_work_runs({"backends": "CPU", "n_gpu_layers": 99}) == "cpu"
    assert where_work_runs({}) == "cpu"


def test_cold_first_repetitions() -> None:
    rng = np.random.default_rng(4)
    procs = [Proc("AB"[i % 2], "c", float(i), (LEVEL - 0.15, *(LEVEL + rng.normal(0, 0.01, 4))))
             for i in range(12)]
    d = classify(procs, cpus=4)
    assert "cold" in d.codes() and "first repetition of 12 of 12" in d.findings[d.codes().index("cold")].seen


def test_cells_and_arms_are_levels_of_their_own() -> None:
    # B 30% slower than A and tg far from pp: no bimodality, no between-process spread
    procs = [Proc(arm, cell, float(i), tuple(LEVEL + (0.3 if arm == "A" else 0) + (2 if cell == "pp" else 0)
                                         + np.random.default_rng(i).normal(0, 0.01, 5)))
             for i, (arm, cell) in enumerate([(a, c) for c in ("pp", "tg") for a in "AB"] * 6)]
    d = classify(procs, cpus=2)
    assert d.codes() == ["within"] and d.between_cv < 0.01


def test_busy_names_are_read_from_the_warning() -> None:
    assert busy_names("python3[812] 97% of a core, gcc-12[9] 14% of a core") == ["python3", "gcc-12"]


def test_with_threads_replaces_or_appends() -> None:
    assert with_threads(["-r", "3", "-t", "2"], 1) == ["-r", "3", "-t", "1"]
    assert with_threads(["--threads=8", "-r", "3"], 7) == ["-r", "3", "-t", "7"]
    assert with_threads([], 3) == ["-t", "3"]


def test_rerun_command_changes_the_flags_as_a_new_study() -> None:
    argv = ["compare", "--arm", "a=pypi:x", "--resume", "-m", "m q.gguf", "--", "-r", "3", "-t", "2"]
    assert rerun_command(argv, threads=1) == "tokensleuth compare --arm a=pypi:x -m 'm q.gguf' -- -r 3 -t 1"
    assert rerun_command(["bisect", "--good", "g"], resume=True) == "tokensleuth bisect --good g --resume"
    assert rerun_command(["bisect", "--good", "g"], threads=3) == "tokensleuth bisect --good g -- -t 3"
    # --max-pairs is tokensleuth's: before `--`, the one given replaced (it went after the engine's flags)
    assert rerun_command(["compare", "--max-pairs", "6", "--", "-r", "5"], resume=True, max_pairs=582) == \
        "tokensleuth compare --resume --max-pairs 582 -- -r 5"


def _d(codes: list[str], busy: tuple[str, ...] = (), between: float = 0.25) -> Diagnosis:
    return Diagnosis(tuple(Finding(c, c) for c in codes), between, 0.03, 5, 40, 2, 2, busy)


def test_a_probe_that_helps_is_prescribed_with_its_command() -> None:
    rx = prescribe(_d(["threads", "between"]), 0.02, 1045, 20, ["compare", "-m", "m", "--", "-t", "2"],
                   Probe("p1", 1, 6, 0.021, 12))
    text = rx.text()
    assert "one thread fewer (-t 1) measured 2.1% between processes in a 6-process probe — about 12 pairs" in text
    assert "rerun as a new study (the flags change): tokensleuth compare -m m -- -t 1" in text
    assert "about 1045 pairs" in text
    assert rx.to_json()["probe"]["pairs"] == 12 and rx.to_json()["cause"] == "threads"


def test_a_probe_that_does_not_help_is_not_prescribed() -> None:
    text = prescribe(_d(["threads", "between"]), 0.02, 30, 20, ["compare"], Probe("p", 1, 6, 0.2, 900)).text()
    assert "no better, so not suggested" in text and "rerun as a new study" not in text


def test_busy_processes_are_named_and_a_wider_band_says_what_it_costs() -> None:
    text = prescribe(_d(["busy-process", "between"], ("python3",), 0.03), 0.02, 500, 20, ["compare"], None).text()
    assert "stop python3 or measure on a quieter machine" in text
    assert "or keep measuring: tokensleuth compare --resume --max-pairs 500" in text
    # 20 pairs, 3.0% between and 3.0% within over 5 reps: 2.861 · √2 · 3.29% / √20 = 3.0%
    assert "or accept a wider band: ±3.0% is decidable in 20 pairs here" in text and "read as `same`" in text
    assert "-t " not in text  # no probe ran: no thread fix is offered
    # a band so wide that it would hide what users look for is no advice
    assert "wider band" not in prescribe(_d(["between"]), 0.02, 500, 20, ["compare"], None).text()
    text = prescribe(_d(["between"]), 0.02, 500, 20, ["compare", "-m", "m", "--", "-r", "3"], None).text()
    assert "or keep measuring: tokensleuth compare -m m --resume --max-pairs 500 -- -r 3" in text


def test_a_probe_past_counting_helps_when_its_spread_is_clearly_smaller() -> None:
    rx = prescribe(_d(["threads", "between"]), 0.001, None, 3, ["compare", "--", "-t", "2"],
                   Probe("p", 1, 6, 0.05, None))
    assert "rerun as a new study (the flags change): tokensleuth compare -- -t 1" in rx.text()
    rx = prescribe(_d(["threads", "between"]), 0.001, None, 3, ["compare"], Probe("p", 1, 6, 0.24, None))
    assert "no better, so not suggested" in rx.text()
