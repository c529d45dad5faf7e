"""Attribution of CPU time over the engine's own durations, and the confounders a trial's own
samples and windows show (stall, short-window, impossible-figure), on constructed windows."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tokensleuth.analysis.confounders import REMEDY, outcome_warnings
from tokensleuth.monitor.attribute import EDGE_ERROR_LIMIT, attributed_cpu_ms, edge_error
from tokensleuth.store import ResultRow, SampleRow, TrialOutcome, WindowRow

MS = 1_000_000


def test_cpu_is_attributed_over_the_engines_duration() -> None:
    # a late end edge: the window (5 ms) covers 1 ms of untimed work beyond the 4 ms repetition
    share = attributed_cpu_ms(10.0, 5 * MS, 4 * MS)
    assert share.cpu_ms == pytest.approx(8.0) and share.duration_ms == pytest.approx(4.0)
    # the case: 9 ms of CPU read across a 4 ms window of a 4.5 ms repetition on 2 cores
    # was 2.25 busy cores over the window; over max(window, repetition) it cannot pass the reading's rate
    share = attributed_cpu_ms(9.0, 4 * MS, int(4.5 * MS))
    assert share.cpu_ms / share.duration_ms == pytest.approx(2.0)
    # no engine duration known (imported, or a window without its sample): the window it is
    share = attributed_cpu_ms(3.0, 2 * MS, None)
    assert (share.cpu_ms, share.duration_ms) == (3.0, 2.0)
    assert edge_error(int(4.5 * MS), 4 * MS) == pytest.approx(0.125)
    assert edge_error(4 * MS, None) is None


def _outcome(durations_ns: list[int], windows: list[tuple[int, int, float]]) -> TrialOutcome:
    samples = tuple(SampleRow(i, d, 64) for i, d in enumerate(durations_ns))
    result = ResultRow(0, "pp64", 64, 0, 0, None, None, {}, samples)
    wins = tuple(WindowRow(0, i, s, e, cpu) for i, (s, e, cpu) in enumerate(windows))
    return TrialOutcome("done", 0, "", "", 0.0, 1.0, 0, 10**12, {}, (result,), wins)


def _contiguous(lengths_ns: list[int], cpu_ms: list[float]) -> list[tuple[int, int, float]]:
    out, t = [], 10 * MS
    for n, c in zip(lengths_ns, cpu_ms, strict=True):
        out.append((t, t + n, c))
        t += n
    return out


def test_a_clean_trial_raises_nothing() -> None:
    d = [60 * MS, 61 * MS, 59 * MS]
    out = _outcome(d, _contiguous([x + MS // 2 for x in d], [110.0, 112.0, 108.0]))
    assert outcome_warnings(out, cpus=2) == []


def test_a_planted_stall_is_a_stall_warning() -> None:
    d = [60 * MS, 7800 * MS, 61 * MS]
    out = _outcome(d, _contiguous(d, [110.0, 9000.0, 112.0]))
    assert outcome_warnings(out, cpus=2) == [
        ("stall", "pp64 repetition 2/3 took 7800.0 ms against 60.0 ms")]
    assert "stall" in REMEDY


def test_uncertain_edges_and_impossible_busy_cores_are_flagged() -> None:
    # 4 ms repetitions whose windows came out 1.07 ms short (the median) ...
    d = [4 * MS] * 4
    short = [int(2.93 * MS)] * 4
    # ... with 7.5 ms of CPU in each: 2.56 busy cores over the window on a 2-core machine, the
    # issue's impossible figure; over the engine's own 4 ms it is 1.88, and the edges are flagged
    out = _outcome(d, _contiguous(short, [7.5] * 4))
    found = dict(outcome_warnings(out, cpus=2))
    assert set(found) == {"short-window"}
    assert found["short-window"].startswith("4 of 4 windows differ from llama-bench's own durations by more "
                                            f"than {EDGE_ERROR_LIMIT:.0%}")
    # windows off by more than the limit have their CPU withheld: no figure of theirs, so none impossible
    out = _outcome(d, _contiguous(short, [10.0] * 4))
    assert set(dict(outcome_warnings(out, cpus=2))) == {"short-window"}
    # more CPU than the cores can give over the engine's duration, in windows within the limit:
    # said so, never printed bare
    out = _outcome(d, _contiguous([int(3.9 * MS)] * 4, [10.0] * 4))
    found = dict(outcome_warnings(out, cpus=2))
    assert found["impossible-figure"] == "busy cores 2.50 on 2 CPUs"
    assert "impossible-figure" in REMEDY and "short-window" in REMEDY


def test_many_stalls_are_counted_not_listed() -> None:
    d = [60 * MS] + [900 * MS] * 5
    out = _outcome(d, _contiguous(d, [100.0] * 6))
    ((code, detail),) = outcome_warnings(out, cpus=2)
    assert code == "stall" and detail.count("took") == 3 and detail.endswith("(+2 more)")


def test_a_power_p95_is_never_below_the_mean_of_the_same_windows() -> None:
    """Windows of 0.15 s whose samples read NVML's lagging average (148 W) while the energy
    counter says 324 W: a p95 below the mean is no percentile of the real power — not reported."""
    from tokensleuth.analysis.results import Cell

    def cell(p95: float) -> dict[str, Any]:
        c = Cell("a", "m.gguf", "pp2048", 0, {})
        c.windows = [{"window_s": 0.15, "power_w": 324.0, "power_p95_w": p95, "gpu_energy_counter_j": 48.6,
                      "tokens": 2048} for _ in range(4)]
        return c.resources()

    lagging = cell(148.2)
    assert lagging["power_w"] == pytest.approx(324.0) and lagging["power_p95_w"] is None
    assert any("lags the energy counter" in n for n in lagging["notes"]), lagging["notes"]
    steady = cell(331.0)  # long windows: the samples agree with the counter
    assert steady["power_p95_w"] == pytest.approx(331.0) and steady["power_p95_w"] >= steady["power_w"]


def test_a_trial_whose_windows_are_all_off_gives_the_cpu_verdict_nothing(tmp_path: Path) -> None:
    """The CPU verdict's pairs are load_cells': a trial whose every window is off by more than the
    edge limit has no CPU there, and the stored sum of its windows' CPU is not taken instead."""
    from tokensleuth.core.records import WindowRow
    from tokensleuth.drivers.verdicts.comparisons import analyze
    from tokensleuth.store import PlannedTrial, ResultRow, SampleRow, Store, TrialOutcome
    from tokensleuth.trials.spec import build_compare_spec

    spec = build_compare_spec({"arms": [{"name": "a", "source": "pypi:x==1"}, {"name": "b", "source": "pypi:x==1"}],
                               "models": ["/m.gguf"], "workloads": ["tg32"], "band": 0.05}, "test")
    plan = [PlannedTrial(arm, "/m.gguf", "tg32", (), pair) for pair in range(3) for arm in ("a", "b")]
    with Store(tmp_path / "s.db") as s:
        sid = s.writes.create_study("compare", {"x": 1}, "h", [("a", "pypi:x==1", {}, (), {}), ("b", "pypi:x==1", {}, (), {})],
                             plan)
        for k, t in enumerate(s.reads.planned(sid)):
            reps = tuple(SampleRow(i, 40 * MS, 32) for i in range(3))
            # pair 0's candidate: windows 30% short, with ten times the CPU (its edges do not belong to it)
            off = t["arm"] == "b" and t["pair"] == 0
            wins = tuple(WindowRow(0, i, (1 + 100 * i) * MS, (1 + 100 * i) * MS + (28 if off else 40) * MS,
                                   400.0 if off else 40.0 + k, {}) for i in range(3))
            r = ResultRow(0, "tg32", 0, 32, 0, 800.0, 0.0, {}, reps)
            s.writes.mark_running(t["id"])
            s.writes.finish_trial(t["id"], TrialOutcome("done", 0, "", "", 0.0, 1.0, 0, 10**9, {}, (r,), wins))
        (c,) = analyze(s, sid, spec)
    assert c.cpu_estimate is not None
    # two pairs with CPU on both sides: pair 0 is left out, not read at 10x
    assert c.cpu_estimate.ratio == pytest.approx((43 / 42 * 45 / 44) ** 0.5, rel=1e-6)
