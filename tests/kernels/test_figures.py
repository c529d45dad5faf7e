"""Kernel figures of a process and the diff of two builds, on traces whose answer is planted:
the rules applied to stored records (the windows, the busy union, the intervals over processes)."""

from __future__ import annotations

import re

import numpy as np
import pytest

from tokensleuth.analysis.kernels import ProcessKernels, Window, coverage, diff, process_kernels
from tokensleuth.kernels import Trace, trace_of


def _trace(kernels: list[tuple[str, int, int]], regs: dict[str, int] | None = None) -> Trace:
    names = sorted({k for k, _, _ in kernels})
    return trace_of(names, {"name": [names.index(k) for k, _, _ in kernels], "start": [s for _, s, _ in kernels],
                            "end": [e for _, _, e in kernels],
                            "registers": [(regs or {}).get(k, 32) for k, _, _ in kernels],
                            "grid": [(8, 1, 1)] * len(kernels), "block": [(128, 1, 1)] * len(kernels)})


def test_a_process_counts_the_kernels_of_its_kept_repetitions_and_the_idle_between() -> None:
    # two repetitions of 1,000 ns and 4 tokens each; the warm-up before and a left-out repetition after
    kernels = [("warmup", 0, 50),
               ("a", 100, 400), ("b", 300, 600), ("a", 800, 900),   # rep 1: busy union 100-600, 800-900
               ("a", 1200, 1500), ("b", 1600, 1700),                 # rep 2: busy 300 + 100
               ("a", 3000, 3900)]                                     # a repetition left out (cold)
    p = process_kernels(_trace(kernels), [Window(100, 1100, 4, 1000), Window(1100, 2100, 4, 1000)])
    assert p.tokens == 8 and p.calls == {"a": 3, "b": 2} and p.busy_ns == {"a": 700, "b": 400}
    assert p.union_ns == 600 + 400
    # idle: the gaps between kernels inside each repetition's kernel span (100-900: 200; 1200-1700: 100),
    # not the time before the first and after the last (outside: 2000 - 800 - 500)
    assert p.span_ns == 800 + 500
    assert p.idle_ms_per_token == pytest.approx(300 / 8 / 1e6)
    assert p.outside_ms_per_token == pytest.approx(700 / 8 / 1e6)
    assert p.kernel_ms_per_token == pytest.approx(1100 / 8 / 1e6)
    # concurrent kernels (a and b overlap by 100 ns) count twice in the sum; the outside time not at all
    assert coverage(p) == pytest.approx((1100 + 300) / 2000)
    j = p.to_json()
    assert [k["name"] for k in j["kernels"]] == ["a", "b"] and j["kernels"][0]["calls_per_token"] == 3 / 8
    assert j["kernels"][0]["launches"] == [{"grid": [8, 1, 1], "block": [128, 1, 1], "registers": 32,
                                            "shared_bytes": -1}]


def test_totals_without_a_timeline_count_in_the_window_their_block_ended_in() -> None:
    t = trace_of(["ADD", "MUL_MAT"], {"name": [0, 1, 0], "start": [0, 0, 1000], "end": [1000, 1000, 2000],
                                      "calls": [48, 96, 48], "busy_ns": [150, 1920, 144]}, timeline=False)
    p = process_kernels(t, [Window(500, 1500, 1)])
    assert p.busy_ns == {"ADD": 150, "MUL_MAT": 1920} and p.calls == {"ADD": 48, "MUL_MAT": 96}
    assert p.idle_ms_per_token is None and coverage(p) is None


def _processes(rng: np.random.Generator, n: int, extra: dict[str, int], regs: dict[str, int] | None = None,
               drop: str | None = None, idle: int = 0) -> list[ProcessKernels]:
    """``n`` processes of 3 repetitions (one token each): kernels a (200 ns), b (100 ns), c (50 ns)
    back to back with 20 ns between, jittered; ``extra`` ns added to a kernel; ``idle`` ns more
    between kernels; ``drop`` a kernel that does not run."""
    out = []
    for _ in range(n):
        kernels, windows, t = [], [], 0
        for _rep in range(3):
            w0 = t
            for name, ns in (("a", 200), ("b", 100), ("c", 50), ("d", 0)):
                dur = ns + extra.get(name, 0)
                if dur <= 0 or name == drop:
                    continue
                dur = int(dur * rng.normal(1, 0.01))
                kernels.append((name, t, t + dur))
                t += dur + 20 + idle
            windows.append(Window(w0, t, 1, t - w0))
        out.append(process_kernels(_trace(kernels, regs), windows))
    return out


