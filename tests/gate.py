"""A llama-bench that holds one of its model runs while a gate file exists (test helper).

A test that kills a study part-way polls the store for the trials it wants done first; how many
more run before the kill lands is the machine's. Held at the study's last process, the study
cannot finish before the kill, however slowly the poll comes round.
"""

from __future__ import annotations

import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

WRAPPER = '''#!/bin/bash
# the real llama-bench; its run number {hold} (from 0) of those that load a model waits while {gate} exists
case " $* " in *" -m "*)
    n=$(wc -l < {count})
    echo >> {count}
    while [ "$n" -ge {hold} ] && [ -e {gate} ]; do sleep 0.05; done;;
esac
exec {real} "$@"
'''


class Gate:
    """``bin_dir`` (a ``bin:`` source) runs ``real``'s llama-bench, holding its ``hold``-th model run
    (counted from 0) and every later one until :meth:`open`."""

    def __init__(self, d: Path, real: Path, hold: int) -> None:
        d.mkdir()
        self.bin_dir = d / "bin"
        self.bin_dir.mkdir()
        self.gate = d / "gate"
        self.gate.touch()
        count = d / "runs"
        count.touch()
        bench = self.bin_dir / "llama-bench"
        bench.write_text(WRAPPER.format(hold=hold, gate=self.gate, count=count, real=real / "llama-bench"))
        bench.chmod(0o755)

    def open(self) -> None:
        """Let the held run (if any) and every later one through."""
        self.gate.unlink(missing_ok=True)

    def kill_when(self, proc: subprocess.Popen[str], done: Callable[[], int], at_least: int) -> None:
        """SIGKILL the study's process once ``done()`` reaches ``at_least``, then open the gate.

        Waits at most 20 minutes: a hang guard, not a bound (a few trials take seconds)."""
        deadline = time.monotonic() + 1200
        try:
            while done() < at_least:
                assert proc.poll() is None, proc.communicate()[1][-2000:]
                assert time.monotonic() < deadline, f"{at_least} trials not done in 20 minutes: hung"
                time.sleep(0.02)
        finally:
            proc.send_signal(signal.SIGKILL)
            proc.wait()
            self.open()
