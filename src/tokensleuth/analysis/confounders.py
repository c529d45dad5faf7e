"""Confounder checks around a trial: other busy processes, swap activity, and what the
trial's own samples show (stalled repetitions, uncertain window edges, impossible figures).

Warnings are values ``(code, detail)`` stored with the trial and rendered by the
report in one place.
"""

from __future__ import annotations

import os
import re
import time
from dataclasses import dataclass, field

import psutil

from tokensleuth.analysis.stats import STALL_FACTOR, stalled_reps
from tokensleuth.core.records import TrialOutcome
from tokensleuth.monitor.attribute import EDGE_ERROR_LIMIT, attributed_cpu_ms, edge_error
from tokensleuth.monitor.sampler import engine_cpus

BUSY_CORE_FRACTION = 0.10  # another process using >10% of a core during the trial

REMEDY = {
    "busy-process": "another process used CPU during the measurement — rerun on a quiet system",
    "swap": "the system swapped during the measurement — free memory or use a smaller model",
    "gpu-process": "another process was resident on the GPU — stop it and rerun",
    "short-window": "some window edges (the stamped progress lines) differ from the engine's own durations by "
                    "more than the limit, so the CPU, power and energy read at them are left out — on repetitions "
                    "of a few ms use more tokens per test; on longer ones the output reader was late (a loaded "
                    "machine): rerun on a quiet one",
    "stall": f"a repetition took over {STALL_FACTOR:g}x the trial's fastest: an engine thread was preempted and "
             "the others waited for it (another process, or as many threads as cores); the stalled repetition is "
             "left out of the trial's t/s — rerun on a quiet system, or with fewer threads (-t) than cores",
    "impossible-figure": "a figure beyond what the hardware allows (more busy cores than CPUs) — the windows "
                         "are too short for their edges; use more tokens per test",
    "spinning-thread": "a CPU thread polled while the GPU worked — try --poll 0 or check the backend's sync mode",
    "machine-lost": "the machine froze or rebooted while this trial ran (it was run again) — check memory "
                    "headroom (a model larger than RAM + VRAM freezes some systems) and the kernel log",
}


_BUSY_NAME = re.compile(r"([^,\[]+)\[\d+\]")


def busy_names(detail: str) -> list[str]:
    """The process names of a busy-process warning's detail ("python3[812] 97% of a core, …")."""
    return [m.group(1).strip() for m in _BUSY_NAME.finditer(detail)]


@dataclass(slots=True)
class Snapshot:
    cpu: dict[int, tuple[str, float]] = field(default_factory=dict)
    swap_io: int = 0
    t_ns: int | None = None  # when it was taken (monotonic)


def snapshot() -> Snapshot:
    snap = Snapshot(t_ns=time.monotonic_ns())
    for p in psutil.process_iter(["name", "cpu_times"]):
        t = p.info.get("cpu_times")
        if t is not None:
            snap.cpu[p.pid] = (p.info.get("name") or "?", t.user + t.system)
    try:
        sw = psutil.swap_memory()
        snap.swap_io = int(sw.sin + sw.sout)
    except (RuntimeError, OSError):
        pass
    return snap


def compare_snapshots(a: Snapshot, b: Snapshot, seconds: float, engine_pid: int | None) -> list[tuple[str, str]]:
    """Warnings from two snapshots taken around a trial of ``seconds``. A neighbour's share of a
    core is its CPU time over the time between the snapshots where both say when they were taken:
    the engine's own span can be much shorter than its process (a wrapper that waits before it
    starts the engine read another process at 1,580% of a core over it)."""
    out: list[tuple[str, str]] = []
    me = os.getpid()
    if a.t_ns is not None and b.t_ns is not None and b.t_ns > a.t_ns:
        seconds = (b.t_ns - a.t_ns) / 1e9
    if seconds > 0:
        busy = []
        for pid, (name, t1) in b.cpu.items():
            if pid in (me, engine_pid) or pid not in a.cpu:
                continue
            frac = (t1 - a.cpu[pid][1]) / seconds
            if frac > BUSY_CORE_FRACTION:
                busy.append(f"{name}[{pid}] {frac * 100:.0f}% of a core")
        if busy:
            out.append(("busy-process", ", ".join(busy[:5])))
    if b.swap_io > a.swap_io:
        out.append(("swap", f"{(b.swap_io - a.swap_io) / (1 << 20):.1f} MiB swapped in/out"))
    return out


def outcome_warnings(out: TrialOutcome, cpus: int | None = None) -> list[tuple[str, str]]:
    """Warnings the trial's own samples and windows show: stalls, edge errors, impossible figures.

    ``cpus``: the logical CPUs the engine may run on, for the busy-cores bound (default: the
    affinity an engine inherits from this process).
    """
    cpus = cpus if cpus is not None else engine_cpus()
    found: list[tuple[str, str]] = []
    stalls = []
    durations: dict[tuple[int, int], int] = {}
    for r in out.results:
        ds = [s.duration_ns for s in r.samples]
        fastest = min(ds, default=0)
        for i in stalled_reps(ds):
            stalls.append(f"{r.test} repetition {r.samples[i].rep + 1}/{len(ds)} took "
                          f"{ds[i] / 1e6:.1f} ms against {fastest / 1e6:.1f} ms")
        # a client-timed sample (a server request) is attributed over its own window, not an
        # engine-reported duration inside it
        durations.update({(r.test_idx, s.rep): (s.end_ns - s.start_ns if s.start_ns is not None
                                                and s.end_ns is not None else s.duration_ns)
                          for s in r.samples})
    if stalls:
        more = f" (+{len(stalls) - 3} more)" if len(stalls) > 3 else ""
        found.append(("stall", "; ".join(stalls[:3]) + more))
    worst: tuple[float, int, int] | None = None  # (error, window ns, engine ns)
    n_bad = n = 0
    cpu = span = 0.0
    for w in out.windows:
        d = durations.get((w.test_idx, w.rep))
        err = edge_error(w.end_ns - w.start_ns, d)
        if err is not None and d is not None:
            n += 1
            if err > EDGE_ERROR_LIMIT:
                n_bad += 1
                if worst is None or err > worst[0]:
                    worst = (err, w.end_ns - w.start_ns, d)
        if w.cpu_ms is not None and (err is None or err <= EDGE_ERROR_LIMIT):  # (as results.load_cells)
            share = attributed_cpu_ms(w.cpu_ms, w.end_ns - w.start_ns, d)
            cpu += share.cpu_ms
            span += share.duration_ms
    if worst is not None:
        err, win, eng = worst
        found.append(("short-window", f"{n_bad} of {n} windows differ from llama-bench's own durations by more "
                                      f"than {EDGE_ERROR_LIMIT:.0%} (worst {abs(win - eng) / 1e6:.2f} ms on a "
                                      f"{eng / 1e6:.2f} ms repetition, {err:.0%})"))
    if cpus and span > 0 and cpu / span > cpus:
        found.append(("impossible-figure", f"busy cores {cpu / span:.2f} on {cpus} CPUs"))
    return found
