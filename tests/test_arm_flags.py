"""An arm's argv is joined in one place (Engine.join_flags): the common flags, then the arm's own,
and an option given in both passed once with the arm's value. The flag check and the run see that
argv; a list of values in one arm is refused before any build."""

from __future__ import annotations

import json
import sqlite3
import subprocess
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from tests.faults.gguf_tiny import write_tiny_gguf
from tokensleuth import cli
from tokensleuth.core.errors import UserError
from tokensleuth.engines import engine_for
from tokensleuth.sources import DEFAULT_ENGINE
from tokensleuth.sources.build import EngineBuild

BENCH = engine_for("llama-bench")


def joined(common: Sequence[str], own: Sequence[str]) -> tuple[list[str], list[tuple[str, str]]]:
    j = BENCH.join_flags(common, own)
    return list(j.argv), list(j.overrides)


def test_an_arms_flag_is_passed_once_with_its_value() -> None:
    assert joined(["-t", "2", "-r", "3"], ["-t", "1"]) == (["-r", "3", "-t", "1"], [("-t 1", "-t 2")])
    # the order is fixed: the common flags first, whatever order the arm's came in
    assert joined(["-r", "3", "-t", "2"], ["-ub", "64", "-t", "1"]) == (["-r", "3", "-ub", "64", "-t", "1"],
                                                                        [("-t 1", "-t 2")])
    # a common option given twice goes whole
    assert joined(["-r", "2", "-r", "3"], ["-r", "5"]) == (["-r", "5"], [("-r 5", "-r 2 -r 3")])


def test_a_long_and_a_short_spelling_are_one_option() -> None:
    assert joined(["--threads", "2"], ["-t", "1"]) == (["-t", "1"], [("-t 1", "--threads 2")])
    assert joined(["--threads=2"], ["-t", "1"])[0] == ["-t", "1"]
    # a negative value is the option's value, not an option; llama-bench reads '_' as '-'
    assert joined(["-ngl", "-1", "-r", "2"], ["--n_gpu_layers", "0"])[0] == ["-r", "2", "--n_gpu_layers", "0"]
    assert joined(["-v", "-r", "2"], ["--verbose"])[0] == ["-r", "2", "--verbose"]


def test_flags_given_once_are_joined_as_they_were_given() -> None:
    assert joined(["-r", "2", "-t", "1"], ["-ub", "64"]) == (["-r", "2", "-t", "1", "-ub", "64"], [])
    assert joined(["-v", "-r", "2"], ["-fa", "1"]) == (["-v", "-r", "2", "-fa", "1"], [])  # -v takes no value
    assert joined([], ["-t", "1"]) == (["-t", "1"], []) and joined(["-t", "1"], []) == (["-t", "1"], [])
    # a kind without an option table passes both, the arm's last (its parser keeps the later one)
    server = engine_for("llama-server").join_flags(["-c", "512"], ["-c", "1024"])
    assert server.argv == ("-c", "512", "-c", "1024") and server.overrides == ()


def test_a_list_of_values_is_several_tests() -> None:
    for flags in (["-t", "1,2"], ["-ngl", "0-99"], ["-ub=64,512"], ["-ot", "exps=CPU,attn=CPU"], ["-t", "1", "-t", "2"],
                  ["--threads", "1", "-t", "2"]):
        with pytest.raises(UserError, match="each value its own arm"):
            BENCH.check_one_test(flags)
    BENCH.check_one_test(["-ngl", "-1", "-ot", "exps=CPU;attn=CPU", "-r", "2", "-r", "3", "-v", "-t", "1"])


def test_the_spec_checks_and_runs_each_arm_with_its_joined_argv() -> None:
    from tokensleuth.drivers.verdicts import pairs as cmp
    from tokensleuth.drivers.verdicts import reps
    from tokensleuth.trials.spec import build_compare_spec

    spec = build_compare_spec({"arms": [{"name": "a", "source": "bin:/x", "flags": "-t 1 -r 4"},
                                        {"name": "b", "source": "bin:/x"}],
                               "models": ["m.gguf"], "common_flags": ["-t", "2", "-r", "2"]}, "test")
    a, b = spec.arms
    assert spec.flags_of(a) == ["-t", "1", "-r", "4"] and spec.flags_of(b) == ["-t", "2", "-r", "2"]
    assert spec.joined(a).notes("a") == ["arm a: -t 1 overrides the common -t 2",
                                         "arm a: -r 4 overrides the common -r 2"]
    build: Any = SimpleNamespace(bin_dir="/x", source="bin:/x")
    runtimes = cmp._runtimes(spec, {"a": build, "b": build})
    assert runtimes["a"].flags == ("-t", "1", "-r", "4") and runtimes["b"].flags == ("-t", "2", "-r", "2")
    assert reps.asked_reps(spec) is None  # the arms' own -r: 4 and 2, not the common one for both


def test_an_engine_of_a_trace_runs_its_own_flag_over_the_common_one(monkeypatch: pytest.MonkeyPatch) -> None:
    from tokensleuth.drivers.slower import kernels

    got: dict[str, Any] = {}
    monkeypatch.setattr(kernels, "tracer_for", lambda backends: SimpleNamespace(name="fake", ready=lambda: None))
    monkeypatch.setattr(kernels, "run_study", lambda store, study, spec, **kw: got.update(study=study, spec=spec))
    builds: Any = {"a": SimpleNamespace(key="k", backends=("CPU",)), "b": SimpleNamespace(key="k", backends=("CPU",))}
    kernels.run_kernels(None, builds, ["m"], ["tg16"], ["-t", "2", "-r", "3"],  # type: ignore[arg-type]
                        engine_flags={"a": ["-t", "1"]})
    argv = {"a": ["-r", "3", "-t", "1"], "b": ["-t", "2", "-r", "3"]}
    assert got["study"].flags == argv and got["spec"]["engine_argv"] == argv
    kernels.run_kernels(None, builds, ["m"], ["tg16"], ["-t", "2"], engine_flags={"a": ["-r", "3"]})  # type: ignore[arg-type]
    assert got["study"].flags == {"a": ["-t", "2", "-r", "3"], "b": ["-t", "2"]} and "engine_argv" not in got["spec"]


