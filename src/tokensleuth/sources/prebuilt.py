"""A llama-bench program as found: checked that this machine runs it (its ``--help``, each way
it can fail said in words with the fix) and its version read; a short command run in a session
of its own (:func:`run_in_session`), killed whole when it hangs."""

from __future__ import annotations

import contextlib
import errno
import os
import re
import signal
import stat
import subprocess
from collections.abc import Sequence
from pathlib import Path

from tokensleuth.core.errors import UserError

# Seconds llama-bench may take to print its --help (it loads no model: a fraction of a second).
HELP_TIMEOUT_S = 20.0


def bench_help(bench: Path, timeout_s: float | None = None) -> str:
    """The ``--help`` text of a llama-bench, after checking it is a program this machine runs.

    A file that cannot be started at all (missing, a folder, empty, not executable, a
    script whose interpreter is missing, a binary for another machine) or whose --help
    never ends is the user's path being wrong: a UserError, before any trial. A
    llama-bench that starts and then crashes is an engine fault, left to the trials.
    """
    timeout_s = HELP_TIMEOUT_S if timeout_s is None else timeout_s
    where = f"bin:{bench.parent}"
    try:
        st = bench.stat()
    except FileNotFoundError:
        raise UserError(f"{bench.parent} has no llama-bench — {where} must hold llama.cpp's binaries") from None
    except OSError as exc:
        raise UserError(f"cannot read {bench}: {exc.strerror or exc} — check {where}") from None
    if stat.S_ISDIR(st.st_mode):
        raise UserError(f"{bench} is a folder, not the llama-bench program — point bin: at the folder holding it")
    if not stat.S_ISREG(st.st_mode):
        raise UserError(f"{bench} is not a regular file — {where} must hold the llama-bench program")
    if st.st_size == 0:
        raise UserError(f"{bench} is an empty file — copy llama-bench into {bench.parent} again")
    if not os.access(bench, os.X_OK):
        raise UserError(f"{bench} is not executable — `chmod +x {bench}`")
    try:
        out = run_in_session([str(bench), "--help"], timeout_s)
    except OSError as exc:
        raise UserError(f"{bench} cannot be run: {_exec_failure(bench, exc)}") from None
    if out is None:
        raise UserError(f"`{bench} --help` did not finish in {timeout_s:g} s — is it really llama-bench?") from None
    return out


def run_in_session(argv: Sequence[str], timeout_s: float) -> str | None:
    """A short command's stdout and stderr, run in a session of its own; None where it did not
    finish in ``timeout_s``: then its whole session (a script's children too) is killed, so nothing
    it started is left running. OSError where it cannot start."""
    proc = subprocess.Popen(list(argv), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(OSError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()
        return None
    finally:
        if proc.returncode is None:
            with contextlib.suppress(OSError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    return out.decode("utf-8", "replace")


def _exec_failure(bench: Path, exc: OSError) -> str:
    """Why the kernel refused to start ``bench``, in words, with the fix."""
    try:
        with open(bench, "rb") as fh:
            head = fh.read(256)
    except OSError:
        head = b""
    if exc.errno == errno.ENOEXEC:
        if head.startswith(b"\x7fELF"):
            return "it is a program for another kind of machine (exec format error) — use a build for this one"
        return "it is not a program (exec format error) — copy the real llama-bench there"
    if exc.errno == errno.ENOENT:
        if head.startswith(b"#!"):
            interp = head[2:].split(b"\n", 1)[0].strip().split(b" ", 1)[0].decode("utf-8", "replace")
            return f"its #! interpreter {interp!r} does not exist — fix the first line of the script"
        return "its loader or libraries are missing (a build for another system?) — use a build for this one"
    if exc.errno == errno.EACCES:
        return "permission denied (a noexec mount, or no permission) — copy it somewhere it may run"
    return f"{exc.strerror or exc} — check the file"


def bench_version(bench: Path) -> tuple[str | None, int | None]:
    """The commit and build number a llama-bench names (``--version``); None for what it does not say."""
    try:
        text = run_in_session([str(bench), "--version"], 20)
    except OSError:
        return None, None
    if text is None:  # (it hung: its session was killed, nothing of it left running)
        return None, None
    # "version: 0.6.0-dev (build 11434, commit unknown)" (newer) or "version: 6901 (8da3c0e2)"
    m = re.search(r"build (\d+), commit (\w+)", text) or re.search(r"version: (\d+) \((\w+)\)", text)
    if not m:
        return None, None
    return (None if m.group(2) == "unknown" else m.group(2)), int(m.group(1))
