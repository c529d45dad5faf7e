"""Output checks: verdicts, caching and engine faults (fake runner), then the real engine."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import GOLDEN, tokensleuth_bin
from tokensleuth.core.errors import EngineError, UserError
from tokensleuth.engines.perplexity import KldSettings, parse_kld
from tokensleuth.engines.proc import Line, ProcResult
from tokensleuth.sources import DEFAULT_ENGINE
from tokensleuth.sources.build import BuildCache, EngineBuild
from tokensleuth.trials.outputs import (
    ArmOutputCheck,
    OutputChecker,
    Tolerance,
    check_outputs,
    classify,
    corpus_text,
    render_output_checks,
)

PPL_TARGETS = ("llama-bench", "llama-quantize", "llama-perplexity")


def golden(name: str) -> tuple[str, str]:
    return ((GOLDEN / f"perplexity-b11434-{name}.stdout").read_text(),
            (GOLDEN / f"perplexity-b11434-{name}.stderr").read_text())


SAME = parse_kld("\n".join(golden("kld-same")))
Q8 = parse_kld("\n".join(golden("kld-ctk-q8_0")))


def test_verdicts_against_the_floor() -> None:
    assert classify(SAME, SAME) == "identical"
    assert classify(Q8, SAME) == "changed"
    # a last-digit difference in PPL, KLD within tolerance, same top token everywhere
    near = dataclasses.replace(SAME, mean_ppl_q=SAME.mean_ppl_q + 0.01, mean_kld=0.000001, kld_99=0.000002)
    assert classify(near, SAME) == "equivalent"
    assert classify(dataclasses.replace(near, same_top_p=99.0), SAME) == "changed"
    assert classify(dataclasses.replace(near, kld_99=0.000004), SAME) == "changed"
    assert classify(Q8, SAME, Tolerance(kld=1e-4, top_p_pct=5.0)) == "equivalent"


def test_corpus_is_deterministic_and_long_enough() -> None:
    text = corpus_text()
    assert text == corpus_text()
    assert len(text.split()) >= 3000  # > 4 chunks x 128 tokens under any tokenizer


class FakeRunner:
    """Plays golden output; writes the base file where a base run would."""

    def __init__(self, kld: str = "kld-same", *, returncode: int = 0, timed_out: bool = False,
                 spawn_error: str | None = None) -> None:
        self.kld, self.returncode, self.timed_out, self.spawn_error = kld, returncode, timed_out, spawn_error
        self.calls: list[list[str]] = []

    def __call__(self, argv: list[str], **_: Any) -> ProcResult:
        self.calls.append(argv)
        is_base = "--kl-divergence" not in argv
        if is_base and self.returncode == 0:
            Path(argv[argv.index("--kl-divergence-base") + 1]).write_bytes(b"\x01" * 64)
        out, err = golden("kld-base" if is_base else self.kld)
        lines = [Line("out", 0, ln) for ln in out.splitlines(keepends=True)]
        lines += [Line("err", 1, ln) for ln in err.splitlines(keepends=True)]
        return ProcResult(tuple(argv), None if self.spawn_error else self.returncode, self.timed_out,
                          0, 1, time.time(), time.time(), lines, spawn_error=self.spawn_error)


def fake_build(tmp_path: Path, key: str) -> EngineBuild:
    d = tmp_path / key
    d.mkdir(exist_ok=True)
    (d / "llama-perplexity").write_text("")
    return EngineBuild(DEFAULT_ENGINE, str(d), key, None, None, (), "cc", ("CPU",), PPL_TARGETS)


@pytest.fixture()
def model(tmp_path: Path) -> str:
    p = tmp_path / "m.gguf"
    p.write_bytes(b"GGUF")
    return str(p)


class CountingRunner:
    """The real runner, counted: which llama-perplexity runs the checker asked for."""

    def __init__(self, real: Any = None) -> None:
        from tokensleuth.engines.proc import run_process

        self.real = real or run_process
        self.calls: list[list[str]] = []

        self.lost: list[bool] = []  # the run lost its statistics (llama.cpp#22142) and was run again

    def __call__(self, argv: list[str], **kw: Any) -> ProcResult:
        from tokensleuth.core.errors import EngineError
        from tokensleuth.engines import perplexity as ppl

        self.calls.append(list(argv))
        res = self.real(argv, **kw)
        text = res.text("out") + res.text("err")
        try:
            (ppl.parse_kld if "--kl-divergence" in argv else ppl.parse_base_ppl)(text)
            self.lost.append(False)
        except EngineError:
            self.lost.append(not ppl.error_line(text))
        return res

    def asked(self) -> list[list[str]]:
        """The runs the checker asked for: a run whose statistics were lost, and so was run again, once."""
        return [a for a, lost in zip(self.calls, self.lost, strict=True) if not lost]


def test_base_and_floor_are_made_once_per_base(ppl_engine: EngineBuild, dense_model: Path, tmp_path: Path) -> None:
    run = CountingRunner()
    checker = OutputChecker(tmp_path / "wd", KldSettings(threads=2), run=run)
    first = checker.check(ppl_engine, ppl_engine, str(dense_model))
    second = checker.check(ppl_engine, ppl_engine, str(dense_model), cand_flags=("-ctk", "q8_0", "-ctv", "q8_0"))
    # base logits, floor, candidate; then only the second candidate: the real llama-perplexity four times
    assert ["--kl-divergence" in a for a in run.asked()] == [False, True, True, True]
    assert all(Path(a[0]).name == "llama-perplexity" for a in run.calls)
    assert first.verdict == "identical" and second.verdict == "changed"
    assert first.floor == second.floor  # one floor for the base, reused
    assert not list((tmp_path / "wd").glob("*.tmp*"))


def test_check_outputs_json_has_the_contract_keys(ppl_engine: EngineBuild, dense_model: Path,
                                                  tmp_path: Path) -> None:
    c = check_outputs(ppl_engine, ppl_engine, str(dense_model), workdir=tmp_path / "wd",
                      settings=KldSettings(threads=2))
    j = c.to_json()
    assert {"verdict", "mean_kld", "kld_99", "same_top_p", "ppl_ratio"} <= set(j)
    assert j["verdict"] == "identical" and j["same_top_p"] == 100.0 and j["ppl_ratio"] == pytest.approx(1.0, abs=1e-5), j
    assert 0 <= j["mean_kld"] <= 1e-6 and 0 <= j["kld_99"] <= 1e-5, j
    json.dumps(j)
    line = render_output_checks([ArmOutputCheck("base", "cand", str(dense_model), c).to_json()])
    assert f"{dense_model.stem}: cand vs base: **identical**" in line


@pytest.mark.parametrize(("runner", "match"), [
    (FakeRunner(returncode=1), "exited with 1"),
    (FakeRunner(timed_out=True), "ran past"),
    (FakeRunner(spawn_error="cannot start llama-perplexity: Permission denied"), "Permission denied"),
    (FakeRunner("kld-bad-base"), "does not look like a file containing log-probabilities"),
])
def test_engine_faults_are_one_engine_error(tmp_path: Path, model: str, runner: FakeRunner, match: str) -> None:
    with pytest.raises(EngineError, match=match):
        check_outputs(fake_build(tmp_path, "b"), fake_build(tmp_path, "c"), model,
                      workdir=tmp_path / "wd", run=runner)
    assert not list((tmp_path / "wd").glob("*.kld"))  # nothing half-made is kept as a base


def test_missing_model_or_binary_is_a_user_error(tmp_path: Path, model: str) -> None:
    b = fake_build(tmp_path, "b")
    with pytest.raises(UserError, match="give an existing GGUF file"):
        check_outputs(b, b, str(tmp_path / "nope.gguf"), workdir=tmp_path / "wd", run=FakeRunner())
    (Path(b.bin_dir) / "llama-perplexity").unlink()
    with pytest.raises(UserError, match="llama-perplexity is not in"):
        check_outputs(b, b, model, workdir=tmp_path / "wd", run=FakeRunner())


# -- the real engine -----------------------------------------------------------------


@pytest.fixture(scope="session")
def ppl_engine() -> EngineBuild:
    return BuildCache().get(DEFAULT_ENGINE, targets=PPL_TARGETS)


def test_real_engine_same_build_is_identical_and_kv_quant_is_changed(
        ppl_engine: EngineBuild, dense_model: Path, tmp_path: Path) -> None:
    checker = OutputChecker(tmp_path, KldSettings(threads=2))
    same = checker.check(ppl_engine, ppl_engine, str(dense_model))
    assert same.verdict == "identical"
    assert same.same_top_p == 100.0 and same.mean_kld <= 1e-6
    q8 = checker.check(ppl_engine, ppl_engine, str(dense_model), cand_flags=("-ctk", "q8_0", "-ctv", "q8_0"))
    assert q8.verdict == "changed"
    assert q8.mean_kld > same.floor.mean_kld and q8.same_top_p < 100.0


def _in_this_session(argv: list[str], *, timeout_s: float | None = None, env: dict[str, str] | None = None,
                     **_: Any) -> ProcResult:
    """The real engine run in this process's session (run_process gives it one of its own)."""
    t0, started = time.monotonic_ns(), time.time()
    p = subprocess.run(argv, env={**os.environ, **(env or {})}, capture_output=True, text=True, timeout=timeout_s)
    lines = [Line("out", 0, ln) for ln in p.stdout.splitlines(keepends=True)]
    lines += [Line("err", 1, ln) for ln in p.stderr.splitlines(keepends=True)]
    return ProcResult(tuple(argv), p.returncode, False, t0, time.monotonic_ns(), started, time.time(), lines)


