"""What will make measurements noisy on this machine, each with its fix — and, on request,
a short A/A run that measures this machine's noise and the pairs a verdict would need.

The checks read ``/sys`` and ``/proc`` (injectable roots, tested on fixture trees), psutil
and NVML; none needs root. ``summary_line`` is what compare and bisect print at start when
a check finds something.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import psutil

from tokensleuth.core.hostenv import read_value

if TYPE_CHECKING:
    from tokensleuth.engines.base import Engine


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


def engine_checks(backends: Sequence[str], models: Sequence[Path], flags: Sequence[str],
                  nvml: Any | None = None, free: Any = None) -> list[Finding]:
    """The devices the engine being measured runs on: a GPU build whose GPU cannot be read is a
    finding, and each model's memory headroom, as the memory guard predicts it for these flags."""
    from tokensleuth.engines.placement import GPU_BACKENDS
    from tokensleuth.monitor.nvidia import NvidiaSource
    from tokensleuth.trials import memory, memory_free

    out: list[Finding] = []
    gpu = [b for b in backends if b in GPU_BACKENDS]
    if "CUDA" in gpu and NvidiaSource.probe(nvml) is None:
        out.append(Finding("GPU", False, "the engine is built for CUDA but NVML answers nothing",
                           "install the NVIDIA driver's NVML (libnvidia-ml): without it no GPU clock, power, "
                           "persistence or other-process check runs, and no J/token is measured"))
    elif gpu and "CUDA" not in gpu:
        out.append(Finding("GPU", True, f"{', '.join(gpu)} build: clocks and other processes are checked for "
                           "NVIDIA GPUs only", ""))
    if not models:
        return out
    s = aa_engine().guard(flags, memory.tests_of([]))
    if s is None:
        return out
    if free is None:
        h, hs = memory_free.host_free()
        g, gs = memory_free.gpu_free(nvml) if gpu else (None, "")
        free = memory_free.Free(h, g, (hs, gs))
    for m in models:
        need = memory.predict(m, s, bool(gpu))
        v = memory.judge(m, need, free, s)
        have = {"host": free.host, "gpu": free.gpu}
        seen = ", ".join(f"{where} {need.guarded(where, bool(gpu)) / 1e9:.1f} of {have[where] / 1e9:.1f} GB free"
                         for where in need.places() if have.get(where) is not None)
        out.append(Finding(f"memory ({m.name})", v.ok and not v.line, seen or "no free memory reading",
                           v.line or "it fits with room"))
    return out


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


AA_PAIRS = 8
ADVICE_CONFIDENCE = 0.95  # the interval a probe's gain must clear before doctor advises it


@dataclass(frozen=True, slots=True)
class Gain:
    """How much less noisy a probed setting was than the default: the ratio of the two A/As'
    SDs of a pair's log ratio, with its interval (an F distribution: each A/A's pairs are
    independent processes)."""

    ratio: float
    lo: float
    hi: float

    @property
    def helps(self) -> bool:
        return self.hi < 1.0


def sd_ratio(sd_new: float, n_new: int, sd_old: float, n_old: int, confidence: float = ADVICE_CONFIDENCE) -> Gain:
    """sd_new / sd_old with its ``confidence`` interval (F test on the two variances)."""
    from scipy import stats as sps

    r = (sd_new / sd_old) ** 2
    a = (1 - confidence) / 2
    lo = r / float(sps.f.ppf(1 - a, n_new - 1, n_old - 1))
    hi = r / float(sps.f.ppf(a, n_new - 1, n_old - 1))
    return Gain(r ** 0.5, lo ** 0.5, hi ** 0.5)


@dataclass(frozen=True, slots=True)
class AA:
    """The short A/A run: this machine's noise and what a verdict would cost here."""

    pairs: int
    log_ratio_sd: float
    noise: Any  # noise.Noise | None
    pairs_needed: dict[float, int | None]
    threads: int | None = None  # the engine threads the A/A ran (llama-bench's own default unless given)
    diagnosis: Any = None  # diagnose.Diagnosis of its processes

    def line(self) -> str:
        t = f" at {self.threads} thread{'s' if self.threads != 1 else ''}" if self.threads else ""
        return (f"A/A{t}: {self.pairs} pairs, a pair's log ratio varies by {self.log_ratio_sd:.2%} (SD); pairs a "
                "verdict needs here: " + ", ".join(f"±{band:.0%} {v if v is not None else '> 10000'}"
                                                   for band, v in self.pairs_needed.items()))


def aa_engine() -> Engine:
    """The engine the doctor measures: its A/A's arms name no kind, so the default kind's (whose
    flags the checks read and whose threads the advice sets)."""
    from tokensleuth.engines import engine_for
    from tokensleuth.engines.base import DEFAULT_KIND

    return engine_for(DEFAULT_KIND)


