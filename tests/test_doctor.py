"""doctor: each check on a fixture /sys and /proc tree (noisy and quiet), the one line compare
prints, the pairs a verdict needs, and the real command with its A/A run."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.conftest import tokensleuth_bin
from tokensleuth.analysis import stats
from tokensleuth.drivers import doctor, machine
from tokensleuth.drivers.verdicts.diagnose import allowed_cpus
from tokensleuth.sources.build import EngineBuild


def tree(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text + "\n")
    return root


def noisy(tmp_path: Path) -> tuple[Path, Path]:
    sys_root = tree(tmp_path / "sys", {
        "devices/system/cpu/cpu0/cpufreq/scaling_governor": "powersave",
        "devices/system/cpu/cpu1/cpufreq/scaling_governor": "performance",
        "devices/system/cpu/cpufreq/boost": "1",
        "devices/system/cpu/smt/active": "1",
        "kernel/mm/transparent_hugepage/enabled": "[always] madvise never",
        "class/thermal/thermal_zone0/temp": "91000",
    })
    proc_root = tree(tmp_path / "proc", {"sys/kernel/randomize_va_space": "2"})
    return sys_root, proc_root


def test_a_noisy_machine_is_named_check_by_check(tmp_path: Path) -> None:
    found = {f.name: f for f in machine.cpu_checks(*noisy(tmp_path))}
    assert not found["governor"].ok and found["governor"].seen == "performance, powersave"
    assert "cpupower frequency-set -g performance" in found["governor"].fix
    assert not found["boost"].ok and found["boost"].seen == "on"
    assert not found["THP"].ok and found["THP"].seen == "always"
    assert not found["temperature"].ok and found["temperature"].seen.startswith("91")
    assert found["SMT"].ok and found["ASLR"].ok and found["ASLR"].seen == "on"  # notes, not faults
    line = machine.summary_line(list(found.values()))
    assert line is not None and line.startswith("doctor: governor performance, powersave; boost on; THP always")


def test_a_quiet_machine_says_nothing(tmp_path: Path) -> None:
    sys_root = tree(tmp_path / "sys", {
        "devices/system/cpu/cpu0/cpufreq/scaling_governor": "performance",
        "devices/system/cpu/intel_pstate/no_turbo": "1",
        "kernel/mm/transparent_hugepage/enabled": "always [madvise] never",
        "class/thermal/thermal_zone0/temp": "45000",
    })
    found = machine.cpu_checks(sys_root, tmp_path / "proc")
    assert all(f.ok for f in found), found
    assert machine.summary_line(found) is None


def test_gpu_checks_on_the_fake_nvml() -> None:
    from tests.monitor.fakes import FakeNVML

    found = {f.name: f for f in machine.gpu_checks(FakeNVML(gpu_pids=(4242,)))}
    assert found["GPU0 clock"].seen == "SM 1980 of 1980 MHz now"
    assert not found["GPU other processes"].ok and "4242" in found["GPU other processes"].seen


class _NoNVML:
    """An NVML whose library is not there (NVMLError_LibraryNotFound at init)."""

    def nvmlInit(self) -> None:
        raise RuntimeError("NVML Shared Library Not Found")


def test_the_engines_own_devices_are_checked(dense_model: Path) -> None:
    from tests.monitor.fakes import FakeNVML
    from tokensleuth.trials.memory_free import Free

    (gpu,) = doctor.engine_checks(["CUDA"], [], [], nvml=_NoNVML())
    assert not gpu.ok and "built for CUDA but NVML answers nothing" in gpu.seen and "libnvidia-ml" in gpu.fix
    assert doctor.engine_checks(["CUDA"], [], [], nvml=FakeNVML()) == []  # read: gpu_checks has its clocks
    assert doctor.engine_checks(["CPU"], [], []) == []
    # the model's headroom, as the memory guard predicts it for the flags given
    (fits,) = doctor.engine_checks(["CPU"], [dense_model], ["-t", "1"], free=Free(8e9, None))
    assert fits.ok and fits.seen.startswith("host 0.") and fits.seen.endswith("of 8.0 GB free")
    (full,) = doctor.engine_checks(["CPU"], [dense_model], ["-t", "1"], free=Free(1e6, None))
    assert not full.ok and "it would not fit" in full.fix


def test_a_probe_is_advised_only_beyond_its_own_noise() -> None:
    # 8 pairs each: an SD 0.58x the default's is a gain (interval below 1); 1.72x or 0.8x is not
    assert doctor.sd_ratio(0.01, 8, 0.03, 8).helps
    g = doctor.sd_ratio(0.0211, 8, 0.0122, 8)  # the doctor run of this machine above: 1.72x
    assert not g.helps and g.lo < 1 < g.hi and g.ratio == pytest.approx(1.7295, rel=1e-3)
    assert not doctor.sd_ratio(0.008, 8, 0.010, 8).helps
    assert doctor.sd_ratio(0.008, 200, 0.010, 200).helps  # the same ratio, measured well enough


def test_pairs_needed_follow_the_noise() -> None:
    need = stats.pairs_needed(0.02)
    assert need[0.05] is not None and need[0.02] is not None and need[0.01] is not None
    assert need[0.05] < need[0.02] < need[0.01]
    # 99% t interval: t(0.995, n-1) * 0.02 / sqrt(n) < 0.05 first holds at n = 5 (4.60 * 0.02 / 2.24)
    assert need[0.05] == 5
    assert stats.pairs_needed(0.5, limit=50)[0.01] is None


def test_doctor_command_runs_its_checks_and_an_aa(engine: EngineBuild, cli_env: dict[str, str]) -> None:
    # a guard against a hang, not a bound: beside a busy core the A/A at every CPU's threads
    # stalls at ggml's barrier, and this run took 255 s once (bench/results/suite_busy_stop40.txt)
    p = subprocess.run([tokensleuth_bin(), "doctor"], env=cli_env, capture_output=True, text=True, timeout=1200)
    assert p.returncode == 0, p.stderr[-2000:]
    for name in ("ASLR", "THP", "other processes", "swap", "memory"):
        assert name in p.stdout
    assert "noise here:" in p.stdout and "pairs a verdict needs here: ±1%" in p.stdout
    assert "diagnosis: " in p.stdout  # the A/A's own processes, classified as a study's would be
    threads = int(p.stdout.split("A/A at ", 1)[1].split(" thread", 1)[0])  # llama-bench's default here
    cpus = allowed_cpus()
    if cpus >= 2 and threads >= cpus:  # every CPU: the A/A again with one thread fewer, both figures
        assert f"A/A at {threads - 1} thread" in p.stdout
        assert f"threads: -t {threads - 1} needs " in p.stdout and "pairs for ±2% where the default needs" in p.stdout
    else:
        assert "threads: -t" not in p.stdout


def test_doctor_measures_the_engine_model_and_flags_given(engine: EngineBuild, dense_model: Path,
                                                          cli_env: dict[str, str]) -> None:
    p = subprocess.run([tokensleuth_bin(), "doctor", "--model", str(dense_model), "--", "-t", "1"], env=cli_env,
                       capture_output=True, text=True, timeout=1200)  # (a hang guard)
    assert p.returncode == 0, p.stderr[-2000:]
    assert f"memory ({dense_model.name})" in p.stdout and "GB free" in p.stdout
    assert f"against itself on {dense_model.name}" in p.stderr
    assert "A/A at 1 thread: 8 pairs" in p.stdout  # the user's -t 1, not llama-bench's default
    assert "threads: -t" not in p.stdout  # one thread does not use every CPU: nothing to probe
    bad = subprocess.run([tokensleuth_bin(), "doctor", "--model", "/no/such.gguf"], env=cli_env,
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and bad.stderr.strip().startswith("error: --model /no/such.gguf: no such file")


def test_the_exit_drain_is_reported_with_its_fix(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from tokensleuth.engines import exitdrain

    (built,) = machine.drain_checks()
    assert built.ok and built.seen.endswith(".so"), built
    monkeypatch.setenv("TOKENSLEUTH_CACHE", str(tmp_path))
    monkeypatch.setattr(exitdrain, "_compiler", lambda: None)
    (missing,) = machine.drain_checks()
    assert not missing.ok and "no C compiler" in missing.seen and "install a C compiler" in missing.fix
