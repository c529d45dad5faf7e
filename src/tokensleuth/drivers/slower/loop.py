"""Which X got slower: the one study loop of the op profile (drivers/slower/ops.py: which op) and
the kernel trace (drivers/slower/kernels.py: which kernel).

Both ask one question the same way. Per engine, model and workload, ``processes`` processes of
their own, outside any timed trial (profiling never changes a verdict), the engines alternating
(A B, then B A) so that the machine's drift falls on both; each process's figures stored as
soon as they exist, so that ``--resume`` runs only what is missing; then each side's processes
read back and each engine diffed against the first. What a process measures, and how a side's
processes become figures and two sides a diff, is the study's own: a ``Slower``.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from tokensleuth.core.errors import EngineError
from tokensleuth.core.records import spec_hash
from tokensleuth.engines import engine_for
from tokensleuth.engines.base import DEFAULT_KIND, ArmRuntime
from tokensleuth.store import Store

if TYPE_CHECKING:
    from tokensleuth.engines.base import EngineRun
    from tokensleuth.sources.build import EngineBuild

Key = tuple[str, str, str, int]  # engine, model, workload, process
Log = Callable[[str], None]


class Slower(Protocol):
    """One "which X got slower" study: what one process of a side produces, and how the sides'
    processes are diffed.

    Every process is one entry of the ``runs_state`` list: ``{engine, model, workload,
    process}`` and what the process measured, in the order it measured it."""

    @property
    def kind(self) -> str:
        """The study kind it is stored as (studies.kind_of)."""
        ...

    @property
    def runs_state(self) -> str:
        """The study state that holds the entries."""
        ...

    def complete(self, entry: Mapping[str, Any]) -> bool:
        """Whether a stored entry holds all its process measures (--resume leaves it alone)."""
        ...

    def measure(self, entry: dict[str, Any], number: int) -> Iterator[str]:
        """Measure into ``entry`` (the study's ``number``-th) what it is missing, a part at a time:
        after each part, yield the line that says so (the loop stores the entries, then logs it)."""
        ...

    def beside(self, store: Store, sid: str, model: str, workload: str) -> None:
        """After every process of one model and workload: what the study measures beside them."""
        ...

    def analyze(self, store: Store, sid: str, spec: Mapping[str, Any],
                runs: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        """The study's JSON: each side's figures, and each engine's diff against the first."""
        ...


def process_order(engines: Sequence[str], models: Sequence[str], workloads: Sequence[str], processes: int,
                  done: Collection[Key]) -> Iterator[Key]:
    """(engine, model, workload, process) of every process not yet ``done``, the engines
    alternating (A B, then B A) so that the machine's drift falls on both (op profile and kernel trace)."""
    for m in models:
        for w in workloads:
            for i in range(processes):
                for e in engines if i % 2 == 0 else engines[::-1]:
                    if (e, m, w, i) not in done:
                        yield e, m, w, i


def run_study(store: Store, study: Slower, spec: dict[str, Any], *, resume: bool = False,
              log: Log | None = None) -> tuple[str, dict[str, Any]]:
    """Run ``study`` over the engines, models, workloads and processes its ``spec`` names (each
    entry stored as soon as a part of it is measured); return (study id, its JSON)."""
    log = log or (lambda s: None)
    engines = list(spec["engines"])
    sid = store.writes.begin_study(study.kind, spec, spec_hash(spec), resume=resume).id
    with store.leases.hold(sid):
        runs: list[dict[str, Any]] = list(store.state.get(sid, study.runs_state, []))
        done = {(r["engine"], r["model"], r["workload"], r["process"]) for r in runs if study.complete(r)}
        for m in spec["models"]:
            for w in spec["workloads"]:
                for e, _, _, i in process_order(engines, [m], [w], int(spec["processes"]), done):
                    at = next((n for n, r in enumerate(runs)
                               if (r["engine"], r["model"], r["workload"], r["process"]) == (e, m, w, i)), None)
                    if at is None:  # a process not begun (a half-measured one goes on in its entry)
                        runs.append({"engine": e, "model": m, "workload": w, "process": i})
                        at = len(runs) - 1
                    for said in study.measure(runs[at], at + 1):
                        store.state.put(sid, study.runs_state, runs)
                        log(said)
                study.beside(store, sid, m, w)
        store.writes.finish_study(sid)
    return sid, study.analyze(store, sid, spec, runs)


def bench_process(build: EngineBuild, name: str, model: str, workload: str, flags: Sequence[str], reps: int, *,
                  timeout_s: float, env: Mapping[str, str], wrap: Sequence[str] = (), what: str = "run") -> EngineRun:
    """One llama-bench process of ``build`` on one model and workload, as it is measured (its flags
    and environment; ``wrap``: a tracer's command before it): its run, or an EngineError that
    names ``what`` failed."""
    engine = engine_for(DEFAULT_KIND)
    arm = ArmRuntime(name, Path(build.bin_dir), tuple(flags), dict(env), wrap=tuple(wrap))
    run = engine.run_trial(arm, model, workload, engine.argv_for([workload], reps) or [], timeout_s=timeout_s,
                           probe=None, host_env={})
    if run.outcome.status != "done":
        raise EngineError(f"the {what} of {name} on {Path(model).name} {workload} {run.outcome.status}: "
                          f"{run.outcome.message}")
    return run