def test_statistics_come_through_on_a_core_shared_with_a_busy_process(
        ppl_engine: EngineBuild, dense_model: Path, tmp_path: Path) -> None:
    """llama.cpp's logger thread loses the statistics at exit when the engine's threads share a
    core, and a scheduling group, with a busy process (ggml-org/llama.cpp#22142): without the
    exit drain 17 of 20 such runs lost them, with it 0 of 20 (bench/lost_tail.py). Linux groups
    the threads of a session, so the runner here starts the engine in this process's session, as
    the busy one is (run_process's session of its own shields it on this machine, not where the
    tests run in a cgroup of their own). Every run must bring its statistics the first time."""
    cpu = max(os.sched_getaffinity(0))
    spinner = subprocess.Popen([sys.executable, "-c", "while 1: pass"],
                               preexec_fn=lambda: os.sched_setaffinity(0, {cpu}))
    mine = os.sched_getaffinity(0)
    run = CountingRunner(_in_this_session)
    checker = OutputChecker(tmp_path / "wd", KldSettings(threads=2), run=run)
    try:
        os.sched_setaffinity(0, {cpu})  # the engines started from here share the spinner's core
        for _ in range(8):
            checker.kld(ppl_engine, ppl_engine, str(dense_model))
    finally:
        os.sched_setaffinity(0, mine)
        spinner.kill()
        spinner.wait()
    assert len(run.calls) == 9 and run.lost == [False] * 9  # the base, then 8 comparisons; none run again


