"""Which op got slower: a per-op profile of the real model graph, and its diff between builds.

Each engine build gets ``tokensleuth-profile`` (tokensleuth.sources.profiler) as an extra
target of its own CMake build. A profile process loads the model as llama-bench does and
times every node of the graph through llama.cpp's eval callback; it prints, per repetition,
the nodes and nanoseconds of every op signature (op, its sources' types and shapes) and the
workload's wall time. Here, per engine x model x workload:

* an op's **nodes per token** (a property of the graph: the same in every repetition) and its
  **ms per token**, with a 99% interval over the processes (each process's mean over its
  repetitions: the process is the unit of replication, as in compare — repetitions of one
  process share its load, its memory layout and its clocks, and treating 2 processes × 3
  repetitions as 6 samples called a fusion change on the 30B shape that a rerun did not see);
* the **node sum** against llama-bench's own ms/token of the same build and model (one
  llama-bench process beside the profiles): the ratio says how much of the real time the
  per-node timing sees, and what it adds (on a GPU each node is synchronised);
* **time outside the graph**: the workload's wall time less its node times (a busy wait in
  the decode call, host work between graphs).

Between two engines, the **diff**: per op signature, the change of ms per token with a
Welch interval at 99% over the processes for the whole table (Bonferroni over the
signatures), called a change only beyond the interval *and* beyond ``band`` of the
baseline's total ms/token, and ``unresolved`` where an engine has fewer than 2 processes (no
interval: never read as the same); ops that appear or vanish; node counts that changed. Profiles run in processes of their own, outside
any timed trial: profiling never changes a verdict.
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from scipy import stats as sps

from tokensleuth.analysis.stats import change_verdict, welch
from tokensleuth.core.errors import EngineError, UserError
from tokensleuth.core.records import JSON_SCHEMA_VERSION, spec_hash
from tokensleuth.engines import profiler
from tokensleuth.engines.proc import run_process
from tokensleuth.sources.build import EngineBuild
from tokensleuth.sources.profiler import TARGET
from tokensleuth.store import Store

# the engine flags a profile takes (after `--`), as the profiler and llama-bench both spell them
FLAGS = ("-t", "-ngl", "-b", "-ub")
workload_args = profiler.workload_args  # the profiler's flags for a workload (commands check it before a build)
PROFILES_STATE = "profiles"  # a compare's --profile: [{candidate, model, workload, study, headline, rows} | skipped]
RUNS_STATE = "profile-runs"  # [{engine, model, workload, process, rows}], one entry per process
BENCH_STATE = "profile-bench"  # [{engine, model, workload, ms_per_token}]
CONFIDENCE = 0.99
PROCESSES = 4  # per engine, model and workload: the intervals are over processes
Log = Callable[[str], None]


def check_flags(flags: Sequence[str]) -> list[str]:
    """The flags after `--`, as pairs the profiler takes (UserError, one line, otherwise)."""
    out = list(flags)
    if len(out) % 2:
        raise UserError(f"profile takes flag-value pairs after `--` ({' '.join(FLAGS)}), got {' '.join(out)}")
    for f, v in zip(out[::2], out[1::2], strict=True):
        if f not in FLAGS:
            raise UserError(f"profile does not take {f} — it takes {', '.join(FLAGS)} after `--`")
        if not v.lstrip("-").isdigit():
            raise UserError(f"{f} {v}: give a whole number")
    return out


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


def flags_from(flags: Sequence[str]) -> list[str]:
    """The profile flags among a measurement's llama-bench flags (-t 4 -r 3 -ngl 99 -> -t 4 -ngl 99)."""
    out = []
    for i, f in enumerate(flags[:-1]):
        if f in FLAGS and flags[i + 1].lstrip("-").isdigit():
            out += [f, flags[i + 1]]
    return out


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


def parse_rows(text: str) -> list[dict[str, Any]]:
    """The profiler's JSON lines (ValueError on anything else)."""
    rows = []
    for line in text.splitlines():
        if not line.strip():
            continue
        r = json.loads(line)
        if not isinstance(r, dict) or not {"test", "tokens", "wall_ns", "graph_ns", "ops"} <= r.keys():
            raise ValueError(f"not a profile line: {line[:120]}")
        if int(r["tokens"]) <= 0:
            raise ValueError("a profile line with no tokens")
        for op in r["ops"]:
            if not (isinstance(op, list) and len(op) == 4 and int(op[2]) > 0 and int(op[3]) >= 0):
                raise ValueError(f"not an op entry: {op!r}"[:160])
        rows.append(r)
    return rows


