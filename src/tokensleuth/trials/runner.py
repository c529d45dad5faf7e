"""Run one trial: no store, no executor (pyperf's worker side).

:func:`run_trial` takes plain data (an :class:`ArmRuntime`, a :class:`TrialJob`) and
returns a :class:`TrialOutcome`, so any executor can call it, in this process or on
another machine (``tokensleuth.executors``). The driver that plans, hands out and writes
is :func:`tokensleuth.executors.execute`.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, cast

from tokensleuth.analysis import confounders
from tokensleuth.core.hostenv import host_environment
from tokensleuth.core.records import TrialOutcome
from tokensleuth.engines import engine_for
from tokensleuth.engines.base import ArmRuntime, SharedRun
from tokensleuth.monitor.cpu import is_spinning
from tokensleuth.monitor.sampler import Monitor
from tokensleuth.monitor.sources import Source
from tokensleuth.sources.build import EngineBuild
from tokensleuth.store import stored_json

__all__ = ["ArmRuntime", "TrialCallback", "TrialJob", "arm_runtime", "failed_outcome", "run_shared", "run_trial"]


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
                        tuple(stored_json(row, "argv_json")), int(row["pair"]))


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
        load = monitor.thread_load(min(w.start_ns for w in out.windows), max(w.end_ns for w in out.windows))
        spin = sorted((t for t in load if is_spinning(t)), key=lambda t: cast(int, t["tid"]))
        gpu_busy = [row[k] for _, row in timeline for k in row if k.endswith("_busy_pct")]
        if load:  # the busiest thread's figures, whatever the rule decides (what it was applied to)
            host["busiest_thread"] = load[0]
        host["busy_threads"] = spin
        # Busy threads that never block are polling when the GPU does the work; on a
        # CPU backend the same pattern is plain computing, so only GPU runs are flagged.
        if spin and gpu_busy and sum(gpu_busy) / len(gpu_busy) >= 50:
            host["spinning_threads"] = spin
            warnings.append(("spinning-thread", ", ".join(
                f"{th['name']}[{th['tid']}] {th['cores']:.2f} cores, {th['voluntary_switches_per_s']}/s "
                "voluntary switches" for th in spin)))
    return replace(out, timeline=tuple(timeline), warnings=tuple(warnings), env=dict(out.env, **host))


def run_shared(s: SharedRun, *, timeout_s: float | None, sources: Sequence[Source], interval_s: float = 0.2,
               on_sample: Sink | None = None) -> tuple[TrialOutcome, TrialOutcome]:
    """Both trials of a pair in one engine process (tokensleuth.engines.shared_unit
    found they fit): one outcome per trial."""
    first = s.jobs[0]
    assert isinstance(first, TrialJob)  # the unit's own jobs (shared_unit keeps them)
    out = run_trial(s.arm, replace(first, argv=s.argv), timeout_s=timeout_s, sources=sources,
                    interval_s=interval_s, on_sample=on_sample)
    return s.split(out)


def failed_outcome(message: str, env: dict[str, Any]) -> TrialOutcome:
    """A trial that could not start (its engine did not build on the machine it was given)."""
    now, ns = time.time(), time.monotonic_ns()
    return TrialOutcome("failed", None, message, "", now, now, ns, ns, env)
