"""The kernel driver end to end on the real llama-bench, traced by a tracer for a machine without a
GPU (tests/fakes/kernel_tracer.py: the engine runs under its wrapper and environment, and planted
kernels come back): every process stored, resumed without a rerun, the diff names the planted
kernel and the launch that changed, and the kind renders it (Markdown, JSON, figures)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tokensleuth import kernels
from tokensleuth.drivers.slower.kernels import RUNS_STATE, run_kernels
from tokensleuth.sources.build import EngineBuild
from tokensleuth.store import Store
from tokensleuth.studies import kind_of


def test_two_builds_traced_stored_resumed_and_diffed(engine: EngineBuild, dense_model: Path, tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(kernels.TRACERS, "CPU", "tests.fakes.kernel_tracer")
    builds = {"a": engine, "b": engine}
    env = {"b": {"FAKE_EXTRA": "1", "FAKE_REGS": "96"}}
    lines: list[str] = []
    with Store(tmp_path / "s.db") as store:
        sid, obj = run_kernels(store, builds, [str(dense_model)], ["tg16"], ["-t", "1"], processes=2, reps=4,
                               env=env, log=lines.append)
        def said(what: str) -> int:
            return sum(x.startswith(f"  {what} ") for x in lines)

        # a traced process and an untraced one for each of the 4
        assert len(store.state.get(sid, RUNS_STATE)) == 4 and said("traced") == 4 and said("untraced") == 4
        again, _ = run_kernels(store, builds, [str(dense_model)], ["tg16"], ["-t", "1"], processes=2, reps=4,
                               env=env, resume=True, log=lines.append)
        assert again == sid and said("traced") == 4 and said("untraced") == 4  # nothing measured twice
        # killed between the two halves of a pair: --resume runs the half that is missing, only it
        runs = store.state.get(sid, RUNS_STATE)
        del runs[1]["untraced_ms_per_token"]
        store.state.put(sid, RUNS_STATE, runs)
        store.db.execute("UPDATE studies SET status='interrupted' WHERE id=?", (sid,))
        run_kernels(store, builds, [str(dense_model)], ["tg16"], ["-t", "1"], processes=2, reps=4, env=env,
                    resume=True, log=lines.append)
        assert said("traced") == 4 and said("untraced") == 5
        md, j = kind_of("kernels").render_stored(store, sid)
        figures = kind_of("kernels").figures(store, sid, j)
    (d,) = obj["diffs"]
    rows = {r["kernel"]: r for r in d["rows"]}
    assert rows["k_extra"]["verdict"] == "appeared" and rows["k_extra"]["calls_per_token"][0] == 0
    assert rows["k_tail"]["launch_changed"] == "registers 32 -> 96"
    assert {c["engine"] for c in obj["cells"]} == {"a", "b"} and all(c["processes"] == 2 for c in obj["cells"])
    assert d["measured_by"] == "untraced processes" and all(c["untraced_ms_per_token"] for c in obj["cells"])
    assert all(c["trace_cost"]["ratio"] > 0 for c in obj["cells"])
    # the records lie inside the windows (the planted kernels cover part of each one's time)
    share = {c["engine"]: c["kernel_ms_per_token"] / c["bench_ms_per_token"] for c in obj["cells"]}
    assert all(0.2 < v < 1.0 for v in share.values()), share
    assert "### Diff: b vs a" in md and "k_extra appeared" in md and "registers 32 -> 96" in md
    assert [(r["kernel"], r["verdict"]) for r in j["diffs"][0]["rows"]] == [(r["kernel"], r["verdict"]) for r in d["rows"]]
    assert {f.key.split("-")[0] for f in figures} == {"kernels", "timeline"}


def test_a_cpu_build_is_not_traced_and_a_tracer_that_records_nothing_is_said(engine: EngineBuild) -> None:
    from tokensleuth.drivers.slower.kernels import traced

    assert not traced([engine.backends])  # the op profile's, not a kernel trace
    assert traced([("CPU", "CUDA"), ("CPU", "Vulkan")])


def test_a_traced_run_refuses_what_it_cannot_trace_before_any_build() -> None:
    from tokensleuth.core.errors import UserError
    from tokensleuth.drivers.slower.kernels import check_flags

    for flags, workloads, said in ((["-p", "512"], ["tg32"], "conflicts with --workload"),
                                   (["-o", "csv"], ["tg32"], "set by tokensleuth"),
                                   (["-fa", "0,1"], ["tg32"], "a list of values runs one test each"),
                                   (["-ngl=0,99"], ["tg32"], "a list of values runs one test each"),
                                   ([], ["tg32xc4"], "runs one stream")):
        with pytest.raises(UserError, match=said):
            check_flags(flags, workloads)
    check_flags(["-ngl", "99", "-fa", "1", "-ub", "2048"], ["tg32", "pp2048", "pp512+tg128"])


def test_arms_of_one_build_are_traced_as_each_runs_it(engine: EngineBuild, dense_model: Path, tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """compare --profile on arms that differ only in environment or flags: one build traced two
    ways (it said "not profiled — one build" before)."""
    from types import SimpleNamespace

    from tokensleuth.drivers.slower import profiler
    from tokensleuth.drivers.slower.ops import profile_comparisons
    from tokensleuth.sources import DEFAULT_ENGINE
    from tokensleuth.studies.kernels import summary

    monkeypatch.setitem(kernels.TRACERS, "CPU", "tests.fakes.kernel_tracer")
    arms = [SimpleNamespace(name="fused", source=DEFAULT_ENGINE, cmake=[], env={}, flags=[]),
            SimpleNamespace(name="split", source=DEFAULT_ENGINE, cmake=[], env={"FAKE_EXTRA": "1"}, flags=["-ngl", "0"])]
    comps = [SimpleNamespace(verdict="slower", baseline="fused", candidate="split", model=str(dense_model),
                             workload="tg16")]
    from tokensleuth.commands.common import SAY as say

    with Store(tmp_path / "s.db") as store:
        got = profile_comparisons(comps, SimpleNamespace(arms=arms),
                                  profiler(store, [], ["-t", "1"], 600, say, summary))
        (sid,) = [s["id"] for s in store.reads.studies() if s["kind"] == "kernels"]
        spec = store.reads.study(sid).spec
    (p,) = got
    assert "skipped" not in p and "k_extra appeared" in p["headline"]
    assert spec["engines"] == ["fused", "split"] and spec["env"] == {"split": {"FAKE_EXTRA": "1"}}
    assert spec["engine_flags"] == {"split": ["-ngl", "0"]}
