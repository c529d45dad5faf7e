"""Confounder checks around a trial: other busy processes, swap activity.

Warnings are values ``(code, detail)`` stored with the trial and rendered by the
report in one place.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

import psutil

BUSY_CORE_FRACTION = 0.10  # another process using >10% of a core during the trial

REMEDY = {
    "busy-process": "another process used CPU during the measurement — rerun on a quiet system",
    "swap": "the system swapped during the measurement — free memory or use a smaller model",
    "gpu-process": "another process was resident on the GPU — stop it and rerun",
    "short-window": "windows are shorter than the power sampling allows — use more tokens per test",
    "spinning-thread": "a CPU thread polled while the GPU worked — try --poll 0 or check the backend's sync mode",
}


@dataclass(slots=True)
class Snapshot:
    cpu: dict[int, tuple[str, float]] = field(default_factory=dict)
    swap_io: int = 0


def snapshot() -> Snapshot:
    snap = Snapshot()
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
    """Warnings from two snapshots taken around a trial of ``seconds``."""
    out: list[tuple[str, str]] = []
    me = os.getpid()
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
