"""AMD GPUs through the amdgpu driver's sysfs files.

Files (Documentation/gpu/amdgpu/thermal.rst, driver-misc.rst): gpu_busy_percent,
mem_info_vram_used / mem_info_gtt_used (bytes), pp_dpm_sclk (the active level is
marked ``*``), hwmon power1_average or power1_input (µW), freq1_input (Hz),
energy1_input (µJ, where the driver has it). On APUs (Strix Halo) the power
figure is the whole socket, CPU included; the source says so in its notes.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from tokensleuth.monitor.nvidia import ENERGY_LOST, ReadFailed, why


def _read_num(p: Path) -> float | None:
    try:
        text = p.read_text().strip()
    except OSError:
        return None
    try:
        return float(text)
    except ValueError:
        return None  # "N/A" and friends


class AmdgpuSource:
    name = "amdgpu"

    def __init__(self, device: Path, index: int) -> None:
        self.dev = device
        self.index = index
        hw = sorted((device / "hwmon").glob("hwmon*")) if (device / "hwmon").is_dir() else []
        self.hwmon = hw[0] if hw else None
        self.apu = _read_num(device / "mem_info_vram_total") is not None and (
            (_read_num(device / "mem_info_vram_total") or 0) < (1 << 30))
        # an energy counter where the driver has one that reads (as NVML's is probed): one that
        # fails later is a failed read, noted by the monitor, not a counter that is not there
        self.has_energy = self.hwmon is not None and _read_num(self.hwmon / "energy1_input") is not None

    @classmethod
    def probe(cls, sysfs_root: Path) -> list[AmdgpuSource]:
        out: list[AmdgpuSource] = []
        for _i, card in enumerate(sorted((sysfs_root / "class" / "drm").glob("card[0-9]*"))):
            dev = card / "device"
            if (dev / "gpu_busy_percent").exists():
                out.append(cls(dev, len(out)))
        return out

    def _power_w(self) -> float | None:
        if self.hwmon is None:
            return None
        for f in ("power1_average", "power1_input"):
            v = _read_num(self.hwmon / f)
            if v is not None:
                return v / 1e6  # µW -> W
        return None

    def counters(self) -> dict[str, float]:
        """The energy counter (J) where the driver has one; ReadFailed where its read fails."""
        if not self.has_energy or self.hwmon is None:
            return {}
        try:
            return {f"gpu{self.index}_energy_j": float((self.hwmon / "energy1_input").read_text()) / 1e6}  # µJ -> J
        except (OSError, ValueError) as exc:
            raise ReadFailed({}, {f"gpu{self.index} energy counter (amdgpu)": why(exc)}, ENERGY_LOST,
                             (f"gpu{self.index}_energy_j",)) from None

    def sample(self) -> dict[str, float]:
        i = self.index
        out: dict[str, float] = {}
        busy = _read_num(self.dev / "gpu_busy_percent")
        if busy is not None:
            out[f"gpu{i}_busy_pct"] = busy
        p = self._power_w()
        if p is not None:
            out[f"gpu{i}_power_w"] = p
        clk = _read_num(self.hwmon / "freq1_input") if self.hwmon else None
        if clk is not None:
            out[f"gpu{i}_sm_clock_mhz"] = clk / 1e6  # Hz -> MHz
        else:
            try:
                for line in (self.dev / "pp_dpm_sclk").read_text().splitlines():
                    m = re.search(r"(\d+)\s*[Mm]hz\s*\*", line)
                    if m:
                        out[f"gpu{i}_sm_clock_mhz"] = float(m.group(1))
            except OSError:
                pass
        for f, key in (("mem_info_vram_used", "mem_used_mb"), ("mem_info_gtt_used", "gtt_used_mb")):
            v = _read_num(self.dev / f)
            if v is not None:
                out[f"gpu{i}_{key}"] = v / (1 << 20)
        return out

    def info(self) -> dict[str, Any]:
        return {"vendor": "amd", "device": str(self.dev), "apu": self.apu}

    def notes(self) -> list[str]:
        n = []
        if self.hwmon is None or self._power_w() is None:
            n.append(f"gpu{self.index}: amdgpu exposes no power file; no power or energy")
        elif self.apu:
            n.append(f"gpu{self.index}: APU — power is the whole socket (CPU and GPU)")
        if not self.has_energy:
            n.append(f"gpu{self.index}: no energy counter; energy integrates sampled power")
        return n
