"""Which kernel got slower: each engine's GPU kernels per token, and their diff between builds.

The op profile (drivers/slower/ops.py) times the graph through llama.cpp's eval callback, which
ends the graph at every node it observes: on a GPU that measures another program than the one
benchmarked (fusion and CUDA graphs broken up; on the 30B shape its node sums were 6x
llama-bench's ms/token). Here llama-bench itself runs, with every flag the measurement used,
under the build's kernel tracer (tokensleuth.kernels: CUPTI injected for CUDA, rocprofv3 around
it for ROCm, the perf logger for Vulkan), and the tracer's records are assigned to llama-bench's
own timed repetitions (analysis/kernels.py).

Per engine, model and workload: ``processes`` processes alternating the engines (A B, then B A),
each stored as soon as it ends (``--resume`` runs only what is missing: the study loop of
drivers/slower/loop.py, the op profile's too); a process's cold and stalled repetitions are left out
as they are of t/s. The diff takes the process as the unit.
Traced processes are processes of their own, outside any timed trial: tracing never changes a
verdict.
"""

from __future__ import annotations

import math
import tempfile
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from tokensleuth.analysis.cold import cold_leading
from tokensleuth.analysis.kernels import ProcessKernels, Window, one_token, process_kernels, whole_windows
from tokensleuth.analysis.stats import stalled_reps
from tokensleuth.analysis.traces import analyze
from tokensleuth.core.errors import EngineError, UserError
from tokensleuth.core.records import TrialOutcome
from tokensleuth.drivers.slower.loop import bench_process, run_study
from tokensleuth.engines import engine_for
from tokensleuth.engines.base import DEFAULT_KIND, ArmRuntime
from tokensleuth.kernels import Trace, Tracer, tracer_for
from tokensleuth.sources.build import EngineBuild
from tokensleuth.store import Store
from tokensleuth.trials.spec import arm_argv

# [{engine, model, workload, process, kernels, timeline, untraced_ms_per_token}]: one entry per
# process pair, a traced process and an untraced one
RUNS_STATE = "kernel-runs"
MODE = "kernels"  # how the CUDA tracer records by default (kernels/cupti.py; bench/gpu/trace_cost.py)
PROCESSES = 4
REPS = 5
Log = Callable[[str], None]


def traced(backends: Iterable[Sequence[str]]) -> bool:
    """Whether builds of these backends are profiled by their kernels (each has a GPU backend with a tracer)."""
    try:
        for b in backends:
            tracer_for(b)
    except UserError:  # a CPU build: its profile is the op profile
        return False
    return True


def check_flags(flags: Sequence[str], workloads: Sequence[str]) -> None:
    """What a traced llama-bench run cannot take, refused in one line before any build: a
    workload's flags (the workload says the test), tokensleuth's own (the engine's check), a list
    of values (more tests than the one traced), a workload llama-bench cannot run."""
    engine = engine_for(DEFAULT_KIND)
    engine.check(ArmRuntime("kernels", None, tuple(flags), {}), workloads)
    for i, f in enumerate(flags):
        name = f.split("=", 1)[0]
        if name in engine.workload_flags:
            raise UserError(f"flag {f} conflicts with --workload — a traced run takes its test from -w")
        value = f.split("=", 1)[1] if "=" in f else (flags[i + 1] if i + 1 < len(flags) and f.startswith("-")
                                                      and not flags[i + 1].startswith("-") else "")
        if f.startswith("-") and "," in value:
            raise UserError(f"{name} {value}: a list of values runs one test each — trace one value at a time")
    for w in workloads:
        if not engine.argv_for([w]):
            raise UserError(f"workload {w} cannot be traced in one llama-bench process — give pp, tg or pp+tg")


