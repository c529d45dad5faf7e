"""The sampler thread and the edge reader: what the runner calls while a trial runs."""

from __future__ import annotations

import os
import select
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import psutil

from tokensleuth.monitor.cpu import (
    ProcessCpuReader,
    cgroup_cpu_s,
    cgroup_of,
    memory_mb,
    spinning_threads,
    thread_stats,
)
from tokensleuth.monitor.sources import NullSource, Source


class Monitor:
    """Reads counters at window edges and samples instant values every ``interval_s``.

    The sampler sleeps in select() between reads, so its own CPU use is the
    cost of the reads and wake-ups (bench/monitor_overhead.py measures it).
    """

    def __init__(self, sources: Sequence[Source], interval_s: float = 0.2,
                 on_sample: Callable[[list[tuple[int, dict[str, float]]]], None] | None = None) -> None:
        self.sources = list(sources)
        self.interval_s = interval_s
        # told the whole timeline after each sample (sampler thread): the runner commits the
        # readings as they come, so a machine that freezes mid-trial leaves its last ones behind
        self.on_sample = on_sample
        self.timeline: list[tuple[int, dict[str, float]]] = []
        # per-thread (name, cpu ns, voluntary switches) snapshots, for spin detection
        self.threads: list[tuple[int, dict[int, tuple[str, int, int]]]] = []
        self.pid: int | None = None
        self.peak_mb: dict[str, float] = {}
        # other processes seen resident on a GPU while the engine ran: pid -> name
        self.gpu_others: dict[int, str] = {}
        # GPU pids that do not exist in this PID namespace: in a container NVML reports
        # host pids, the engine's own among them, so these are recorded, not warned about
        self.gpu_unseen: set[int] = set()
        self._cpu: ProcessCpuReader | None = None
        self._cgroup: str | None = None
        # Edges come from two output-reader threads: the lazy set-up below, the fallback CPU
        # reader's open descriptors and the sources' wrap tracking (RAPL) must not interleave.
        self._edge_lock = threading.Lock()
        # Thread and memory reads serve spin detection and peaks: once a second is plenty.
        self.slow_every = max(1, round(1.0 / interval_s)) if interval_s > 0 else 1
        self._stop = threading.Event()
        # the sampler sleeps in select() on this pipe: one syscall per tick, woken at once by stop()
        self._wake_r, self._wake_w = os.pipe()
        self._thread: threading.Thread | None = None

    def edge(self, pid: int) -> dict[str, float]:
        """Counters at a window edge: the engine's CPU seconds and every energy counter."""
        with self._edge_lock:
            return self._edge(pid)

    def _edge(self, pid: int) -> dict[str, float]:
        out: dict[str, float] = {}
        if self.pid != pid or self._cpu is None:
            self.pid = pid
            self._cpu = ProcessCpuReader(pid)
            # An engine in a cgroup of its own (a container, a systemd scope) is also
            # charged there: children and helper processes included.
            own, eng = cgroup_of("self"), cgroup_of(pid)
            self._cgroup = eng if eng is not None and eng != own else None
        ns = self._cpu.read_ns()
        if ns is not None:
            out["cpu_s"] = ns / 1e9
        if self._cgroup is not None:
            cg = cgroup_cpu_s(self._cgroup)
            if cg is not None:
                out["cgroup_cpu_s"] = cg
        for s in self.sources:
            try:
                out.update(s.counters())
            except Exception:  # a flaky driver read must not kill the measurement
                continue
        return out

    def _run(self) -> None:
        tick = 0
        while not self._stop.is_set():
            t = time.monotonic_ns()
            row: dict[str, float] = {}
            for s in self.sources:
                try:
                    row.update(s.sample())
                except Exception:  # same reason as in edge()
                    continue
            if self.pid is not None and tick % self.slow_every == 0:
                self.threads.append((t, thread_stats(self.pid)))
                for k, v in memory_mb(self.pid).items():
                    self.peak_mb[k] = max(v, self.peak_mb.get(k, 0.0))
                    row[f"engine_{k.lower()}_mb"] = v  # memory in the timeline too: RssAnon over time
                self._gpu_residents()
            if row:
                self.timeline.append((t, row))
                if self.on_sample is not None:
                    try:
                        self.on_sample(self.timeline)
                    except Exception:  # a store hiccup must not stop the sampling
                        pass
            tick += 1
            ready, _, _ = select.select([self._wake_r], [], [], self.interval_s)
            if ready:
                break

    def _gpu_residents(self) -> None:
        own = {os.getpid(), self.pid or 0}
        for s in self.sources:
            others = getattr(s, "other_processes", None)
            if others is None:
                continue
            try:
                pids = others(own)
            except Exception:  # a flaky driver read must not kill the measurement
                continue
            for pid in pids:
                if pid in self.gpu_others or pid in self.gpu_unseen:
                    continue
                try:
                    self.gpu_others[pid] = psutil.Process(pid).name()
                except psutil.NoSuchProcess:
                    self.gpu_unseen.add(pid)
                except psutil.Error:
                    self.gpu_others[pid] = "?"

    def start(self) -> None:
        if all(isinstance(s, NullSource) for s in self.sources):
            # nothing to sample for timelines: only the once-a-second thread/memory reads
            self.interval_s, self.slow_every = 1.0, 1
        if self.interval_s > 0:
            self._thread = threading.Thread(target=self._run, name="tokensleuth-sampler", daemon=True)
            self._thread.start()

    def stop(self) -> list[tuple[int, dict[str, float]]]:
        self._stop.set()
        os.write(self._wake_w, b"x")
        if self._thread is not None:
            self._thread.join(timeout=5)
        with self._edge_lock:
            if self._cpu is not None:
                self._cpu.close()
        os.close(self._wake_r)
        os.close(self._wake_w)
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
        # The engine inherits tokensleuth's CPU affinity: what bounds its busy cores.
        return {"process": {"cpus_allowed": engine_cpus()}, **{s.name: s.info() for s in self.sources}}


def engine_cpus() -> int | None:
    """Logical CPUs an engine started now may run on (this process's affinity, inherited)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count()
