"""NVIDIA GPUs through NVML (``nvidia-ml-py``): energy counter, power, clocks, busy %."""

from __future__ import annotations

import os
from typing import Any


class ReadFailed(Exception):
    """A read of which some parts failed (any source's: see sources.py, which exports it).

    ``values``: the readings that did come; ``failed``: what each lost part is (a label such
    as ``"gpu0 energy counter (NVML)"``) and why it failed; ``lost``: what a missing reading
    costs the figures (the monitor's note says it to the user); ``keys``: the reading keys
    the failed parts would have given (``gpu0_energy_j``).
    """

    def __init__(self, values: dict[str, float], failed: dict[str, str], lost: str,
                 keys: tuple[str, ...] = ()) -> None:
        super().__init__("; ".join(f"{k}: {v}" for k, v in failed.items()))
        self.values = values
        self.failed = failed
        self.lost = lost
        self.keys = keys


def why(exc: BaseException) -> str:
    """An exception in a few words: its type, and its message where that adds something."""
    name = type(exc).__name__
    text = (str(exc).splitlines() or [""])[0].strip()[:120]
    return f"{name}: {text}" if text and text != name else name


# what a window loses when an edge's energy-counter read fails (results.py: a window's energy is
# its counter's delta, else the sampled-power integral, else it is left out of J/token)
ENERGY_LOST = ("the windows at those edges have no GPU energy-counter reading (of any GPU): their energy is the "
               "sampled-power integral where there are power samples, else they are left out of J/token")
# what a timeline loses when a sampled reading fails
SAMPLE_LOST = ("those samples lack it: the windows' means of it (and, for power, the sampled-power energy) "
               "rest on the other samples")
# sampled readings: (timeline key suffix, what the note calls it)
_SAMPLED = {"power": ("power_w", "power"), "sm_clock": ("sm_clock_mhz", "SM clock"),
            "mem_clock": ("mem_clock_mhz", "memory clock"), "busy": ("busy_pct", "busy %"),
            "mem_used": ("mem_used_mb", "memory used")}


class NvidiaSource:
    """All NVML devices (or those in CUDA_VISIBLE_DEVICES when it lists indices)."""

    name = "nvidia"

    def __init__(self, nvml: Any, indices: list[int]) -> None:
        self.nvml = nvml
        self.handles = [(i, nvml.nvmlDeviceGetHandleByIndex(i)) for i in indices]
        self._has_energy: dict[int, bool] = {}
        self._notes: list[str] = []
        for i, h in self.handles:
            try:
                nvml.nvmlDeviceGetTotalEnergyConsumption(h)
                self._has_energy[i] = True
            except nvml.NVMLError:
                self._has_energy[i] = False
                self._notes.append(f"gpu{i}: no total-energy counter; energy integrates sampled power")

    @classmethod
    def probe(cls, nvml: Any | None = None) -> NvidiaSource | None:
        if nvml is None:
            try:
                import pynvml as nvml_mod  # nvidia-ml-py
            except ImportError:
                return None
            nvml = nvml_mod
        try:
            nvml.nvmlInit()
            n = int(nvml.nvmlDeviceGetCount())
        except Exception:  # NVMLError_LibraryNotFound, DriverNotLoaded, …: no NVIDIA GPU here
            return None
        if n == 0:
            return None
        indices = list(range(n))
        vis = os.environ.get("CUDA_VISIBLE_DEVICES", "")
        if vis and all(x.strip().isdigit() for x in vis.split(",")):
            indices = [int(x) for x in vis.split(",") if int(x) < n]
        return cls(nvml, indices)

    def counters(self) -> dict[str, float]:
        """Each GPU's energy counter (J); ReadFailed, naming the GPU, where one's read fails."""
        out: dict[str, float] = {}
        failed: dict[str, str] = {}
        for i, h in self.handles:
            if self._has_energy.get(i):
                try:
                    # NVML reports mJ since driver load; house unit is J.
                    out[f"gpu{i}_energy_j"] = self.nvml.nvmlDeviceGetTotalEnergyConsumption(h) / 1e3
                except self.nvml.NVMLError as exc:
                    failed[f"gpu{i} energy counter (NVML)"] = why(exc)
        if failed:
            # the GPUs that did read are returned: the monitor drops every GPU's energy at an edge
            # where one's is missing (a window's counter energy is the sum over its GPUs)
            raise ReadFailed(out, failed, ENERGY_LOST,
                             tuple(f"gpu{i}_energy_j" for i, _ in self.handles if self._has_energy.get(i)))
        return out

    def sample(self) -> dict[str, float]:
        """Each GPU's power, clocks, busy % and memory used; ReadFailed (with the readings that
        came) where one fails, each failed reading named."""
        nv = self.nvml
        out: dict[str, float] = {}
        failed: dict[str, str] = {}
        for i, h in self.handles:
            for what, (key, label) in _SAMPLED.items():
                try:
                    out[f"gpu{i}_{key}"] = self._sampled(h, what)
                except nv.NVMLError as exc:
                    failed[f"gpu{i} {label} (NVML)"] = why(exc)
        if failed:
            raise ReadFailed(out, failed, SAMPLE_LOST)
        return out

    def _sampled(self, h: Any, what: str) -> float:
        nv = self.nvml
        if what == "power":
            return float(nv.nvmlDeviceGetPowerUsage(h)) / 1e3  # mW -> W
        if what == "sm_clock":
            return float(nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_SM))
        if what == "mem_clock":
            return float(nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_MEM))
        if what == "busy":
            return float(nv.nvmlDeviceGetUtilizationRates(h).gpu)
        return float(nv.nvmlDeviceGetMemoryInfo(h).used) / (1 << 20)  # mem_used

    def other_processes(self, own_pids: set[int], failures: list[str] | None = None) -> list[int]:
        """PIDs of other processes resident on the GPUs (a confounder). A GPU whose processes
        could not be listed is appended to ``failures`` ("gpu0: NVMLError_Unknown"): for it the
        check did not run, which the caller must say (an empty list is not "none there")."""
        pids: list[int] = []
        for i, h in self.handles:
            try:
                procs = self.nvml.nvmlDeviceGetComputeRunningProcesses(h)
            except self.nvml.NVMLError as exc:
                if failures is not None:
                    failures.append(f"gpu{i}: {why(exc)}")
                continue
            pids += [p.pid for p in procs if p.pid not in own_pids]
        return pids

    def info(self) -> dict[str, Any]:
        nv = self.nvml
        devs = []
        for i, h in self.handles:
            name = nv.nvmlDeviceGetName(h)
            dev: dict[str, Any] = {"index": i, "name": name.decode() if isinstance(name, bytes) else str(name)}
            try:
                # the memory system's peak: bus width x the highest memory clock x 2 (double data
                # rate: HBM and GDDR move data on both clock edges), bits -> bytes, in GB/s
                bus = int(nv.nvmlDeviceGetMemoryBusWidth(h))
                mclk = int(nv.nvmlDeviceGetMaxClockInfo(h, nv.NVML_CLOCK_MEM))
                dev.update(mem_bus_width_bits=bus, max_mem_clock_mhz=mclk, peak_mem_gbs=round(bus * mclk * 2 / 8 / 1e3, 1))
            except (nv.NVMLError, AttributeError):
                pass
            devs.append(dev)
        try:
            drv = nv.nvmlSystemGetDriverVersion()
            drv = drv.decode() if isinstance(drv, bytes) else str(drv)
        except nv.NVMLError:
            drv = None
        return {"vendor": "nvidia", "driver": drv, "devices": devs}

    def notes(self) -> list[str]:
        return list(self._notes)
