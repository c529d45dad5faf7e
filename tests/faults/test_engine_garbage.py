"""A fake llama-bench that prints JSON of the wrong types or sizes, run through the real CLI.

Any engine output is a trial outcome: the trial is stored ``failed`` with the reason
(the "garbage" fault class), the command exits 1 with one error line, and ``--resume``
finds nothing left running to crash on.
"""

from __future__ import annotations

import json
import sqlite3
import stat
import subprocess
from pathlib import Path

import pytest

from tests.conftest import GOLDEN, tokensleuth_bin
from tests.faults.gguf_tiny import write_tiny_gguf
from tokensleuth.engines.llamabench import outcome_from
from tokensleuth.engines.proc import Line, ProcResult

GOOD = json.loads((GOLDEN / "b11434-jsonl.stdout").read_text().splitlines()[0])

FAKE = """#!/usr/bin/env bash
case "$*" in
  *--version*) echo "version: 1 (abc1234)"; exit 0 ;;
  *--help*) echo "usage: llama-bench [options]"; exit 0 ;;
esac
echo "llama-bench: benchmark 1/1: starting" >&2
echo "llama-bench: benchmark 1/1: prompt run 1/1" >&2
cat "$(dirname "$0")/out.jsonl"
"""


def _line(**change: object) -> str:
    return json.dumps(dict(GOOD, **change))


# (stdout of the fake engine, what the stored message must say)
GARBAGE = {
    "n_prompt null": (_line(n_prompt=None), "n_prompt is null"),
    "n_prompt >= 2^63": (_line(n_prompt=2**63), "does not fit in 64 bits"),
    "samples_ns >= 2^63": (_line(samples_ns=[2**63], samples_ts=[1.0]), "does not fit in 64 bits"),
    "n_gen a string": (_line(n_gen="16"), "n_gen is a string"),
    "negative count": (_line(n_prompt=-64), "n_prompt = -64 is out of range"),
    "samples length mismatch": (_line(samples_ts=[1.0, 2.0, 3.0]), "one entry per repetition"),
    "1e400": (_line(avg_ts=0).replace('"avg_ts": 0', '"avg_ts": 1e400'), "out of range"),
    "not an object": ("[1, 2, 3]", "not a llama-bench result object"),
    "deep nesting": ('{"samples_ns": ' + "[" * 5000 + "]" * 5000 + "}", "nested"),
    "lone surrogate": (_line(model_type="x").replace('"model_type": "x"', '"model_type": "\\udc80"'),
                       "surrogate"),
}


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_tiny_gguf(tmp_path_factory.mktemp("model") / "tiny.gguf")


def _run(args: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([tokensleuth_bin(), *args], capture_output=True, text=True, timeout=120)


def test_every_garbage_case_is_a_garbage_outcome() -> None:
    """The classification itself, for every case (fast: no process)."""
    for case, (body, reason) in GARBAGE.items():
        lines = [Line("err", 1, "llama-bench: benchmark 1/1: prompt run 1/1\n"), Line("out", 2, body + "\n")]
        o = outcome_from(ProcResult(("llama-bench",), 0, False, 0, 3, 0.0, 1.0, lines), {}, {})
        assert o.status == "garbage" and o.results == () and o.windows == (), case
        assert o.message.startswith("engine printed malformed output: ") and reason in o.message, (case, o.message)


# Through the real CLI for a few cases (each costs two tokensleuth processes).
@pytest.mark.parametrize("case", ["n_prompt null", "n_prompt >= 2^63", "deep nesting"])
def test_wrong_types_are_a_garbage_trial_not_a_crash(case: str, tiny_model: Path, tmp_path: Path) -> None:
    body, reason = GARBAGE[case]
    bindir = tmp_path / "bin"
    bindir.mkdir()
    fake = bindir / "llama-bench"
    fake.write_text(FAKE)
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    (bindir / "out.jsonl").write_text(body + "\n", errors="surrogatepass")
    db = tmp_path / "s.db"
    args = ["bench", "--db", str(db), "--engine", f"bin:{bindir}", "--model", str(tiny_model)]
    p = _run(args)
    assert p.returncode == 1, p.stderr
    assert "Traceback" not in p.stderr
    errors = [ln for ln in p.stderr.splitlines() if ln.startswith("error: ")]
    assert errors == [ln for ln in p.stderr.splitlines() if "error" in ln.lower()] and len(errors) == 1, p.stderr
    assert "malformed output" in p.stderr and reason in p.stderr, p.stderr
    con = sqlite3.connect(db)
    rows = con.execute("SELECT status, message FROM trials").fetchall()
    assert len(rows) == 1 and rows[0][0] == "garbage", rows
    assert rows[0][1].startswith("engine printed malformed output: ") and reason in rows[0][1]
    assert con.execute("SELECT COUNT(*) FROM results").fetchone()[0] == 0
    con.close()
    # --resume: nothing was left running, so nothing reruns, nothing crashes
    r = _run([*args, "--resume"])
    assert "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) <= 1, r.stderr
    con = sqlite3.connect(db)
    assert con.execute("SELECT status FROM trials").fetchall() == [("garbage",)]
    con.close()