def kept_windows(outcome: TrialOutcome) -> list[Window]:
    """The process's timed repetitions that count (not cold, not stalled), as windows."""
    if not outcome.results:
        return []
    if len(outcome.results) != 1:
        raise EngineError(f"the traced llama-bench ran {len(outcome.results)} tests, not the one traced "
                          "(a flag with several values?)")
    samples = outcome.results[0].samples
    spans = {w.rep: w for w in outcome.windows if w.test_idx == outcome.results[0].test_idx}
    durations = [s.duration_ns for s in samples]
    logs = [math.log(s.tokens / (s.duration_ns / 1e9)) for s in samples if s.duration_ns > 0 and s.tokens > 0]
    cold = cold_leading([logs]).count if len(logs) == len(samples) else 0
    stalled = set(stalled_reps(durations[cold:]))
    out = []
    for i, s in enumerate(samples):
        w = spans.get(s.rep)
        if i < cold or (i - cold) in stalled or w is None:
            continue
        out.append(Window(w.start_ns, w.end_ns, s.tokens, s.duration_ns))
    return out


def _largest(traces: Sequence[Trace]) -> Trace | None:
    return max(traces, key=len) if traces else None


def untraced_process(build: EngineBuild, name: str, model: str, workload: str, flags: Sequence[str], reps: int,
                     timeout_s: float, env: Mapping[str, str]) -> float:
    """llama-bench's own ms/token over the kept repetitions of one untraced process of ``build``
    (the same argv and environment as a traced one): the program the trace explains."""
    run = bench_process(build, name, model, workload, flags, reps, timeout_s=timeout_s, env=env, what="untraced run")
    windows = kept_windows(run.outcome)
    tokens = sum(w.tokens for w in windows)
    if not tokens:
        raise EngineError(f"no timed repetition of the untraced run of {name} on {Path(model).name} {workload} was kept")
    return sum(w.bench_ns or 0 for w in windows) / tokens / 1e6


