"""CPU time of an engine process and its threads, with nanosecond precision where Linux gives it.

``/proc/<pid>/task/<tid>/schedstat`` holds each thread's time on a CPU in ns
(Documentation/scheduler/sched-stats.rst, field 1), far finer than the 10 ms
clock ticks of ``/proc/<pid>/stat`` that psutil reports; at thousands of tokens
per second the ticks would quantize CPU ms/token to nonsense.

Cheaper still, and what window edges use: the process's CPU-time clock, read
with one ``clock_gettime`` on the clock id Linux derives from the pid
(``MAKE_PROCESS_CPUCLOCK(pid, CPUCLOCK_SCHED)`` in include/linux/posix-timers.h).
It is the same scheduler runtime summed over every thread, exited ones included,
in ns, for about 0.3 µs instead of a directory walk.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import cast


def process_cpu_clock(pid: int) -> int:
    """Linux's clock id for ``pid``'s whole-process scheduler CPU time."""
    return ((~pid) << 3) | 2  # CPUCLOCK_SCHED, process-wide (not per-thread) clock


class ProcessCpuReader:
    """One process's on-CPU ns from its CPU-time clock; the schedstat walk where the
    clock cannot be read (another kernel, no permission)."""

    def __init__(self, pid: int, proc_root: Path = Path("/proc")) -> None:
        self.clock = process_cpu_clock(pid)
        self.fallback: ThreadCpuReader | None = None
        try:
            time.clock_gettime_ns(self.clock)
        except (OSError, OverflowError):
            self.fallback = ThreadCpuReader(pid, proc_root)

    def read_ns(self) -> int | None:
        if self.fallback is not None:
            return self.fallback.read_ns()
        try:
            return time.clock_gettime_ns(self.clock)
        except OSError:  # the process is gone
            return None

    def close(self) -> None:
        if self.fallback is not None:
            self.fallback.close()


class ThreadCpuReader:
    """Repeated reads of one process's on-CPU ns from kept-open schedstat files.

    The fallback of :class:`ProcessCpuReader`: listing ``task/`` and ``pread`` on
    cached descriptors (about 4 µs an edge, against 0.2 µs for the clock);
    threads that exit keep their last reading in the total.
    """

    def __init__(self, pid: int, proc_root: Path = Path("/proc")) -> None:
        self.task_dir = str(proc_root / str(pid) / "task")
        self.fds: dict[str, int] = {}
        self.gone_ns = 0  # time of threads that exited since we first saw them
        self.last: dict[str, int] = {}

    def read_ns(self) -> int | None:
        try:
            tids = os.listdir(self.task_dir)
        except OSError:
            return None
        total = 0
        live = set(tids)
        for tid in list(self.fds):
            if tid not in live:
                os.close(self.fds.pop(tid))
                self.gone_ns += self.last.pop(tid, 0)
        for tid in tids:
            fd = self.fds.get(tid)
            try:
                if fd is None:
                    fd = self.fds[tid] = os.open(f"{self.task_dir}/{tid}/schedstat", os.O_RDONLY)
                ns = int(os.pread(fd, 64, 0).split()[0])
            except (OSError, ValueError, IndexError):
                continue
            self.last[tid] = ns
            total += ns
        return total + self.gone_ns

    def close(self) -> None:
        for fd in self.fds.values():
            os.close(fd)
        self.fds.clear()


def thread_stats(pid: int, proc_root: Path = Path("/proc")) -> dict[int, tuple[str, int, int]]:
    """Per thread: (name, on-CPU ns, voluntary context switches)."""
    out: dict[int, tuple[str, int, int]] = {}
    try:
        tasks = list((proc_root / str(pid) / "task").iterdir())
    except OSError:
        return out
    for t in tasks:
        try:
            ns = int((t / "schedstat").read_text().split()[0])
            name, vol = "?", 0
            for line in (t / "status").read_text().splitlines():
                if line.startswith("Name:"):
                    name = line.split(":", 1)[1].strip()
                elif line.startswith("voluntary_ctxt_switches:"):
                    vol = int(line.split(":", 1)[1])
            out[int(t.name)] = (name, ns, vol)
        except (OSError, ValueError, IndexError):
            continue
    return out


def thread_figures(a: dict[int, tuple[str, int, int]], b: dict[int, tuple[str, int, int]],
                   seconds: float) -> list[dict[str, object]]:
    """Every thread seen in both snapshots: the cores it used and its voluntary switches a
    second, busiest first."""
    out: list[dict[str, object]] = []
    if seconds <= 0:
        return out
    for tid, (name, ns1, vol1) in b.items():
        if tid not in a:
            continue
        _, ns0, vol0 = a[tid]
        out.append({"tid": tid, "name": name, "cores": round((ns1 - ns0) / 1e9 / seconds, 3),
                    "voluntary_switches_per_s": round((vol1 - vol0) / seconds, 1)})
    return sorted(out, key=lambda t: -cast(float, t["cores"]))


def is_spinning(thread: dict[str, object], min_cores: float = 0.9, max_switches_per_s: float = 10.0) -> bool:
    """The rule: a thread that used >= ``min_cores`` of a core while almost never blocking.

    A thread that is busy but never sleeps voluntarily is polling: on a GPU
    backend that is a CPU core burnt waiting for the device (the field report's
    30% CPU at --poll 50 against 2% at --poll 0).
    """
    return (cast(float, thread["cores"]) >= min_cores
            and cast(float, thread["voluntary_switches_per_s"]) <= max_switches_per_s)


def spinning_threads(a: dict[int, tuple[str, int, int]], b: dict[int, tuple[str, int, int]],
                     seconds: float) -> list[dict[str, object]]:
    """The threads of ``thread_figures`` that ``is_spinning`` holds, in tid order."""
    return sorted((t for t in thread_figures(a, b, seconds) if is_spinning(t)), key=lambda t: cast(int, t["tid"]))


def memory_mb(pid: int, proc_root: Path = Path("/proc")) -> dict[str, float]:
    """Resident memory split: anonymous (the engine's working set) vs file-backed.

    mmapped GGUF pages count as RssFile: they are the page cache, not memory the
    engine allocated, so "peak memory" figures use RssAnon.
    """
    out: dict[str, float] = {}
    try:
        for line in (proc_root / str(pid) / "status").read_text().splitlines():
            key, _, rest = line.partition(":")
            if key in ("RssAnon", "RssFile", "VmRSS"):
                out[key] = int(rest.split()[0]) / 1024  # kB -> MB
    except (OSError, ValueError, IndexError):
        pass
    return out


def cgroup_of(pid: int | str, proc_root: Path = Path("/proc")) -> str | None:
    """The process's cgroup path (v2 unified line, else v1 cpuacct controller)."""
    try:
        lines = (proc_root / str(pid) / "cgroup").read_text().splitlines()
    except OSError:
        return None
    v1 = None
    for line in lines:
        hid, ctrls, path = line.split(":", 2)
        if hid == "0" and ctrls == "":
            return path
        if "cpuacct" in ctrls.split(","):
            v1 = path
    return v1


def cgroup_cpu_s(path: str, cgroup_root: Path = Path("/sys/fs/cgroup")) -> float | None:
    """CPU seconds charged to a cgroup: v2 cpu.stat usage_usec, or v1 cpuacct.usage (ns)."""
    v2 = cgroup_root / path.lstrip("/") / "cpu.stat"
    try:
        for line in v2.read_text().splitlines():
            if line.startswith("usage_usec "):
                return int(line.split()[1]) / 1e6  # µs -> s
    except (OSError, ValueError):
        pass
    for base in (cgroup_root / "cpuacct", cgroup_root / "cpu,cpuacct"):
        try:
            return int((base / path.lstrip("/") / "cpuacct.usage").read_text()) / 1e9  # ns -> s
        except (OSError, ValueError):
            continue
    return None
