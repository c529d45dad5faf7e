"""Execute planned trials: one engine process each, persisted as it ends.

Split the way pyperf splits manager and worker. :func:`run_trial` runs one trial and
knows nothing of the store: it takes plain data (an :class:`ArmRuntime`, a
:class:`TrialJob`) and returns a :class:`TrialOutcome`, so any executor can call it, in
this process or on another machine. :func:`execute` is the driver: it hands units of
work to an executor (:class:`LocalExecutor` here, ``tokensleuth.fleet``'s on Ray) and is
the only writer of the store.
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Protocol

from tokensleuth import confounders
from tokensleuth.engines import engine_for
from tokensleuth.engines.base import ArmRuntime
from tokensleuth.hostenv import host_environment
from tokensleuth.monitor.sampler import Monitor
from tokensleuth.monitor.sources import Source, probe_sources
from tokensleuth.sources.build import EngineBuild
from tokensleuth.store import NODE_LOST, Store, TrialOutcome

__all__ = ["ArmRuntime", "Delivery", "Executor", "LocalExecutor", "Lost", "TrialCallback", "TrialJob",
           "arm_runtime", "execute", "run_trial", "units_of"]


def arm_runtime(name: str, build: EngineBuild, flags: Sequence[str], env: Mapping[str, str], kind: str,
                api_key_env: str | None = None) -> ArmRuntime:
    """An arm as the runner starts it: a build's binaries, or the server a url: source names."""
    served = build.source.startswith(("url:", "cmd:"))  # a server to attach to, or a command that starts one
    return ArmRuntime(name, Path(build.bin_dir) if build.bin_dir else None, tuple(flags), env, kind=kind,
                      endpoint=build.source if served else None, api_key_env=api_key_env)


TrialCallback = Callable[[int, int, str, TrialOutcome], None]
Sink = Callable[[list[tuple[int, dict[str, float]]]], None]


@dataclass(frozen=True, slots=True)
class TrialJob:
    """A planned trial as an executor gets it: plain data, no store (it crosses to other machines)."""

    trial_id: int
    seq: int
    arm: str
    model: str
    workload: str
    argv: tuple[str, ...]
    pair: int = -1

    @staticmethod
    def of(row: sqlite3.Row) -> TrialJob:
        return TrialJob(int(row["id"]), int(row["seq"]), str(row["arm"]), str(row["model"]), str(row["workload"]),
                        tuple(json.loads(row["argv_json"])), int(row["pair"]))


Unit = tuple[TrialJob, ...]  # what one machine runs back to back: a pair (both arms), or one trial


def units_of(jobs: Sequence[TrialJob]) -> list[Unit]:
    """Group a plan into units: the trials of one pair (same cell, same pair index) go together,
    since the paired statistic assumes both arms ran on one machine; anything else alone."""
    units: dict[tuple[str, str, int] | int, list[TrialJob]] = {}
    for j in jobs:
        key: tuple[str, str, int] | int = (j.model, j.workload, j.pair) if j.pair >= 0 else -j.trial_id - 1
        units.setdefault(key, []).append(j)
    return [tuple(u) for u in units.values()]


@dataclass(frozen=True, slots=True)
class Done:
    """A unit's trials, finished (engine faults included: they are outcomes)."""

    jobs: Unit
    outcomes: tuple[TrialOutcome, ...]


@dataclass(frozen=True, slots=True)
class Lost:
    """A unit whose machine died (or stopped answering) before it came back: nothing of it is kept."""

    jobs: Unit
    node: str
    at: float  # wall clock, epoch seconds
    why: str

    def detail(self) -> str:
        when = time.strftime("%H:%M:%S", time.localtime(self.at))
        seqs = ", ".join(str(j.seq) for j in self.jobs)
        return f"worker {self.node} lost at {when} during trial(s) {seqs} ({self.why}); they run again elsewhere"


Delivery = Done | Lost
Handout = Callable[[Unit, str | None], None]  # (unit, node): told before a unit starts; None = this process


class Executor(Protocol):
    """Runs units of trials somewhere and delivers them as they end.

    ``handout`` is called before a unit starts (the driver marks its trials running, with
    the machine). A :class:`Lost` unit is run again by the executor on another machine (or
    later), after the driver has put it back: every unit is delivered Done exactly once.
    """

    def run(self, units: Sequence[Unit], arms: Mapping[str, ArmRuntime], *, timeout_s: float | None,
            interval_s: float, handout: Handout, live: Callable[[int], Any] | None) -> Iterator[Delivery]: ...


