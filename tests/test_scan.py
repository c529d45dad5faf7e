"""`tokensleuth scan`: every step of a history, found, bisected and explained.

The sampling, the step fit, the resolution and the budget are pure and tested on synthetic
sequences; the real scan runs over a planted history of 25 commits on the real llama.cpp."""

from __future__ import annotations

import json
import signal
import sqlite3
import subprocess
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.conftest import tokensleuth_bin
from tokensleuth.errors import UserError
from tokensleuth.scan import fit_steps, initial_sample, parse_budget, round_order, smallest_seen
from tokensleuth.sources.build import EngineBuild


def test_the_first_sample_has_both_ends_and_even_gaps() -> None:
    assert initial_sample(26, 8) == [0, 3, 6, 9, 12, 16, 19, 22, 25]
    assert initial_sample(3, 8) == [0, 1, 2]
    assert initial_sample(2, 8) == [0, 1]
    with pytest.raises(UserError):
        initial_sample(1)
    assert round_order([0, 3, 6], 0) == [0, 3, 6] and round_order([0, 3, 6], 1) == [6, 3, 0]


def _sequence(rng: np.random.Generator, steps: dict[int, float], n: int = 30, rounds: int = 2,
              noise: float = 0.01) -> list[list[float]]:
    level, out = 100.0, []
    for i in range(n):
        level *= steps.get(i, 1.0)
        out.append(list(level * np.exp(rng.normal(0, noise, rounds))))
    return out


def test_the_step_fit_finds_planted_steps_where_they_are_and_no_other() -> None:
    rng = np.random.default_rng(7)
    seq = _sequence(rng, {8: 0.9, 20: 1.08})
    got = fit_steps(seq, band=0.02)
    assert [s.after for s in got] == [7, 19]
    assert got[0].ratio == pytest.approx(0.9, abs=0.02) and got[0].ci[0] < 0.9 < got[0].ci[1]
    assert got[1].ratio == pytest.approx(1.08, abs=0.02)
    # a step inside the band is not a step, however sure
    assert fit_steps(_sequence(rng, {10: 0.99}, noise=0.001), band=0.02) == []


def test_the_step_fit_calls_no_step_in_flat_noise() -> None:
    """False steps on flat sequences of 30 points at 1% noise: none in 200 sequences."""
    rng = np.random.default_rng(11)
    false = sum(len(fit_steps(_sequence(rng, {}), band=0.02)) for _ in range(200))
    assert false == 0


def test_the_resolution_is_the_band_plus_what_the_noise_hides() -> None:
    assert smallest_seen([], 0.02) is None
    assert smallest_seen([0.0], 0.02) == pytest.approx(0.02)
    seen = smallest_seen([0.01, 0.005], 0.02)
    assert seen is not None and 0.02 + 0.01 < seen < 0.02 + 0.02  # the noisiest sets it: 1% × (1 + 1.645/2.576)


def test_the_budget_takes_a_time_builds_or_both() -> None:
    assert parse_budget(None) == {}
    assert parse_budget("4h") == {"wall_s": 14400}
    assert parse_budget("90m, 40builds") == {"wall_s": 5400, "builds": 40}
    with pytest.raises(UserError, match="--budget"):
        parse_budget("lots")


# -- bad input ----------------------------------------------------------------------------------


@pytest.mark.parametrize("args, match", [
    (["--from", "nosuchrev", "--to", "HEAD"], "not a revision"),
    (["--from", "HEAD", "--to", "HEAD~3"], "is not an ancestor of --to"),
    (["--from", "HEAD", "--to", "HEAD"], "no commits between"),
    (["--to", "HEAD"], "needs --from and --to"),
    (["--from", "HEAD~1", "--to", "HEAD", "--budget", "soon"], "--budget"),
    (["--from", "HEAD~1", "--to", "HEAD", "--cluster", "x"], "this machine only"),
])
def test_bad_input_is_one_line_and_exit_2(args: list[str], match: str, tmp_path: Path,
                                          cli_env: dict[str, str]) -> None:
    from tests.planted import planted_repo

    p = subprocess.run([tokensleuth_bin(), "scan", "--repo", str(planted_repo()), "--model", "m.gguf", *args],
                       env=cli_env, capture_output=True, text=True, timeout=120)
    assert p.returncode == 2, p.stderr
    assert match in p.stderr and len(p.stderr.strip().splitlines()) == 1 and "Traceback" not in p.stderr


# -- the real scan --------------------------------------------------------------------------------


def _state(db: str, key: str) -> Any:
    try:
        con = sqlite3.connect(db, timeout=30)
        row = con.execute("SELECT value_json FROM state WHERE key=?", (key,)).fetchone()
        return json.loads(row[0]) if row else None
    except sqlite3.OperationalError:
        return None


