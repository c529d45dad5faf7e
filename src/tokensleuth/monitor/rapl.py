"""CPU package energy from the Linux powercap RAPL interface.

``/sys/class/powercap/intel-rapl:N/energy_uj`` counts µJ and wraps at
``max_energy_range_uj`` (Documentation/power/powercap/powercap.rst); AMD CPUs
expose the same files. The counter is unwrapped here by remembering the last
raw value, so deltas are right across a wrap (reads must come more often than
one wrap period, minutes at package power).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tokensleuth.monitor.nvidia import ReadFailed, why  # (defined there: see sources.py)


class RaplSource:
    name = "rapl"

    def __init__(self, zones: list[Path]) -> None:
        self.zones = zones
        self._last: dict[Path, int] = {}
        self._offset: dict[Path, int] = {}
        self._range: dict[Path, int] = {}
        for z in zones:
            try:
                self._range[z] = int((z / "max_energy_range_uj").read_text())
            except (OSError, ValueError):
                self._range[z] = 0

    @classmethod
    def probe(cls, sysfs_root: Path) -> RaplSource | None:
        base = sysfs_root / "class" / "powercap"
        zones = []
        for z in sorted(base.glob("intel-rapl:[0-9]*")):
            if ":" in z.name.split("intel-rapl:", 1)[1]:
                continue  # subzones (core, uncore) are inside the package figure
            try:
                int((z / "energy_uj").read_text())
            except (OSError, ValueError):
                continue  # unreadable without root on recent kernels
            zones.append(z)
        return cls(zones) if zones else None

    def _unwrapped_uj(self, z: Path) -> int:
        raw = int((z / "energy_uj").read_text())  # OSError, ValueError: the caller says which zone
        last = self._last.get(z)
        if last is not None and raw < last:
            self._offset[z] = self._offset.get(z, 0) + (self._range[z] or last)
        self._last[z] = raw
        return raw + self._offset.get(z, 0)

    def counters(self) -> dict[str, float]:
        """The packages' energy (J), summed; ReadFailed, naming the zone, where one's read fails
        (then no figure at this edge: a sum without a package would be silently low)."""
        total = 0
        failed: dict[str, str] = {}
        for z in self.zones:  # every zone read, so each one's wrap tracking stays current
            try:
                total += self._unwrapped_uj(z)
            except (OSError, ValueError) as exc:
                failed[f"CPU package energy (RAPL {z.name})"] = why(exc)
        if failed:
            raise ReadFailed({}, failed, "the windows at those edges have no CPU package energy: the package "
                                         "energy total leaves them out", ("cpu_pkg_energy_j",))
        return {"cpu_pkg_energy_j": total / 1e6}  # µJ -> J

    def sample(self) -> dict[str, float]:
        return {}

    def info(self) -> dict[str, Any]:
        return {"vendor": "rapl", "zones": [z.name for z in self.zones]}

    def notes(self) -> list[str]:
        return []