@pytest.fixture()
def world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    m = tmp_path / "m.gguf"
    write_tiny_gguf(m)
    repo = tmp_path / "repo"
    subprocess.run(["git", "init", "-q", "-b", "main", str(repo)], check=True)
    for i in range(2):
        (repo / "f.txt").write_text(f"{i}\n")
        subprocess.run(["git", "-C", str(repo), "add", "."], check=True)
        subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", f"c{i}"],
                       check=True)
    study = tmp_path / "s.toml"
    study.write_text(f'models = ["{m}"]\ncommon_flags = "-t 2"\n'
                     f'[[arms]]\nname = "a"\nsource = "{DEFAULT_ENGINE}"\nflags = "-t 1,2"\n'
                     f'[[arms]]\nname = "b"\nsource = "{DEFAULT_ENGINE}"\n')
    cache, db = tmp_path / "cache", tmp_path / "store.sqlite"
    monkeypatch.setenv("TOKENSLEUTH_CACHE", str(cache))
    monkeypatch.setenv("TOKENSLEUTH_DB", str(db))
    monkeypatch.setenv("TOKENSLEUTH_DATA", str(tmp_path / "data"))
    return {"m": str(m), "repo": str(repo), "study": str(study), "cache": str(cache), "db": str(db)}


ARMS = ["compare", "--arm", f"a={DEFAULT_ENGINE}", "--arm", f"b={DEFAULT_ENGINE}", "--model", "{m}", "-w", "tg16"]


@pytest.mark.parametrize("args", [
    [*ARMS, "--flags", "a=-t 1,2"],
    [*ARMS, "--flags", "a=-ngl 0-99"],
    [*ARMS, "--", "-t", "1", "-t", "2"],
    ["compare", "--study", "{study}"],
    ["bisect", "--repo", "{repo}", "--good", "HEAD~1", "--bad", "HEAD", "--model", "{m}", "--", "-t", "1,2"],
], ids=["arm list", "arm range", "common twice", "study file", "bisect"])
def test_a_list_of_values_in_an_arm_is_refused_before_any_build(
        args: list[str], world: dict[str, str], capsys: pytest.CaptureFixture[str]) -> None:
    rc = cli.main([a.format(**world) for a in args])
    err = capsys.readouterr().err
    assert rc == 2, err
    assert len(err.strip().splitlines()) == 1 and "each value its own arm" in err, err
    assert not Path(world["db"]).exists()
    assert not Path(world["cache"]).exists() or not any(Path(world["cache"]).iterdir())


def test_the_check_and_the_run_see_the_same_argv(engine: EngineBuild, dense_model: Path, tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    """compare --flags "a=-t 1" -- -t 2: arm a is checked and run with -t 1 alone (one test per
    process), b with -t 2; the override is said once and the study records each arm's argv."""
    from tokensleuth.engines.llamabench import LlamaBench

    checked: dict[str, set[tuple[str, ...]]] = defaultdict(set)
    ran: dict[str, set[tuple[str, ...]]] = defaultdict(set)
    check, run_trial = LlamaBench.check, LlamaBench.run_trial

    def spy_check(self: LlamaBench, arm: Any, workloads: Sequence[str]) -> None:
        checked[arm.name].add(tuple(arm.flags))
        check(self, arm, workloads)

    def spy_run(self: LlamaBench, arm: Any, *args: Any, **kw: Any) -> Any:
        ran[arm.name].add(tuple(arm.flags))
        return run_trial(self, arm, *args, **kw)

    monkeypatch.setattr(LlamaBench, "check", spy_check)
    monkeypatch.setattr(LlamaBench, "run_trial", spy_run)
    db = tmp_path / "s.db"
    monkeypatch.setenv("TOKENSLEUTH_DB", str(db))
    rc = cli.main(["compare", "--arm", f"a=bin:{engine.bin_dir}", "--arm", f"b=bin:{engine.bin_dir}",
                   "--flags", "a=-t 1", "--model", str(dense_model), "-w", "tg16", "--min-pairs", "2",
                   "--max-pairs", "2", "--no-probe", "--", "-t", "2", "-r", "1"])
    err = capsys.readouterr().err
    assert rc == 0, err
    argv = {"a": ("-r", "1", "-t", "1"), "b": ("-t", "2", "-r", "1")}
    assert checked == ran == {name: {a} for name, a in argv.items()}
    assert err.count("arm a: -t 1 overrides the common -t 2") == 1 and "arm b:" not in err
    con = sqlite3.connect(db)
    (spec_json,) = con.execute("SELECT spec_json FROM studies WHERE kind='compare'").fetchone()
    assert json.loads(spec_json)["arm_argv"] == {name: list(a) for name, a in argv.items()}
    rows = con.execute("SELECT a.name, r.raw_json FROM results r JOIN trials t ON t.id=r.trial_id "
                       "JOIN arms a ON a.id=t.arm_id").fetchall()
    per_trial = con.execute("SELECT COUNT(*) FROM results GROUP BY trial_id").fetchall()
    assert len(rows) == 4 and {n for (n,) in per_trial} == {1}  # one test per process
    assert {(name, json.loads(raw)["n_threads"]) for name, raw in rows} == {("a", 1), ("b", 2)}
