"""NVIDIA GPUs through NVML (``nvidia-ml-py``): energy counter, power, clocks, busy %."""

from __future__ import annotations

import os
from typing import Any


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
        out = {}
        for i, h in self.handles:
            if self._has_energy.get(i):
                # NVML reports mJ since driver load; house unit is J.
                out[f"gpu{i}_energy_j"] = self.nvml.nvmlDeviceGetTotalEnergyConsumption(h) / 1e3
        return out

    def sample(self) -> dict[str, float]:
        nv = self.nvml
        out: dict[str, float] = {}
        for i, h in self.handles:
            try:
                out[f"gpu{i}_power_w"] = nv.nvmlDeviceGetPowerUsage(h) / 1e3  # mW -> W
            except nv.NVMLError:
                pass
            try:
                out[f"gpu{i}_sm_clock_mhz"] = float(nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_SM))
                out[f"gpu{i}_mem_clock_mhz"] = float(nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_MEM))
            except nv.NVMLError:
                pass
            try:
                u = nv.nvmlDeviceGetUtilizationRates(h)
                out[f"gpu{i}_busy_pct"] = float(u.gpu)
            except nv.NVMLError:
                pass
            try:
                out[f"gpu{i}_mem_used_mb"] = nv.nvmlDeviceGetMemoryInfo(h).used / (1 << 20)
            except nv.NVMLError:
                pass
        return out

    def other_processes(self, own_pids: set[int]) -> list[int]:
        """PIDs of other processes resident on the GPUs (a confounder)."""
        pids: list[int] = []
        for _, h in self.handles:
            try:
                procs = self.nvml.nvmlDeviceGetComputeRunningProcesses(h)
            except self.nvml.NVMLError:
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
