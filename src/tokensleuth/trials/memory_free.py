"""What memory is free to a run started now, per place: the host's (MemAvailable, or less where a
cgroup limits this process) and the GPU's (NVML, or amdgpu's VRAM and GTT). The memory guard
(:mod:`tokensleuth.trials.memory`) holds a run's predicted need against it."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True, slots=True)
class Free:
    """Bytes free per place, and where each figure came from."""

    host: float | None
    gpu: float | None
    sources: tuple[str, ...] = ()


def host_free(proc_root: Path = Path("/proc"), cgroup_root: Path = Path("/sys/fs/cgroup")) -> tuple[float | None, str]:
    """Host memory free to a run started now: MemAvailable, or less where this process's
    cgroup (which the engine inherits) or one above it leaves less (:func:`cgroup_left`)."""
    avail, src = None, "MemAvailable"
    try:
        for line in (proc_root / "meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                avail = float(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError) as exc:
        src = f"no MemAvailable ({proc_root / 'meminfo'}: {type(exc).__name__})"
    cg = cgroup_left(proc_root, cgroup_root)
    if cg is not None and (avail is None or cg[0] < avail):
        avail, src = cg
    return avail, src


def cgroup_left(proc_root: Path = Path("/proc"), cgroup_root: Path = Path("/sys/fs/cgroup")) -> tuple[float, str] | None:
    """What this process's cgroups let it still take: the smallest limit less usage over its own
    memory cgroup and each one above it (a parent's limit binds its children too), and where
    that figure comes from; None where none has a limit.

    The cgroup is the one /proc/self/cgroup names: on cgroup v1 (and a hybrid host, whose
    memory controller is v1) the ``memory`` controller's path under ``<cgroup_root>/memory``
    (memory.limit_in_bytes, memory.usage_in_bytes), else the v2 ``0::`` path under
    ``<cgroup_root>`` (memory.max, memory.current). In a container with a cgroup namespace
    that path is ``/`` and the mount's root is the container's own cgroup."""
    try:
        lines = (proc_root / "self" / "cgroup").read_text().splitlines()
    except OSError:
        lines = []  # no /proc here: the mount's root is all there is to read
    v1 = v2 = None
    for line in lines:
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        if "memory" in parts[1].split(","):
            v1 = parts[2]
        elif parts[0] == "0" and parts[1] == "":
            v2 = parts[2]
    if v1 is not None and (cgroup_root / "memory").is_dir():
        base, path, limit_file, usage_file = cgroup_root / "memory", v1, "memory.limit_in_bytes", "memory.usage_in_bytes"
    else:
        base, path, limit_file, usage_file = cgroup_root, v2 or "/", "memory.max", "memory.current"
    names = [p for p in path.split("/") if p]
    best: tuple[float, str] | None = None
    for depth in range(len(names), -1, -1):  # this process's cgroup, then each one above it
        where = base.joinpath(*names[:depth])
        try:
            limit = (where / limit_file).read_text().strip()
        except OSError:
            continue  # the root cgroup has no limit file (v2), nor a level this mount does not show
        if not limit.isdigit():
            continue  # "max": no limit at this level
        try:
            left, how = float(limit) - float((where / usage_file).read_text().strip()), ""
        except (OSError, ValueError) as exc:
            left, how = float(limit), f", its usage unreadable ({type(exc).__name__}): the limit alone"
        if best is None or left < best[0]:
            best = (max(left, 0.0), f"{limit_file} of cgroup /{'/'.join(names[:depth])}{how}")
    return best


def gpu_free(nvml: Any | None = None, sys_root: Path = Path("/sys")) -> tuple[float | None, str]:
    """Free GPU memory: NVML's, else amdgpu's VRAM — or, on an APU (little VRAM), its GTT."""
    from tokensleuth.monitor.nvidia import NvidiaSource

    src = NvidiaSource.probe(nvml)
    if src is not None:
        total = 0.0
        for _, h in src.handles:
            info = src.nvml.nvmlDeviceGetMemoryInfo(h)
            total += float(info.total - info.used)
        return total, "NVML"
    for card in sorted((sys_root / "class" / "drm").glob("card[0-9]*")):
        d = card / "device"

        def num(name: str) -> float | None:
            try:
                return float((d / name).read_text().strip())
            except (OSError, ValueError):
                return None

        vt, vu, gt, gu = (num(f"mem_info_{k}") for k in ("vram_total", "vram_used", "gtt_total", "gtt_used"))
        if vt is None or vu is None:
            continue
        if vt < (1 << 30) and gt is not None and gu is not None:  # an APU: its GPU's memory is GTT
            return gt - gu + (vt - vu), "amdgpu GTT + VRAM"
        return vt - vu, "amdgpu VRAM"
    return None, ""
