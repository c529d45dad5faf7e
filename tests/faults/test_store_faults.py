"""Bad --db values through the real CLI: one line, the right exit code, the store untouched.

Each case is tried with a reading command (``studies``, ``report``) and a writing one
(``import`` of a one-result llama-bench JSONL file). The faults the file system must
show (immutable file, read-only or full disk) use ``chattr`` and a small tmpfs mounted
by the test; they are skipped, saying why, where this machine does not allow that.
"""

from __future__ import annotations

import hashlib
import os
import sqlite3
import subprocess
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.conftest import GOLDEN
from tokensleuth.cli import main
from tokensleuth.store import SCHEMA_VERSION

Run = Callable[..., tuple[int, str, str]]


@pytest.fixture()
def run(capsys: pytest.CaptureFixture[str]) -> Run:
    def _run(*args: str) -> tuple[int, str, str]:
        capsys.readouterr()
        rc = main(list(args))
        o, e = capsys.readouterr()
        return rc, o, e

    return _run


@pytest.fixture()
def bench_file(tmp_path: Path) -> Path:
    p = tmp_path / "one.jsonl"
    p.write_text((GOLDEN / "b11434-jsonl.stdout").read_text().splitlines()[0] + "\n")
    return p


@pytest.fixture()
def good_store(tmp_path: Path, run: Run, bench_file: Path) -> Path:
    """A store holding one imported study."""
    p = tmp_path / "good" / "store.sqlite"
    rc, _, e = run("import", str(bench_file), "--db", str(p))
    assert rc == 0, e
    return p


def _state(p: Path) -> object:
    """What must not change: a file's bytes, a folder's entries (and no -wal/-shm left beside)."""
    if p.is_dir():
        return sorted(os.listdir(p))
    side = sorted(x.name for x in p.parent.glob(p.name + "-*")) if p.parent.is_dir() else []
    return (hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else None, side)


def _one_error(rc: int, err: str, want_rc: int, fragment: str) -> None:
    lines = err.strip().splitlines()
    assert rc == want_rc, err
    assert len(lines) == 1, err
    assert lines[0].startswith("error: "), err
    assert fragment in lines[0], err


def _try_all(run: Run, db: str, bench_file: Path, want_rc: int, fragment: str, watch: Path) -> None:
    """studies, report and import on ``db``: each one line, and ``watch`` unchanged."""
    before = _state(watch)
    for args in (["studies"], ["report", "abc"], ["import", str(bench_file)]):
        rc, _, e = run(*args, "--db", db)
        _one_error(rc, e, want_rc, fragment)
        assert _state(watch) == before, args


def _sqlite(p: Path, *sql: str) -> None:
    con = sqlite3.connect(p)
    for s in sql:
        con.execute(s)
    con.commit()
    con.close()


# -- paths that are no store file -------------------------------------------------------


def test_directory(tmp_path: Path, run: Run, bench_file: Path) -> None:
    d = tmp_path / "d"
    d.mkdir()
    _try_all(run, str(d), bench_file, 2, "is a folder", d)


def test_empty_path(tmp_path: Path, run: Run, bench_file: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # --db '' is the current folder to Python's Path: refused, nothing created in it
    work = tmp_path / "cwd"
    work.mkdir()
    monkeypatch.chdir(work)
    _try_all(run, "", bench_file, 2, "is a folder", work)


def test_parent_is_a_file(tmp_path: Path, run: Run, bench_file: Path) -> None:
    f = tmp_path / "afile"
    f.write_text("x")
    _try_all(run, str(f / "store.sqlite"), bench_file, 2, "is a file, not a folder", f)


def test_dev_null(run: Run, bench_file: Path) -> None:
    # as root SQLite would create /dev/null-wal; nothing may be written beside it
    before = sorted(os.listdir("/dev"))
    _try_all(run, "/dev/null", bench_file, 2, "not a regular file", Path("/dev/null"))
    assert sorted(os.listdir("/dev")) == before


def test_fifo_is_refused_without_blocking(tmp_path: Path, run: Run, bench_file: Path) -> None:
    # reading a FIFO's "header" would wait for a writer forever
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    _try_all(run, str(fifo), bench_file, 2, "not a regular file", tmp_path)


def test_text_file(tmp_path: Path, run: Run, bench_file: Path) -> None:
    p = tmp_path / "notes.txt"
    p.write_text("my notes, not a database\n")
    _try_all(run, str(p), bench_file, 2, "not a tokensleuth database", p)


# -- SQLite files that are not tokensleuth's ---------------------------------------------


@pytest.mark.parametrize("sql", [
    # a table named like ours, of another schema
    ("CREATE TABLE studies(a, b)", "INSERT INTO studies VALUES (1, 2)"),
    # another application's schema (a browser history)
    ("CREATE TABLE moz_places(url TEXT)", "INSERT INTO moz_places VALUES ('x')"),
    # claims our schema version 1 with the wrong tables
    ("PRAGMA user_version=1", "CREATE TABLE studies(a, b)"),
    # another program that uses application_id
    ("PRAGMA application_id=42", "CREATE TABLE t(x)"),
], ids=["studies-table", "other-app", "user-version-1", "application-id"])
def test_foreign_sqlite(tmp_path: Path, run: Run, bench_file: Path, sql: tuple[str, ...]) -> None:
    p = tmp_path / "foreign.sqlite"
    _sqlite(p, *sql)
    _try_all(run, str(p), bench_file, 2, "database of another program", p)


def test_newer_schema(good_store: Path, run: Run, bench_file: Path) -> None:
    _sqlite(good_store, f"PRAGMA user_version={SCHEMA_VERSION + 1}")
    _try_all(run, str(good_store), bench_file, 2, "newer than this tokensleuth", good_store)


def test_corrupt_page(good_store: Path, run: Run, bench_file: Path) -> None:
    con = sqlite3.connect(good_store)
    root = con.execute("SELECT rootpage FROM sqlite_master WHERE name='studies'").fetchone()[0]
    size = con.execute("PRAGMA page_size").fetchone()[0]
    con.close()
    with open(good_store, "r+b") as fh:  # overwrite the studies table's root page
        fh.seek((root - 1) * size)
        fh.write(b"\xa5" * size)
    _try_all(run, str(good_store), bench_file, 2, "is damaged", good_store)


# -- read-only and full stores -------------------------------------------------------


@contextmanager
def _tmpfs(where: Path, size: str) -> Iterator[Path]:
    where.mkdir()
    p = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)],
                       capture_output=True, text=True)
    assert p.returncode == 0, f"cannot mount a tmpfs here ({p.stderr.strip() or p.returncode})"
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


