"""The compiler cache carried between GPU slices (bench/gpu/cache_carry.py): what goes out comes
back whole, the newest entries are the ones kept under the budget, and a set with a part
missing is refused without unpacking anything."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "bench" / "gpu" / "cache_carry.py"


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True)


def _cache(root: Path, n: int, size: int) -> dict[str, bytes]:
    got = {}
    for i in range(n):
        p = root / f"{i % 16:x}" / f"entry{i:03d}"
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data := os.urandom(size))  # incompressible: the budget binds
        os.utime(p, (1_000_000 + i, 1_000_000 + i))  # entry i is the i-th newest from the oldest
        got[str(p.relative_to(root))] = data
    return got


def test_the_cache_comes_back_whole(tmp_path: Path) -> None:
    want = _cache(tmp_path / "c", 40, 5_000)
    assert _run("out", str(tmp_path / "c"), str(tmp_path / "out"), "--budget-mb", "5").returncode == 0
    assert _run("take", str(tmp_path / "out"), str(tmp_path / "in")).returncode == 0
    r = _run("in", str(tmp_path / "in"), str(tmp_path / "c2"))
    assert r.returncode == 0 and "40 entries" in r.stdout
    assert {str(p.relative_to(tmp_path / "c2")): p.read_bytes() for p in (tmp_path / "c2").rglob("*")
            if p.is_file()} == want


def test_the_newest_entries_fit_the_budget(tmp_path: Path) -> None:
    _cache(tmp_path / "c", 40, 10_000)  # 400 kB, incompressible, against a 0.2 MB budget
    r = _run("out", str(tmp_path / "c"), str(tmp_path / "out"), "--budget-mb", "0.2")
    assert r.returncode == 0
    size = sum(p.stat().st_size for p in (tmp_path / "out").iterdir())
    assert size <= 200_000
    _run("in", str(tmp_path / "out"), str(tmp_path / "c2"))
    names = sorted(p.name for p in (tmp_path / "c2").rglob("entry*"))
    assert names and names == [f"entry{i:03d}" for i in range(40 - len(names), 40)]  # the newest ones


def test_a_missing_part_is_refused(tmp_path: Path) -> None:
    _cache(tmp_path / "c", 6, 50_000)  # 300 kB, incompressible: parts of 0.1 MB
    _run("out", str(tmp_path / "c"), str(tmp_path / "out"), "--budget-mb", "1", "--part-mb", "0.1")
    parts = sorted((tmp_path / "out").iterdir())
    assert len(parts) >= 3
    parts[1].unlink()
    r = _run("in", str(tmp_path / "out"), str(tmp_path / "c2"))
    assert r.returncode != 0 and r.stderr.count("\n") == 1 and "lacks part" in r.stderr
    assert not (tmp_path / "c2").exists()


def test_a_missing_last_part_is_refused_and_nothing_unpacked(tmp_path: Path) -> None:
    """With the last part gone the numbers are still whole (00, 01, …): the archive's own end says it."""
    _cache(tmp_path / "c", 6, 50_000)
    _run("out", str(tmp_path / "c"), str(tmp_path / "out"), "--budget-mb", "1", "--part-mb", "0.1")
    parts = sorted((tmp_path / "out").iterdir())
    assert len(parts) >= 3
    parts[-1].unlink()
    r = _run("in", str(tmp_path / "out"), str(tmp_path / "c2"))
    assert r.returncode != 0 and r.stderr.count("\n") == 1 and "ends before the cache does" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr and not (tmp_path / "c2").exists()
