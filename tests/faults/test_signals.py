"""SIGINT / SIGTERM mid-trial: exit 130 / 143, one line saying how to resume, no engine
left running, the study marked interrupted, and --resume finishes it with nothing twice."""

from __future__ import annotations

import json
import signal
import sqlite3
import subprocess
import time
from pathlib import Path

import psutil
import pytest

from tests.conftest import tokensleuth_bin
from tokensleuth.drivers.bench import asked_reps
from tokensleuth.sources.build import EngineBuild

REPS = 200  # a trial of ~0.5 s on a quiet machine (model load + repetitions): the signal lands in it


def _name(p: psutil.Process) -> str:
    try:
        return str(p.name())
    except psutil.NoSuchProcess:  # exited between the listing and the look
        return ""


def _is_trial(p: psutil.Process) -> bool:
    """A measured trial (``--progress``), not compare's short placement run (``-v``) before them."""
    try:
        return "--progress" in p.cmdline()
    except psutil.Error:
        return False


def _engines_of(cli: psutil.Process, timeout_s: float = 60) -> list[psutil.Process]:
    """The llama-bench trial processes under the CLI, once one is running."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            children = cli.children(recursive=True)
        except psutil.NoSuchProcess:
            return []
        found = [c for c in children if _name(c) == "llama-bench" and _is_trial(c)]
        if found or time.monotonic() >= deadline:
            return found
        time.sleep(0.02)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_signal_mid_trial_then_resume(engine: EngineBuild, dense_model: Path, cli_env: dict[str, str],
                                      db: Path, sig: signal.Signals) -> None:
    argv = [tokensleuth_bin(), "bench", "--trials", "2", "--model", str(dense_model)]
    bench_flags = ["--", "-p", "32", "-n", "4", "-t", "1", "-r", str(REPS)]  # -t 1: no spin barrier to stall
    p = subprocess.Popen([*argv, *bench_flags], env=cli_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    cli = psutil.Process(p.pid)
    engines = _engines_of(cli)  # the signal goes as soon as an engine is seen: mid-trial
    assert engines, "the engine never started"
    p.send_signal(sig)
    _, err = p.communicate(timeout=60)

    assert p.returncode == 128 + sig  # 130 / 143; typer used to turn Ctrl-C into a silent 0
    assert err.strip().splitlines() == [
        f"interrupted ({sig.name}) — rerun the same command with --resume to continue where it stopped"]
    for e in engines:  # killed with its CLI, not left running on (or holding the CPU)
        assert not e.is_running() or e.status() == psutil.STATUS_ZOMBIE, e
    con = sqlite3.connect(db)
    assert con.execute("SELECT status FROM studies").fetchall() == [("interrupted",)]
    statuses = [s for (s,) in con.execute("SELECT status FROM trials ORDER BY seq")]
    assert "running" not in statuses and "done" not in statuses[1:]  # nothing counted half-way
    con.close()

    r = subprocess.run([*argv, "--resume", *bench_flags], env=cli_env, capture_output=True, text=True, timeout=180)
    assert r.returncode == 0, r.stderr
    con = sqlite3.connect(db)
    assert con.execute("SELECT status FROM studies").fetchall() == [("done",)]
    assert [s for (s,) in con.execute("SELECT status FROM trials ORDER BY seq")] == ["done", "done"]
    per_result = con.execute(
        "SELECT r.trial_id, r.test, COUNT(s.id), COUNT(DISTINCT s.rep) FROM results r"
        " JOIN samples s ON s.result_id=r.id GROUP BY r.id ORDER BY r.trial_id, r.test_idx").fetchall()
    # 2 trials x (pp32, tg4), once each, with the repetitions each trial was planned with (the
    # second adds the cold ones the first showed, bench.cold_reps)
    planned = {tid: asked_reps([*bench_flags[1:], *json.loads(a)])
               for tid, a in con.execute("SELECT id, argv_json FROM trials")}
    assert [(n, d) for _, _, n, d in per_result] == [(planned[t], planned[t]) for t, _, _, _ in per_result]
    assert min(planned.values()) == REPS
    assert len({(t, test) for t, test, _, _ in per_result}) == 4
    con.close()


def test_sigterm_mid_compare_then_resume(engine: EngineBuild, dense_model: Path, cli_env: dict[str, str],
                                         db: Path) -> None:
    argv = [tokensleuth_bin(), "compare", "--arm", f"a={engine.source}", "--arm", f"b={engine.source}",
            "--model", str(dense_model), "-w", "tg4", "--min-pairs", "2", "--max-pairs", "2"]
    bench_flags = ["--", "-t", "1", "-r", str(REPS)]
    p = subprocess.Popen([*argv, *bench_flags], env=cli_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True)
    cli = psutil.Process(p.pid)
    assert _engines_of(cli), "the engine never started"
    time.sleep(0.1)
    engines = _engines_of(cli, timeout_s=0)
    assert engines
    p.send_signal(signal.SIGTERM)
    _, err = p.communicate(timeout=60)

    assert p.returncode == 143
    lines = err.strip().splitlines()  # the round line(s), then one line for the interrupt
    assert lines[-1] == "interrupted (SIGTERM) — rerun the same command with --resume to continue where it stopped"
    assert all(ln.startswith(("round:", "  trial")) for ln in lines[:-1]), lines
    for e in engines:
        assert not e.is_running() or e.status() == psutil.STATUS_ZOMBIE, e
    con = sqlite3.connect(db)
    assert con.execute("SELECT status FROM studies").fetchall() == [("interrupted",)]
    con.close()

    r = subprocess.run([*argv, "--resume", *bench_flags], env=cli_env, capture_output=True, text=True, timeout=180)
    assert r.returncode == 0, r.stderr
    con = sqlite3.connect(db)
    assert con.execute("SELECT status FROM studies").fetchall() == [("done",)]
    trials = con.execute("SELECT a.name, t.pair, t.status FROM trials t JOIN arms a ON a.id=t.arm_id").fetchall()
    assert sorted(trials) == [("a", 0, "done"), ("a", 1, "done"), ("b", 0, "done"), ("b", 1, "done")]
    con.close()
