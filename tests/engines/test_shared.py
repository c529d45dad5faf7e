"""Which pairs may share one llama-bench process, and how its outcome splits back into trials."""

from __future__ import annotations

from pathlib import Path

from tokensleuth.engines.base import ArmRuntime, per_instance
from tokensleuth.engines.llamabench.shared import differing_setting, shared_unit, split
from tokensleuth.store import ResultRow, SampleRow, TrialOutcome, WindowRow
from tokensleuth.trials.runner import TrialJob

BIN = Path("/builds/x/bin")


def arm(name: str, *flags: str, env: dict[str, str] | None = None, bin_dir: Path = BIN,
        share: bool = True) -> ArmRuntime:
    return ArmRuntime(name, bin_dir, tuple(flags), env or {}, options={"share": True} if share else {})


def job(name: str, tid: int, *argv: str, pair: int = 0) -> TrialJob:
    return TrialJob(tid, tid, name, "m.gguf", "pp64", ("-p", "64", "-n", "0", "-r", "3", *argv), pair)


def test_one_context_setting_apart_shares_anything_else_does_not() -> None:
    assert differing_setting(arm("a", "-ub", "512", "-t", "1"), arm("b", "-ub", "64", "-t", "1")) == ("-ub", "512", "64")
    assert differing_setting(arm("a", "--poll", "50"), arm("b", "--poll", "0")) == ("--poll", "50", "0")
    # a model setting reloads the model: no
    assert differing_setting(arm("a", "-ngl", "99"), arm("b", "-ngl", "0")) is None
    # two settings: llama-bench would run every combination of them
    assert differing_setting(arm("a", "-ub", "512", "-t", "1"), arm("b", "-ub", "64", "-t", "2")) is None
    # a list of values would multiply the instances
    assert differing_setting(arm("a", "-ub", "512,64"), arm("b", "-ub", "64")) is None
    # another build, another environment, or one arm without the flag (its default is unknown)
    assert differing_setting(arm("a", "-ub", "512"), arm("b", "-ub", "64", bin_dir=Path("/other"))) is None
    assert differing_setting(arm("a", "-ub", "512"), arm("b", "-ub", "64", env={"X": "1"})) is None
    assert differing_setting(arm("a"), arm("b", "-ub", "64")) is None
    # the same flags: nothing to pair inside a process
    assert differing_setting(arm("a", "-ub", "64"), arm("b", "-ub", "64")) is None
    # only -ub and --poll by default (measured to give the same ratio in one process); any context
    # setting, and identical arms (an A/A: its one value in both), when asked
    assert differing_setting(arm("a", "-t", "1"), arm("b", "-t", "2")) is None
    assert differing_setting(arm("a", "-t", "1"), arm("b", "-t", "2"), in_process=True) == ("-t", "1", "2")
    assert differing_setting(arm("a", "-ub", "64", "-t", "1"), arm("b", "-ub", "64", "-t", "1"),
                             in_process=True) == ("-ub", "64", "64")
    assert differing_setting(arm("a", "-r", "3"), arm("b", "-r", "3"), in_process=True) is None  # no context flag


def test_a_unit_shares_only_when_the_driver_allowed_it_and_its_trials_fit() -> None:
    arms = {"a": arm("a", "-ub", "512", "-t", "1"), "b": arm("b", "-ub", "64", "-t", "1")}
    s = shared_unit(arms, [job("b", 2), job("a", 1)])
    assert s is not None
    assert s.arm.flags == ("-ub", "64,512,512,64", "-t", "1")  # the pair's first arm runs first and last
    assert [j.arm for j in s.jobs] == ["b", "a"] and s.values == ("64", "512")
    assert shared_unit({**arms, "b": arm("b", "-ub", "64", "-t", "1", share=False)}, [job("a", 1), job("b", 2)]) is None
    assert shared_unit(arms, [job("a", 1)]) is None
    assert shared_unit(arms, [job("a", 1, pair=0), job("b", 2, pair=1)]) is None
    assert shared_unit(arms, [job("a", 1, "-d", "0"), job("b", 2)]) is None
    # the load log (the first trial of an arm asks for it) is the process's: on for both
    s = shared_unit(arms, [job("a", 1, "-v"), job("b", 2)])
    assert s is not None and s.argv[-1] == "-v" and s.argv.count("-v") == 1


