"""llama-bench output parsers, on golden files captured from a real b11434 run."""

from __future__ import annotations

from typing import Any

import pytest

from tests.conftest import GOLDEN
from tokensleuth.core.errors import UserError
from tokensleuth.core.workloads import bench_test_name, parse_workload
from tokensleuth.engines.llamabench import (
    MalformedOutput,
    check_flags,
    extract_windows,
    known_flags,
    outcome_from,
    parse_jsonl,
    parse_progress,
)
from tokensleuth.engines.llamabench.argv import workload_flags
from tokensleuth.engines.proc import Line, ProcResult


def test_progress_lines_parse() -> None:
    p = parse_progress("llama-bench: benchmark 3/4: depth run 2/2 (cached)\n")
    assert p is not None and (p.test, p.kind, p.rep) == (3, "depth", 2)
    p = parse_progress("llama-bench: benchmark 2/4: generation run 1/5")
    assert p is not None and (p.test, p.kind, p.rep) == (2, "gen", 1)
    w = parse_progress("llama-bench: benchmark 1/4: warmup prompt run")
    assert w is not None and w.kind == "warmup"
    assert parse_progress("load_tensors: CPU_Mapped model buffer size") is None
    # counted from 1: a 0 would make a window with index -1 (found by fuzzing)
    assert parse_progress("llama-bench: benchmark 0/0: prompt run 1/2") is None
    assert parse_progress("llama-bench: benchmark 1/1: generation run 0/2") is None
    assert parse_progress("llama-bench: benchmark 1/1: prompt run 1" + "9" * 5000 + "/2") is None


def test_jsonl_golden_has_samples() -> None:
    objs = parse_jsonl((GOLDEN / "b11434-jsonl.stdout").read_text())
    assert [bench_test_name(o["n_prompt"], o["n_gen"], o["n_depth"]) for o in objs] == [
        "pp64", "tg16", "pp64@d64", "tg16@d64"]
    assert all(len(o["samples_ns"]) == 2 for o in objs)


def test_jsonl_rejects_garbage() -> None:
    with pytest.raises(MalformedOutput):
        parse_jsonl("hello world\n")
    with pytest.raises(MalformedOutput):
        parse_jsonl('{"no": "samples"}\n')


def _replay(step_ns: int = 1000) -> ProcResult:
    """Interleave the golden stderr and stdout the way llama-bench emits them."""
    err = (GOLDEN / "b11434-jsonl.stderr").read_text().splitlines(keepends=True)
    out = (GOLDEN / "b11434-jsonl.stdout").read_text().splitlines(keepends=True)
    lines, t, n_out = [], 0, 0
    for e in err:
        if e.startswith("llama-bench: benchmark") and "starting" in e and n_out < len(out):
            # a new test starts only after the previous test's JSON line
            if t > 0:
                t += step_ns
                lines.append(Line("out", t, out[n_out], probe={"cpu_s": t / 1e9}))
                n_out += 1
        t += step_ns
        lines.append(Line("err", t, e, probe={"cpu_s": t / 1e9}))
    t += step_ns
    lines.append(Line("out", t, out[n_out], probe={"cpu_s": t / 1e9}))
    return ProcResult(("llama-bench",), 0, False, 0, t + step_ns, 0.0, 1.0, lines)


def test_windows_cover_each_repetition() -> None:
    res = _replay()
    wins = extract_windows(res)
    assert [(w.test_idx, w.rep) for w in wins] == [(i, r) for i in range(4) for r in range(2)]
    assert all(0 < w.start_ns < w.end_ns <= res.t1_ns for w in wins)
    # A depth-run line closes the previous repetition: the depth prefill is not timed.
    assert all(w.end_ns - w.start_ns == 1000 for w in wins)
    # the probe (here: fake CPU seconds = time) becomes cpu_ms over the window
    assert all(w.cpu_ms == pytest.approx(1e-3) for w in wins)


