"""The sampler thread and the edge reader: what the runner calls while a trial runs."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from typing import Any

from tokensleuth.monitor.cpu import process_tree_cpu_s, spinning_threads, thread_stats
from tokensleuth.monitor.sources import Source


class Monitor:
    """Reads counters at window edges and samples instant values every ``interval_s``.

    The sampler sleeps between reads (Event.wait), so its own CPU use is the
    cost of the reads themselves (bench/monitor_overhead.py measures it).
    """

    def __init__(self, sources: Sequence[Source], interval_s: float = 0.2) -> None:
        self.sources = list(sources)
        self.interval_s = interval_s
        self.timeline: list[tuple[int, dict[str, float]]] = []
        # per-thread (name, cpu ns, voluntary switches) snapshots, for spin detection
        self.threads: list[tuple[int, dict[int, tuple[str, int, int]]]] = []
        self.pid: int | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def edge(self, pid: int) -> dict[str, float]:
        """Counters at a window edge: the engine's CPU seconds and every energy counter."""
        out: dict[str, float] = {}
        self.pid = pid
        cpu = process_tree_cpu_s(pid)
        if cpu is not None:
            out["cpu_s"] = cpu
        for s in self.sources:
            try:
                out.update(s.counters())
            except Exception:  # a flaky driver read must not kill the measurement
                continue
        return out

    def _run(self) -> None:
        while not self._stop.is_set():
            t = time.monotonic_ns()
            row: dict[str, float] = {}
            for s in self.sources:
                try:
                    row.update(s.sample())
                except Exception:  # same reason as in edge()
                    continue
            if row:
                self.timeline.append((t, row))
            if self.pid is not None:
                self.threads.append((t, thread_stats(self.pid)))
            self._stop.wait(self.interval_s)

    def start(self) -> None:
        if self.interval_s > 0:
            self._thread = threading.Thread(target=self._run, name="tokensleuth-sampler", daemon=True)
            self._thread.start()

    def stop(self) -> list[tuple[int, dict[str, float]]]:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        return self.timeline

    def spinning(self, start_ns: int, end_ns: int) -> list[dict[str, object]]:
        """Threads that spun between ``start_ns`` and ``end_ns`` (first/last snapshot inside)."""
        inside = [(t, s) for t, s in self.threads if start_ns <= t <= end_ns and s]
        if len(inside) < 2:
            return []
        (t0, a), (t1, b) = inside[0], inside[-1]
        return spinning_threads(a, b, (t1 - t0) / 1e9)

    def notes(self) -> list[str]:
        return [n for s in self.sources for n in s.notes()]

    def info(self) -> dict[str, Any]:
        return {s.name: s.info() for s in self.sources}
