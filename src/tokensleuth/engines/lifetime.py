"""The engine never outlives tokensleuth: the pre-exec step that has the kernel kill it when
tokensleuth dies (PR_SET_PDEATHSIG), the interrupts held while it is being started, and the kill
of its whole process tree. :mod:`tokensleuth.engines.proc` spawns through these."""

from __future__ import annotations

import ctypes
import os
import signal
import threading
from collections.abc import Callable
from typing import Any

import psutil

# prctl(2) option and its argument, converted to C values once in the parent.
_PR_SET_PDEATHSIG = ctypes.c_int(1)
_SIGKILL = ctypes.c_ulong(signal.SIGKILL)


def _resolve_prctl() -> Any:
    """libc's prctl, looked up in the parent at import (None where there is none).

    The child of a fork must not load libraries or import modules: another thread
    (the sampler, the readers of an earlier trial) may have held the loader's or
    the allocator's lock at the fork, and the child would wait on it forever
    (the warning on ``preexec_fn`` in the subprocess docs). Resolved here, the
    child's whole work is one foreign call with prepared arguments.
    """
    try:
        fn = ctypes.CDLL(None, use_errno=True).prctl  # libc is already mapped: no dlopen of a file
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_int, ctypes.c_ulong]
    fn.restype = ctypes.c_int
    return fn


_PRCTL = _resolve_prctl()


def die_with_parent_fn(parent_pid: int) -> Callable[[], None] | None:
    """The child's pre-exec step: ask for SIGKILL when tokensleuth dies (Linux).

    If tokensleuth is killed (even with SIGKILL), the engine must not run on and
    disturb the next measurement or hold the GPU. A parent that died between the
    fork and the prctl would never send the signal, so the child checks it is
    still our child afterwards (os.getppid is one syscall, no lock).
    """
    prctl = _PRCTL
    if prctl is None:
        return None

    def child() -> None:  # pragma: no cover - runs in the child between fork and exec
        prctl(_PR_SET_PDEATHSIG, _SIGKILL)
        if os.getppid() != parent_pid:
            os._exit(137)

    return child


class HeldInterrupts:
    """SIGINT and SIGTERM held while an engine is being started, then given to their handlers.

    A signal handler raises in the main thread between two bytecodes: one that ran while
    Popen was returning (the child forked, its pid not yet ours) would leave the engine running
    with nothing to kill it. Only handlers of Python's own are held (a signal ignored or left at
    its default is not touched: the engine inherits that disposition), and only in the main
    thread, the one thread Python runs handlers in.
    """

    def __init__(self) -> None:
        self.got: list[int] = []
        self.old: dict[int, Callable[[int, Any], Any]] = {}
        if threading.current_thread() is not threading.main_thread():
            return
        for sig in (signal.SIGINT, signal.SIGTERM):
            handler = signal.getsignal(sig)
            if callable(handler):
                self.old[sig] = handler
                signal.signal(sig, self._hold)

    def _hold(self, sig: int, frame: Any) -> None:
        self.got.append(sig)

    def release(self) -> None:
        """Put the handlers back; the first signal that came meanwhile is handled now."""
        old, self.old = self.old, {}
        for sig, handler in old.items():
            signal.signal(sig, handler)
        if self.got:
            sig = self.got[0]
            self.got = []
            old[sig](sig, None)


def kill_tree(pid: int) -> None:
    """SIGKILL the engine, its descendants, and anything left in its session's group.

    The group first, in one call, so that no process of it runs on after another is killed (a
    shell whose child was killed first would go on to its next command); then the descendants
    found before it that left the group."""
    try:
        parent = psutil.Process(pid)
        procs = [parent, *parent.children(recursive=True)]
    except psutil.NoSuchProcess:
        procs = []
    # A grandchild whose parent already exited is no longer in the tree, but still in the
    # process group the engine leads (start_new_session): its pgid is the engine's pid.
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    for p in procs:
        try:
            p.kill()
        except psutil.NoSuchProcess:
            pass