def test_a_result_line_stamped_before_the_last_progress_line_still_closes_its_window() -> None:
    """stdout and stderr are read by two threads: where stderr's reader was late, the test's
    JSON line is stamped before the last repetition's progress line. The window is matched to
    its test by its place in stdout, and closed at the next progress line (cut to the engine's
    own duration by timed_part); a window nothing closes ends at the process's end, with no
    counters (nothing read them there)."""
    import json

    ms = 1_000_000
    row = {"n_prompt": 64, "n_gen": 0, "n_depth": 0, "avg_ts": 1.0, "stddev_ts": 0.0,
           "samples_ns": [100 * ms, 100 * ms], "samples_ts": [640.0, 640.0]}

    def err(t: int, text: str) -> Line:
        return Line("err", t * ms, f"llama-bench: benchmark {text}\n", {"cpu_s": t / 1e3})

    lines = [err(0, "1/2: starting"), err(10, "1/2: prompt run 1/2"), err(110, "1/2: prompt run 2/2"),
             Line("out", 105 * ms, json.dumps(row) + "\n", {"cpu_s": 0.105}),  # before its last rep's line
             err(215, "2/2: starting"), err(220, "2/2: prompt run 1/2"), err(320, "2/2: prompt run 2/2")]
    # test 2's JSON line never came (the engine was killed after its last repetition)
    res = ProcResult(("llama-bench",), 0, False, 0, 500 * ms, 0.0, 1.0, sorted(lines, key=lambda ln: ln.t_ns))
    wins = extract_windows(res)
    assert [(w.test_idx, w.rep) for w in wins] == [(0, 0), (0, 1), (1, 0), (1, 1)]
    assert [(w.start_ns // ms, w.end_ns // ms) for w in wins] == [(10, 110), (110, 215), (220, 320), (320, 500)]
    assert wins[1].cpu_ms == pytest.approx(105.0)
    assert wins[3].cpu_ms is None and wins[3].counters == {}


def test_outcome_done_from_replay() -> None:
    o = outcome_from(_replay(), {}, {})
    assert o.status == "done" and o.message == ""
    assert sum(len(r.samples) for r in o.results) == len(o.windows) == 8


def test_outcome_statuses() -> None:
    base: dict[str, Any] = dict(argv=("x",), t0_ns=0, t1_ns=10, started_at=0.0, ended_at=1.0)
    crash = ProcResult(returncode=-11, timed_out=False, lines=[Line("err", 5, "boom\n")], **base)
    assert outcome_from(crash, {}, {}).status == "crashed"
    assert "SIGSEGV" in outcome_from(crash, {}, {}).message
    hang = ProcResult(returncode=-9, timed_out=True, **base)
    assert outcome_from(hang, {}, {}).status == "timeout"
    garbage = ProcResult(returncode=0, timed_out=False, lines=[Line("out", 5, "garbage\n")], **base)
    o = outcome_from(garbage, {}, {})
    assert o.status == "garbage" and "malformed" in o.message and o.results == ()


def test_known_flags_from_help() -> None:
    flags = known_flags((GOLDEN / "llama-bench-help-b11434.txt").read_text())
    assert {"-p", "-n", "-d", "-pg", "-t", "--poll", "-ngl", "-fa", "-ot", "--override-tensor",
            "-hfr", "-ub", "-r"} <= flags


def test_check_flags() -> None:
    help_text = (GOLDEN / "llama-bench-help-b11434.txt").read_text()
    check_flags(["-p", "512", "-n", "128", "-d", "0,4096", "-ngl", "-1"], help_text)
    with pytest.raises(UserError, match="does not know the flag --bogus"):
        check_flags(["--bogus", "1"], help_text)
    with pytest.raises(UserError, match="set by tokensleuth"):
        check_flags(["-o", "md"], help_text)


def test_workloads() -> None:
    assert parse_workload("pp2048@d4096") == (2048, 0, 4096)
    assert parse_workload("tg128") == (0, 128, 0)
    assert parse_workload("pp512+tg128") == (512, 128, 0)
    assert workload_flags("tg128") == ["-p", "0", "-n", "128", "-d", "0"]
    with pytest.raises(UserError):
        parse_workload("xx12")


def test_workload_grammar_and_canonical_names() -> None:
    from tokensleuth.core.workloads import canonical_workload

    forms = {"pp512": "pp512", "tg128": "tg128", "pp512+tg128": "pp512+tg128", "pp2048@d4096": "pp2048@d4096",
             "tg128@d0": "tg128", "pp512@d0": "pp512", "pp512+tg128@d0": "pp512+tg128",
             "pp512+tg128@d64": "pp512+tg128@d64", "pp0512": "pp512", " tg 128 ": "tg128", "tg128@d064": "tg128@d64"}
    for form, canon in forms.items():
        assert canonical_workload(form) == canon, form
        n_p, n_g, n_d = parse_workload(form)
        assert bench_test_name(n_p, n_g, n_d) == canon  # the name llama-bench's results come back under
    for bad in ("tg0", "pp0", "pp0+tg8", "+tg128", "pp512+", "pp512tg128", "tg128+pp512", "pp", "@d4", "",
                "pp99999999999", "PP512", "pp512@d", "pp١٢", "pp512\x00"):
        with pytest.raises(UserError):
            parse_workload(bad)


def test_every_workload_form_gets_its_resources(engine: Any, dense_model: Any, tmp_path: Any) -> None:
    """Each grammar form, run end to end on the real engine: its cells carry resources."""
    import json

    from tokensleuth.cli import main

    # long enough that each window spans several of the kernel's 4 ms CPU-clock ticks (tg2 did
    # not: its CPU reading could be 0 ticks, a missing figure that says nothing of the name)
    forms = ["pp64", "tg16", "pp64+tg16", "pp64@d8", "tg16@d8", "pp64+tg16@d8", "tg16@d0", "pp064+tg16@d0"]
    out = tmp_path / "c.json"
    args = ["compare", "--db", str(tmp_path / "s.db"), "--arm", f"a=bin:{engine.bin_dir}",
            "--arm", f"b=bin:{engine.bin_dir}", "--model", str(dense_model), "--min-pairs", "2",
            "--max-pairs", "2", "--json", str(out)]
    for f in forms:
        args += ["-w", f]
    assert main([*args, "--", "-r", "1"]) == 0
    doc = json.loads(out.read_text())
    got = {c["workload"]: c for c in doc["comparisons"]}
    # tg16@d0 is tg16 and pp064+tg16@d0 is pp64+tg16: one cell each, under llama-bench's name
    assert sorted(got) == sorted({"pp64", "tg16", "pp64+tg16", "pp64@d8", "tg16@d8", "pp64+tg16@d8"})
    for name, c in got.items():
        assert c["pairs"] == 2, name
        for arm in ("baseline", "candidate"):
            # a figure, or withheld with its reason (every window's edges off by over 5%: a loaded
            # machine's late reader on a few-ms repetition)
            res = c["resources"][arm]
            assert res["cpu_ms_per_token"] is not None or any("withheld" in n for n in res["notes"]), (name, arm)
    # most cells carry the figure: the form's windows were found and attributed
    have = [c["resources"][arm]["cpu_ms_per_token"] is not None for c in got.values() for arm in ("baseline", "candidate")]
    assert sum(have) >= len(have) // 2, have


def test_a_window_is_the_timed_repetition_not_the_next_ones_memory_clear() -> None:
    """The stamped lines of `-n 32 -d 4096 -r 4` on the 30B shape (H200): each repetition's
    window closed at the next "depth run (cached)" line, 60 ms after llama-bench's clock
    stopped (the next repetition's memory clear); the window is cut to the timed part and
    its counters taken in proportion."""
    import json

    from tokensleuth.engines.llamabench import timed_part

    ms = 1_000_000
    own = [141.94, 130.26, 130.55, 130.14]
    at = [("err", 0.0, "starting"), ("err", 5104.19, "warmup generation run"), ("err", 5170.73, "depth run 1/4"),
          ("err", 5859.28, "generation run 1/4"), ("err", 6057.87, "depth run 2/4 (cached)"),
          ("err", 6057.89, "generation run 2/4"), ("err", 6249.97, "depth run 3/4 (cached)"),
          ("err", 6249.98, "generation run 3/4"), ("err", 6438.71, "depth run 4/4 (cached)"),
          ("err", 6438.73, "generation run 4/4")]
    row = {"n_prompt": 0, "n_gen": 32, "n_depth": 4096, "avg_ts": 240.0, "stddev_ts": 1.0,
           "samples_ns": [int(x * ms) for x in own], "samples_ts": [32e3 / x for x in own]}
    lines = [Line(s, int(t * ms), f"llama-bench: benchmark 1/1: {text}\n", {"cpu_s": t / 1e3, "gpu0_energy_j": t})
             for s, t, text in at]
    lines.append(Line("out", int(6568.91 * ms), json.dumps(row) + "\n", {"cpu_s": 6.56891, "gpu0_energy_j": 6568.91}))
    res = ProcResult(("llama-bench",), 0, False, 0, int(6600 * ms), 0.0, 1.0, lines)
    raw = extract_windows(res)
    assert [round((w.end_ns - w.start_ns) / ms, 2) for w in raw] == [198.59, 192.08, 188.73, 130.18]
    out = outcome_from(res, {}, {})
    assert out.status == "done"
    assert [round((w.end_ns - w.start_ns) / ms, 2) for w in out.windows] == own[:3] + [130.14]
    assert [w.start_ns for w in out.windows] == [w.start_ns for w in raw]
    first = out.windows[0]
    # CPU and energy read at the edges, at the window's mean rate over the timed part
    assert first.cpu_ms == pytest.approx(198.59 * 141.94 / 198.59, rel=1e-3)
    assert first.counters["gpu0_energy_j"] == pytest.approx(141.94, rel=1e-3)
    assert first.counters["untimed_ms"] == pytest.approx(198.59 - 141.94, abs=0.01)
    assert out.windows[3].counters["untimed_ms"] < 0.1  # the last one closed on time (its JSON line)
    assert timed_part(raw, []) == raw  # no durations from the engine: the windows as stamped
