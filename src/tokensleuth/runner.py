"""Execute planned trials: one engine process each, persisted as it ends."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path

from tokensleuth import confounders
from tokensleuth.engines import engine_for
from tokensleuth.engines.base import ArmRuntime
from tokensleuth.hostenv import host_environment
from tokensleuth.monitor.sampler import Monitor
from tokensleuth.monitor.sources import Source, probe_sources
from tokensleuth.sources.build import EngineBuild
from tokensleuth.store import Store, TrialOutcome

__all__ = ["ArmRuntime", "TrialCallback", "arm_runtime", "execute"]


def arm_runtime(name: str, build: EngineBuild, flags: Sequence[str], env: Mapping[str, str], kind: str,
                api_key_env: str | None = None) -> ArmRuntime:
    """An arm as the runner starts it: a build's binaries, or the server a url: source names."""
    served = build.source.startswith(("url:", "cmd:"))  # a server to attach to, or a command that starts one
    return ArmRuntime(name, Path(build.bin_dir) if build.bin_dir else None, tuple(flags), env, kind=kind,
                      endpoint=build.source if served else None, api_key_env=api_key_env)

TrialCallback = Callable[[int, int, str, TrialOutcome], None]


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
) -> list[TrialOutcome]:
    """Run the study's planned trials in plan order; each is committed as it ends.

    Engine faults (crash, garbage, hang) become the trial's status and the study
    goes on. ``limit`` stops after that many trials (for sequential drivers).
    """
    store.recover(study_id)
    planned = store.planned(study_id)
    if limit is not None:
        planned = planned[:limit]
    if not planned:
        return []
    srcs = list(sources) if sources is not None else probe_sources()
    outcomes: list[TrialOutcome] = []
    for i, t in enumerate(planned):
        arm = arms[t["arm"]]
        argv: Sequence[str] = json.loads(t["argv_json"])
        store.mark_running(int(t["id"]))
        live = store.live_timeline(int(t["id"]))
        monitor = Monitor(srcs, interval_s, on_sample=live)
        host = host_environment()
        host["monitor"] = monitor.info()
        before = confounders.snapshot()
        monitor.start()
        try:
            run = engine_for(arm.kind).run_trial(arm, t["model"], t["workload"], argv, timeout_s=timeout_s,
                                                 probe=monitor.edge, host_env=host)
        finally:
            timeline = monitor.stop()
            live.close()
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
        out = replace(out, timeline=tuple(timeline), warnings=tuple(warnings), env=dict(out.env, **host))
        store.finish_trial(int(t["id"]), out)
        outcomes.append(out)
        if on_trial:
            on_trial(i + 1, len(planned), t["arm"], out)
    return outcomes