def test_the_outcome_splits_into_each_arms_two_instances_interleaved() -> None:
    arms = {"a": arm("a", "-ub", "512"), "b": arm("b", "-ub", "64")}
    s = shared_unit(arms, [job("a", 1), job("b", 2)])
    assert s is not None
    # instance i, repetition r takes (i + 1) * 1000 + r ns: every sample says where it came from
    rows = tuple(ResultRow(i, "pp64", 64, 0, 0, 1.0, 0.0, {"n_ubatch": int(("512", "64", "64", "512")[i])},
                           tuple(SampleRow(r, (i + 1) * 1000 + r, 64) for r in range(3))) for i in range(4))
    wins = tuple(WindowRow(i, r, 10_000 * i + 10 * r, 10_000 * i + 10 * r + 5, float(i)) for i in range(4) for r in range(3))
    out = TrialOutcome("done", 0, "", "", 100.0, 200.0, 1_000, 3_000, {"argv": ["llama-bench"]}, rows, wins)
    oa, ob = split(s, out)
    (ra,), (rb,) = oa.results, ob.results
    # a ran instances 0 and 3, b instances 1 and 2; repetitions alternate between the two
    assert [x.duration_ns for x in ra.samples] == [1000, 4000, 1001, 4001, 1002, 4002]
    assert [x.duration_ns for x in rb.samples] == [2000, 3000, 2001, 3001, 2002, 3002]
    assert [x.rep for x in ra.samples] == list(range(6)) and ra.test_idx == rb.test_idx == 0
    assert ra.raw["n_ubatch"] == 512 and rb.raw["n_ubatch"] == 64
    assert [(w.rep, w.cpu_ms) for w in oa.windows] == [(0, 0.0), (1, 3.0), (2, 0.0), (3, 3.0), (4, 0.0), (5, 3.0)]
    assert {w.cpu_ms for w in ob.windows} == {1.0, 2.0} and len(ob.windows) == 6
    # the process's time is counted once: halved between the two trials
    assert (oa.t0_ns, oa.t1_ns, ob.t0_ns, ob.t1_ns) == (1_000, 2_000, 2_000, 3_000)
    assert oa.env["shared_process"]["order"] == ["a", "b", "b", "a"]
    # fewer instances than asked: neither trial keeps anything
    ga, gb = split(s, TrialOutcome("done", 0, "", "", 1.0, 2.0, 0, 10, {}, rows[:3], wins))
    assert ga.status == gb.status == "garbage" and not ga.results and "3 results for 4" in ga.message
    # a crash is both trials'
    ca, cb = split(s, TrialOutcome("crashed", -11, "engine crashed", "", 1.0, 2.0, 0, 10, {}))
    assert ca.status == cb.status == "crashed"
    assert per_instance(2) == 1 and per_instance(1) == 1 and per_instance(0) == 0


def test_each_arm_gets_back_the_command_it_would_run_alone() -> None:
    from tokensleuth.engines.base import own_argv

    shared = {"order": ["b", "a", "a", "b"], "flag": "-t", "values": ["2", "1"]}
    argv = ["llama-bench", "-m", "m.gguf", "-t", "2,1,1,2", "-p", "64"]
    assert own_argv(argv, shared, "b") == ["llama-bench", "-m", "m.gguf", "-t", "2", "-p", "64"]
    assert own_argv(argv, shared, "a") == ["llama-bench", "-m", "m.gguf", "-t", "1", "-p", "64"]


def test_an_aa_shares_a_process_only_when_asked() -> None:
    same = {n: arm(n, "-ub", "64", "-t", "1") for n in ("a", "b")}
    assert shared_unit(same, [job("a", 1), job("b", 2)]) is None
    asked = {n: ArmRuntime(n, BIN, ("-ub", "64", "-t", "1"), {}, options={"share": True, "in_process": True})
             for n in ("a", "b")}
    s = shared_unit(asked, [job("a", 1), job("b", 2)])
    assert s is not None and s.arm.flags == ("-ub", "64,64,64,64", "-t", "1") and s.values == ("64", "64")
