"""What will make measurements noisy on this machine, each with its fix: the checks behind the
doctor command, and the one line compare, bisect and scan print at start when one finds something.

The checks read ``/sys`` and ``/proc`` (injectable roots, tested on fixture trees), psutil
and NVML; none needs root.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil

from tokensleuth.core.hostenv import read_value
from tokensleuth.drivers.requests import Say


@dataclass(frozen=True, slots=True)
class Finding:
    """One check: ``ok`` False means it will add noise (or bias), and ``fix`` says what to do."""

    name: str
    ok: bool
    seen: str
    fix: str = ""


def cpu_checks(sys_root: Path = Path("/sys"), proc_root: Path = Path("/proc")) -> list[Finding]:
    """The CPU's noise sources: the frequency governor, turbo boost, SMT siblings, ASLR,
    transparent huge pages and the hottest thermal zone, each read from ``sys_root`` and
    ``proc_root``."""
    out: list[Finding] = []
    cpu = sys_root / "devices/system/cpu"
    govs = sorted({g for p in cpu.glob("cpu[0-9]*/cpufreq/scaling_governor") if (g := read_value(p))})
    if govs:
        out.append(Finding("governor", govs == ["performance"], ", ".join(govs),
                           "sudo cpupower frequency-set -g performance (the clock then stays up between runs)"))
    boost = read_value(cpu / "cpufreq/boost")
    no_turbo = read_value(cpu / "intel_pstate/no_turbo")
    if boost is not None or no_turbo is not None:
        on = boost == "1" if boost is not None else no_turbo == "0"
        out.append(Finding("boost", not on, "on" if on else "off",
                           "turbo/boost varies the clock with temperature: echo 0 | sudo tee "
                           + ("/sys/devices/system/cpu/cpufreq/boost" if boost is not None
                              else "/sys/devices/system/cpu/intel_pstate/no_turbo (write 1)")))
    smt = read_value(cpu / "smt/active")
    if smt is not None:
        # a note, not a fault: it matters only when the engine's threads land on siblings
        out.append(Finding("SMT", True, "siblings active" if smt == "1" else "off",
                           "two threads on one core share its units: give the engine one thread per core "
                           "(-t N, --cpu-mask) or turn SMT off"))
    aslr = read_value(proc_root / "sys/kernel/randomize_va_space")
    if aslr is not None:
        # on by default and left on: a fixed layout can bias an A/B while shrinking its noise
        out.append(Finding("ASLR", True, {"0": "off", "1": "partial", "2": "on"}.get(aslr, aslr),
                           "leave it on: each process gets a fresh layout, so layout effects average out"))
    thp = read_value(sys_root / "kernel/mm/transparent_hugepage/enabled")
    if thp is not None:
        mode = thp.split("[", 1)[1].split("]", 1)[0] if "[" in thp else thp
        out.append(Finding("THP", mode != "always", mode,
                           "with 'always' the kernel's khugepaged compacts memory in the background: "
                           "echo madvise | sudo tee /sys/kernel/mm/transparent_hugepage/enabled"))
    temps = []
    for z in (sys_root / "class/thermal").glob("thermal_zone*/temp"):
        t = read_value(z)
        if t and t.lstrip("-").isdigit():
            temps.append(int(t) / 1000)
    if temps:
        hot = max(temps)
        out.append(Finding("temperature", hot < 85, f"{hot:.0f} °C hottest zone",
                           "let the machine cool, or it throttles mid-study"))
    return out


def memory_checks() -> list[Finding]:
    sw = psutil.swap_memory()
    vm = psutil.virtual_memory()
    return [Finding("swap", sw.used < (64 << 20), f"{sw.used >> 20} MiB used",
                    "swapped-out pages fault back in during a run: free memory or swapoff -a"),
            Finding("memory", vm.available > 0.1 * vm.total, f"{vm.available >> 20} MiB available of "
                    f"{vm.total >> 20}", "close programs: the page cache holding the model must not be evicted")]


def load_checks(self_pid: int | None = None, sample_s: float = 0.5) -> list[Finding]:
    out: list[Finding] = []
    me = {self_pid or os.getpid(), os.getppid()}
    procs = []
    for p in psutil.process_iter(["pid", "name"]):
        if p.info["pid"] in me:
            continue
        try:
            p.cpu_percent(None)
            procs.append(p)
        except psutil.Error:
            continue
    psutil.cpu_percent(None)
    import time

    time.sleep(sample_s)
    busy = []
    for p in procs:
        try:
            c = p.cpu_percent(None)
        except psutil.Error:
            continue
        if c >= 10:
            busy.append((c, p.info["name"], p.info["pid"]))
    busy.sort(reverse=True)
    out.append(Finding("other processes", not busy,
                       ", ".join(f"{n} (pid {pid}) {c:.0f}% CPU" for c, n, pid in busy[:4]) or "quiet",
                       "stop them, or they take cycles and cache from the engine at random moments"))
    return out


def gpu_checks(nvml: Any | None = None) -> list[Finding]:
    from tokensleuth.monitor.nvidia import NvidiaSource

    src = NvidiaSource.probe(nvml)
    if src is None:
        return []
    nv = src.nvml
    out = []
    for i, h in src.handles:
        try:
            pm = nv.nvmlDeviceGetPersistenceMode(h)
            out.append(Finding(f"GPU{i} persistence", bool(pm), "on" if pm else "off",
                               "sudo nvidia-smi -pm 1 (else the driver re-initialises the GPU per process)"))
        except (nv.NVMLError, AttributeError):
            pass
        try:
            sm = nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_SM)
            top = nv.nvmlDeviceGetMaxClockInfo(h, nv.NVML_CLOCK_SM)
            out.append(Finding(f"GPU{i} clock", True, f"SM {sm} of {top} MHz now",
                               "to hold it: sudo nvidia-smi -lgc <MHz> (compare reports drift either way)"))
        except (nv.NVMLError, AttributeError):
            pass
    failed: list[str] = []
    others = src.other_processes(set(), failed)  # over every GPU at once
    if others:
        out.append(Finding("GPU other processes", False, f"pids {others[:5]}",
                           "other programs on the GPU share its memory bandwidth and clocks"))
    if failed:  # not listed is not none there
        out.append(Finding("GPU other processes", False, "could not be listed (" + "; ".join(failed) + ")",
                           "check the driver (nvidia-smi): without the list no other program on the GPU is seen"))
    return out


def drain_checks() -> list[Finding]:
    """Whether the exit drain (engines/exitdrain.py) can hold an engine until its logger has written."""
    from tokensleuth.engines import exitdrain

    lib = exitdrain.library()
    return [Finding("exit drain", lib is not None, str(lib) if lib else "not built (no C compiler found)",
                    "install a C compiler (cc): without it llama-perplexity and llama-batched-bench runs whose "
                    "last lines llama.cpp's logger lost at exit are run again")]


def checks(sys_root: Path = Path("/sys"), proc_root: Path = Path("/proc"), nvml: Any | None = None,
           sample_s: float = 0.5) -> list[Finding]:
    return [*cpu_checks(sys_root, proc_root), *memory_checks(), *load_checks(sample_s=sample_s), *gpu_checks(nvml),
            *drain_checks()]


def quick_checks(sys_root: Path = Path("/sys"), proc_root: Path = Path("/proc"),
                 nvml: Any | None = None) -> list[Finding]:
    """The checks that read state without sampling (what compare and bisect run at start)."""
    return [*cpu_checks(sys_root, proc_root), *memory_checks(), *gpu_checks(nvml)]


def summary_line(found: Sequence[Finding]) -> str | None:
    """One line for the start of compare and bisect; None when nothing was found."""
    bad = [f for f in found if not f.ok]
    if not bad:
        return None
    return ("doctor: " + "; ".join(f"{f.name} {f.seen}" for f in bad)
            + " — these add noise; `tokensleuth doctor` says how to fix each")


def doctor_line(say: Say) -> None:
    """The doctor's one line when a quick check finds something that adds noise."""
    line = summary_line(quick_checks())
    if line:
        say.line(line)
