"""--json targets: regular files atomically, special files written through, never replaced."""

from __future__ import annotations

import json
import os
import stat
import threading
from pathlib import Path

import pytest

from tokensleuth.core.errors import UserError
from tokensleuth.core.writes import check_writable
from tokensleuth.report.jsonout import write_json


def test_regular_file_is_replaced_atomically_keeping_its_mode(tmp_path: Path) -> None:
    p = tmp_path / "out.json"
    p.write_text("old")
    p.chmod(0o640)
    write_json(p, {"a": 1})
    assert json.loads(p.read_text()) == {"a": 1}
    assert stat.S_IMODE(p.stat().st_mode) == 0o640
    assert sorted(x.name for x in tmp_path.iterdir()) == ["out.json"]  # no temporary file left


def test_new_file_in_new_folders(tmp_path: Path) -> None:
    p = tmp_path / "a" / "b" / "out.json"
    check_writable("--json", p)
    write_json(p, {"a": 1})
    assert json.loads(p.read_text()) == {"a": 1}


@pytest.mark.parametrize("dev", ["/dev/null", "/dev/full"])
def test_character_devices_stay_devices(dev: str) -> None:
    # The tmp-then-rename write turned /dev/full into a regular file (and would /dev/null as root).
    check_writable("--json", Path(dev))
    if dev == "/dev/full":
        with pytest.raises(OSError):
            write_json(Path(dev), {"a": 1})
    else:
        write_json(Path(dev), {"a": 1})
    assert stat.S_ISCHR(os.stat(dev).st_mode)


def test_fifo_is_written_through(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    got: list[str] = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_text()))
    reader.start()
    write_json(fifo, {"a": 1})
    reader.join(5)
    assert json.loads(got[0]) == {"a": 1}
    assert stat.S_ISFIFO(fifo.lstat().st_mode)


def test_symlink_stays_a_link(tmp_path: Path) -> None:
    target = tmp_path / "real.json"
    target.write_text("old")
    link = tmp_path / "link.json"
    link.symlink_to(target)
    write_json(link, {"a": 1})
    assert link.is_symlink() and json.loads(target.read_text()) == {"a": 1}


@pytest.mark.parametrize("make, message", [
    (lambda t: t, "is a folder"),
    (lambda t: t / "file" / "x.json", "file is a file, not a folder"),
])
def test_bad_targets_fail_before_measuring(tmp_path: Path, make: object, message: str) -> None:
    (tmp_path / "file").write_text("x")
    with pytest.raises(UserError, match=message):
        check_writable("--json", make(tmp_path))  # type: ignore[operator]


def test_read_only_targets(tmp_path: Path) -> None:
    """A file that cannot be written and a folder that cannot take files, for any user: as
    root (who may write anywhere) they are an immutable file and a read-only mount."""
    import subprocess

    ro = tmp_path / "ro.json"
    ro.write_text("x")
    d = tmp_path / "rodir"
    d.mkdir()
    root = os.geteuid() == 0
    if root:
        assert subprocess.run(["chattr", "+i", str(ro)], capture_output=True).returncode == 0, "chattr +i refused"
        assert subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k,ro", "tmpfs", str(d)],
                              capture_output=True).returncode == 0, "cannot mount a read-only tmpfs"
    else:
        ro.chmod(0o444)
        d.chmod(0o555)
    try:
        with pytest.raises(UserError, match="not writable"):
            check_writable("--json", ro)
        with pytest.raises(UserError, match="is on a read-only file system" if root else "is not writable"):
            check_writable("--json", d / "x.json")
    finally:
        if root:
            subprocess.run(["chattr", "-i", str(ro)], check=False)
            subprocess.run(["umount", str(d)], check=False)