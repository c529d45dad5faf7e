"""What runs on each machine of the fleet: one actor per machine, no store.

It builds the engines it is asked to run in its own build cache (its own compiler and
backend flags; a build-cache key it has seen is reused), runs units of trials with the
same :func:`~tokensleuth.trials.runner.run_trial` the driver uses alone, and returns the
outcomes. The driver writes them.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from tokensleuth.core.errors import EngineError, UserError
from tokensleuth.core.hostenv import host_environment
from tokensleuth.core.records import TrialOutcome
from tokensleuth.engines import shared_unit
from tokensleuth.engines.base import ArmRuntime
from tokensleuth.sources.build import BuildCache, EngineBuild
from tokensleuth.trials.runner import TrialJob, failed_outcome, run_shared, run_trial


class TrialWorker:
    """A machine's worker (made a Ray actor by :class:`~tokensleuth.fleet.Fleet`)."""

    def __init__(self, label: str) -> None:
        self.label = label
        self.cache = BuildCache()
        self.builds: dict[tuple[str, tuple[str, ...], tuple[str, ...]], EngineBuild] = {}
        self.sources: list[Any] | None = None

    def build(self, source: str, cmake: tuple[str, ...], targets: tuple[str, ...], rid: str | None = None,
              sha: str | None = None, bundle: bytes | None = None) -> dict[str, Any]:
        """``source`` built here. A git source comes as (``rid``, ``sha``) and, when this
        machine lacks the commit, a ``bundle`` of its history (fleet.ship)."""
        key = (source, tuple(cmake), tuple(targets))
        if key not in self.builds:
            here = source
            if rid is not None and sha is not None:
                from tokensleuth.fleet.ship import receive

                here = f"git:{receive(self.cache.src, rid, sha, bundle)}@{sha}"
            self.builds[key] = self.cache.get(here, list(cmake), targets=targets)
        return self.builds[key].to_json()

    def has_commit(self, rid: str, sha: str) -> bool:
        from tokensleuth.fleet.ship import has

        return has(self.cache.src, rid, sha)

    def files(self, paths: list[str]) -> dict[str, int | None]:
        """Size of each path on this machine (None: missing); a folder counts as 0."""
        out: dict[str, int | None] = {}
        for p in paths:
            q = Path(p)
            out[p] = (0 if q.is_dir() else q.stat().st_size) if q.exists() else None
        return out

    def check_arm(self, build: dict[str, Any], name: str, kind: str, flags: list[str], env: dict[str, str],
                  workloads: list[str], source: str) -> None:
        """The arm's flags and devices, checked against this machine's build (UserError, one line)."""
        from tokensleuth.engines.checks import check_arm

        check_arm(EngineBuild.from_json(build), name, kind, flags, env, workloads, source=source)

    def host(self) -> dict[str, Any]:
        from tokensleuth.monitor.sources import probe_sources

        env = host_environment()
        env["node"] = self.label
        env["monitor"] = {s.name: s.info() for s in probe_sources()}
        return env

    def run_unit(self, jobs: tuple[TrialJob, ...], arms: dict[str, tuple[ArmRuntime, Any]],
                 timeout_s: float | None, interval_s: float) -> list[TrialOutcome]:
        """Run a unit's trials back to back on this machine (a pair: both arms, one machine)."""
        from tokensleuth.monitor.sources import probe_sources

        if self.sources is None:
            self.sources = list(probe_sources())
        outs: list[TrialOutcome | None] = []
        resolved: dict[str, ArmRuntime] = {}
        extras: dict[str, dict[str, Any]] = {}
        for job in jobs:
            arm, recipe = arms[job.arm]
            extra: dict[str, Any] = {"node": self.label}
            if recipe is not None:
                try:  # built by the driver's Fleet.build before the unit came (git: shipped)
                    b = self.builds.get(tuple(recipe)) or EngineBuild.from_json(self.build(*recipe))
                except (EngineError, UserError) as exc:
                    outs.append(failed_outcome(f"build failed on {self.label}: {str(exc).splitlines()[0][:200]}",
                                               extra))
                    continue
                arm = replace(arm, bin_dir=Path(b.bin_dir))
                extra["build_key"] = b.key
            resolved[job.arm], extras[job.arm] = arm, extra
            outs.append(None)
        shared = shared_unit(resolved, jobs) if len(resolved) == len(jobs) else None
        if shared is not None:  # both arms in one engine process (Engine.sharing)
            pair = run_shared(shared, timeout_s=timeout_s, sources=self.sources, interval_s=interval_s)
            return [replace(o, env=dict(o.env, **extras[j.arm])) for j, o in zip(jobs, pair, strict=True)]
        for i, job in enumerate(jobs):
            if outs[i] is None:
                out = run_trial(resolved[job.arm], job, timeout_s=timeout_s, sources=self.sources,
                                interval_s=interval_s)
                outs[i] = replace(out, env=dict(out.env, **extras[job.arm]))
        return [o for o in outs if o is not None]  # every one is set by now