def _interval(xs: Sequence[float], confidence: float = CONFIDENCE) -> tuple[float, float, float]:
    m = sum(xs) / len(xs)
    if len(xs) < 2:
        return m, math.nan, math.nan
    sd = math.sqrt(sum((x - m) ** 2 for x in xs) / (len(xs) - 1))
    h = float(sps.t.ppf(0.5 + confidence / 2, len(xs) - 1)) * sd / math.sqrt(len(xs))
    return m, m - h, m + h


@dataclass(frozen=True)
class Profile:
    """One engine's profile of one model and workload: every repetition of every process.

    ``procs``: the process of each repetition (where none is given, each repetition is a
    process of its own)."""

    engine: str
    model: str
    workload: str
    reps: tuple[dict[str, Any], ...]
    procs: tuple[int, ...] = ()

    def key(self) -> tuple[str, str, str]:
        return (self.engine, self.model, self.workload)

    def by_process(self, xs: Sequence[float]) -> list[float]:
        """Per-repetition values -> one mean per process, in process order."""
        procs = self.procs or tuple(range(len(xs)))
        acc: dict[int, list[float]] = defaultdict(list)
        for p, x in zip(procs, xs, strict=True):
            acc[p].append(x)
        return [sum(v) / len(v) for _, v in sorted(acc.items())]

    def per_rep(self) -> dict[tuple[str, str], list[float]]:
        """(op, signature) -> ms per token in each repetition (0 where it did not run)."""
        out: dict[tuple[str, str], list[float]] = defaultdict(lambda: [0.0] * len(self.reps))
        for i, r in enumerate(self.reps):
            for op, sig, _nodes, ns in r["ops"]:
                out[(op, sig)][i] += ns / 1e6 / r["tokens"]
        return dict(out)

    def nodes(self) -> dict[tuple[str, str], float]:
        """(op, signature) -> nodes per token (the most any repetition had)."""
        out: dict[tuple[str, str], float] = defaultdict(float)
        for r in self.reps:
            for op, sig, nodes, _ns in r["ops"]:
                out[(op, sig)] = max(out[(op, sig)], nodes / r["tokens"])
        return dict(out)

    def graph_ms(self) -> list[float]:
        return [r["graph_ns"] / 1e6 / r["tokens"] for r in self.reps]

    def outside_ms(self) -> list[float]:
        return [max(0.0, (r["wall_ns"] - r["graph_ns"]) / 1e6 / r["tokens"]) for r in self.reps]

    def ops(self) -> list[dict[str, Any]]:
        nodes = self.nodes()
        total = sum(self.graph_ms()) / len(self.reps)
        out = []
        for (op, sig), xs in self.per_rep().items():
            m, lo, hi = _interval(self.by_process(xs))
            out.append({"engine": self.engine, "model": self.model, "workload": self.workload, "op": op,
                        "signature": sig, "nodes_per_token": nodes[(op, sig)], "ms_per_token": m,
                        "ci": [lo, hi], "share": m / total if total else None})
        return sorted(out, key=lambda o: -o["ms_per_token"])