def test_a_failed_base_run_is_tried_once(tmp_path: Path, model: str) -> None:
    run = FakeRunner(returncode=1)
    with pytest.raises(EngineError, match="exited with 1"):
        check_outputs(fake_build(tmp_path, "b"), fake_build(tmp_path, "c"), model,
                      workdir=tmp_path / "wd", run=run)
    assert len(run.calls) == 1


# -- compare --check-outputs through the CLI -------------------------------------------


def _compare(args: list[str], env: dict[str, str], tmp_path: Path) -> tuple[subprocess.CompletedProcess[str],
                                                                           dict[str, Any]]:
    out = tmp_path / "c.json"
    p = subprocess.run([tokensleuth_bin(), "compare", "--json", str(out), *args], env=env,
                       capture_output=True, text=True, timeout=900)
    return p, (json.loads(out.read_text()) if out.exists() else {})


def test_compare_checks_outputs_of_each_candidate(ppl_engine: EngineBuild, dense_model: Path,
                                                  cli_env: dict[str, str], tmp_path: Path) -> None:
    E = DEFAULT_ENGINE
    p, doc = _compare(["--arm", f"a={E}", "--arm", f"same={E}", "--arm", f"kvq8={E}",
                       "--flags", "kvq8=-ctk q8_0 -ctv q8_0", "--model", str(dense_model), "-w", "tg8",
                       "--min-pairs", "2", "--max-pairs", "2", "--check-outputs", "--", "-r", "1", "-t", "1"],
                      cli_env, tmp_path)
    assert p.returncode == 0, p.stderr
    by_arm = {o["candidate"]: o for o in doc["outputs"]}
    assert set(by_arm) == {"same", "kvq8"}
    assert by_arm["same"]["verdict"] == "identical" and by_arm["same"]["baseline"] == "a"
    assert by_arm["kvq8"]["verdict"] == "changed"
    assert by_arm["kvq8"]["same_top_p"] < 100.0 and by_arm["kvq8"]["mean_kld"] > by_arm["kvq8"]["floor"]["mean_kld"]
    for o in doc["outputs"]:
        assert {"verdict", "mean_kld", "kld_99", "same_top_p", "ppl_ratio"} <= set(o)
    assert ": same vs a: **identical**" in p.stdout and ": kvq8 vs a: **changed**" in p.stdout
    # stored with the study: `report` shows them and its JSON carries them
    r = subprocess.run([tokensleuth_bin(), "report", doc["study"], "--json", str(tmp_path / "r.json")],
                       env=cli_env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and ": kvq8 vs a: **changed**" in r.stdout, r.stderr
    assert json.loads((tmp_path / "r.json").read_text())["outputs"] == doc["outputs"]


def test_compare_without_the_flag_has_no_outputs_key(engine: EngineBuild, dense_model: Path,
                                                     cli_env: dict[str, str], tmp_path: Path) -> None:
    E = DEFAULT_ENGINE
    p, doc = _compare(["--arm", f"a={E}", "--arm", f"b={E}", "--model", str(dense_model), "-w", "tg8",
                       "--min-pairs", "2", "--max-pairs", "2", "--", "-r", "1", "-t", "1"], cli_env, tmp_path)
    assert doc["comparisons"] and "outputs" not in doc
    assert "Outputs (" not in p.stdout


def test_a_swept_setting_is_refused_before_measuring(ppl_engine: EngineBuild, dense_model: Path,
                                                      cli_env: dict[str, str]) -> None:
    E = DEFAULT_ENGINE
    p = subprocess.run([tokensleuth_bin(), "compare", "--arm", f"a={E}", "--arm", f"b={E}",
                        "--flags", "b=-ctk f16,q8_0", "--model", str(dense_model), "-w", "tg8",
                        "--check-outputs"], env=cli_env, capture_output=True, text=True, timeout=120)
    assert p.returncode == 2
    assert len(p.stderr.strip().splitlines()) == 1 and "sweeps several settings" in p.stderr, p.stderr
    assert not Path(cli_env["TOKENSLEUTH_DB"]).exists()


def test_an_engine_without_llama_perplexity_is_refused_before_measuring(
        engine: EngineBuild, dense_model: Path, cli_env: dict[str, str], tmp_path: Path) -> None:
    bench_only = tmp_path / "bin"
    bench_only.mkdir()
    (bench_only / "llama-bench").symlink_to(Path(engine.bin_dir) / "llama-bench")
    p = subprocess.run([tokensleuth_bin(), "compare", "--arm", f"a=bin:{bench_only}", "--arm", f"b=bin:{bench_only}",
                        "--model", str(dense_model), "-w", "tg8", "--check-outputs"],
                       env=cli_env, capture_output=True, text=True, timeout=120)
    assert p.returncode == 2
    assert len(p.stderr.strip().splitlines()) == 1 and "llama-perplexity is not in" in p.stderr, p.stderr
    assert not Path(cli_env["TOKENSLEUTH_DB"]).exists()


class LosesTailOnce(FakeRunner):
    """A run that went through but whose last lines never arrived (llama.cpp's logger, at exit
    on a busy machine), then a whole one."""

    def __call__(self, argv: list[str], **kw: Any) -> ProcResult:
        res = super().__call__(argv, **kw)
        if len(self.calls) == 2:  # the floor's run: its statistics lost
            keep = [ln for ln in res.lines if "Mean" not in ln.text and "Same top p:" not in ln.text
                    and "KLD" not in ln.text]
            return dataclasses.replace(res, lines=keep)
        return res


def test_a_run_whose_statistics_were_lost_at_exit_is_run_again(tmp_path: Path, model: str) -> None:
    run = LosesTailOnce()
    c = check_outputs(fake_build(tmp_path, "b"), fake_build(tmp_path, "b"), model, workdir=tmp_path / "wd", run=run)
    assert c.verdict == "identical"
    assert ["--kl-divergence" in a for a in run.calls] == [False, True, True, True]  # the floor twice
    # an engine error line is never run again: the engine said what is wrong
    bad = FakeRunner("kld-bad-base")
    with pytest.raises(EngineError, match="does not look like a file containing log-probabilities"):
        check_outputs(fake_build(tmp_path, "c"), fake_build(tmp_path, "c"), model, workdir=tmp_path / "wd2", run=bad)
    assert len(bad.calls) == 2  # the base, then the floor once


class LosesTailAlways(FakeRunner):
    def __call__(self, argv: list[str], **kw: Any) -> ProcResult:
        res = super().__call__(argv, **kw)
        if "--kl-divergence" not in argv:
            return res
        return dataclasses.replace(res, lines=[ln for ln in res.lines if "Same top p:" not in ln.text])


def test_statistics_lost_in_every_run_end_in_one_engine_error_after_pauses(
        tmp_path: Path, model: str, monkeypatch: pytest.MonkeyPatch) -> None:
    pauses: list[float] = []
    monkeypatch.setattr(time, "sleep", pauses.append)
    run = LosesTailAlways()
    with pytest.raises(EngineError, match=r"missing same_top_p\) .* \(in 5 runs; llama.cpp's logger can drop"):
        check_outputs(fake_build(tmp_path, "b"), fake_build(tmp_path, "b"), model, workdir=tmp_path / "wd", run=run)
    assert ["--kl-divergence" in a for a in run.calls] == [False, True, True, True, True, True]
    assert pauses == [0.5, 1.0, 1.5, 2.0]  # a burst of load passes; a run that has its lines waits for nothing
