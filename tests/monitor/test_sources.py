"""Monitor sources on fixture sysfs trees and a fake NVML; attribution golden values."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.monitor.fakes import FakeNVML
from tokensleuth.monitor.amdgpu import AmdgpuSource
from tokensleuth.monitor.attribute import counter_deltas, integrate_power_j, window_resources
from tokensleuth.monitor.cpu import ProcessCpuReader, ThreadCpuReader
from tokensleuth.monitor.nvidia import NvidiaSource
from tokensleuth.monitor.rapl import RaplSource
from tokensleuth.monitor.sources import NullSource, probe_sources

S = 1_000_000_000


def _w(p: Path, text: str) -> None:
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(text)


def amd_tree(root: Path, power_file: str | None = "power1_input", busy: str = "73\n") -> Path:
    dev = root / "class" / "drm" / "card0" / "device"
    _w(dev / "gpu_busy_percent", busy)
    _w(dev / "mem_info_vram_used", str(512 << 20))
    _w(dev / "mem_info_vram_total", str(512 << 20))  # a small carve-out: an APU
    _w(dev / "mem_info_gtt_used", str(3 << 30))
    _w(dev / "pp_dpm_sclk", "0: 600Mhz\n1: 2400Mhz *\n2: 2900Mhz\n")
    if power_file:
        _w(dev / "hwmon" / "hwmon3" / power_file, "101100000\n")  # µW
    return dev


def test_amdgpu_with_only_power1_input(tmp_path: Path) -> None:
    amd_tree(tmp_path)
    (src,) = AmdgpuSource.probe(tmp_path)  # the sysfs root, with class/drm/card0/device under it
    s = src.sample()
    assert s["gpu0_power_w"] == pytest.approx(101.1)
    assert s["gpu0_busy_pct"] == 73
    assert s["gpu0_sm_clock_mhz"] == 2400  # the level marked * in pp_dpm_sclk
    assert s["gpu0_gtt_used_mb"] == 3072
    assert src.counters() == {}  # no energy1_input: energy integrates power
    assert any("whole socket" in n for n in src.notes())


def test_amdgpu_missing_and_na_files(tmp_path: Path) -> None:
    amd_tree(tmp_path, power_file=None, busy="N/A\n")
    (src,) = AmdgpuSource.probe(tmp_path)
    s = src.sample()
    assert "gpu0_power_w" not in s and "gpu0_busy_pct" not in s
    assert any("no power" in n for n in src.notes())


def test_rapl_counter_wraps(tmp_path: Path) -> None:
    z = tmp_path / "class" / "powercap" / "intel-rapl:0"
    _w(z / "max_energy_range_uj", "1000000\n")  # wraps at 1 J
    _w(z / "energy_uj", "900000\n")
    _w(tmp_path / "class" / "powercap" / "intel-rapl:0:0" / "energy_uj", "5\n")  # subzone ignored
    src = RaplSource.probe(tmp_path)
    assert src is not None and len(src.zones) == 1
    a = src.counters()
    _w(z / "energy_uj", "100000\n")  # wrapped: +0.2 J
    b = src.counters()
    assert b["cpu_pkg_energy_j"] - a["cpu_pkg_energy_j"] == pytest.approx(0.2)


def test_nvml_counter_and_integral_agree_on_constant_power() -> None:
    """Golden: constant 100 W for 10 s is 1000 J by counter and by integration."""
    clock = [0.0]
    nv = FakeNVML(power_w=100.0, clock=lambda: clock[0])
    src = NvidiaSource.probe(nv)
    assert src is not None
    start = src.counters()
    timeline = []
    for i in range(0, 51):  # a sample every 0.2 s for 10 s
        clock[0] = i * 0.2
        timeline.append((int(i * 0.2 * S), src.sample()))
    end = src.counters()
    d = counter_deltas(start, end)
    assert d["gpu0_energy_j"] == pytest.approx(1000.0)
    assert integrate_power_j(timeline, "gpu0_power_w", 0, 10 * S) == pytest.approx(1000.0)
    r = window_resources(0, 10 * S, d, timeline)
    assert r["gpu_energy_counter_j"] == pytest.approx(1000.0)
    assert r["gpu_energy_integral_j"] == pytest.approx(1000.0)
    assert r["power_w"] == pytest.approx(100.0) and r["sm_clock_mhz"] == 1980 and r["busy_pct"] == 87
    assert not r["short_window"]
    assert src.other_processes({1}) == [4242]
    assert src.info()["devices"][0]["name"] == "Fake H200"
    # the roofline's peak: 6016-bit bus x 3201 MHz x 2 (double data rate) / 8 = 4814.3 GB/s
    assert src.info()["devices"][0]["peak_mem_gbs"] == 4814.3


def test_nvml_without_energy_counter_falls_back_to_integral() -> None:
    src = NvidiaSource.probe(FakeNVML(energy=False))
    assert src is not None and src.counters() == {}
    assert any("integrates" in n for n in src.notes())
    r = window_resources(0, 2 * S, {}, [(0, {"gpu0_power_w": 50.0}), (2 * S, {"gpu0_power_w": 50.0})])
    assert r["gpu_energy_counter_j"] is None and r["gpu_energy_integral_j"] == pytest.approx(100.0)
    assert r["short_window"] is False


def test_short_window_flagged() -> None:
    r = window_resources(0, S // 2, {}, [(0, {"gpu0_power_w": 50.0})])
    assert r["short_window"] is True


def test_probe_without_hardware_is_null(tmp_path: Path) -> None:
    class NoNVML:
        class NVMLError(Exception):
            pass

        def nvmlInit(self) -> None:
            raise self.NVMLError("driver not loaded")

    found = probe_sources(str(tmp_path), nvml=NoNVML())
    assert len(found) == 1 and isinstance(found[0], NullSource)
    assert found[0].counters() == {} and found[0].notes()


def test_schedstat_fixture(tmp_path: Path) -> None:
    _w(tmp_path / "77" / "task" / "77" / "schedstat", "1500000000 20 30\n")
    _w(tmp_path / "77" / "task" / "78" / "schedstat", "500000000 1 2\n")
    r = ThreadCpuReader(77, tmp_path)
    assert r.read_ns() == 2_000_000_000
    # a thread that exits keeps its time in the total
    (tmp_path / "77" / "task" / "78" / "schedstat").unlink()
    (tmp_path / "77" / "task" / "78").rmdir()
    assert r.read_ns() == 2_000_000_000
    r.close()
    assert ThreadCpuReader(12345, tmp_path).read_ns() is None


@pytest.mark.parametrize("reader", [ThreadCpuReader, ProcessCpuReader])
def test_busy_and_idle_children_cpu(reader: type[ThreadCpuReader] | type[ProcessCpuReader]) -> None:
    """Ground truth: a busy-looping child's CPU agrees with the kernel's own accounting (/proc/PID/stat,
    through psutil), a sleeping child uses ~0. How much of a core the busy child gets depends on what
    else runs here (0.66 under load, which failed a 1.0 +- 0.25 bound): the reading must match it."""
    import subprocess
    import time

    import psutil

    busy = subprocess.Popen(["python3", "-c", "import time\nt=time.time()\nwhile time.time()-t<1.5: pass"])
    idle = subprocess.Popen(["sleep", "1.5"])
    time.sleep(0.2)
    rb, ri = reader(busy.pid), reader(idle.pid)
    pb = psutil.Process(busy.pid)
    # the kernel's totals bracket the reader's: read before and after each of its reads, so
    # the bounds hold however long this process waits between two reads on a loaded machine
    k0 = sum(pb.cpu_times()[:2])
    b0, i0, t0 = (rb.read_ns() or 0) / 1e9, (ri.read_ns() or 0) / 1e9, time.monotonic()
    k0_after = sum(pb.cpu_times()[:2])
    time.sleep(1.0)
    k1_before = sum(pb.cpu_times()[:2])
    b1, i1, t1 = (rb.read_ns() or 0) / 1e9, (ri.read_ns() or 0) / 1e9, time.monotonic()
    k1 = sum(pb.cpu_times()[:2])
    rb.close()
    ri.close()
    busy.wait()
    idle.wait()
    assert k1 - k0 > 0.05  # it ran
    tick = 0.02  # the kernel's totals count in 10 ms ticks, at each end
    assert k1_before - k0_after - tick <= b1 - b0 <= k1 - k0 + tick
    assert (i1 - i0) / (t1 - t0) < 0.05


def test_process_clock_matches_schedstat_and_keeps_exited_threads(tmp_path: Path) -> None:
    import subprocess
    import time

    import psutil

    # two busy threads for 0.6 s that then exit, the main thread sleeping on
    code = ("import threading, time\n"
            "def f():\n    t = time.time()\n    while time.time() - t < 0.6: pass\n"
            "ts = [threading.Thread(target=f) for _ in range(2)]\n[t.start() for t in ts]\n"
            "[t.join() for t in ts]\ntime.sleep(3)\n")
    child = subprocess.Popen(["python3", "-c", code])
    try:
        time.sleep(0.3)
        clock, walk = ProcessCpuReader(child.pid), ThreadCpuReader(child.pid)
        assert clock.fallback is None  # the clock is readable here: no directory walk
        a, b, a2 = clock.read_ns(), walk.read_ns(), clock.read_ns()
        # the same runtime: the walk's reading lies between two of the clock's around it
        assert a is not None and b is not None and a2 is not None
        assert a - 1_000_000 <= b <= a2 + 1_000_000
        time.sleep(1.2)  # the busy threads have exited by now
        c = clock.read_ns()
        kernel = sum(psutil.Process(child.pid).cpu_times()[:2])  # exited threads included
        # their CPU (up to ~0.6 s: the GIL lets one run at a time; less on a busy machine) is still
        # counted after they exited: the clock agrees with the kernel's total, not the live threads'
        assert kernel > 0.05
        assert c is not None and c >= a and c / 1e9 == pytest.approx(kernel, abs=0.03)
        clock.close()
        walk.close()
    finally:
        child.kill()
        child.wait()
    assert ProcessCpuReader(child.pid).read_ns() is None  # gone
    # where the clock cannot be read, the schedstat walk answers (here: a fixture tree)
    _w(tmp_path / "4000001" / "task" / "4000001" / "schedstat", "700 1 2\n")
    r = ProcessCpuReader(4_000_001, tmp_path)
    assert r.fallback is not None and r.read_ns() == 700


def test_spinning_threads_rule() -> None:
    from tokensleuth.monitor.cpu import spinning_threads

    a = {1: ("main", 0, 100), 2: ("worker", 0, 100), 3: ("idle", 0, 0)}
    b = {1: ("main", 2_000_000_000, 100), 2: ("worker", 2_000_000_000, 5000), 3: ("idle", 1_000_000, 10)}
    spin = spinning_threads(a, b, 2.0)
    # busy and never blocking: spinning; busy but blocking 2450 times/s: working; idle: neither
    assert [t["name"] for t in spin] == ["main"]
    assert spin[0]["cores"] == 1.0


def test_thread_stats_and_memory_fixture(tmp_path: Path) -> None:
    from tokensleuth.monitor.cpu import memory_mb, thread_stats

    _w(tmp_path / "9" / "task" / "9" / "schedstat", "3000 1 1\n")
    _w(tmp_path / "9" / "task" / "9" / "status", "Name:\tllama-bench\nvoluntary_ctxt_switches:\t42\n")
    _w(tmp_path / "9" / "status", "VmRSS:\t 4096 kB\nRssAnon:\t 1024 kB\nRssFile:\t 3072 kB\n")
    assert thread_stats(9, tmp_path) == {9: ("llama-bench", 3000, 42)}
    assert memory_mb(9, tmp_path) == {"VmRSS": 4.0, "RssAnon": 1.0, "RssFile": 3.0}


def test_cgroup_cpu_v2_and_v1(tmp_path: Path) -> None:
    from tokensleuth.monitor.cpu import cgroup_cpu_s, cgroup_of

    _w(tmp_path / "proc" / "5" / "cgroup", "0::/system.slice/docker-abc.scope\n")
    _w(tmp_path / "proc" / "6" / "cgroup", "4:memory:/x\n2:cpu,cpuacct:/docker/def\n")
    assert cgroup_of(5, tmp_path / "proc") == "/system.slice/docker-abc.scope"
    assert cgroup_of(6, tmp_path / "proc") == "/docker/def"
    root = tmp_path / "cg"
    _w(root / "system.slice" / "docker-abc.scope" / "cpu.stat", "usage_usec 2500000\nuser_usec 2000000\n")
    _w(root / "cpu,cpuacct" / "docker" / "def" / "cpuacct.usage", "1500000000\n")
    assert cgroup_cpu_s("/system.slice/docker-abc.scope", root) == pytest.approx(2.5)
    assert cgroup_cpu_s("/docker/def", root) == pytest.approx(1.5)
    assert cgroup_cpu_s("/nope", root) is None


def test_gpu_clock_drift_between_arms_is_a_warning() -> None:
    from tokensleuth.drivers.verdicts.comparisons import Comparison

    c = Comparison("m", "tg128", "a", "b", 5, [], [], None, "unresolved",
                   base_res={"gpu_clock_mhz": 1980.0}, cand_res={"gpu_clock_mhz": 1800.0})
    assert c.warnings() and "gpu-clock-drift" in c.warnings()[0]
    c.cand_res = {"gpu_clock_mhz": 1950.0}
    assert c.warnings() == []


def test_monitor_edges_never_interleave() -> None:
    """Two readers' edges at once: a source's counters() (RAPL wrap tracking) is never entered twice."""
    import os
    import threading
    import time

    from tokensleuth.monitor.sampler import Monitor

    class Slow(NullSource):
        name = "slow"

        def __init__(self) -> None:
            super().__init__()
            self.active = self.most = 0

        def counters(self) -> dict[str, float]:
            self.active += 1
            self.most = max(self.most, self.active)
            time.sleep(0.002)
            self.active -= 1
            return {"x_energy_j": 1.0}

    src = Slow()
    mon = Monitor([src], interval_s=0)
    threads = [threading.Thread(target=lambda: [mon.edge(os.getpid()) for _ in range(20)]) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    mon.stop()
    assert src.most == 1
