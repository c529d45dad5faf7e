"""Which op got slower: a per-op profile of the real model graph, and its diff between builds.

Each engine build gets ``tokensleuth-profile`` (tokensleuth.sources.profiler) as an extra
target of its own CMake build. A profile process loads the model as llama-bench does and
times every node of the graph through llama.cpp's eval callback; it prints, per repetition,
the nodes and nanoseconds of every op signature (op, its sources' types and shapes) and the
workload's wall time (its flags, argv and rows: engines/profiler.py). Here, per engine x model
x workload, ``processes`` such processes and one llama-bench process beside them (the node sum
against llama-bench's own ms/token), run by the study loop the kernel trace shares
(drivers/slower/loop.py); what the rows say per op, and the diff between engines, is
analysis/ops.py's. Profiles run in processes of their own, outside any timed trial: profiling
never changes a verdict.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

# analyze, check_flags, flags_from and workload_args: re-exported for the studies, commands and hooks
# that import them from here
from tokensleuth.analysis.ops import analyze as analyze
from tokensleuth.core.errors import EngineError, UserError
from tokensleuth.drivers.slower.loop import bench_process, run_study
from tokensleuth.engines import profiler
from tokensleuth.engines.proc import run_process
from tokensleuth.sources.build import EngineBuild
from tokensleuth.sources.profiler import TARGET
from tokensleuth.store import Store

PROFILES_STATE = "profiles"  # a compare's --profile: [{candidate, model, workload, study, headline, rows} | skipped]
RUNS_STATE = "profile-runs"  # [{engine, model, workload, process, rows}], one entry per process
BENCH_STATE = "profile-bench"  # [{engine, model, workload, ms_per_token}]
PROCESSES = 4  # per engine, model and workload: the intervals are over processes
Log = Callable[[str], None]


def engine_names(engines: Sequence[str], env: Sequence[str]) -> tuple[dict[str, str], dict[str, dict[str, str]]]:
    """--engine SOURCE or NAME=SOURCE, and --env NAME:VAR=VALUE -> ({name: source}, {name: env}).

    A source always begins with its kind (git:, pypi:, …), so a word before the first `=` with
    no `:` in it is a name; an engine without one is named by its source."""
    names: dict[str, str] = {}
    for text in engines:
        name, eq, source = text.partition("=")
        if not eq or ":" in name or not name:
            name, source = text, text
        if name in names:
            raise UserError(f"engine {name!r} is given twice — give each source once, or name them "
                            "(--engine a=SOURCE --engine b=SOURCE)")
        names[name] = source
    envs: dict[str, dict[str, str]] = {}
    for e in env:
        name, sep, kv = e.partition(":")
        var, eq, value = kv.partition("=")
        if not sep or not eq or not var or name not in names or name == names[name]:
            raise UserError(f"cannot read --env {e!r} — name the engine (--engine NAME=SOURCE) and write "
                            "NAME:VAR=VALUE")
        envs.setdefault(name, {})[var] = value
    return names, envs


def profile_comparisons(comps: Sequence[Any], spec: Any, profiler: Callable[..., dict[str, Any]],
                        log: Log | None = None) -> list[dict[str, Any]]:
    """compare --profile: the per-op diff of each candidate's build against the baseline's, for
    every cell that came out faster or slower (arms of one build have no build diff to show)."""
    log = log or (lambda s: None)
    arms = {a.name: a for a in spec.arms}
    out: list[dict[str, Any]] = []
    for c in comps:
        if c.verdict not in ("faster", "slower"):
            continue
        base, cand = arms[c.baseline], arms[c.candidate]
        where = {"candidate": c.candidate, "model": c.model, "workload": c.workload}
        one = (base.source, base.cmake) == (cand.source, cand.cmake)
        log(f"profiling {c.candidate} against {c.baseline} on {Path(c.model).name} {c.workload}"
            + (" (one build, traced as each arm runs it)" if one else ""))
        try:
            sides = [(a.name, dict(a.env), list(a.flags)) for a in (base, cand)] if one else None
            out.append(dict(profiler(base.source, cand.source, c.model, c.workload, sides=sides), **where))
        except (UserError, EngineError) as exc:
            out.append(dict(where, skipped=str(exc).splitlines()[0][:300]))
    return out

def profile_process(build: EngineBuild, name: str, model: str, workload: str, flags: Sequence[str], reps: int,
                    groups: bool, timeout_s: float, env: Mapping[str, str] | None) -> list[dict[str, Any]]:
    """One profiler process of ``build``: the rows of its ``reps`` repetitions."""
    argv = profiler.argv(str(build.binary(TARGET)), model, workload, reps, flags, groups)
    res = run_process(argv, env=env, timeout_s=timeout_s)
    if res.returncode != 0 or res.timed_out:
        tail = (res.tail("err").strip().splitlines() or ["no output"])[-1][:200]
        raise EngineError(f"the profile of {name} on {Path(model).name} {workload} failed (exit {res.returncode}): {tail}")
    try:
        return profiler.parse_rows(res.text("out"))
    except ValueError as exc:
        raise EngineError(f"the profiler of {name} printed malformed output: {exc}") from None


def bench_ms_per_token(build: EngineBuild, model: str, workload: str, flags: Sequence[str],
                       timeout_s: float, env: Mapping[str, str] | None = None) -> float | None:
    """llama-bench's own ms/token of this build, model and workload (3 repetitions); None where
    the run failed (the profile's rows stand without it)."""
    try:
        run = bench_process(build, "bench", model, workload, flags, 3, timeout_s=timeout_s, env=env or {})
    except EngineError:
        return None
    ts = run.outcome.results[0].avg_ts if run.outcome.results else None
    return 1000.0 / float(ts) if ts else None


@dataclass(frozen=True)
class OpProfile:
    """Which op got slower (drivers.slower.Slower): a process is one profiler process's rows; the
    cell's llama-bench runs beside them; the sides are diffed op signature by op signature."""

    builds: Mapping[str, EngineBuild]
    flags: Mapping[str, Sequence[str]]  # each engine's: the common flags and its own
    reps: int
    groups: bool
    timeout_s: float
    env: Mapping[str, Mapping[str, str]]
    kind: ClassVar[str] = "profile"
    runs_state: ClassVar[str] = RUNS_STATE

    def complete(self, entry: Mapping[str, Any]) -> bool:
        return "rows" in entry

    def measure(self, entry: dict[str, Any], number: int) -> Iterator[str]:
        e, m, w = entry["engine"], entry["model"], entry["workload"]
        entry["rows"] = profile_process(self.builds[e], e, m, w, self.flags[e], self.reps, self.groups,
                                        self.timeout_s, self.env.get(e))
        yield f"  profile {number}: {e} {Path(m).stem} {w} ({self.reps} repetitions)"

    def beside(self, store: Store, sid: str, model: str, workload: str) -> None:
        bench: list[dict[str, Any]] = list(store.state.get(sid, BENCH_STATE, []))
        for e in self.builds:
            if not any((b["engine"], b["model"], b["workload"]) == (e, model, workload) for b in bench):
                bench.append({"engine": e, "model": model, "workload": workload,
                              "ms_per_token": bench_ms_per_token(self.builds[e], model, workload, self.flags[e],
                                                                 self.timeout_s, self.env.get(e, {}))})
                store.state.put(sid, BENCH_STATE, bench)

    def analyze(self, store: Store, sid: str, spec: Mapping[str, Any],
                runs: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        return analyze(spec, runs, store.state.get(sid, BENCH_STATE, []))


def run_profile(store: Store, builds: Mapping[str, EngineBuild], models: Sequence[str], workloads: Sequence[str],
                flags: Sequence[str], *, processes: int = PROCESSES, reps: int = 3, band: float = 0.02,
                timeout_s: float = 600, resume: bool = False, log: Log | None = None, groups: bool = False,
                env: Mapping[str, Mapping[str, str]] | None = None,
                engine_flags: Mapping[str, Sequence[str]] | None = None) -> tuple[str, dict[str, Any]]:
    """Profile every engine on every model and workload; return (study id, its JSON).
    ``engine_flags``: an engine's profile flags where they differ from the common ``flags`` (one
    build two ways: each arm's flags joined with the common ones).

    ``builds`` maps each engine's name (its source, or a label) to its build; ``env`` gives an
    engine's environment (its profiles and its llama-bench run both get it); ``groups`` times
    chains of dependent ops as one node (the profiler's -g 1: what a GPU backend fuses stays
    fused). Processes alternate the engines (A B, then B A) so that the machine's drift falls
    on both; each one's rows are stored as soon as it ends, and --resume runs only what is
    missing."""
    env = {e: dict(v) for e, v in (env or {}).items() if v}
    spec: dict[str, Any] = {"engines": list(builds), "models": list(models), "workloads": list(workloads),
                            "flags": list(flags), "processes": processes, "reps": reps, "band": band,
                            "builds": {e: b.key for e, b in builds.items()},
                            "synchronised": any(x != "CPU" for b in builds.values() for x in b.backends)}
    if env:  # only then: a profile without them keeps its identity
        spec["env"] = env
    if groups:
        spec["groups"] = True
    own = {e: list(f) for e, f in (engine_flags or {}).items() if list(f) != list(flags)}
    if own:  # only then, as env
        spec["engine_flags"] = own
    study = OpProfile(builds, {e: own.get(e, list(flags)) for e in builds}, reps, groups, timeout_s, env)
    return run_study(store, study, spec, resume=resume, log=log)
