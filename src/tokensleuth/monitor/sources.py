"""Resource sources behind one protocol, and the factory that finds them.

A source has two kinds of readings:

* ``counters()`` — cumulative counters (energy in J) read at the edges of each
  timed window; their deltas are exact over the window whatever its length.
* ``sample()`` — instantaneous values (power W, clocks MHz, busy %, memory MB)
  read by the sampler thread for timelines and window means.

A read that fails in part raises :class:`ReadFailed` with the readings it did get, so
the monitor keeps those and notes what was lost (never a silent gap in a figure).

Every file or library a source reads is injectable (``sysfs_root``, ``nvml``),
so tests run them on fixture trees and scripted fakes.
"""

from __future__ import annotations

from typing import Any, Protocol

# The protocol's exception is defined in nvidia.py, a module that imports no other of the monitor:
# this module imports every source (probe_sources), so a source importing it would close a cycle.
from tokensleuth.monitor.nvidia import ReadFailed, why

__all__ = ["NullSource", "ReadFailed", "Source", "probe_sources", "why"]


class Source(Protocol):
    name: str

    def counters(self) -> dict[str, float]: ...

    def sample(self) -> dict[str, float]: ...

    def info(self) -> dict[str, Any]: ...

    def notes(self) -> list[str]: ...


class NullSource:
    """What the factory returns when nothing is there: reads nothing, says why."""

    name = "null"

    def __init__(self, why: str = "no GPU or energy source found on this host") -> None:
        self.why = why

    def counters(self) -> dict[str, float]:
        return {}

    def sample(self) -> dict[str, float]:
        return {}

    def info(self) -> dict[str, Any]:
        return {}

    def notes(self) -> list[str]:
        return [self.why]


def probe_sources(sysfs_root: str = "/sys", nvml: Any | None = None) -> list[Source]:
    """Every source this host has (NVIDIA, amdgpu, RAPL); a NullSource when none."""
    from pathlib import Path

    from tokensleuth.monitor.amdgpu import AmdgpuSource
    from tokensleuth.monitor.nvidia import NvidiaSource
    from tokensleuth.monitor.rapl import RaplSource

    found: list[Source] = []
    nv = NvidiaSource.probe(nvml)
    if nv is not None:
        found.append(nv)
    found += AmdgpuSource.probe(Path(sysfs_root))
    rapl = RaplSource.probe(Path(sysfs_root))
    if rapl is not None:
        found.append(rapl)
    return found or [NullSource()]
