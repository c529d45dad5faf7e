"""A fake NVML module with scripted counters (for hosts without an NVIDIA GPU)."""

from __future__ import annotations

import time
from types import SimpleNamespace
from typing import Any


class FakeNVMLError(Exception):
    pass


class FakeNVML:
    """Constant power P watts since ``t0``: the energy counter grows P*dt, like the real one."""

    NVMLError = FakeNVMLError
    NVML_CLOCK_SM = 1
    NVML_CLOCK_MEM = 2

    def __init__(self, power_w: float = 100.0, energy: bool = True, clock_mhz: float = 1980.0,
                 busy_pct: float = 87.0, clock: Any = None, gpu_pids: tuple[int, ...] = (4242,)) -> None:
        self.power_w = power_w
        self.energy = energy
        self.clock_mhz = clock_mhz
        self.busy = busy_pct
        self.gpu_pids = gpu_pids
        self.now = clock or time.monotonic
        self.t0 = self.now()

    def nvmlInit(self) -> None:
        pass

    def nvmlDeviceGetCount(self) -> int:
        return 1

    def nvmlDeviceGetHandleByIndex(self, i: int) -> int:
        return i

    def nvmlDeviceGetTotalEnergyConsumption(self, h: int) -> int:
        if not self.energy:
            raise FakeNVMLError("not supported")
        return int((self.now() - self.t0) * self.power_w * 1e3)  # mJ

    def nvmlDeviceGetPowerUsage(self, h: int) -> int:
        return int(self.power_w * 1e3)  # mW

    def nvmlDeviceGetClockInfo(self, h: int, kind: int) -> int:
        return int(self.clock_mhz if kind == self.NVML_CLOCK_SM else 2619)

    def nvmlDeviceGetUtilizationRates(self, h: int) -> Any:
        return SimpleNamespace(gpu=self.busy, memory=40)

    def nvmlDeviceGetMemoryInfo(self, h: int) -> Any:
        return SimpleNamespace(used=5 << 30, total=80 << 30)

    def nvmlDeviceGetComputeRunningProcesses(self, h: int) -> list[Any]:
        return [SimpleNamespace(pid=p, usedGpuMemory=1 << 30) for p in self.gpu_pids]

    def nvmlDeviceGetName(self, h: int) -> str:
        return "Fake H200"

    def nvmlDeviceGetMemoryBusWidth(self, h: int) -> int:
        return 6016  # what NVML reported on the lent H200

    def nvmlDeviceGetMaxClockInfo(self, h: int, kind: int) -> int:
        return 3201 if kind == self.NVML_CLOCK_MEM else 1980

    def nvmlSystemGetDriverVersion(self) -> str:
        return "999.1"