def run_trial(arm: ArmRuntime, job: TrialJob, *, timeout_s: float | None, sources: Sequence[Source],
              interval_s: float = 0.2, on_sample: Sink | None = None) -> TrialOutcome:
    """Run one trial under the monitor and return everything it left; no store is touched.

    Engine faults (crash, garbage, hang) are the outcome's status, never an exception.
    ``on_sample`` gets the timeline as the sampler takes it (the driver's live writer).
    """
    monitor = Monitor(sources, interval_s, on_sample=on_sample)
    host = host_environment()
    host["monitor"] = monitor.info()
    before = confounders.snapshot()
    monitor.start()
    try:
        run = engine_for(arm.kind).run_trial(arm, job.model, job.workload, job.argv, timeout_s=timeout_s,
                                             probe=monitor.edge, host_env=host)
    finally:
        timeline = monitor.stop()
    after = confounders.snapshot()
    out = run.outcome
    warnings = confounders.compare_snapshots(before, after, (out.t1_ns - out.t0_ns) / 1e9, run.pid)
    warnings += confounders.outcome_warnings(out)  # stalls, edge errors, impossible figures
    host["monitor_notes"] = monitor.notes()
    host["peak_memory_mb"] = dict(monitor.peak_mb)
    host["sample_interval_s"] = monitor.interval_s  # what the sampler really used
    if monitor.gpu_unseen:
        host["gpu_pids_not_in_this_namespace"] = sorted(monitor.gpu_unseen)
    if monitor.gpu_others:
        warnings.append(("gpu-process", ", ".join(
            f"{name}[{pid}] resident on the GPU" for pid, name in sorted(monitor.gpu_others.items()))))
    if out.windows:
        spin = monitor.spinning(min(w.start_ns for w in out.windows), max(w.end_ns for w in out.windows))
        gpu_busy = [row[k] for _, row in timeline for k in row if k.endswith("_busy_pct")]
        host["busy_threads"] = spin
        # Busy threads that never block are polling when the GPU does the work; on a
        # CPU backend the same pattern is plain computing, so only GPU runs are flagged.
        if spin and gpu_busy and sum(gpu_busy) / len(gpu_busy) >= 50:
            host["spinning_threads"] = spin
            warnings.append(("spinning-thread", ", ".join(
                f"{th['name']}[{th['tid']}] {th['cores']:.2f} cores, {th['voluntary_switches_per_s']}/s "
                "voluntary switches" for th in spin)))
    return replace(out, timeline=tuple(timeline), warnings=tuple(warnings), env=dict(out.env, **host))


class LocalExecutor:
    """Today's behaviour: every trial in this process, in plan order, each delivered as it ends."""

    def __init__(self, sources: Sequence[Source] | None = None) -> None:
        self.sources = sources

    def run(self, units: Sequence[Unit], arms: Mapping[str, ArmRuntime], *, timeout_s: float | None,
            interval_s: float, handout: Handout, live: Callable[[int], Any] | None) -> Iterator[Delivery]:
        srcs = list(self.sources) if self.sources is not None else probe_sources()
        for unit in units:
            for job in unit:  # one at a time: a kill between the two of a pair loses neither
                handout((job,), None)
                sink = live(job.trial_id) if live else None
                try:
                    out = run_trial(arms[job.arm], job, timeout_s=timeout_s, sources=srcs, interval_s=interval_s,
                                    on_sample=sink)
                finally:
                    if sink is not None:
                        sink.close()
                yield Done((job,), (out,))


def execute(
    store: Store,
    study_id: str,
    arms: Mapping[str, ArmRuntime],
    *,
    timeout_s: float | None = None,
    on_trial: TrialCallback | None = None,
    limit: int | None = None,
    sources: Sequence[Source] | None = None,
    interval_s: float = 0.2,
    executor: Executor | None = None,
) -> list[TrialOutcome]:
    """Run the study's planned trials (in plan order, here); each unit is committed as it ends.

    The driver is the store's only writer: executors return outcomes, it writes them. A
    unit whose worker was lost goes back to planned with a ``node-lost`` warning and runs
    again; nothing of it was stored. ``limit`` stops after that many trials.
    """
    store.recover(study_id)
    planned = store.planned(study_id)
    if limit is not None:
        planned = planned[:limit]
    if not planned:
        return []
    jobs = [TrialJob.of(t) for t in planned]
    ex = executor if executor is not None else LocalExecutor(sources)

    def handout(unit: Unit, node: str | None) -> None:
        store.mark_running_many([j.trial_id for j in unit], node)

    outcomes: list[TrialOutcome] = []
    for d in ex.run(units_of(jobs), arms, timeout_s=timeout_s, interval_s=interval_s, handout=handout,
                    live=store.live_timeline):
        if isinstance(d, Lost):
            store.hand_back([j.trial_id for j in d.jobs], NODE_LOST, d.detail())
            lost = list(store.get_state(study_id, "lost_nodes", []))
            lost.append({"node": d.node, "at": d.at, "why": d.why, "trials": [j.seq for j in d.jobs]})
            store.put_state(study_id, "lost_nodes", lost)
            continue
        store.finish_trials([(j.trial_id, o) for j, o in zip(d.jobs, d.outcomes, strict=True)])
        for j, o in zip(d.jobs, d.outcomes, strict=True):
            outcomes.append(o)
            if on_trial:
                on_trial(len(outcomes), len(jobs), j.arm, o)
    return outcomes