def diff(a: Profile, b: Profile, band: float = 0.02) -> dict[str, Any]:
    """What changed from ``a`` to ``b``: per op signature, sorted by the size of the change."""
    pa, pb = a.per_rep(), b.per_rep()
    na, nb = a.nodes(), b.nodes()
    keys = sorted(set(pa) | set(pb))
    conf = 1 - (1 - CONFIDENCE) / max(1, len(keys))  # the table's, not each row's
    total = sum(a.graph_ms()) / len(a.reps)
    practical = band * total
    rows: list[dict[str, Any]] = []
    for k in keys:
        xa = pa.get(k, [0.0] * len(a.reps))
        xb = pb.get(k, [0.0] * len(b.reps))
        d, lo, hi = welch(a.by_process(xa), b.by_process(xb), conf)
        dn = nb.get(k, 0.0) - na.get(k, 0.0)
        verdict = change_verdict(d, lo, hi, practical, appeared=k not in pa, vanished=k not in pb)
        rows.append({"model": a.model, "workload": a.workload, "op": k[0], "signature": k[1],
                     "ms_per_token": [sum(xa) / len(xa), sum(xb) / len(xb)], "delta_ms_per_token": d,
                     "ci": [lo, hi], "delta_nodes_per_token": dn, "verdict": verdict})
    rows.sort(key=lambda r: -abs(r["delta_ms_per_token"]))
    d_out, lo_out, hi_out = welch(a.by_process(a.outside_ms()), b.by_process(b.outside_ms()), CONFIDENCE)
    d_all, lo_all, hi_all = welch(a.by_process([g + o for g, o in zip(a.graph_ms(), a.outside_ms(), strict=True)]),
                                   b.by_process([g + o for g, o in zip(b.graph_ms(), b.outside_ms(), strict=True)]),
                                   CONFIDENCE)
    return {"model": a.model, "workload": a.workload, "engines": [a.engine, b.engine], "rows": rows,
            "total_ms_per_token": [total, sum(b.graph_ms()) / len(b.reps)],
            "delta_total_ms_per_token": d_all, "delta_total_ci": [lo_all, hi_all],
            "outside_ms_per_token": [sum(a.outside_ms()) / len(a.reps), sum(b.outside_ms()) / len(b.reps)],
            "delta_outside_ms_per_token": d_out, "delta_outside_ci": [lo_out, hi_out],
            "outside_changed": lo_out > practical or hi_out < -practical, "band": band}


def profiles(runs: Sequence[Mapping[str, Any]]) -> dict[tuple[str, str, str], Profile]:
    """(engine, model, workload) -> its Profile, from the stored runs."""
    acc: dict[tuple[str, str, str], list[dict[str, Any]]] = defaultdict(list)
    procs: dict[tuple[str, str, str], list[int]] = defaultdict(list)
    for run in runs:
        key = (str(run["engine"]), str(run["model"]), str(run["workload"]))
        acc[key] += list(run["rows"])
        procs[key] += [int(run["process"])] * len(run["rows"])
    return {k: Profile(*k, tuple(v), tuple(procs[k])) for k, v in acc.items()}


