"""Attribution of resource readings to timed windows. Pure functions.

Energy over a window is the delta of an energy counter read at its edges when
the device has one (NVML total energy, amdgpu energy1_input, RAPL), else the
trapezoid integral of sampled power; both are kept when both exist so a report
can cross-check them. A window shorter than ~5 sampling intervals has too few
power samples for a fair integral or mean, and is flagged.

A window's edges are the arrival times of llama-bench's progress lines, so they
carry the latency of printing and reading a line (and of waking the reader on a
machine whose cores the engine keeps busy): about a millisecond on a busy
2-core machine, against 4-10 ms pp64 repetitions (issue 8). Where llama-bench
reports the repetition's own duration (``samples_ns``), CPU time is attributed
over it (:func:`attributed_cpu_ms`) and the difference between the two is the
window's edge error (:func:`edge_error`), flagged above :data:`EDGE_ERROR_LIMIT`.
CPU readings are coarse too: Linux's per-process CPU clock only counts a thread
running on another core up to its last scheduler tick (kernel/sched/cputime.c,
``thread_group_cputime``; 4 ms steps at HZ=250 on the machine of issue 8), so a
single few-ms window's busy cores is noise; the figures reported sum many windows.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

Timeline = Sequence[tuple[int, Mapping[str, float]]]

# A window whose edges differ from the engine's own duration by more than this
# share of it is flagged (``short-window``): its CPU figures carry that error.
EDGE_ERROR_LIMIT = 0.05


def _series(timeline: Timeline, key: str, start_ns: int, end_ns: int) -> tuple[np.ndarray, np.ndarray]:
    t = np.array([ts for ts, row in timeline if key in row and start_ns <= ts <= end_ns], dtype=float)
    v = np.array([row[key] for ts, row in timeline if key in row and start_ns <= ts <= end_ns], dtype=float)
    return t, v


def integrate_power_j(timeline: Timeline, key: str, start_ns: int, end_ns: int) -> float | None:
    """Trapezoid integral of sampled power (W) over [start, end], edges held flat."""
    t, v = _series(timeline, key, start_ns, end_ns)
    if len(t) == 0:
        return None
    t = np.concatenate([[start_ns], t, [end_ns]])
    v = np.concatenate([[v[0]], v, [v[-1]]])
    return float(np.sum((v[1:] + v[:-1]) / 2 * np.diff(t)) / 1e9)


def window_resources(start_ns: int, end_ns: int, counters: Mapping[str, float],
                     timeline: Timeline, interval_s: float = 0.2) -> dict[str, Any]:
    """Per-window figures: energy (counter and integral), mean/p95 power, clocks, busy %."""
    out: dict[str, Any] = {"window_s": (end_ns - start_ns) / 1e9}
    keys = {k for _, row in timeline for k in row}
    gpus = sorted({k.split("_", 1)[0] for k in keys | set(counters) if k.startswith("gpu")})
    energy_counter = 0.0
    energy_integral = 0.0
    have_counter = have_integral = False
    for g in gpus:
        if f"{g}_energy_j" in counters:
            energy_counter += counters[f"{g}_energy_j"]
            have_counter = True
        j = integrate_power_j(timeline, f"{g}_power_w", start_ns, end_ns)
        if j is not None:
            energy_integral += j
            have_integral = True
        for metric in ("power_w", "sm_clock_mhz", "busy_pct", "mem_used_mb"):
            _, v = _series(timeline, f"{g}_{metric}", start_ns, end_ns)
            if len(v):
                out.setdefault(metric, []).append(float(v.mean()))
                if metric == "power_w":
                    out.setdefault("power_p95_w", []).append(float(np.percentile(v, 95)))
                if metric == "sm_clock_mhz":
                    out.setdefault("clock_max_mhz", []).append(float(v.max()))
    for k in ("power_w", "power_p95_w", "mem_used_mb"):
        if k in out:
            out[k] = float(sum(out[k]))  # summed over GPUs
    for k in ("sm_clock_mhz", "busy_pct", "clock_max_mhz"):
        if k in out:
            out[k] = float(np.mean(out[k]))  # averaged over GPUs
    if have_counter and (end_ns - start_ns) > 0:
        # The counter's mean power is exact over the window; samples may miss a short one.
        out["power_w"] = energy_counter / ((end_ns - start_ns) / 1e9)
    out["gpu_energy_counter_j"] = energy_counter if have_counter else None
    out["gpu_energy_integral_j"] = energy_integral if have_integral else None
    out["cpu_pkg_energy_j"] = counters.get("cpu_pkg_energy_j")
    out["cgroup_cpu_ms"] = counters.get("cgroup_cpu_ms")
    out["short_window"] = (end_ns - start_ns) / 1e9 < 5 * interval_s
    return out


def counter_deltas(a: Mapping[str, float], b: Mapping[str, float]) -> dict[str, float]:
    """Deltas of every counter present at both edges (cpu_s becomes cpu_ms)."""
    out = {}
    for k in a.keys() & b.keys():
        if k in ("cpu_s", "cgroup_cpu_s"):
            out[k.replace("_s", "_ms")] = (b[k] - a[k]) * 1e3
        else:
            out[k] = b[k] - a[k]
    return out


def edge_error(window_ns: int, engine_ns: int | None) -> float | None:
    """|window - engine duration| / engine duration; None where the engine gave none."""
    if engine_ns is None or engine_ns <= 0:
        return None
    return abs(window_ns - engine_ns) / engine_ns


@dataclass(frozen=True, slots=True)
class CpuShare:
    """A window's CPU time attributed to the engine's timed duration."""

    cpu_ms: float  # CPU ms of the timed duration
    duration_ms: float  # the timed duration: the engine's own where known, else the window


def attributed_cpu_ms(cpu_ms: float, window_ns: int, engine_ns: int | None) -> CpuShare:
    """CPU time of the engine's timed duration, from the CPU time read at the window's edges.

    The CPU rate is taken over ``max(window, engine duration)`` and multiplied by the
    engine's duration. A window longer than the repetition (late edges) then sheds the
    CPU of the untimed work it also covers (printing, the next repetition's set-up); a
    window shorter than the repetition is never stretched up to it, so edge latency can
    only make busy cores lower, never above what the cores allow.
    """
    if engine_ns is None or engine_ns <= 0:
        return CpuShare(cpu_ms, window_ns / 1e6)
    span = max(window_ns, engine_ns)
    if span <= 0:
        return CpuShare(cpu_ms, engine_ns / 1e6)
    return CpuShare(cpu_ms * engine_ns / span, engine_ns / 1e6)
