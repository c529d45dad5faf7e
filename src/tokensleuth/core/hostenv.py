"""What the machine looked like when a trial ran (stored with every trial)."""

from __future__ import annotations

import os
import platform
import socket
from pathlib import Path
from typing import Any

import psutil


def read_value(p: Path) -> str | None:
    """A /sys or /proc file's stripped text, or None when it cannot be read."""
    try:
        return p.read_text().strip()
    except OSError:
        return None


def host_environment(sys_root: Path = Path("/sys"), proc_root: Path = Path("/proc")) -> dict[str, Any]:
    """Host facts that can confound a measurement: CPU, governor, load, kernel."""
    cpu_model = None
    info = read_value(proc_root / "cpuinfo") or ""
    for line in info.splitlines():
        if line.startswith("model name"):
            cpu_model = line.split(":", 1)[1].strip()
            break
    governor = read_value(sys_root / "devices/system/cpu/cpu0/cpufreq/scaling_governor")
    vm = psutil.virtual_memory()
    return {
        "host": socket.gethostname(),
        "kernel": platform.release(),
        "python": platform.python_version(),
        "cpu_model": cpu_model,
        "cpu_count": os.cpu_count(),
        "governor": governor,
        "loadavg_1m": os.getloadavg()[0],
        "mem_available_mb": vm.available // (1 << 20),
    }


def hardware(env: dict[str, Any]) -> dict[str, Any]:
    """What a machine is, from a trial's stored environment: host, CPU, GPUs, driver and kernel
    (a cross-host table's row, a bundle's machine)."""
    gpus = ((env.get("monitor") or {}).get("nvidia") or {})
    amd = ((env.get("monitor") or {}).get("amdgpu") or {})
    names = [str(d.get("name")) for d in gpus.get("devices") or []] + [
        str(d.get("name") or d.get("card")) for d in amd.get("devices") or []]
    return {"host": env.get("host"), "cpu": env.get("cpu_model"), "cpu_count": env.get("cpu_count"),
            "gpu": ", ".join(names) or None,
            "driver": gpus.get("driver") or amd.get("driver"), "kernel": env.get("kernel")}
