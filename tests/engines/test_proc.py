"""The process seam: serialised window edges, and no engine outlives an interrupt or a kill."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import psutil
import pytest

from tokensleuth.core.errors import Interrupted
from tokensleuth.engines.proc import run_process


def _wait_for(path: Path, timeout_s: float = 10.0) -> str:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if path.exists() and path.read_text().strip():
            return path.read_text().strip()
        time.sleep(0.01)
    raise AssertionError(f"{path} never written")


def _gone(pid: int, timeout_s: float = 5.0) -> bool:
    """Whether ``pid`` has exited (a zombie waiting for its new parent counts as exited)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                return True
        except psutil.NoSuchProcess:
            return True
        time.sleep(0.02)
    return False


def test_edges_are_serialised_across_the_two_reader_threads() -> None:
    """A probe with state (RAPL wrap tracking, lazy set-up) is never entered twice at once,
    and each line's probe is read after its stamp (the stamp never waits for a probe)."""
    active = 0
    max_active = 0
    calls = 0
    guard = threading.Lock()

    def probe(pid: int) -> int:
        nonlocal active, max_active, calls
        with guard:
            active += 1
            max_active = max(max_active, active)
            calls += 1
        time.sleep(0.003)  # a slow read widens any overlap between the two readers
        with guard:
            active -= 1
        return time.monotonic_ns()

    # stdout and stderr written at once, 40 lines each
    script = "for i in $(seq 40); do echo out$i; echo err$i >&2; done"
    res = run_process(["sh", "-c", script], probe=probe, timeout_s=30)
    assert res.returncode == 0
    assert len(res.lines) == 80 and calls == 80
    assert max_active == 1
    assert all(ln.probe > ln.t_ns for ln in res.lines)


@pytest.mark.parametrize("only_edges", [True, False])
def test_a_slow_probe_does_not_delay_the_stamps_of_the_lines_it_skips(only_edges: bool) -> None:
    """A verbose engine's log (llama-bench -v) must not push its progress lines' stamps late.

    300 log lines come at once, then after 0.5 s two edge lines 300 ms apart. The probe costs 10
    ms (a slow driver read). Probed only at the edges, the reader has read the log when the edges
    come, and their stamps lie about 300 ms apart, as written. Probed at every line (what
    run_process did before it took ``edges``), the reader is still 2.5 s behind when the edges
    come, and stamps them a few ms apart: the windows of issue 39.
    """
    calls = 0

    def probe(pid: int) -> int:
        nonlocal calls
        calls += 1
        time.sleep(0.010)
        return calls

    script = ("i=0; while [ $i -lt 300 ]; do echo log line $i >&2; i=$((i+1)); done; "
              "sleep 0.5; echo EDGE a >&2; sleep 0.3; echo EDGE b >&2")
    res = run_process(["sh", "-c", script], probe=probe, timeout_s=60,
                      edges=(lambda stream, text: text.startswith("EDGE")) if only_edges else None)
    assert res.returncode == 0
    a, b = (ln for ln in res.lines if ln.text.startswith("EDGE"))
    gap_ms = (b.t_ns - a.t_ns) / 1e6
    if only_edges:
        assert calls == 2 and a.probe is not None and b.probe is not None
        assert all(ln.probe is None for ln in res.lines if not ln.text.startswith("EDGE"))
        # (sleep 0.3 between the two writes. A loaded machine can read either late: with the log
        # right before the first edge, it was read 190 ms late and the gap came out 110 ms)
        assert 200 <= gap_ms
    else:
        assert calls == 302
        assert gap_ms < 100  # the planted backlog (2.5 s of probes left) is far longer than the 300 ms


def test_engine_runs_in_its_own_session() -> None:
    """A terminal's Ctrl-C goes to tokensleuth alone, so it is never recorded as an engine crash."""
    res = run_process(["sh", "-c", "ps -o sid= -p $$"], timeout_s=30)
    assert res.returncode == 0
    assert int(res.text("out").strip()) != os.getsid(0)


