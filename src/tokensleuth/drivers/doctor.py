"""The doctor command (``run_doctor``): the machine's checks (``machine.py``), the engine's
(its model's memory and flags), and on request a short A/A run that measures this machine's
noise and the pairs a verdict would need, with the threads advice measured, not guessed.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tokensleuth.drivers.machine import Finding, checks

if TYPE_CHECKING:
    from tokensleuth.engines.base import Engine


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


def run_aa(build: Any, model: Path, flags: Sequence[str] = ()) -> AA:
    """The engine against itself, AA_PAIRS pairs of tg32 at -r 3 with the user's ``flags``, in a
    throw-away store."""
    import math
    import tempfile

    import numpy as np

    from tokensleuth.analysis import noise, stats
    from tokensleuth.drivers.verdicts import causes, diagnose
    from tokensleuth.drivers.verdicts.pairs import run_compare
    from tokensleuth.engines.base import DEFAULT_KIND
    from tokensleuth.store import Store
    from tokensleuth.trials.spec import arm_argv, build_compare_spec, model_paths

    three = aa_engine().argv_for([], 3) or []  # 3 repetitions per process
    spec = build_compare_spec({"arms": [{"name": "a", "source": build.source}, {"name": "b", "source": build.source}],
                               "models": model_paths([model]), "workloads": ["tg32"], "min_pairs": AA_PAIRS,
                               "max_pairs": AA_PAIRS, "band": 0.001,
                               "common_flags": list(arm_argv(DEFAULT_KIND, three, flags).argv)}, "doctor")
    with tempfile.TemporaryDirectory() as td, Store(Path(td) / "aa.sqlite") as store:
        sid, comps = run_compare(store, spec, {"a": build, "b": build})
        n = noise.estimate(store, sid)
        d = causes.classify(diagnose.load_procs(store, sid), diagnose.allowed_cpus())
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
    from tokensleuth.engines.base import DEFAULT_KIND
    from tokensleuth.trials.spec import arm_argv

    named = got.diagnosis is None or "threads" in got.diagnosis.codes()
    if got.threads is None or cpus < 2 or got.threads < cpus or not named:
        return None
    fewer = got.threads - 1
    fewer_flags = aa_engine().with_threads([], fewer)
    if fewer_flags is None:
        return None
    if log:
        log(f"A/A again at {' '.join(fewer_flags)} (the engine's default, {got.threads}, uses every CPU) …")
    alt = run_aa(build, model, list(arm_argv(DEFAULT_KIND, flags, fewer_flags).argv))  # (its -t over the user's)
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
    from tokensleuth.drivers.verdicts.diagnose import allowed_cpus

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