def _studies(run: Run, db: Path) -> int:
    rc, o, e = run("studies", "--db", str(db))
    assert rc == 0, e
    return sum(1 for line in o.splitlines() if "| import " in line)


@pytest.mark.needs("chattr")
def test_immutable_store_reads_and_refuses_writes(good_store: Path, run: Run, bench_file: Path) -> None:
    p = subprocess.run(["chattr", "+i", str(good_store)], capture_output=True, text=True)
    assert p.returncode == 0, f"chattr +i is not allowed here ({p.stderr.strip()})"
    try:
        before = _state(good_store)
        assert _studies(run, good_store) == 1  # reading an immutable store works
        rc, _, e = run("import", str(bench_file), "--db", str(good_store))
        _one_error(rc, e, 2, "is read-only")
        assert _state(good_store) == before
    finally:
        subprocess.run(["chattr", "-i", str(good_store)], check=True)


@pytest.mark.needs("tmpfs")
def test_read_only_file_system(tmp_path: Path, good_store: Path, run: Run, bench_file: Path) -> None:
    with _tmpfs(tmp_path / "ro", "2m") as mnt:
        db = mnt / "store.sqlite"
        db.write_bytes(good_store.read_bytes())
        subprocess.run(["mount", "-o", "remount,ro", str(mnt)], check=True)
        before = _state(db)
        assert _studies(run, db) == 1  # a store on a read-only disk can still be read
        rc, o, e = run("report", "abc", "--db", str(db))
        _one_error(rc, e, 2, "no study 'abc'")
        rc, _, e = run("import", str(bench_file), "--db", str(db))
        _one_error(rc, e, 2, "is read-only")
        assert _state(db) == before


@pytest.mark.needs("tmpfs")
@pytest.mark.parametrize("free_kib", [0, 48], ids=["full", "nearly-full"])
def test_full_disk(tmp_path: Path, good_store: Path, run: Run, bench_file: Path, free_kib: int) -> None:
    # full: SQLite cannot even make its -shm file; nearly full: the import's
    # transaction runs out of room half-way. Either way one line, exit 1, nothing stored.
    with _tmpfs(tmp_path / "full", "512k") as mnt:
        db = mnt / "store.sqlite"
        db.write_bytes(good_store.read_bytes())
        fill: list[Path] = []
        try:
            while True:
                f = mnt / f"fill{len(fill)}"
                fill.append(f)
                f.write_bytes(b"\0" * 4096)
        except OSError:
            fill.pop().unlink(missing_ok=True)
        for f in fill[len(fill) - free_kib // 4:] if free_kib else []:
            f.unlink()
        before = hashlib.sha256(db.read_bytes()).hexdigest()
        rc, _, e = run("import", str(bench_file), "--db", str(db))
        _one_error(rc, e, 1, "is full")
        assert hashlib.sha256(db.read_bytes()).hexdigest() == before
        for f in fill:
            f.unlink(missing_ok=True)
        # with room again the store opens and holds exactly what it held
        assert _studies(run, db) == 1


def test_subprocess_entry_point_gives_one_line(tmp_path: Path) -> None:
    """The installed console script, not only main(): no traceback reaches the terminal."""
    import sys

    d = tmp_path / "d"
    d.mkdir()
    exe = Path(sys.executable).parent / "tokensleuth"
    p = subprocess.run([str(exe), "studies", "--db", str(d)], capture_output=True, text=True, timeout=60)
    assert p.returncode == 2
    assert p.stderr.strip().splitlines() == [p.stderr.strip()]
    assert "is a folder" in p.stderr