def test_the_diff_names_what_grew_appeared_vanished_and_changed_its_launch() -> None:
    rng = np.random.default_rng(3)
    base = _processes(rng, 4, {})
    cand = _processes(rng, 4, {"a": 60, "d": 40}, regs={"b": 96}, drop="c", idle=5)
    d = diff(base, cand, band=0.02)
    rows = {r["kernel"]: r for r in d["rows"]}
    assert rows["a"]["verdict"] == "grew" and rows["a"]["delta_ms_per_token"] == pytest.approx(60e-6, rel=0.2)
    assert rows["d"]["verdict"] == "appeared" and rows["c"]["verdict"] == "vanished"
    assert rows["b"]["verdict"] == "same" and rows["b"]["launch_changed"] == "registers 32 -> 96"
    assert [r["kernel"] for r in d["rows"]][0] == "a"  # the largest change first
    # two gaps between kernels, each 5 ns longer; the third gap, after the last kernel, is outside
    assert d["idle"]["delta_ms_per_token"] == pytest.approx(2 * 5e-6, rel=0.05)
    assert d["outside"]["delta_ms_per_token"] == pytest.approx(5e-6, rel=0.05)
    # measured: +60 (a) +40 (d) -50 (c) +15 (gaps) = +65 ns; the kernels +50 and the idle +10 account for 60
    assert d["measured"]["delta_ms_per_token"] == pytest.approx(65e-6, rel=0.1)
    assert d["accounted"] == pytest.approx(60 / 65, abs=0.06) and d["kernels_share"] == pytest.approx(50 / 65, abs=0.06)
    assert re.fullmatch(r"The named kernels and the idle time account for 9\d% of the measured difference of "
                        r"\+6\.\d+e-05 ms/token \(kernels 7\d%, idle 1\d%; kernels \+4\.\d+e-05, idle between kernels "
                        r"\+1e-05, outside the kernels' span \+5e-06 ms/token\)\.", d["sentence"]), d["sentence"]


def test_one_process_a_side_decides_nothing_but_presence() -> None:
    rng = np.random.default_rng(4)
    d = diff(_processes(rng, 1, {}), _processes(rng, 1, {"a": 60, "d": 40}), band=0.02)
    rows = {r["kernel"]: r for r in d["rows"]}
    assert rows["a"]["verdict"] == "unresolved" and rows["d"]["verdict"] == "appeared"
    assert diff([], _processes(rng, 2, {}))["rows"] == []


def test_no_nan_in_the_diff_and_no_share_of_a_difference_not_measured() -> None:
    import json

    rng = np.random.default_rng(4)
    one = diff(_processes(rng, 1, {}), _processes(rng, 1, {"a": 60}), band=0.02)
    assert all(r["ci"] == [None, None] for r in one["rows"])  # no interval: null, not NaN
    json.dumps(one, allow_nan=False)
    same = diff(_processes(rng, 4, {}), _processes(rng, 4, {}), band=0.02)
    assert same["accounted"] is None and same["sentence"].startswith("llama-bench measured no difference")


def test_names_that_read_alike_once_shortened_are_one_row_and_a_clock_mismatch_is_said() -> None:
    t = trace_of(["k<1>", "k<1>"], {"name": [0, 1], "start": [100, 300], "end": [200, 400]})
    p = process_kernels(t, [Window(0, 1000, 1, 1000)])
    assert p.calls == {"k<1>": 2} and p.busy_ns == {"k<1>": 200}
    late = process_kernels(t, [Window(10_000, 11_000, 1, 1000)])  # the records on another clock
    assert late.busy_ns == {} and "the trace's clock is not the windows'" in late.notes[-1]
    empty = process_kernels(t, [])
    assert empty.kernel_ms_per_token == 0.0 and empty.idle_ms_per_token is None
