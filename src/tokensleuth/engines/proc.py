"""The one process-spawning seam: run a command, timestamp every output line.

Each line of stdout and stderr is stamped with the monotonic clock the moment it
is read (two blocking reader threads, no polling), before any lock or probe. An
optional probe (e.g. the process tree's CPU time, the GPU's energy counter) is read
right after the stamp, at the lines the caller names as window edges (``edges``;
every line where it names none), so the edges of each timed repetition carry
counter values. Only the probe is serialised between the two readers (a probe with
state is never entered twice at once). A probe at every line was a defect: a
verbose engine (llama-bench ``-v``) prints thousands of lines, each probe of an
NVML counter costs about a millisecond, the stderr reader fell seconds behind, and
the progress lines it then caught up on were stamped a few ms apart instead of a
repetition apart. A watchdog kills the process when it runs past its timeout; it
sleeps until then (no polling while the engine runs).

The engine never outlives tokensleuth: it runs in a session of its own (a
terminal's Ctrl-C reaches tokensleuth alone, which then kills it, so a user's
interrupt is never recorded as an engine crash), any exception or interrupt
while it runs kills its process tree, and if tokensleuth is killed outright
(SIGKILL) the kernel kills the engine (PR_SET_PDEATHSIG): the guards are lifetime.py's.
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from tokensleuth.engines.lifetime import HeldInterrupts, die_with_parent_fn, kill_tree

Probe = Callable[[int], Any]
# Which lines are window edges: (stream "out" | "err", text) -> probe at this line
Edges = Callable[[str, str], bool]


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


def exit_reason(rc: int | None) -> tuple[str, str]:
    """(status, why) of a process that did not exit 0: crashed when a signal killed it (named,
    e.g. "killed by SIGSEGV (signal 11)"), failed otherwise ("exited with code 3")."""
    if rc is not None and rc < 0:
        try:
            return "crashed", f"killed by {signal.Signals(-rc).name} (signal {-rc})"
        except ValueError:
            return "crashed", f"killed by signal {-rc}"
    return "failed", f"exited with code {rc}"


def process_fault(res: ProcResult) -> tuple[str, str] | None:
    """(status, message) of an engine process that did not finish well (it never started, its
    watchdog killed it, a signal killed it, it exited non-zero); None when it exited 0."""
    if res.spawn_error:
        return "failed", res.spawn_error
    if res.timed_out:
        return "timeout", "engine ran past its timeout and was killed (watchdog)"
    if res.returncode == 0:
        return None
    status, why = exit_reason(res.returncode)
    return status, f"engine crashed: {why}" if status == "crashed" else f"engine {why}"


def run_process(
    argv: Sequence[str],
    *,
    env: Mapping[str, str] | None = None,
    timeout_s: float | None = None,
    probe: Probe | None = None,
    cwd: str | None = None,
    edges: Edges | None = None,
) -> ProcResult:
    """Run ``argv`` to completion (or timeout) and return its stamped lines.

    ``probe`` is read at the lines ``edges`` accepts (at every line where ``edges`` is None).
    """
    full_env = dict(os.environ)
    if env:
        full_env.update(env)
    lines: list[Line] = []
    # The probe is serialised (a probe with state — a wrapping energy counter, a reader set up
    # lazily at its first call — never runs twice at once); the stamp is not: it is taken the
    # moment a line is read, never after a wait for the other reader's probe.
    probe_lock = threading.Lock()
    list_lock = threading.Lock()

    def reader(stream: Any, name: str) -> None:
        for text in iter(stream.readline, ""):
            t = time.monotonic_ns()
            value = None
            if probe is not None and (edges is None or edges(name, text)):
                with probe_lock:
                    value = probe(proc.pid)
            with list_lock:
                lines.append(Line(name, t, text, value))
        stream.close()

    started_at = time.time()
    t0 = time.monotonic_ns()
    # A Ctrl-C or SIGTERM that comes while the engine is being started (the child already
    # forked, Popen not yet returned) is held and raised inside the guard below, which kills it
    held = HeldInterrupts()
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
            start_new_session=True,  # setsid() in C, no Python in the child
            preexec_fn=die_with_parent_fn(os.getpid()),
        )
    except OSError as exc:
        held.release()  # (nothing was started: an interrupt held meanwhile is raised here)
        t1 = time.monotonic_ns()
        return ProcResult(tuple(argv), None, False, t0, t1, started_at, time.time(),
                          spawn_error=f"cannot start {argv[0]}: {exc.strerror or exc}")
    except BaseException:
        held.release()
        raise

    # Everything after the spawn is guarded: whatever ends this call early (the
    # watchdog thread aside, an exception or a KeyboardInterrupt / Interrupted
    # raised in this thread by a signal handler) kills the engine before it returns.
    timer: threading.Timer | None = None
    try:
        held.release()
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
                kill_tree(proc.pid)

        if timeout_s is not None:
            timer = threading.Timer(timeout_s, watchdog)
            timer.daemon = True
            timer.start()
        # The exit is waited for in another thread, and here in slices of a second (one wake-up a
        # second). A signal whose handler was due just before a blocking wait began does not break
        # that wait (no EINTR: the signal has come already), so a wait here on the process itself
        # would see a Ctrl-C or a SIGTERM only when the engine ended (a whole trial, or its
        # timeout, later).
        exited = threading.Event()
        ended: list[int] = []

        def waiter() -> None:
            try:
                # Wait for the exit without reaping: until the readers have read the last lines, the
                # process stays a zombie whose CPU-time clock still reads, so the probe at its last
                # line (llama-bench's last JSON result, printed just before it exits) still gets the
                # counters; reaped first, that window's CPU was lost whenever the exit won the race.
                try:
                    os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOWAIT)
                except (ChildProcessError, AttributeError):  # (reaped already; no waitid off Linux)
                    pass
                ended.append(time.monotonic_ns())
                for th in threads:
                    th.join(timeout=5)
                proc.wait()
            finally:  # (set whatever happens: the loop below must end)
                if not ended:
                    ended.append(time.monotonic_ns())
                exited.set()

        threading.Thread(target=waiter, daemon=True).start()
        while not exited.wait(1.0):
            pass
    except BaseException:
        kill_tree(proc.pid)
        proc.wait()
        raise
    finally:
        if timer is not None:
            timer.cancel()
    timed_out = fired.is_set()
    t1 = ended[0]
    for th in threads:
        th.join(timeout=5)
    with list_lock:
        lines.sort(key=lambda ln: ln.t_ns)
    return ProcResult(tuple(argv), proc.returncode, timed_out, t0, t1, started_at, time.time(), lines,
                      pid=proc.pid)


class Background:
    """A long-lived engine process (a server): started like :func:`run_process`'s
    (own session, killed with tokensleuth), its output kept as a bounded tail.

    ``stop()`` ends it: SIGTERM to its group, SIGKILL of the tree after ``grace_s``.
    Use it as a context manager so an exception or an interrupt never leaves it running.
    """

    def __init__(self, argv: Sequence[str], *, env: Mapping[str, str] | None = None, keep: int = 200,
                 die_with_parent: bool = True) -> None:
        import collections

        self.argv = tuple(argv)
        self.lines: collections.deque[str] = collections.deque(maxlen=keep)
        self.spawn_error: str | None = None
        self.started_at = time.time()
        self.t0_ns = time.monotonic_ns()
        self.proc: subprocess.Popen[str] | None = None
        full_env = dict(os.environ)
        if env:
            full_env.update(env)
        held = HeldInterrupts()  # (as run_process's: an interrupt during the start kills it)
        try:
            self.proc = subprocess.Popen(
                list(argv), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                env=full_env, text=True, errors="replace", bufsize=1, start_new_session=True,
                preexec_fn=die_with_parent_fn(os.getpid()) if die_with_parent else None)
        except OSError as exc:
            self.spawn_error = f"cannot start {argv[0]}: {exc.strerror or exc}"
            held.release()
            return
        except BaseException:
            held.release()
            raise
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        try:
            held.release()
        except BaseException:  # never returned to a `with`: no one else would stop it
            kill_tree(self.proc.pid)
            self.proc.wait()
            raise

    def _read(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        for text in iter(self.proc.stdout.readline, ""):
            self.lines.append(text.rstrip("\n"))
        self.proc.stdout.close()

    @property
    def pid(self) -> int | None:
        return None if self.proc is None else self.proc.pid

    def poll(self) -> int | None:
        """The exit status once it has exited, else None (also None when it never started)."""
        return None if self.proc is None else self.proc.poll()

    def tail(self, n: int = 8) -> str:
        return "\n".join(list(self.lines)[-n:])

    def stop(self, grace_s: float = 5.0) -> int | None:
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)
            except (ProcessLookupError, PermissionError):
                pass
            try:
                self.proc.wait(timeout=grace_s)
            except subprocess.TimeoutExpired:
                pass
        kill_tree(self.proc.pid)  # what is left of its tree and group
        self.proc.wait()
        self._reader.join(timeout=2)
        return self.proc.returncode

    def __enter__(self) -> Background:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
