"""profile's request run to its study: GPU builds traced by their kernels (llama-bench as measured,
every flag), CPU builds (or ``by="ops"``) timed op by op through the profiler built with them."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from tokensleuth.drivers import kernels, profile, shared
from tokensleuth.drivers.requests import Say
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


def expected_backends(source: str, cmake: Sequence[str]) -> tuple[str, ...]:
    """The backends a source's build will have: a prebuilt folder's libraries, else the CMake flags."""
    src = parse_source(source)
    return backends_in(src.path) if src.kind == "bin" and src.path else backends_from_flags(cmake)


def run(request: ProfileRequest, say: Say) -> tuple[str, str]:
    """Profile the request's engines; returns (study kind, study id)."""
    backends = [expected_backends(s, request.cmake) for s in request.engines.values()]
    if request.by == "kernels":
        for expected in backends:
            tracer_for(expected)  # one line for a build without a GPU backend to trace
    traced = request.by != "ops" and kernels.traced(backends)
    flags = list(request.flags) if traced else profile.check_flags(request.flags)  # before any build
    if not traced:
        for w in request.workloads:
            profile.workload_args(w)
    targets = DEFAULT_TARGETS if traced else (*DEFAULT_TARGETS, TARGET)
    builds = {n: shared.build(s, request.cmake, targets, say) for n, s in request.engines.items()}
    for b in builds.values():
        guard(list(request.models), flags, list(request.workloads), b.backends, warn=say.line)
    with shared.open_store(request.db) as store:
        if traced:
            sid, _ = kernels.run_kernels(store, builds, request.models, request.workloads, flags,
                                         processes=request.processes, reps=max(request.reps, kernels.REPS),
                                         band=request.band, timeout_s=request.timeout_s, resume=request.resume,
                                         log=say.line, env=request.env)
            return "kernels", sid
        sid, _ = profile.run_profile(store, builds, request.models, request.workloads, flags,
                                     processes=request.processes, reps=request.reps, band=request.band,
                                     timeout_s=request.timeout_s, resume=request.resume, log=say.line,
                                     groups=request.groups, env=request.env)
        return "profile", sid