def trace_process(tracer: Tracer, build: EngineBuild, name: str, model: str, workload: str, flags: Sequence[str],
                  reps: int, timeout_s: float, env: Mapping[str, str],
                  mode: str = "kernels") -> tuple[ProcessKernels, list[list[Any]]]:
    """One llama-bench process of ``build`` under ``tracer``: its kernels over its kept repetitions,
    and one token of its middle repetition for the timeline."""
    with tempfile.TemporaryDirectory(prefix="tokensleuth-kernels-") as tmp:
        out = Path(tmp)
        run = bench_process(build, name, model, workload, flags, reps, timeout_s=timeout_s,
                            env={**env, **tracer.env(out, mode)}, wrap=tracer.prefix(out), what="traced run")
        trace = _largest(tracer.read(out, run.stderr))
    if trace is None or not len(trace):
        raise EngineError(f"the {tracer.name} tracer recorded no kernel of {name} on {Path(model).name} {workload}: "
                          "the model ran on no GPU (-ngl 0?) or the tracer was not loaded")
    windows = kept_windows(run.outcome)
    if not windows:
        raise EngineError(f"no timed repetition of {name} on {Path(model).name} {workload} had a window "
                          "(llama-bench printed no progress lines?)")
    windows, short = whole_windows(windows)
    pk = process_kernels(trace, windows)
    if short:
        pk.notes.insert(0, short)
    if pk.traced_tokens == 0:
        raise EngineError(f"no token of {name} on {Path(model).name} {workload} was traced: "
                          f"{'; '.join(pk.notes[-2:]) or 'its sampled launches fell outside the kept repetitions'} — "
                          "give --trace-mode kernels, or sample:N with a smaller N")
    if not pk.busy_ns:
        raise EngineError(f"none of the {tracer.name} tracer's {len(trace)} records of {name} fell inside a timed "
                          "repetition: its clock is not the one the repetitions were stamped with")
    return pk, one_token(trace, windows[len(windows) // 2])


@dataclass(frozen=True)
class KernelTrace:
    """Which kernel got slower (drivers.slower.Slower): a process is a traced llama-bench process
    and an untraced one, in turn first (the machine's drift on both); the sides are diffed kernel
    by kernel, against the untraced processes' ms/token."""

    builds: Mapping[str, EngineBuild]
    tracers: Mapping[str, Tracer]
    flags: Mapping[str, Sequence[str]]  # each engine's: the common flags and its own
    reps: int
    timeout_s: float
    env: Mapping[str, Mapping[str, str]]
    mode: str
    kind: ClassVar[str] = "kernels"
    runs_state: ClassVar[str] = RUNS_STATE

    def complete(self, entry: Mapping[str, Any]) -> bool:
        return "kernels" in entry and "untraced_ms_per_token" in entry  # a kernels spec is always "untraced"

    def measure(self, entry: dict[str, Any], number: int) -> Iterator[str]:
        e, m, w, i = entry["engine"], entry["model"], entry["workload"], entry["process"]
        for traced_now in ((True, False) if i % 2 == 0 else (False, True)):
            if traced_now and "kernels" not in entry:
                pk, timeline = trace_process(self.tracers[e], self.builds[e], e, m, w, self.flags[e], self.reps,
                                             self.timeout_s, self.env.get(e, {}), self.mode)
                entry.update(kernels=pk.to_state(), timeline=timeline if i == 0 else [])
                yield (f"  traced {e} {Path(m).stem} {w} #{i + 1}: {len(pk.busy_ns)} kernels, "
                       f"{pk.kernel_ms_per_token:.3f} ms/token on the GPU")
            elif not traced_now and "untraced_ms_per_token" not in entry:
                entry["untraced_ms_per_token"] = untraced_process(self.builds[e], e, m, w, self.flags[e], self.reps,
                                                                  self.timeout_s, self.env.get(e, {}))
                yield f"  untraced {e} {Path(m).stem} {w} #{i + 1}: {entry['untraced_ms_per_token']:.3f} ms/token"

    def beside(self, store: Store, sid: str, model: str, workload: str) -> None:
        return None

    def analyze(self, store: Store, sid: str, spec: Mapping[str, Any],
                runs: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        return analyze(spec, runs)


def run_kernels(store: Store, builds: Mapping[str, EngineBuild], models: Sequence[str], workloads: Sequence[str],
                flags: Sequence[str], *, processes: int = PROCESSES, reps: int = REPS, band: float = 0.02,
                timeout_s: float = 600, resume: bool = False, log: Log | None = None,
                env: Mapping[str, Mapping[str, str]] | None = None, mode: str = MODE,
                engine_flags: Mapping[str, Sequence[str]] | None = None) -> tuple[str, dict[str, Any]]:
    """Trace every engine on every model and workload, each traced process beside an untraced one
    (the ms/token the kernels explain, and what the trace costs); return (study id, its JSON).
    ``mode``: how a CUDA tracer records (kernels/cupti.py); ``engine_flags``: an engine's flags
    beside the common ``flags`` (the arms of one build that differ in their flags)."""
    tracers = {e: tracer_for(b.backends) for e, b in builds.items()}
    for t in tracers.values():
        t.ready()
    env = {e: dict(v) for e, v in (env or {}).items() if v}
    spec: dict[str, Any] = {"engines": list(builds), "models": list(models), "workloads": list(workloads),
                            "flags": list(flags), "processes": processes, "reps": reps, "band": band,
                            "builds": {e: b.key for e, b in builds.items()},
                            "tracers": {e: t.name for e, t in tracers.items()}, "untraced": True}
    if any(t.name == "cuda" for t in tracers.values()):
        spec["mode"] = mode
    if env:
        spec["env"] = env
    own = {e: list(f) for e, f in (engine_flags or {}).items() if f}
    if own:
        spec["engine_flags"] = own
    joined = {e: arm_argv(DEFAULT_KIND, flags, own.get(e, [])) for e in builds}
    argv = {e: list(j.argv) for e, j in joined.items()}
    if any(j.overrides for j in joined.values()):  # what each engine ran, where its flag overrode a common one
        spec["engine_argv"] = argv
    study = KernelTrace(builds, tracers, argv, reps, timeout_s, env, spec.get("mode", "kernels"))
    return run_study(store, study, spec, resume=resume, log=log)


