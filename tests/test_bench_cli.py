"""`tokensleuth bench` end to end on the real engine: samples, windows, JSON, faults."""

from __future__ import annotations

import json
import os
import sqlite3
import stat
import subprocess
from pathlib import Path

from tests.conftest import tokensleuth_bin
from tokensleuth.cli import main
from tokensleuth.sources.build import EngineBuild


def run_cli(args: list[str], env: dict[str, str], timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run([tokensleuth_bin(), *args], env=env, capture_output=True, text=True,
                          timeout=timeout)


def test_bench_stores_exactly_what_llama_bench_reported(
    engine: EngineBuild, moe_model: Path, dense_model: Path, db: Path, tmp_path: Path
) -> None:
    out_json = tmp_path / "b.json"
    rc = main(["bench", "--db", str(db), "--model", str(moe_model), "--model", str(dense_model),
               "--json", str(out_json), "--", "-p", "64", "-n", "16", "-r", "3", "-d", "0,64"])
    assert rc == 0
    con = sqlite3.connect(db)
    con.row_factory = sqlite3.Row
    results = con.execute("SELECT * FROM results").fetchall()
    assert len(results) == 2 * 4  # two models x (pp64, tg16, pp64@d64, tg16@d64)
    for r in results:
        raw = json.loads(r["raw_json"])
        stored = [s["duration_ns"] for s in con.execute(
            "SELECT duration_ns FROM samples WHERE result_id=? ORDER BY rep", (r["id"],))]
        assert stored == raw["samples_ns"]  # samples are llama-bench's own, unaltered
    for t in con.execute("SELECT * FROM trials").fetchall():
        assert t["status"] == "done"
        wins = con.execute("SELECT * FROM windows WHERE trial_id=?", (t["id"],)).fetchall()
        n_samples = con.execute("SELECT COUNT(*) FROM samples s JOIN results r ON r.id=s.result_id"
                                " WHERE r.trial_id=?", (t["id"],)).fetchone()[0]
        assert len(wins) == n_samples == 12
        for w in wins:
            assert t["t0_ns"] < w["start_ns"] < w["end_ns"] < t["t1_ns"]
            assert w["cpu_ms"] is not None and w["cpu_ms"] >= 0
        # Windows bracket their samples: window and sample lengths agree up to the
        # latency of reading two stderr lines, which on a 2-core machine saturated by
        # the engine's own threads can reach a few ms for a single line.
        errs, total_w, total_s = [], 0, 0
        for w in wins:
            ns = con.execute("SELECT s.duration_ns FROM samples s JOIN results r ON r.id=s.result_id"
                             " WHERE r.trial_id=? AND r.test_idx=? AND s.rep=?",
                             (t["id"], w["test_idx"], w["rep"])).fetchone()[0]
            errs.append(abs((w["end_ns"] - w["start_ns"]) - ns))
            total_w += w["end_ns"] - w["start_ns"]
            total_s += ns
        assert sorted(errs)[len(errs) // 2] < 1e6  # median error under 1 ms
        assert abs(total_w - total_s) < 0.35 * total_s
    doc = json.loads(out_json.read_text())
    assert doc["engine"]["build_number"] == 11434
    assert {r["workload"] for r in doc["results"]} == {"pp64", "tg16", "pp64@d64", "tg16@d64"}
    for r in doc["results"]:
        assert len(r["samples"]) == 3
        assert r["tokens_per_s"]["mean"] > 0
        assert r["resources"]["cpu_ms_per_token"] > 0


def test_bench_table_on_stdout(engine: EngineBuild, dense_model: Path, cli_env: dict[str, str]) -> None:
    p = run_cli(["bench", "--model", str(dense_model), "--", "-p", "32", "-n", "8", "-r", "2"], cli_env)
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    assert lines[0].startswith("| model") and "t/s" in lines[0]
    assert any("| pp32 |" in ln.replace("  ", " ").replace("  ", " ") or "pp32" in ln for ln in lines)
    assert any(ln.startswith("study: ") for ln in lines)


def _fake(dirpath: Path, body: str) -> Path:
    dirpath.mkdir(parents=True, exist_ok=True)
    p = dirpath / "llama-bench"
    p.write_text("#!/usr/bin/env bash\n" + body)
    p.chmod(p.stat().st_mode | stat.S_IEXEC)
    return dirpath


def _wrapper(tmp_path: Path, engine: EngineBuild, fault: str) -> Path:
    """A llama-bench that misbehaves for models whose name contains 'fault', else is real."""
    real = Path(engine.bin_dir) / "llama-bench"
    return _fake(tmp_path / "bin", f"""
case "$*" in
  *--help*|*--version*) exec {real} "$@" ;;
  *fault*) {fault} ;;
  *) exec {real} "$@" ;;
esac
""")


FAULTS = {
    "garbage": ("echo 'this is not json'; exit 0", "failed", "malformed"),
    "exit": ("echo 'main: error: out of memory' >&2; exit 3", "failed", "exited with code 3"),
    "segv": ("echo 'about to crash' >&2; kill -SEGV $$", "crashed", "SIGSEGV"),
    "hang": ("sleep 60", "timeout", "watchdog"),
}


def test_faults_are_recorded_and_the_study_goes_on(
    engine: EngineBuild, dense_model: Path, tmp_path: Path, db: Path, cli_env: dict[str, str]
) -> None:
    for name, (body, status, message) in FAULTS.items():
        d = tmp_path / name
        bindir = _wrapper(d, engine, body)
        fault_model = d / "fault.gguf"
        fault_model.write_bytes(dense_model.read_bytes())  # a complete GGUF: truncated ones fail the model check
        p = run_cli(["bench", "--engine", f"bin:{bindir}", "--timeout", "3", "--model", str(fault_model),
                     "--model", str(dense_model), "--", "-p", "16", "-n", "4", "-r", "2"], cli_env)
        assert p.returncode == 0, (name, p.stderr)  # the healthy model still produced a table
        assert "Traceback" not in p.stderr
        assert message in p.stderr
        con = sqlite3.connect(db)
        rows = con.execute("SELECT model, status, message, stderr_tail FROM trials t"
                           " WHERE study_id=(SELECT id FROM studies ORDER BY created_at DESC LIMIT 1)"
                           " ORDER BY seq").fetchall()
        assert [r[1] for r in rows] == [status, "done"], name
        assert message in rows[0][2]
        if name in ("exit", "segv"):
            assert rows[0][3]  # the stderr tail is kept for the report


def test_only_faults_exit_1(engine: EngineBuild, tmp_path: Path, dense_model: Path,
                            cli_env: dict[str, str]) -> None:
    bindir = _fake(tmp_path / "bin", "kill -SEGV $$\n")
    p = run_cli(["bench", "--engine", f"bin:{bindir}", "--model", str(dense_model)], cli_env)
    assert p.returncode == 1
    assert "crashed" in p.stderr.lower() and "Traceback" not in p.stderr
    assert os.path.exists(cli_env["TOKENSLEUTH_DB"])
