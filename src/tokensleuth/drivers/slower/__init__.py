"""Which X got slower: the op or the kernel whose time grew between two builds (or two runs of one).

- ``loop.py``: the one study loop both ask their question with (``run_study``), and one
  llama-bench process as measured (``bench_process``);
- ``ops.py``: the op profile, through the profiler built with a CPU build;
- ``kernels.py``: the kernel trace of a GPU build (CUPTI, rocprofv3, Vulkan);
- ``profile.py``: the profile command's request run to its study (the entry).

:func:`slower_for` is the one place that picks between them, and :func:`profiler` the hook that
compare, bisect, scan and decompose ask what changed beside a verdict.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from tokensleuth.drivers import shared
from tokensleuth.drivers.requests import Say
from tokensleuth.drivers.slower.kernels import traced
from tokensleuth.engines.base import DEFAULT_KIND
from tokensleuth.kernels import tracer_for
from tokensleuth.sources.build import DEFAULT_TARGETS
from tokensleuth.store import Store
from tokensleuth.trials.spec import arm_argv

def slower_for(backends: Iterable[Sequence[str]], by: str = "auto") -> str:
    """Which study says what got slower for builds of these backends: ``"kernels"`` (traced)
    where each has a GPU backend with a tracer, else ``"ops"`` (the op profile). ``by`` forces
    one: ``kernels`` on a build without a GPU backend to trace is one line (UserError)."""
    if by == "ops":
        return "ops"
    if by == "kernels":
        for b in backends:
            tracer_for(b)
        return "kernels"
    return "kernels" if traced(backends) else "ops"


# (parent source, culprit source, model, workload) -> what the report shows of their kernel (or op)
# diff: the profile hook of compare, bisect, scan and decompose (:func:`profiler`); a compare's arms
# of one build pass ``sides``: each arm's name, environment and extra flags (one build traced two ways)
Profiler = Callable[..., dict[str, Any]]
Summarize = Callable[[str, dict[str, Any]], dict[str, Any]]  # (study id, profile object) -> its summary


def profiler(store: Store, cmake: Sequence[str], flags: Sequence[str], timeout_s: float, say: Say,
             summarize: Summarize) -> Profiler:
    """A driver's profile hook (:data:`Profiler`): what changed between two sources on one model
    and workload, stored as a study, and what the culprit's report shows of it (``summarize``).
    GPU builds are traced by their kernels (drivers/slower/kernels.py: llama-bench as measured, every
    flag); CPU builds get the per-op diff of the profiler built with them (drivers/slower/ops.py)."""
    def run(parent: str, culprit: str, model: str, workload: str,
            sides: Sequence[tuple[str, Mapping[str, str], Sequence[str]]] | None = None) -> dict[str, Any]:
        from tokensleuth.drivers.slower.kernels import check_flags as check_kernel_flags
        from tokensleuth.drivers.slower.kernels import run_kernels
        from tokensleuth.drivers.slower.ops import run_profile
        from tokensleuth.engines.profiler import flags_from, workload_args
        from tokensleuth.sources.profiler import TARGET

        if sides is not None:  # one build, two arms: traced or profiled two ways (their environment and flags)
            one = shared.build(parent, cmake, DEFAULT_TARGETS, say)
            names = [name for name, _, _ in sides]
            extra = {name: list(f) for name, _, f in sides}
            if slower_for([one.backends]) == "ops":  # a CPU build: the op profile of each arm, as it runs
                workload_args(workload)
                one = shared.build(parent, cmake, (*DEFAULT_TARGETS, TARGET), say)
                one.binary(TARGET)
                own = {name: flags_from(list(arm_argv(DEFAULT_KIND, flags, extra[name]).argv)) for name in names}
                sid, obj = run_profile(store, {name: one for name in names}, [model], [workload], flags_from(flags),
                                       timeout_s=timeout_s, resume=True, log=say.line,
                                       env={name: dict(e) for name, e, _ in sides}, engine_flags=own)
                return summarize(sid, obj)
            for name in names:
                check_kernel_flags(list(arm_argv(DEFAULT_KIND, flags, extra[name]).argv), [workload])
            sid, obj = run_kernels(store, {name: one for name in names}, [model], [workload], flags,
                                   timeout_s=timeout_s, resume=True, log=say.line,
                                   env={name: dict(e) for name, e, _ in sides}, engine_flags=extra)
            return summarize(sid, obj)
        builds = {s: shared.build(s, cmake, DEFAULT_TARGETS, say) for s in (parent, culprit)}
        if slower_for(b.backends for b in builds.values()) == "kernels":
            check_kernel_flags(flags, [workload])
            sid, obj = run_kernels(store, builds, [model], [workload], flags, timeout_s=timeout_s, resume=True,
                                   log=say.line)
            return summarize(sid, obj)
        workload_args(workload)  # ppN or tgN, before the profiler's build
        builds = {s: shared.build(s, cmake, (*DEFAULT_TARGETS, TARGET), say) for s in (parent, culprit)}
        for b in builds.values():
            b.binary(TARGET)  # a bin: folder has no profiler: said in one line, before a study is made
        sid, obj = run_profile(store, builds, [model], [workload], flags_from(flags), timeout_s=timeout_s,
                               resume=True, log=say.line)
        return summarize(sid, obj)

    return run
