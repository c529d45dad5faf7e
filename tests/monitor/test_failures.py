"""Failed reads are notes on the figures they touch, never silent gaps (issue 39, item 7): a failed
NVML, RAPL or amdgpu counter read at an edge, a failed sampler read, a failed live-timeline
update and a GPU process list that could not be taken. Fault injection on fake sources."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import pytest

from tests.monitor.fakes import FakeNVML, FakeNVMLError
from tokensleuth.monitor.amdgpu import AmdgpuSource
from tokensleuth.monitor.attribute import counter_deltas, window_resources
from tokensleuth.monitor.nvidia import NvidiaSource
from tokensleuth.monitor.rapl import RaplSource
from tokensleuth.monitor.sampler import Monitor
from tokensleuth.monitor.sources import NullSource

S = 1_000_000_000


class FlakyNVML(FakeNVML):
    """Two GPUs; the calls named in ``fail`` raise on the numbered calls of that kind (1-based),
    or on every one with ``"all"``."""

    def __init__(self, fail: dict[str, Any], **kw: Any) -> None:
        super().__init__(**kw)
        self.fail = fail
        self.calls: dict[str, int] = {}

    def _maybe_fail(self, what: str, h: int) -> None:
        key = f"{what}{h}"
        self.calls[key] = self.calls.get(key, 0) + 1
        when = self.fail.get(key)
        if when == "all" or (when is not None and self.calls[key] in when):
            raise FakeNVMLError("Unknown Error")

    def nvmlDeviceGetCount(self) -> int:
        return 2

    def nvmlDeviceGetTotalEnergyConsumption(self, h: int) -> int:
        self._maybe_fail("energy", h)
        return super().nvmlDeviceGetTotalEnergyConsumption(h)

    def nvmlDeviceGetPowerUsage(self, h: int) -> int:
        self._maybe_fail("power", h)
        return super().nvmlDeviceGetPowerUsage(h)

    def nvmlDeviceGetComputeRunningProcesses(self, h: int) -> list[Any]:
        self._maybe_fail("procs", h)
        return super().nvmlDeviceGetComputeRunningProcesses(h)


def _gpu(nvml: FakeNVML) -> NvidiaSource:
    src = NvidiaSource.probe(nvml)
    assert src is not None
    return src


def _done(mon: Monitor) -> list[str]:
    mon.stop()
    return mon.notes()


def test_a_failed_nvml_edge_read_drops_every_gpus_energy_there_and_is_noted() -> None:
    clock = [0.0]
    # gpu1's energy read fails at the second edge (its first call is NvidiaSource's probe of it)
    nv = FlakyNVML({"energy1": {3}}, power_w=100.0, clock=lambda: clock[0])
    mon = Monitor([_gpu(nv)], interval_s=0)
    edges = []
    for i in range(4):
        clock[0] = 2.0 * i
        edges.append(mon.edge(os.getpid()))
    notes = _done(mon)
    assert {"gpu0_energy_j", "gpu1_energy_j"} <= edges[0].keys()
    # not gpu0's alone: a window's counter energy is the sum over its GPUs, so half would be silently low
    assert not any(k.endswith("_energy_j") for k in edges[1])
    assert "cpu_s" in edges[1]  # the rest of the edge is kept
    # the windows at that edge have no counter energy: they take the integral of sampled power
    timeline = [(int(t * S), {"gpu0_power_w": 100.0, "gpu1_power_w": 100.0}) for t in (0.0, 2.0, 4.0)]
    r = window_resources(0, 2 * S, counter_deltas(edges[0], edges[1]), timeline)
    assert r["gpu_energy_counter_j"] is None and r["gpu_energy_integral_j"] == pytest.approx(400.0)
    r = window_resources(4 * S, 6 * S, counter_deltas(edges[2], edges[3]), timeline)
    assert r["gpu_energy_counter_j"] == pytest.approx(400.0)  # both GPUs, 100 W each for 2 s
    (note,) = [n for n in notes if "edge read" in n]
    assert note.startswith("gpu1 energy counter (NVML): 1 of 4 edge reads failed (FakeNVMLError: Unknown Error): ")
    assert "no GPU energy-counter reading" in note and "sampled-power integral" in note


def test_an_energy_counter_that_never_reads_says_every_edge_failed() -> None:
    nv = FlakyNVML({"energy0": set(range(2, 100))})  # read at the probe, never after
    mon = Monitor([_gpu(nv)], interval_s=0)
    for _ in range(3):
        assert not any(k.endswith("_energy_j") for k in mon.edge(os.getpid()))
    # no count: the same line from every trial of a cell is one line of its notes
    assert any(n.startswith("gpu0 energy counter (NVML): every edge read failed (FakeNVMLError") for n in _done(mon))


def test_a_failed_rapl_read_is_noted_and_its_edge_has_no_package_energy(tmp_path: Path) -> None:
    z = tmp_path / "class" / "powercap" / "intel-rapl:0"
    z.mkdir(parents=True)
    (z / "max_energy_range_uj").write_text("1000000000\n")
    (z / "energy_uj").write_text("1000\n")
    src = RaplSource.probe(tmp_path)
    assert src is not None
    mon = Monitor([src], interval_s=0)
    a = mon.edge(os.getpid())
    (z / "energy_uj").write_text("")  # a read that returns nothing
    b = mon.edge(os.getpid())
    (z / "energy_uj").write_text("3000\n")
    c = mon.edge(os.getpid())
    notes = _done(mon)
    assert "cpu_pkg_energy_j" in a and "cpu_pkg_energy_j" not in b and "cpu_pkg_energy_j" in c
    assert counter_deltas(a, b).get("cpu_pkg_energy_j") is None
    assert counter_deltas(a, c)["cpu_pkg_energy_j"] == pytest.approx(0.002)
    (note,) = notes
    assert note.startswith("CPU package energy (RAPL intel-rapl:0): 1 of 3 edge reads failed (ValueError")
    assert "no CPU package energy" in note


def test_a_failed_amdgpu_energy_read_is_noted(tmp_path: Path) -> None:
    dev = tmp_path / "class" / "drm" / "card0" / "device"
    hw = dev / "hwmon" / "hwmon0"
    hw.mkdir(parents=True)
    (dev / "gpu_busy_percent").write_text("50\n")
    (hw / "power1_average").write_text("100000000\n")
    (hw / "energy1_input").write_text("5000000\n")
    (src,) = AmdgpuSource.probe(tmp_path)
    assert not any("no energy counter" in n for n in src.notes())
    mon = Monitor([src], interval_s=0)
    assert mon.edge(os.getpid())["gpu0_energy_j"] == pytest.approx(5.0)
    (hw / "energy1_input").unlink()
    assert "gpu0_energy_j" not in mon.edge(os.getpid())
    assert any(n.startswith("gpu0 energy counter (amdgpu): 1 of 2 edge reads failed (FileNotFoundError")
               for n in _done(mon))


def test_a_source_that_raises_anything_is_noted_not_dropped() -> None:
    class Broken(NullSource):
        name = "broken"

        def counters(self) -> dict[str, float]:
            raise RuntimeError("driver went away")

        def sample(self) -> dict[str, float]:
            raise RuntimeError("driver went away")

    mon = Monitor([Broken(), _gpu(FakeNVML())], interval_s=0)
    e = mon.edge(os.getpid())
    mon._tick(1)
    notes = _done(mon)
    assert "gpu0_energy_j" in e and "gpu0_power_w" in mon.timeline[0][1]  # the other source's kept
    assert "broken counters: every edge read failed (RuntimeError: driver went away): " \
           "the windows at those edges lack its counters" in notes
    assert any(n.startswith("broken readings: every sampler read failed (RuntimeError: driver went away)")
               for n in notes)


def test_failed_sampler_reads_keep_the_rest_of_the_sample_and_are_noted() -> None:
    nv = FlakyNVML({"power1": {2, 3}})
    mon = Monitor([_gpu(nv)], interval_s=0.2)
    for tick in range(1, 5):  # ticks off the once-a-second reads
        mon._tick(tick)
    notes = _done(mon)
    rows = [row for _, row in mon.timeline]
    assert len(rows) == 4 and all("gpu0_power_w" in r and "gpu1_sm_clock_mhz" in r for r in rows)
    assert ["gpu1_power_w" in r for r in rows] == [True, False, False, True]
    (note,) = notes
    assert note.startswith("gpu1 power (NVML): 2 of 4 sampler reads failed (FakeNVMLError: Unknown Error): ")


def test_a_failed_live_timeline_update_is_noted() -> None:
    calls = []

    def sink(timeline: list[tuple[int, dict[str, float]]]) -> None:
        calls.append(len(timeline))
        if len(calls) == 2:
            raise OSError("database is locked")

    mon = Monitor([_gpu(FakeNVML())], interval_s=0.2, on_sample=sink)
    for tick in range(1, 4):
        mon._tick(tick)  # a failed update does not stop the sampling
    notes = _done(mon)
    assert calls == [1, 2, 3] and len(mon.timeline) == 3
    (note,) = notes
    assert note.startswith("live timeline: 1 of 3 updates failed (OSError: database is locked): ")
    assert "whole timeline is still stored" in note


def test_a_gpu_process_list_that_fails_says_the_check_did_not_run() -> None:
    nv = FlakyNVML({"procs1": "all"}, gpu_pids=())
    mon = Monitor([_gpu(nv)], interval_s=0.2)
    mon.pid = os.getpid()
    mon._tick(0)  # the once-a-second round: threads, memory, other GPU processes
    notes = _done(mon)
    assert mon.gpu_others == {}  # no process seen, but that is not "none there"
    assert notes == ["other GPU processes could not be listed (gpu1: FakeNVMLError: Unknown Error): "
                     "the gpu-process check did not run"]


def test_a_gpu_process_list_that_fails_at_times_says_at_which() -> None:
    nv = FlakyNVML({"procs0": {2}}, gpu_pids=())
    mon = Monitor([_gpu(nv)], interval_s=0.2)
    mon.pid = os.getpid()
    for tick in (0, 5, 10):
        mon._tick(tick)
    assert _done(mon) == ["other GPU processes could not be listed at 1 of 3 checks (gpu0: FakeNVMLError: "
                          "Unknown Error): the gpu-process check did not run at those"]


def test_a_gpu_process_list_that_raises_anything_is_noted() -> None:
    class NoList(NullSource):
        name = "odd"

        def other_processes(self, own: set[int], failures: list[str] | None = None) -> list[int]:
            raise RuntimeError("no such call")

    mon = Monitor([NoList()], interval_s=0.2)
    mon.pid = os.getpid()
    mon._tick(0)
    assert _done(mon)[-1] == ("other GPU processes could not be listed (odd: RuntimeError: no such call): "
                              "the gpu-process check did not run")


def test_a_trial_that_ended_before_the_first_gpu_process_check_says_so() -> None:
    mon = Monitor([_gpu(FakeNVML())], interval_s=0.01)
    mon.slow_every = 10**9  # the once-a-second round: only at the first tick, before the engine's pid is known
    mon.start()
    deadline = time.monotonic() + 30
    while not mon.timeline and time.monotonic() < deadline:
        time.sleep(0.01)
    assert mon.timeline  # the sampler's first tick came, with no engine yet
    mon.edge(os.getpid())  # the engine started: its edges came, the sampler never reached a check
    assert _done(mon) == ["other GPU processes were never listed (the trial ended before the first check, "
                          "taken once a second): the gpu-process check did not run"]
    mon = Monitor([_gpu(FakeNVML())], interval_s=0)  # no sampler at all
    mon.start()
    mon.edge(os.getpid())
    assert _done(mon) == ["other GPU processes were never listed (no sampler ran: a sample interval of 0): "
                          "the gpu-process check did not run"]


def test_a_healthy_monitor_has_no_failure_notes() -> None:
    mon = Monitor([_gpu(FakeNVML(gpu_pids=()))], interval_s=0.2, on_sample=lambda t: None)
    mon.edge(os.getpid())
    for tick in range(6):
        mon._tick(tick)
    mon.edge(os.getpid())
    assert _done(mon) == []


def test_doctor_says_when_the_gpu_processes_could_not_be_listed() -> None:
    from tokensleuth.drivers import machine

    def unlisted(nvml: FakeNVML) -> list[machine.Finding]:
        return [f for f in machine.gpu_checks(nvml) if f.seen.startswith("could not be listed")]

    (f,) = unlisted(FlakyNVML({"procs1": "all"}))
    assert f.name == "GPU other processes" and not f.ok and f.seen.startswith("could not be listed (gpu1: ")
    assert "nvidia-smi" in f.fix
    assert unlisted(FlakyNVML({})) == []


def test_a_cpu_package_energy_total_with_a_window_missing_is_withheld() -> None:
    from tokensleuth.analysis.results import Cell

    c = Cell("a", "m.gguf", "tg16", 0, {})
    c.windows = [{"window_s": 1.0, "tokens": 16, "cpu_pkg_energy_j": 5.0}, {"window_s": 1.0, "tokens": 16}]
    res = c.resources()
    assert res["cpu_pkg_energy_j"] is None
    assert "CPU package energy: 1 of 2 windows have no reading — the total is withheld" in res["notes"]
    c.windows[1]["cpu_pkg_energy_j"] = 4.0
    assert c.resources()["cpu_pkg_energy_j"] == 9.0