def analyze(spec: Mapping[str, Any], runs: Sequence[Mapping[str, Any]],
            bench: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The profile study's JSON: ops of every engine, the diffs against the first engine, and
    the node sum against llama-bench."""
    got = profiles(runs)
    engines = list(spec["engines"])
    ops: list[dict[str, Any]] = []
    ratios: dict[str, dict[str, float | None]] = defaultdict(dict)
    walls: dict[str, dict[str, float | None]] = defaultdict(dict)
    bench_ms = {(str(b["engine"]), str(b["model"]), str(b["workload"])): b.get("ms_per_token") for b in bench}
    for key, p in got.items():
        ops += p.ops()
        real = bench_ms.get(key)
        graph = sum(p.graph_ms()) / len(p.reps)
        label = key[2] if len(spec["models"]) == 1 else f"{Path(key[1]).stem} {key[2]}"
        ratios[key[0]][label] = graph / real if real else None
        wall = graph + sum(p.outside_ms()) / len(p.reps)  # the node times and the time between them
        walls[key[0]][label] = wall / real if real else None
    diffs = []
    for e in engines[1:]:
        for m in spec["models"]:
            for w in spec["workloads"]:
                a, b = got.get((engines[0], m, w)), got.get((e, m, w))
                if a is not None and b is not None:
                    diffs.append(diff(a, b, float(spec.get("band", 0.02))))
    flat: list[dict[str, Any]] = [dict(r, engines=d["engines"]) for d in diffs for r in d["rows"]]
    flat.sort(key=lambda r: -abs(r["delta_ms_per_token"]))
    return {"schema_version": JSON_SCHEMA_VERSION, "engines": engines, "ops": ops, "diff": flat, "diffs": diffs,
            "node_sum_ratio": dict(ratios), "wall_ratio": dict(walls), "synchronised": bool(spec.get("synchronised")),
            "groups": bool(spec.get("groups")), "env": dict(spec.get("env") or {})}


# -- the driver ---------------------------------------------------------------------------


def process_order(engines: Sequence[str], models: Sequence[str], workloads: Sequence[str], processes: int,
                  done: Collection[tuple[str, str, str, int]]) -> Iterator[tuple[str, str, str, int]]:
    """(engine, model, workload, process) of every profile process not yet ``done``, the engines
    alternating (A B, then B A) so that the machine's drift falls on both (op profile and kernel trace)."""
    for m in models:
        for w in workloads:
            for i in range(processes):
                for e in engines if i % 2 == 0 else engines[::-1]:
                    if (e, m, w, i) not in done:
                        yield e, m, w, i


def bench_ms_per_token(build: EngineBuild, model: str, workload: str, flags: Sequence[str],
                       timeout_s: float, env: Mapping[str, str] | None = None) -> float | None:
    """llama-bench's own ms/token of this build, model and workload (3 repetitions)."""
    from tokensleuth.engines import engine_for
    from tokensleuth.engines.base import DEFAULT_KIND, ArmRuntime

    engine = engine_for(DEFAULT_KIND)
    arm = ArmRuntime("bench", Path(build.bin_dir), tuple(flags), dict(env or {}))
    run = engine.run_trial(arm, model, workload, engine.argv_for([workload], 3) or [], timeout_s=timeout_s,
                           probe=None, host_env={})
    ts = run.outcome.results[0].avg_ts if run.outcome.status == "done" and run.outcome.results else None
    return 1000.0 / float(ts) if ts else None


def run_profile(store: Store, builds: Mapping[str, EngineBuild], models: Sequence[str], workloads: Sequence[str],
                flags: Sequence[str], *, processes: int = PROCESSES, reps: int = 3, band: float = 0.02,
                timeout_s: float = 600, resume: bool = False, log: Log | None = None, groups: bool = False,
                env: Mapping[str, Mapping[str, str]] | None = None) -> tuple[str, dict[str, Any]]:
    """Profile every engine on every model and workload; return (study id, its JSON).

    ``builds`` maps each engine's name (its source, or a label) to its build; ``env`` gives an
    engine's environment (its profiles and its llama-bench run both get it); ``groups`` times
    chains of dependent ops as one node (the profiler's -g 1: what a GPU backend fuses stays
    fused). Processes alternate the engines (A B, then B A) so that the machine's drift falls
    on both; each one's rows are stored as soon as it ends, and --resume runs only what is
    missing."""
    log = log or (lambda s: None)
    engines = list(builds)
    env = {e: dict(v) for e, v in (env or {}).items() if v}
    spec: dict[str, Any] = {"engines": engines, "models": list(models), "workloads": list(workloads),
                            "flags": list(flags), "processes": processes, "reps": reps, "band": band,
                            "builds": {e: b.key for e, b in builds.items()},
                            "synchronised": any(x != "CPU" for b in builds.values() for x in b.backends)}
    if env:  # only then: a profile without them keeps its identity
        spec["env"] = env
    if groups:
        spec["groups"] = True
    handle = store.begin_study("profile", spec, spec_hash(spec), resume=resume)
    sid = handle.id
    with store.lease(sid):
        runs: list[dict[str, Any]] = list(store.get_state(sid, RUNS_STATE, []))
        bench: list[dict[str, Any]] = list(store.get_state(sid, BENCH_STATE, []))
        done = {(r["engine"], r["model"], r["workload"], r["process"]) for r in runs}
        for m in models:
            for w in workloads:
                for e, _, _, i in process_order(engines, [m], [w], processes, done):
                    argv = profiler.argv(str(builds[e].binary(TARGET)), m, w, reps, flags, groups)
                    res = run_process(argv, env=env.get(e), timeout_s=timeout_s)
                    if res.returncode != 0 or res.timed_out:
                        tail = (res.tail("err").strip().splitlines() or ["no output"])[-1][:200]
                        raise EngineError(f"the profile of {e} on {Path(m).name} {w} failed (exit {res.returncode}): {tail}")
                    try:
                        rows = parse_rows(res.text("out"))
                    except ValueError as exc:
                        raise EngineError(f"the profiler of {e} printed malformed output: {exc}") from None
                    runs.append({"engine": e, "model": m, "workload": w, "process": i, "rows": rows})
                    store.put_state(sid, RUNS_STATE, runs)
                    log(f"  profile {len(runs)}: {e} {Path(m).stem} {w} ({reps} repetitions)")
                for e in engines:
                    if not any((b["engine"], b["model"], b["workload"]) == (e, m, w) for b in bench):
                        bench.append({"engine": e, "model": m, "workload": w,
                                      "ms_per_token": bench_ms_per_token(builds[e], m, w, flags, timeout_s,
                                                                         env.get(e, {}))})
                        store.put_state(sid, BENCH_STATE, bench)
        store.finish_study(sid)
    return sid, analyze(spec, runs, bench)
