"""The sampler thread and the edge reader: what the runner calls while a trial runs."""

from __future__ import annotations

import os
import re
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
    thread_figures,
    thread_stats,
)
from tokensleuth.monitor.sources import NullSource, ReadFailed, Source, why

_GPU_ENERGY = re.compile(r"gpu\d+_energy_j")
# what each kind of read is called in a note, in the order the notes come
_KINDS = {"edge": "edge read", "sampler": "sampler read", "live": "update", "gpu-list": "check"}


DEFAULT_INTERVAL_S = 0.2  # the sampling interval of instant values (power, clocks, busy %)


class Monitor:
    """Reads counters at window edges and samples instant values every ``interval_s``.

    The sampler sleeps in select() between reads, so its own CPU use is the
    cost of the reads and wake-ups (bench/monitor_overhead.py measures it).
    """

    def __init__(self, sources: Sequence[Source], interval_s: float = DEFAULT_INTERVAL_S,
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
        # Failed reads, each a note (notes()): (kind, what) -> [count, last error, what it costs],
        # and how many reads of each kind there were. Edges and the sampler write them from
        # different threads.
        self._failed: dict[tuple[str, str], list[Any]] = {}
        self._reads = dict.fromkeys(_KINDS, 0)
        self._fail_lock = threading.Lock()
        # each source's counter keys at its last good edge read: what a failure there loses
        self._edge_keys: dict[int, set[str]] = {}
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
        self._count("edge")
        lost: set[str] = set()
        for i, s in enumerate(self.sources):
            try:
                got = s.counters()
            except ReadFailed as exc:  # a part failed: the rest is kept, the failed part noted
                got = exc.values
                for what, err in exc.failed.items():
                    self._fail("edge", what, err, exc.lost)
                lost |= set(exc.keys or self._edge_keys.get(i, ())) - got.keys()
            except Exception as exc:  # a flaky driver read must not kill the measurement: noted
                got = {}
                self._fail("edge", f"{s.name} counters", why(exc), "the windows at those edges lack its counters")
                lost |= self._edge_keys.get(i, set())
            else:
                self._edge_keys[i] = set(got)
            out.update(got)
        if any(_GPU_ENERGY.fullmatch(k) for k in lost):
            # A window's counter energy is the sum over its GPUs' counters present at both of its
            # edges (attribute.window_resources): with one GPU's missing it would be silently low.
            # None at this edge: the windows there take the sampled-power integral over them all.
            for k in [k for k in out if _GPU_ENERGY.fullmatch(k)]:
                del out[k]
        return out

    def _count(self, kind: str) -> None:
        with self._fail_lock:
            self._reads[kind] += 1

    def _fail(self, kind: str, what: str, err: str, lost: str) -> None:
        with self._fail_lock:
            f = self._failed.setdefault((kind, what), [0, "", lost])
            f[0] += 1
            f[1] = err

    def _run(self) -> None:
        tick = 0
        while not self._stop.is_set():
            self._tick(tick)
            tick += 1
            ready, _, _ = select.select([self._wake_r], [], [], self.interval_s)
            if ready:
                break

    def _tick(self, tick: int) -> None:
        """One round of the sampler: every source's instant readings, and on every
        ``slow_every``-th the engine's threads, memory and the other processes on its GPUs."""
        t = time.monotonic_ns()
        row: dict[str, float] = {}
        self._count("sampler")
        for s in self.sources:
            try:
                row.update(s.sample())
            except ReadFailed as exc:  # a part failed: the rest is kept, the failed part noted
                row.update(exc.values)
                for what, err in exc.failed.items():
                    self._fail("sampler", what, err, exc.lost)
            except Exception as exc:  # same reason as in edge(): noted
                self._fail("sampler", f"{s.name} readings", why(exc),
                           "those samples lack its readings: the windows' power, clock and busy % means "
                           "(and the sampled-power energy) rest on the other samples")
        if self.pid is not None and tick % self.slow_every == 0:
            self.threads.append((t, thread_stats(self.pid)))
            for k, v in memory_mb(self.pid).items():
                self.peak_mb[k] = max(v, self.peak_mb.get(k, 0.0))
                row[f"engine_{k.lower()}_mb"] = v  # memory in the timeline too: RssAnon over time
            self._gpu_residents()
        if row:
            self.timeline.append((t, row))
            if self.on_sample is not None:
                self._count("live")
                try:
                    self.on_sample(self.timeline)
                except Exception as exc:  # a store hiccup must not stop the sampling: noted
                    self._fail("live", "live timeline", why(exc),
                               "the live timeline (a running trial's readings in the store, what a machine "
                               "that froze leaves behind) lagged: readings not yet written waited for the next "
                               "write; the trial's whole timeline is still stored when it ends")

    def _gpu_residents(self) -> None:
        own = {os.getpid(), self.pid or 0}
        for s in self.sources:
            others = getattr(s, "other_processes", None)
            if others is None:
                continue
            self._count("gpu-list")
            failed: list[str] = []  # GPUs whose processes could not be listed (the source says which)
            try:
                pids = others(own, failed)
            except Exception as exc:  # a flaky driver read must not kill the measurement: noted
                pids, failed = [], [f"{s.name}: {why(exc)}"]
            if failed:
                # not "no other process": the gpu-process check did not run there, and the note says so
                self._fail("gpu-list", "other GPU processes", "; ".join(failed), "")
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

    def thread_load(self, start_ns: int, end_ns: int) -> list[dict[str, object]]:
        """Each thread's cores and voluntary switches between ``start_ns`` and ``end_ns`` (first
        and last snapshot inside), busiest first; none when fewer than two snapshots fell inside."""
        inside = [(t, s) for t, s in self.threads if start_ns <= t <= end_ns and s]
        if len(inside) < 2:
            return []
        (t0, a), (t1, b) = inside[0], inside[-1]
        return thread_figures(a, b, (t1 - t0) / 1e9)

    def notes(self) -> list[str]:
        """The sources' notes, then one line for each kind of read that failed: how often, the
        last error, and what the figures lost (every read failing is said without counts, so the
        same line from each trial of a cell is one line)."""
        out = [n for s in self.sources for n in s.notes()]
        with self._fail_lock:
            failed = sorted(self._failed.items(), key=lambda kv: (list(_KINDS).index(kv[0][0]), kv[0][1]))
            reads = dict(self._reads)
        for (kind, what), (n, err, lost) in failed:
            total = reads[kind]
            noun = _KINDS[kind]
            times = f"every {noun}" if n >= total else f"{n} of {total} {noun}s"
            if kind == "gpu-list":
                out.append(f"other GPU processes could not be listed ({err}): the gpu-process check did not run"
                           if n >= total else f"other GPU processes could not be listed at {n} of {total} checks "
                           f"({err}): the gpu-process check did not run at those")
            else:
                out.append(f"{what}: {times} failed ({err}): {lost}")
        if (not reads["gpu-list"] and self.pid is not None
                and any(getattr(s, "other_processes", None) is not None for s in self.sources)):
            why_not = ("the trial ended before the first check, taken once a second" if self._thread is not None
                       else "no sampler ran: a sample interval of 0")
            out.append(f"other GPU processes were never listed ({why_not}): the gpu-process check did not run")
        return out

    def info(self) -> dict[str, Any]:
        # The engine inherits tokensleuth's CPU affinity: what bounds its busy cores.
        return {"process": {"cpus_allowed": engine_cpus()}, **{s.name: s.info() for s in self.sources}}


def engine_cpus() -> int | None:
    """Logical CPUs an engine started now may run on (this process's affinity, inherited)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count()