@pytest.mark.parametrize("how", ["KeyboardInterrupt", "Interrupted"])
def test_an_interrupt_while_the_engine_runs_kills_it(how: str, tmp_path: Path) -> None:
    """KeyboardInterrupt, or the CLI's Interrupted raised by its SIGTERM handler, in the main
    thread while run_process waits: the engine and its children are dead when it propagates."""
    pidfile, childfile = tmp_path / "pid", tmp_path / "child"
    script = f"sleep 60 & echo $! > {childfile}; echo $$ > {pidfile}; wait"
    main = threading.main_thread().ident
    assert main is not None and threading.get_ident() == main
    signum = signal.SIGINT if how == "KeyboardInterrupt" else signal.SIGTERM
    old = signal.getsignal(signum)
    if how == "Interrupted":
        def raise_interrupted(sig: int, frame: object) -> None:
            raise Interrupted(sig)
        signal.signal(signum, raise_interrupted)
    else:
        # Python's own Ctrl-C handler: a suite started in the background (`cmd &`, as a CI
        # runner may start it) inherits SIGINT ignored, and then no KeyboardInterrupt comes
        signal.signal(signum, signal.default_int_handler)

    def interrupt() -> None:
        _wait_for(pidfile)
        _wait_for(childfile)
        signal.pthread_kill(main, signum)  # to the main thread, so its waitpid is interrupted

    t = threading.Thread(target=interrupt, daemon=True)
    t.start()
    expected: type[BaseException] = KeyboardInterrupt if how == "KeyboardInterrupt" else Interrupted
    try:
        with pytest.raises(expected):
            run_process(["sh", "-c", script], timeout_s=60)
    finally:
        signal.signal(signum, old)
        t.join(timeout=10)
    engine, child = int(_wait_for(pidfile)), int(_wait_for(childfile))
    assert _gone(engine) and _gone(child)


@pytest.mark.parametrize("start", ["run_process", "Background"])
@pytest.mark.parametrize("how", ["KeyboardInterrupt", "Interrupted"])
def test_an_interrupt_while_the_engine_is_being_started_kills_it(how: str, start: str,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """The interrupt comes after the fork, before Popen has returned the engine to run_process
    (or a server to Background; a loaded machine can leave the parent there while the child
    runs): it is raised, and the engine it started is dead when it propagates, not left running."""
    from tokensleuth.engines.proc import Background

    main = threading.main_thread().ident
    assert main is not None and threading.get_ident() == main
    signum = signal.SIGINT if how == "KeyboardInterrupt" else signal.SIGTERM
    old = signal.getsignal(signum)

    def raise_interrupted(sig: int, frame: object) -> None:
        raise Interrupted(sig)

    installed = raise_interrupted if how == "Interrupted" else signal.default_int_handler
    signal.signal(signum, installed)
    real, started = subprocess.Popen, []

    def popen_interrupted(*args: Any, **kwargs: Any) -> Any:
        p = real(*args, **kwargs)
        started.append(p.pid)
        signal.pthread_kill(main, signum)  # its handler runs here, before Popen returns
        return p

    monkeypatch.setattr(subprocess, "Popen", popen_interrupted)
    expected: type[BaseException] = KeyboardInterrupt if how == "KeyboardInterrupt" else Interrupted
    try:
        with pytest.raises(expected):
            if start == "Background":
                with Background(["sleep", "60"]):
                    pass
            else:
                run_process(["sleep", "60"], timeout_s=60)
        assert signal.getsignal(signum) is installed  # the caller's handler is back
    finally:
        signal.signal(signum, old)
    assert len(started) == 1 and _gone(started[0])


def test_an_interrupt_that_did_not_break_the_wait_is_seen_within_a_second(tmp_path: Path) -> None:
    """A signal whose handler was due just before the wait began does not break the wait (its
    EINTR has come and gone): _thread.interrupt_main makes exactly that state, a pending handler
    and no signal. The engine (which would end by itself after 20 s) is killed, not waited for."""
    import _thread

    pidfile, ended = tmp_path / "pid", tmp_path / "ended"
    script = f"echo $$ > {pidfile}; sleep 20; echo yes > {ended}"
    old = signal.getsignal(signal.SIGINT)
    signal.signal(signal.SIGINT, signal.default_int_handler)

    def interrupt() -> None:
        _wait_for(pidfile)
        time.sleep(0.2)  # inside the wait
        _thread.interrupt_main(signal.SIGINT)

    t = threading.Thread(target=interrupt, daemon=True)
    t.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            run_process(["sh", "-c", script], timeout_s=60)
    finally:
        signal.signal(signal.SIGINT, old)
        t.join(timeout=10)
    assert _gone(int(_wait_for(pidfile)))
    assert not ended.exists(), "the interrupt was seen only when the engine ended"


def test_engine_dies_when_tokensleuth_is_killed(tmp_path: Path) -> None:
    """SIGKILL leaves no handler to run: the kernel kills the engine (PR_SET_PDEATHSIG)."""
    pidfile = tmp_path / "pid"
    code = ("import sys; from tokensleuth.engines.proc import run_process; "
            "run_process(['sh', '-c', 'echo $$ > ' + sys.argv[1] + '; exec sleep 60'])")
    tool = subprocess.Popen([sys.executable, "-c", code, str(pidfile)])
    try:
        engine = int(_wait_for(pidfile))
        # the sampler-like thread is what made preexec_fn unsafe; the spawn still worked
        tool.kill()
        tool.wait()
        assert _gone(engine)
    finally:
        if tool.poll() is None:
            tool.kill()