@pytest.mark.slow
def test_the_scan_names_every_step_of_a_planted_history_and_resumes(
        engine: EngineBuild, moe_model: Path, dense_model: Path, cli_env: dict[str, str], tmp_path: Path) -> None:
    """25 commits: a slowdown of every model (spin), a MoE-only one (culprit), llama-bench's
    default -ub going 512 -> 8 (prompts slower: a settings change), the spin taken out again
    (faster), an output change that is no speed change (eps), a commit that does not build
    (broken, then fix) and neutral ones. Killed once its first step is being bisected, resumed."""
    from tests.planted import SCAN_HISTORY, bisect_history

    repo, shas = bisect_history(SCAN_HISTORY, branch="scan")
    out = tmp_path / "s.json"
    args = [tokensleuth_bin(), "scan", "--repo", str(repo), "--from", shas["base"], "--to", shas["n18"],
            "--model", str(moe_model), "--model", str(dense_model), "-w", "pp64", "-w", "tg16", "--check-outputs",
            "--json", str(out), "--", "-r", "5", "-t", "1"]
    db = cli_env["TOKENSLEUTH_DB"]
    proc = subprocess.Popen(args, env=cli_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 1200
    while not _state(db, "scan-intervals") and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.5)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    judged = _state(db, "scan-intervals")
    assert judged, "killed before an interval was judged"
    p = subprocess.run([*args[:2], "--resume", *args[2:]], env=cli_env, capture_output=True, text=True,
                       timeout=2400)
    assert p.returncode == 0, p.stderr[-3000:]
    r = json.loads(out.read_text())
    short = {name: sha[:10] for name, sha in shas.items()}
    steps = {s["first_bad"]: s for s in r["steps"]}
    assert sorted(steps) == sorted(short[n] for n in ("spin", "culprit", "ubatch", "unspin")), (r["steps"], p.stderr[-3000:])

    def moved(name: str) -> dict[tuple[str, str], str]:
        return {(Path(c["model"]).stem.split("-")[1], c["workload"]): c["verdict"] for c in steps[short[name]]["cells"]
                if c["verdict"] != "same"}

    assert steps[short["spin"]]["direction"] == "slower" and steps[short["spin"]]["cause"] == "engine"
    assert {k for k, v in moved("spin").items() if v == "slower"} >= {("qwen3moe", "tg16"), ("llama", "tg16")}
    assert steps[short["unspin"]]["direction"] == "faster"
    assert {k for k, v in moved("unspin").items() if v == "faster"} >= {("qwen3moe", "tg16"), ("llama", "tg16")}
    # MoE-only: the dense model did not move
    culprit = steps[short["culprit"]]
    assert culprit["direction"] == "slower" and culprit["cause"] == "engine"
    assert ("qwen3moe", "tg16") in moved("culprit") and not any(m == "llama" for m, _ in moved("culprit"))
    assert [f["path"] for f in culprit["files"]] == ["src/llama-graph.cpp"]
    assert "MAP_CUSTOM1" in culprit["profile"]["headline"]
    # the default change: prompts only, named as llama-bench's own
    ub = steps[short["ubatch"]]
    assert ub["cause"] == "settings" and {w for _, w in moved("ubatch")} == {"pp64"}
    assert [d["field"] for d in ub["param_diffs"]] == ["n_ubatch"]
    assert "a default change, not the engine" in p.stdout
    # outputs: the first commit whose outputs changed, though its speed did not
    assert [o["first_changed"] for o in r["output_changes"]] == [short["eps"]]
    assert short["eps"] not in steps
    assert short["broken"] in r["skipped"] or short["broken"] not in {s["label"] for s in r["sampled"]}
    assert r["undecided"] == [] and r["status"] == "done"
    assert r["resolution"]["smallest_step_seen"] is not None and r["resolution"]["longest_unsampled"] <= 32
    # resumed, not started again: one scan study, every judged interval kept
    con = sqlite3.connect(db)
    assert con.execute("SELECT COUNT(*) FROM studies WHERE kind='scan'").fetchone()[0] == 1
    after = _state(db, "scan-intervals")
    assert all(after[k]["study"] == v["study"] for k, v in judged.items() if "study" in v)
    # the stored scan renders again, with its history page
    page = tmp_path / "s.html"
    q = subprocess.run([tokensleuth_bin(), "report", r["study"], "--html", str(page)], env=cli_env,
                       capture_output=True, text=True, timeout=300)
    assert q.returncode == 0, q.stderr
    assert "History:" in page.read_text() and f"**{short['n3']} → {short['spin']}**" in q.stdout