def run_aa(build: Any, model: Path, flags: Sequence[str] = ()) -> AA:
    """The engine against itself, AA_PAIRS pairs of tg32 at -r 3 with the user's ``flags``, in a
    throw-away store."""
    import math
    import tempfile

    import numpy as np

    from tokensleuth.analysis import noise, stats
    from tokensleuth.drivers import diagnose
    from tokensleuth.drivers.compare import run_compare
    from tokensleuth.store import Store
    from tokensleuth.trials.spec import build_compare_spec, model_paths

    three = aa_engine().argv_for([], 3) or []  # 3 repetitions per process
    spec = build_compare_spec({"arms": [{"name": "a", "source": build.source}, {"name": "b", "source": build.source}],
                               "models": model_paths([model]), "workloads": ["tg32"], "min_pairs": AA_PAIRS,
                               "max_pairs": AA_PAIRS, "band": 0.001,
                               "common_flags": list(aa_engine().join_flags(three, flags).argv)}, "doctor")
    with tempfile.TemporaryDirectory() as td, Store(Path(td) / "aa.sqlite") as store:
        sid, comps = run_compare(store, spec, {"a": build, "b": build})
        n = noise.estimate(store, sid)
        d = diagnose.classify(diagnose.load_procs(store, sid), diagnose.allowed_cpus())
    c = comps[0]
    logs = [math.log(y / x) for x, y in zip(c.base_ts, c.cand_ts, strict=True)]
    sd = float(np.std(logs, ddof=1)) if len(logs) > 1 else float("nan")
    return AA(len(logs), sd, n, stats.pairs_needed(sd), d.threads, d)


@dataclass(frozen=True, slots=True)
class ThreadsAdvice:
    """The same A/A at one thread fewer, and whether its spread is lower beyond the two runs' noise."""

    fewer: int
    aa: AA
    gain: Gain
    now: int | None  # pairs the default needs for ±2%
    then: int | None  # ... and one thread fewer

    def line(self) -> str:
        g = self.gain
        return (f"threads: -t {self.fewer} needs {self.then if self.then is not None else '> 10000'} pairs for ±2% "
                f"where the default needs {self.now if self.now is not None else '> 10000'}; its SD is "
                f"{g.ratio:.2f}x the default's [{g.lo:.2f}, {g.hi:.2f}] ({ADVICE_CONFIDENCE:.0%}) — "
                + (f"measure with `-- -t {self.fewer}`" if g.helps else
                   "keep the default (no gain beyond the probes' own noise)"))


def threads_advice(build: Any, model: Path, flags: Sequence[str], got: AA, cpus: int,
                   log: Any = None) -> ThreadsAdvice | None:
    """Where the engine would use every CPU and the diagnosis names its threads (not on a full GPU
    offload, where they mostly wait on the GPU): the same A/A with one thread fewer, measured,
    not guessed; advised only when its SD is lower beyond the two probes' own noise."""
    named = got.diagnosis is None or "threads" in got.diagnosis.codes()
    if got.threads is None or cpus < 2 or got.threads < cpus or not named:
        return None
    fewer = got.threads - 1
    fewer_flags = aa_engine().with_threads([], fewer)
    if fewer_flags is None:
        return None
    if log:
        log(f"A/A again at {' '.join(fewer_flags)} (the engine's default, {got.threads}, uses every CPU) …")
    alt = run_aa(build, model, list(aa_engine().join_flags(flags, fewer_flags).argv))  # (its -t over the user's)
    return ThreadsAdvice(fewer, alt, sd_ratio(alt.log_ratio_sd, alt.pairs, got.log_ratio_sd, got.pairs),
                         got.pairs_needed.get(0.02), alt.pairs_needed.get(0.02))


def tiny_model(get_build: Any = None) -> Path:
    """The A/A's default model: a tiny synthetic one, made once with the default engine's tools
    (``get_build(source, cmake)`` builds that engine: the command's, which shows progress)."""
    from tokensleuth.core.paths import cache_dir
    from tokensleuth.models.synth import synth
    from tokensleuth.sources import DEFAULT_ENGINE
    from tokensleuth.sources.build import BuildCache

    cache = BuildCache()
    d = (get_build or cache.get)(DEFAULT_ENGINE, [])  # the tokenizer's tree: the default engine's
    model = cache_dir() / "doctor" / f"{d.key}-llama-tiny-Q8_0.gguf"
    if not model.exists():
        model.parent.mkdir(parents=True, exist_ok=True)
        synth("llama", "tiny", model, "Q8_0", cache.llama_tree(DEFAULT_ENGINE), Path(d.bin_dir) / "llama-quantize")
    return model


@dataclass(slots=True)
class Report:
    """What doctor found, step by step: the checks, then (when asked) the A/A and the threads advice."""

    checks: list[Finding]
    aa: AA | None = None
    threads: ThreadsAdvice | None = None


def run_doctor(source: str, cmake: Sequence[str], model: Path | None, flags: Sequence[str], *, aa: bool,
               engine: bool, get_build: Any, show: Any, log: Any) -> Report:
    """The checks, the engine's checks (``engine``: the engine was named, or is needed), then the
    A/A and the threads advice; ``show(report)`` is called after each step (the command renders
    what is there so far), ``log`` says what runs."""
    from tokensleuth.core.errors import UserError
    from tokensleuth.drivers.diagnose import allowed_cpus

    rep = Report(checks())
    b = get_build(source, list(cmake)) if aa or engine else None
    if b is not None:
        rep.checks += engine_checks(b.backends, [model] if model else [], flags)
    show(rep)
    if not aa or b is None:
        return rep
    if any(not f.ok and f.name.startswith("memory (") for f in rep.checks):
        raise UserError("the model does not fit with these flags (above): no A/A run — fix that first")
    model = model or tiny_model(get_build)
    log(f"A/A: {source} against itself on {model.name}, {AA_PAIRS} pairs of tg32 …")
    rep.aa = run_aa(b, model, flags)
    show(rep)
    rep.threads = threads_advice(b, model, flags, rep.aa, allowed_cpus(), log=log)
    if rep.threads is not None:
        show(rep)
    return rep
