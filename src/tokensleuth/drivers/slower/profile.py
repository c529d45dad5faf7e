"""profile's request run to its study: GPU builds traced by their kernels (llama-bench as measured,
every flag), CPU builds (or ``by="ops"``) timed op by op through the profiler built with them."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from tokensleuth.core.errors import UserError
from tokensleuth.drivers import shared
from tokensleuth.drivers.requests import Say
from tokensleuth.drivers.slower import kernels, slower_for
from tokensleuth.drivers.slower import ops as profile
from tokensleuth.engines import profiler
from tokensleuth.kernels import tracer_for
from tokensleuth.sources import parse_source
from tokensleuth.sources.build import DEFAULT_TARGETS, backends_from_flags, backends_in
from tokensleuth.sources.profiler import TARGET
from tokensleuth.trials.memory import guard


@dataclass(frozen=True, slots=True)
class ProfileRequest:
    engines: Mapping[str, str]  # name -> source (the first is the diff's baseline)
    env: Mapping[str, Mapping[str, str]]
    models: Sequence[str]
    workloads: Sequence[str]
    flags: Sequence[str]
    cmake: Sequence[str] = ()
    processes: int = profile.PROCESSES
    reps: int = 3
    band: float = 0.02
    groups: bool = False
    by: str = "auto"  # kernels | ops | auto (kernels on a GPU build)
    timeout_s: float = 600
    resume: bool = False
    db: Path | None = None
    trace_mode: str | None = None  # how a CUDA build is traced (kernels/cupti.py); None: the default


def expected_backends(source: str, cmake: Sequence[str]) -> tuple[str, ...]:
    """The backends a source's build will have: a prebuilt folder's libraries, else the CMake flags."""
    src = parse_source(source)
    return backends_in(src.path) if src.kind == "bin" and src.path else backends_from_flags(cmake)


def run(request: ProfileRequest, say: Say) -> tuple[str, str]:
    """Profile the request's engines; returns (study kind, study id)."""
    if request.trace_mode is not None:
        from tokensleuth.kernels.cupti import check_mode

        check_mode(request.trace_mode, kernels=True)  # before any build
    backends = [expected_backends(s, request.cmake) for s in request.engines.values()]
    traced = slower_for(backends, request.by) == "kernels"  # before any build: by kernels needs a tracer
    if traced:  # before any build: the flags, the workloads, the tracer's own parts (CUPTI, rocprofv3)
        kernels.check_flags(request.flags, request.workloads)
        for expected in backends:
            tracer_for(expected).ready()
        flags = list(request.flags)
        if request.groups:
            say.line("--groups is the op profile's: a kernel trace sees the kernels as they ran")
    else:
        flags = profiler.check_flags(request.flags)
        for w in request.workloads:
            profiler.workload_args(w)
    targets = DEFAULT_TARGETS if traced else (*DEFAULT_TARGETS, TARGET)
    builds = {n: shared.build(s, request.cmake, targets, say) for n, s in request.engines.items()}
    built = slower_for((b.backends for b in builds.values()), "ops" if request.by == "ops" else "auto")
    if traced != (built == "kernels"):
        raise UserError("a build's backends are not the ones its CMake flags or folder said (no GPU library in it?) "
                        "— give --by ops or --by kernels with a GPU build")
    for b in builds.values():
        guard(list(request.models), flags, list(request.workloads), b.backends, warn=say.line)
    with shared.open_store(request.db) as store:
        if traced:
            reps = max(request.reps, kernels.REPS)
            if reps != request.reps:
                say.line(f"{reps} repetitions per traced process (cold and stalled ones are left out)")
            sid, _ = kernels.run_kernels(store, builds, request.models, request.workloads, flags,
                                         processes=request.processes, reps=reps,
                                         band=request.band, timeout_s=request.timeout_s, resume=request.resume,
                                         log=say.line, env=request.env, mode=request.trace_mode or kernels.MODE)
            return "kernels", sid
        sid, _ = profile.run_profile(store, builds, request.models, request.workloads, flags,
                                     processes=request.processes, reps=request.reps, band=request.band,
                                     timeout_s=request.timeout_s, resume=request.resume, log=say.line,
                                     groups=request.groups, env=request.env)
        return "profile", sid
