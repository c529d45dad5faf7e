"""The one process-spawning seam: run a command, timestamp every output line.

Each line of stdout and stderr is stamped with the monotonic clock the moment it
is read (two blocking reader threads, no polling), and an optional probe (e.g.
the process tree's CPU time) is read at the same instant, so the edges of each
timed repetition carry counter values. A watchdog kills the process when it runs
past its timeout; it sleeps until then (no polling while the engine runs).
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import psutil

Probe = Callable[[int], Any]


@dataclass(frozen=True, slots=True)
class Line:
    stream: str  # "out" | "err"
    t_ns: int  # monotonic clock at arrival
    text: str
    probe: Any = None


@dataclass(slots=True)
class ProcResult:
    argv: tuple[str, ...]
    returncode: int | None
    timed_out: bool
    t0_ns: int
    t1_ns: int
    started_at: float
    ended_at: float
    lines: list[Line] = field(default_factory=list)
    spawn_error: str | None = None
    pid: int | None = None

    def text(self, stream: str) -> str:
        return "".join(ln.text for ln in self.lines if ln.stream == stream)

    def tail(self, stream: str = "err", n: int = 20) -> str:
        got = [ln.text.rstrip("\n") for ln in self.lines if ln.stream == stream]
        return "\n".join(got[-n:])


def _die_with_parent() -> None:  # pragma: no cover - runs in the child
    # If tokensleuth is killed (even with SIGKILL), the engine must not run on and
    # disturb the next measurement: PR_SET_PDEATHSIG = 1.
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)
    except OSError:
        pass


def run_process(
    argv: Sequence[str],
    *,
    env: Mapping[str, str] | None = None,
    timeout_s: float | None = None,
    probe: Probe | None = None,
    cwd: str | None = None,
) -> ProcResult:
    """Run ``argv`` to completion (or timeout) and return its stamped lines."""
    full_env = dict(os.environ)
    if env:
        full_env.update(env)
    started_at = time.time()
    t0 = time.monotonic_ns()
    try:
        proc = subprocess.Popen(
            list(argv),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            env=full_env,
            cwd=cwd,
            text=True,
            errors="replace",
            bufsize=1,
            preexec_fn=_die_with_parent,
        )
    except OSError as exc:
        t1 = time.monotonic_ns()
        return ProcResult(tuple(argv), None, False, t0, t1, started_at, time.time(),
                          spawn_error=f"cannot start {argv[0]}: {exc.strerror or exc}")

    lines: list[Line] = []
    lock = threading.Lock()

    def reader(stream: Any, name: str) -> None:
        for text in iter(stream.readline, ""):
            t = time.monotonic_ns()
            value = probe(proc.pid) if probe is not None else None
            with lock:
                lines.append(Line(name, t, text, value))
        stream.close()

    threads = [
        threading.Thread(target=reader, args=(proc.stdout, "out"), daemon=True),
        threading.Thread(target=reader, args=(proc.stderr, "err"), daemon=True),
    ]
    for th in threads:
        th.start()
    # The watchdog is a timer thread asleep on one futex until the deadline: Popen.wait
    # with a timeout would poll waitpid ~20 times a second, and each wake-up can preempt
    # an engine thread where the engine uses every core.
    fired = threading.Event()

    def watchdog() -> None:
        if proc.poll() is None:  # (None too while the main thread sits in wait())
            fired.set()
            _kill_tree(proc.pid)

    timer = threading.Timer(timeout_s, watchdog) if timeout_s is not None else None
    if timer is not None:
        timer.daemon = True
        timer.start()
    try:
        proc.wait()
    except BaseException:
        _kill_tree(proc.pid)
        proc.wait()
        raise
    finally:
        if timer is not None:
            timer.cancel()
    timed_out = fired.is_set()
    t1 = time.monotonic_ns()
    for th in threads:
        th.join(timeout=5)
    lines.sort(key=lambda ln: ln.t_ns)
    return ProcResult(tuple(argv), proc.returncode, timed_out, t0, t1, started_at, time.time(), lines,
                      pid=proc.pid)


def _kill_tree(pid: int) -> None:
    try:
        parent = psutil.Process(pid)
        procs = parent.children(recursive=True) + [parent]
    except psutil.NoSuchProcess:
        return
    for p in procs:
        try:
            p.kill()
        except psutil.NoSuchProcess:
            pass
