"""Cold leading repetitions: found from the study's own data, left out, said, and added to -r."""

from __future__ import annotations

import json
import math
import sqlite3
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tests import rules
from tests.conftest import tokensleuth_bin
from tokensleuth.analysis.cold import COLD_ALPHA_WITHIN, COLD_UNDECIDED_P, cold_leading
from tokensleuth.analysis.results import load_cells
from tokensleuth.sources.build import EngineBuild
from tokensleuth.store import Store


def procs(n: int, reps: int, cold: list[float], seed: int = 0, sd: float = 0.01) -> list[list[float]]:
    """``n`` processes of ``reps`` log t/s; the leading ones ``cold`` (log) slower."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        level = rng.normal(0, 0.05)
        x = list(level + rng.normal(0, sd, reps))
        for j, c in enumerate(cold):
            x[j] += c
        out.append(x)
    return out


def test_a_slow_first_repetition_in_every_process_is_cold() -> None:
    c = cold_leading(procs(10, 5, [math.log(0.87)]))
    assert c.count == 1 and c.ratio is not None and abs(c.ratio - 0.87) < 0.02 and c.processes == 10


def test_two_cold_repetitions_and_none() -> None:
    assert cold_leading(procs(10, 6, [math.log(0.8), math.log(0.9)])).count == 2
    for seed in range(10):  # no effect: chance alone never reaches p < 0.001 and 1%
        assert cold_leading(procs(12, 5, [], seed)).count == 0


def test_too_little_data_decides_nothing() -> None:
    assert cold_leading(procs(3, 3, [math.log(0.5)])).count == 0  # three processes of 3: 2 after it
    assert cold_leading(procs(10, 2, [math.log(0.5)])).count == 0  # two repetitions: none to spare
    # a real but negligible effect (0.3%) is left in
    assert cold_leading(procs(40, 5, [math.log(0.997)], sd=0.0005)).count == 0


def test_within_a_few_processes_each_one_decides() -> None:
    """Fewer than 4 processes: a repetition is cold when every process has it outside the
    prediction interval of its later repetitions (bench of the 30B shape, one process)."""
    pp2048 = [11147, 13024, 13125, 13188, 13121]
    c = cold_leading([[math.log(x) for x in pp2048]])
    assert c.count == 1 and c.ratio == pytest.approx(11147 / np.exp(np.mean(np.log(pp2048[1:]))), rel=1e-3)
    assert cold_leading(procs(3, 5, [math.log(0.5)])).count == 1
    assert cold_leading(procs(2, 6, [math.log(0.9)], sd=0.002)).count == 1
    # one process of three that runs it warm: not cold
    mixed = procs(3, 5, [math.log(0.8)])
    mixed[1][0] = float(np.mean(mixed[1][1:]))
    assert cold_leading(mixed).count == 0
    # scatter alone, one process: a block is called cold at about the stated level per look
    # (COLD_ALPHA_WITHIN, at most reps - 3 looks), and a first repetition is left undecided rarely
    for reps in (5, 6, 10):
        found = [cold_leading(procs(1, reps, [], seed)) for seed in range(2000)]
        assert sum(c.count > 0 for c in found) / 2000 <= COLD_ALPHA_WITHIN * (reps - 3)
        assert sum(c.undecided is not None for c in found) / 2000 <= COLD_UNDECIDED_P
    # a stalled later repetition (over 5x the fastest) is left out of the spread, as of t/s
    stalled = [math.log(x) for x in [11147, 13024, 13125, 13188 / 8, 13121, 13090]]
    assert cold_leading([stalled]).count == 1


def test_one_process_at_scale_finds_its_cold_block() -> None:
    """bench's one process of the 30B shape on an H100 (-r 5): pp2048's first repetition is cold
    although its last ran 4% low; tg32's first two are; a repetition that is cold only through the
    one before it is not."""
    def logs(xs: list[float]) -> list[list[float]]:
        return [[math.log(x) for x in xs]]

    pp = cold_leading(logs([11535, 13238, 13302, 13257, 12685]))
    assert pp.count == 1 and pp.ratio == pytest.approx(11535 / np.exp(np.mean(np.log([13238, 13302, 13257, 12685]))))
    tg = cold_leading(logs([243, 245, 259, 258, 258]))
    assert tg.count == 2 and tg.undecided is None
    assert cold_leading(logs([11147, 13024, 13125, 13188, 13121])).count == 1


def test_a_first_repetition_the_rule_cannot_place_is_said() -> None:
    """Below every later repetition by 1.9%, but inside their spread at -r 5: nothing is left out,
    and the deficit is kept for the sentence beside the figure."""
    c = cold_leading([[math.log(x) for x in [98.5, 101, 99.9, 100.5, 100.2]]])
    assert c.count == 0 and c.undecided == pytest.approx(98.5 / np.exp(np.mean(np.log([101, 99.9, 100.5, 100.2]))))
    assert c.doubtful == 1
    # not below every later one: no doubt to say
    assert cold_leading([[math.log(x) for x in [99.5, 101, 99.0, 100.5, 100.2]]]).undecided is None


def test_a_faster_first_repetition_is_not_cold() -> None:
    assert cold_leading(procs(10, 5, [math.log(1.2)])).count == 0


def test_the_statistic_leaves_cold_repetitions_out(tmp_path: Path) -> None:
    from tokensleuth.analysis.noise import estimate
    from tokensleuth.drivers.verdicts.comparisons import analyze
    from tokensleuth.drivers.verdicts.sentences import summary_sentence
    from tokensleuth.store import PlannedTrial, ResultRow, SampleRow, Store, TrialOutcome
    from tokensleuth.trials.spec import build_compare_spec

    rng = np.random.default_rng(5)
    spec = build_compare_spec({"arms": [{"name": "a", "source": "pypi:x==1"}, {"name": "b", "source": "pypi:x==1"}],
                               "models": ["/m.gguf"], "workloads": ["tg32"], "band": 0.05}, "test")
    plan = [PlannedTrial(arm, "/m.gguf", "tg32", (), pair) for pair in range(8) for arm in ("a", "b")]
    kept_means: dict[int, float] = {}
    with Store(tmp_path / "s.db") as s:
        sid = s.writes.create_study("compare", {"x": 1}, "h", [("a", "pypi:x==1", {}, (), {}), ("b", "pypi:x==1", {}, (), {})],
                             plan)
        for t in s.reads.planned(sid):
            level = 100 * math.exp(rng.normal(0, 0.01))
            tps = [level * math.exp(rng.normal(0, 0.005)) for _ in range(5)]
            tps[0] *= 0.87  # the cold one
            reps = tuple(SampleRow(i, int(32 / v * 1e9), 32) for i, v in enumerate(tps))
            r = ResultRow(0, "tg32", 0, 32, 0, float(np.mean(tps)), 0.0, {}, reps)
            s.writes.mark_running(t["id"])
            s.writes.finish_trial(t["id"], TrialOutcome("done", 0, "", "", 0.0, 1.0, 0, 10**9, {}, (r,), ()))
            kept_means[int(t["id"])] = float(np.mean([32 / (int(32 / v * 1e9) / 1e9) for v in tps[1:]]))
        (c,) = analyze(s, sid, spec)
        n = estimate(s, sid)
    assert c.cold is not None and c.cold.count == 1 and abs((c.cold.ratio or 0) - 0.87) < 0.01
    # each trial's t/s is the mean of repetitions 1-4
    assert sorted(round(v, 6) for v in [*c.base_ts, *c.cand_ts]) == sorted(round(v, 6) for v in kept_means.values())
    j = c.to_json()["cold_repetitions"]
    assert j["per_trial"] == 1 and abs(j["ratio"] - 0.87) < 0.01
    assert "Cold repetitions left out of every trial (and added to -r): tg32: the first repetition ran 12.9% slower" in \
        summary_sentence([c], 0.05)
    # the within-process spread is the 0.5% repetitions, not the 13% cold one
    assert n is not None and n.within_cv < 0.008, n


WRAP = r'''#!{python}
"""llama-bench whose repetitions of every test are set from the real ones' median: the first
timed repetition {factor}x that long (a cold repetition), the rest within ±0.1% of it. The machine's
own scatter (a busy CI host) can then neither hide the planted repetition nor add a cold one."""
import json, statistics, subprocess, sys
if sys.argv[1:] == ["--help"]:
    sys.exit(subprocess.run(["{real}", "--help"]).returncode)
p = subprocess.Popen(["{real}", *sys.argv[1:]], stdout=subprocess.PIPE, text=True)
for line in p.stdout:
    if line.startswith("{{"):
        row = json.loads(line)
        ns, ts = row.get("samples_ns"), row.get("samples_ts")
        if ns and ts and len(ns) >= 2:
            tokens = ts[0] * ns[0] / 1e9
            base = statistics.median(ns)
            ns = [int(base * {factor})] + [int(base * (1 + 0.001 * (k % 3 - 1))) for k in range(1, len(ns))]
            ns[-1] = int(ns[-1] * {tail})
            ts = [tokens * 1e9 / x for x in ns]
            row.update(samples_ns=ns, samples_ts=ts, avg_ns=int(statistics.mean(ns)), avg_ts=statistics.mean(ts),
                       stddev_ns=int(statistics.stdev(ns)), stddev_ts=statistics.stdev(ts))
        line = json.dumps(row) + "\n"
    sys.stdout.write(line)
    sys.stdout.flush()
sys.exit(p.wait())
'''


@pytest.mark.slow
def test_a_compare_adds_the_cold_repetitions_to_r(engine: EngineBuild, dense_model: Path, cli_env: dict[str, str],
                                                  tmp_path: Path) -> None:
    d = tmp_path / "cold"
    d.mkdir()
    w = d / "llama-bench"
    w.write_text(WRAP.format(python=sys.executable, real=Path(engine.bin_dir) / "llama-bench", factor=1.5, tail=1.0))
    w.chmod(0o755)
    out = tmp_path / "c.json"
    p = subprocess.run([tokensleuth_bin(), "compare", "--arm", f"a=bin:{d}", "--arm", f"b=bin:{d}",
                        "-m", str(dense_model), "-w", "tg16", "--band", "0.1%", "--min-pairs", "4", "--max-pairs", "8",
                        "--no-probe", "--json", str(out), "--", "-r", "3", "-t", "1"],
                       env=cli_env, capture_output=True, text=True, timeout=900)
    assert p.returncode == 0, p.stderr[-2000:]
    r = json.loads(out.read_text())
    cold = r["comparisons"][0]["cold_repetitions"]
    assert cold["per_trial"] == 1 and cold["ratio"] == pytest.approx(1 / 1.5, rel=0.005), cold
    assert "Cold repetitions left out of every trial" in p.stdout
    con = sqlite3.connect(cli_env["TOKENSLEUTH_DB"])
    argvs = [json.loads(a) for (a,) in con.execute("SELECT argv_json FROM trials WHERE study_id=? ORDER BY seq",
                                                   (r["study"],))]

    def reps(argv: list[str]) -> int:  # a trial's -r: the user's 3 where the plan added none
        return int(argv[argv.index("-r") + 1]) if "-r" in argv else 3

    with Store(Path(cli_env["TOKENSLEUTH_DB"])) as store:
        # an A/A at ±0.1%: a second round or none is the band's rule on the stored pairs
        cell = (r["comparisons"][0]["model"], "tg16")
        assert len(argvs) == 2 * rules.stopped_at(store, r["study"], *cell, ("a", "b"), band=0.001, min_pairs=4,
                                                  max_pairs=8)
        with rules.as_of(store, r["study"], 4) as first:  # the cold repetitions round 1's processes showed
            (found,) = {c.cold.count if c.cold else 0 for c in load_cells(first, r["study"])}
    # round 1 ran what was asked; round 2 those found cold in round 1 more: 3 measured either way
    assert all(reps(a) == 3 for a in argvs[:8]), argvs[:8]
    assert all(reps(a) == 3 + found for a in argvs[8:]), (found, argvs[8:])


def test_a_bench_finds_the_cold_repetition_in_one_process_and_adds_it_to_r(
        engine: EngineBuild, dense_model: Path, cli_env: dict[str, str], tmp_path: Path) -> None:
    """bench: every process's first repetition runs at half speed (planted, far beyond the
    spread of the rest); it is found within that one process, left out of t/s, said in the table
    and the JSON, and the second process runs one repetition more."""
    d = tmp_path / "cold"
    d.mkdir()
    w = d / "llama-bench"
    w.write_text(WRAP.format(python=sys.executable, real=Path(engine.bin_dir) / "llama-bench", factor=2.0, tail=1.0))
    w.chmod(0o755)
    out = tmp_path / "b.json"
    p = subprocess.run([tokensleuth_bin(), "bench", "--engine", f"bin:{d}", "-m", str(dense_model), "--trials", "2",
                        "--json", str(out), "--", "-p", "0", "-n", "16", "-r", "6", "-t", "1"],
                       env=cli_env, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-2000:]
    (res,) = json.loads(out.read_text())["results"]
    cold = res["cold_repetitions"]
    assert cold["per_trial"] == 1 and cold["ratio"] == pytest.approx(0.5, rel=0.005), cold
    assert "Cold repetitions left out of every trial (and added to -r): tg16: the first repetition ran" in p.stdout
    samples = res["samples"]
    assert len(samples) == 6 + 7  # the second process: one repetition more
    # the mean is of the repetitions kept: neither process's first (the second's first is planted too)
    kept = samples[1:6] + samples[7:]
    assert res["tokens_per_s"]["mean"] == pytest.approx(float(np.mean(kept)), rel=1e-9)
    con = sqlite3.connect(cli_env["TOKENSLEUTH_DB"])
    argvs = [json.loads(a) for (a,) in con.execute("SELECT argv_json FROM trials WHERE study_id=? ORDER BY seq",
                                                   (json.loads(out.read_text())["study"],))]
    assert argvs == [[], ["-r", "7"]]


def test_one_process_of_five_finds_a_cold_first_repetition_beside_a_slow_last(
        engine: EngineBuild, dense_model: Path, cli_env: dict[str, str], tmp_path: Path) -> None:
    """bench's defaults, one process of -r 5, as on the 30B shape: the first repetition planted
    15% long and the last 4.5% long (the H100's pp2048). The first is left out of the figure and
    said; the slow last one, not leading, stays in."""
    d = tmp_path / "cold"
    d.mkdir()
    w = d / "llama-bench"
    w.write_text(WRAP.format(python=sys.executable, real=Path(engine.bin_dir) / "llama-bench", factor=1.15,
                             tail=1.045))
    w.chmod(0o755)
    out = tmp_path / "b.json"
    p = subprocess.run([tokensleuth_bin(), "bench", "--engine", f"bin:{d}", "-m", str(dense_model),
                        "--json", str(out), "--", "-p", "0", "-n", "16", "-r", "5", "-t", "1"],
                       env=cli_env, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-2000:]
    (res,) = json.loads(out.read_text())["results"]
    assert res["cold_repetitions"]["per_trial"] == 1, res["cold_repetitions"]
    assert res["cold_repetitions"]["ratio"] == pytest.approx(1 / 1.15, rel=0.02)
    assert res["tokens_per_s"]["mean"] == pytest.approx(float(np.mean(res["samples"][1:])), rel=1e-9)
    assert "not added to -r: no later process): tg16: the first repetition ran" in p.stdout
