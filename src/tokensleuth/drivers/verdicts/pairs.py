"""The compare driver: sequential, paired A/B(/C…) verdicts per (model, workload).

Orchestration only: the plan comes from :mod:`tokensleuth.core.plan`, trials run in
:mod:`tokensleuth.trials.runner`, verdicts come from :mod:`tokensleuth.analysis.stats`.
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from tokensleuth.analysis import noise, stats
from tokensleuth.core.plan import pair_round
from tokensleuth.core.records import PlannedTrial, StudyHandle
from tokensleuth.core.workloads import JOINED, trial_workloads
from tokensleuth.drivers.verdicts.comparisons import (
    ARGV,
    JOINED_DESIGN,
    NOISE_STATE,
    PLACEMENT_STATE,
    SHARED_DESIGN,
    Comparison,
    analyze,
)
from tokensleuth.drivers.verdicts.reps import (
    FIRST_REPS,
    REPS_STATE,
    adaptive_reps,
    asked_reps,
    user_reps,
)
from tokensleuth.engines import differing_setting, engine_for
from tokensleuth.engines.base import DEFAULT_KIND, ArmRuntime, per_instance
from tokensleuth.executors import Executor, execute
from tokensleuth.sources.build import EngineBuild
from tokensleuth.store import Store, stored_json
from tokensleuth.trials.runner import TrialCallback, arm_runtime
from tokensleuth.trials.spec import CompareSpec, spec_hash

if TYPE_CHECKING:
    pass

CellKey = tuple[str, str]  # (model, workload)


def run_compare(
    store: Store,
    spec: CompareSpec,
    builds: Mapping[str, EngineBuild],
    *,
    resume: bool = False,
    on_trial: TrialCallback | None = None,
    on_round: Callable[[int, int], None] | None = None,
    create: bool = False,
    measure: bool = True,
    add_pairs_to: int | None = None,
    on_study: Callable[[StudyHandle], None] | None = None,
    placement: bool = False,
    executor: Executor | None = None,
    identity: Mapping[str, Any] | None = None,
    until: Callable[[list[Comparison]], bool] | None = None,
) -> tuple[str, list[Comparison]]:
    """Run (or resume) a compare study to its verdicts; return (study id, comparisons).

    ``create`` (for drivers such as bisect): continue the latest study that measures
    the same thing, finished or not (its cells that are still open under this spec's
    band and pair budget get more pairs), and start one only when there is none.
    ``measure=False`` only reads that study back (("", []) when there is none).
    ``add_pairs_to``: the caller asked for more pairs (a resumed unresolved answer):
    unresolved cells get one round up to that many pairs before the futility stop applies.
    ``resume``: the latest study of this measurement, finished or not, goes on (a finished
    one only where its cells are still open under this spec), else a new one starts.
    ``on_study`` is told which (:class:`StudyHandle`) before anything runs. The study's
    lease is held while it runs (a second process resuming it gets a one-line error).
    ``placement``: the first trial of each llama-bench arm and model logs its load (where the
    weights and buffers live; state PLACEMENT_STATE), for the report's explanation.
    ``executor``: where the trials run (default: here, one at a time; a fleet's runs pairs on
    its machines). ``identity``: more of what the study measures (a per-host study's machine).
    ``until``: the caller's question is answered by these comparisons, though a cell may still be
    open (decompose: one cell faster and the others' intervals already rule out slower); no more
    rounds are planned. It is not part of what is measured: the cells stay as they were measured.
    """
    share = shares_process(spec, builds)
    joined = not share and joins_workloads(spec)
    if joined and (resume or create):  # a study a version before one process per model began goes
        # on as it began (a process per workload), never measured again from its start
        old = spec_hash(measurement_identity(study_json(spec, builds, identity, share=False, joined=False)))
        joined = not (store.reads.find_resumable("compare", old) if resume else store.reads.find_study("compare", old))
    spec_json = study_json(spec, builds, identity, share=share, joined=joined)
    h = spec_hash(measurement_identity(spec_json))
    if not measure:
        study_id = (store.reads.find_resumable("compare", h) if resume else None) or (
            store.reads.find_study("compare", h) if create else None)
        return (study_id, analyze(store, study_id, spec)) if study_id else ("", [])
    arms = [(a.name, a.source, dict(builds[a.name].to_json(), engine_kind=a.kind), a.flags, a.env)
            for a in spec.arms]
    handle = store.writes.begin_study("compare", spec_json, h, resume=resume or create, arms=arms)
    if on_study:
        on_study(handle)
    with store.leases.hold(handle.id):
        return handle.id, _run_rounds(store, handle.id, spec, builds, on_trial, on_round, add_pairs_to, executor,
                                      placement, share, joined, until)


def study_json(spec: CompareSpec, builds: Mapping[str, EngineBuild], identity: Mapping[str, Any] | None = None,
               *, share: bool, joined: bool) -> dict[str, Any]:
    """What a compare study stores as its spec: the spec, ``identity`` (a per-host study's
    machine), the builds' keys, each arm's argv where an arm overrode a common flag, and the
    design (``share``: a pair in one process; ``joined``: a trial runs all of a model's
    workloads). Its measurement_identity's hash is the study's identity."""
    spec_json = dict(spec_dump(spec), **(identity or {}))
    spec_json["build_keys"] = {n: b.key for n, b in builds.items()}
    if any(spec.joined(a).overrides for a in spec.arms):  # what each arm ran, where an arm overrode a common flag
        spec_json[ARGV] = {a.name: spec.flags_of(a) for a in spec.arms}
    if share:  # what is measured: a pair's ratio inside one process (absent: a process per trial)
        spec_json["design"] = SHARED_DESIGN
    elif joined:  # every workload of a model in one process per trial (absent: a process per workload)
        spec_json["design"] = JOINED_DESIGN
    return spec_json


def _runtimes(spec: CompareSpec, builds: Mapping[str, EngineBuild]) -> dict[str, ArmRuntime]:
    return {a.name: arm_runtime(a.name, builds[a.name], spec.flags_of(a), a.env, a.kind, a.api_key_env)
            for a in spec.arms}


def shares_process(spec: CompareSpec, builds: Mapping[str, EngineBuild]) -> bool:
    """Whether the study's pairs run in one engine process each (Engine.sharing):
    two arms of an engine kind that can, one build and environment, one context setting apart,
    and the user did not ask for a process per trial."""
    if spec.separate_processes or len(spec.arms) != 2:
        return False
    if not all(engine_for(a.kind).shares_process for a in spec.arms):
        return False
    a, b = _runtimes(spec, builds).values()
    return differing_setting(a, b, spec.in_process) is not None


def joins_workloads(spec: CompareSpec) -> bool:
    """Whether each trial runs all of a model's workloads in one process: several workloads that
    every arm's engine can run in one (Engine.argv_for), and the user did not ask for a process
    per trial and workload."""
    return not spec.separate_processes and len(spec.workloads) > 1 and _joins(spec)(list(spec.workloads))


def _joins(spec: CompareSpec) -> Callable[[Sequence[str]], bool]:
    """Whether every arm's engine runs these workloads in one process."""
    engines = [engine_for(a.kind) for a in spec.arms]
    return lambda ws: all(e.argv_for(ws) is not None for e in engines)


def _verbose_first(store: Store, study_id: str, spec: CompareSpec, plan: list[PlannedTrial]) -> list[PlannedTrial]:
    """The first planned trial of each arm and model whose placement is not yet known runs with
    its engine's load log on (llama-bench's ``-v``): the placement comes from a real trial, not
    from a load of its own. (An A/A of -v against none on the tiny MoE model, 40 pairs: tg32
    0.998 [0.924, 1.078], pp64 1.014 [0.958, 1.073]; bench/device_verbose.sh asks the same at
    30B scale.)"""
    got = store.state.get(study_id, PLACEMENT_STATE, {})
    flag = {a.name: engine_for(a.kind).load_log_flag for a in spec.arms}
    want = {(t.arm, t.model) for t in plan if flag.get(t.arm) and t.model not in got.get(t.arm, {})}
    out = []
    for t in plan:
        if (t.arm, t.model) in want:
            want.discard((t.arm, t.model))
            t = dataclasses.replace(t, argv=(*t.argv, str(flag[t.arm])))
        out.append(t)
    return out


def record_placements(store: Store, study_id: str) -> None:
    """The placements that verbose trials reported (llamabench.outcome_from parses the load
    log into the trial's environment), stored per arm and model once each. A trial whose log
    held no placement is recorded as such: it never stops the measurement."""
    got: dict[str, dict[str, Any]] = dict(store.state.get(study_id, PLACEMENT_STATE, {}))
    new = False
    for t in store.reads.trials(study_id):
        if t["status"] == "planned" or t["model"] in got.get(t["arm"], {}) or not t["env_json"]:
            continue
        entry = stored_json(t, "env_json").get("placement")
        if entry is not None:
            got.setdefault(t["arm"], {})[t["model"]] = entry
            new = True
    if new:
        store.state.put(study_id, PLACEMENT_STATE, got)


def _run_rounds(
    store: Store,
    study_id: str,
    spec: CompareSpec,
    builds: Mapping[str, EngineBuild],
    on_trial: TrialCallback | None,
    on_round: Callable[[int, int], None] | None,
    add_pairs_to: int | None,
    executor: Executor | None = None,
    placement: bool = False,
    share: bool = False,
    joined: bool = False,
    until: Callable[[list[Comparison]], bool] | None = None,
) -> list[Comparison]:
    """Run rounds of pairs until no cell is open, finish the study, return its comparisons."""
    runtimes = _runtimes(spec, builds)
    if share:
        runtimes = {n: dataclasses.replace(r, options={**r.options, "share": True, "in_process": spec.in_process})
                    for n, r in runtimes.items()}
    names = [a.name for a in spec.arms]
    while True:
        execute(store, study_id, runtimes, timeout_s=spec.timeout_s, on_trial=on_trial,
                interval_s=spec.sample_interval_s, executor=executor)
        if placement:
            record_placements(store, study_id)
        comps = analyze(store, study_id, spec)
        if spec.budget_s is not None and store.reads.engine_seconds(study_id) >= spec.budget_s:
            break
        if until is not None and until(comps):
            break
        # cells still open: any candidate unresolved and below the pair budget
        have = _planned_pairs(store, study_id)
        broken = _broken_cells(store, study_id)
        open_cells: dict[CellKey, int] = {}
        for c in comps:
            key = (c.model, c.workload)
            n_planned = have.get(key, 0)
            if not still_open(c, spec) or key in broken:
                continue
            if add_pairs_to is not None and n_planned < add_pairs_to:
                open_cells[key] = max(open_cells.get(key, 0), add_pairs_to)
                continue
            # futile: no ratio in the interval could give a verdict by max_pairs. (A one-sided
            # question is never futile before its cap: today's interval always reaches past
            # the narrower one that more pairs would give.)
            if spec.edge is None and not stats.can_still_decide(c.estimate, spec.band, spec.max_pairs):
                continue
            target = stats.next_pair_target(n_planned, spec.min_pairs, spec.max_pairs)
            if target is not None:
                open_cells[key] = max(open_cells.get(key, 0), target)
        add_pairs_to = None  # one forced round at most
        if not open_cells:
            break
        plan = []
        # None: the user's -r (or a server's). A shared process keeps the first design: the
        # allocation weighs a process's cost against noise between processes, which cancels there
        chosen = FIRST_REPS if share and not user_reps(spec) else adaptive_reps(store, study_id, spec)
        asked = asked_reps(spec)
        cold = {(c.model, c.workload): c.cold.count for c in comps if c.cold is not None}
        rounds = round_trials(open_cells, have, cold, _joins(spec) if joined else None)
        for model, w, ws, n_cold, start, target in rounds:
            # cold leading repetitions are left out, so they are added: the measured ones stay as many
            # (the user's own -r is only ever added to, never restated)
            if share:  # a shared trial's repetitions are its two instances', interleaved
                n_cold = per_instance(n_cold)
            reps = (chosen + n_cold if chosen is not None else
                    asked + n_cold if asked is not None and n_cold else None)
            argv = {a.name: tuple(engine_for(a.kind).argv_for(ws, reps) or ()) for a in spec.arms}
            plan += [dataclasses.replace(t, argv=argv[t.arm]) for t in pair_round(names, model, w, (), start, target)]
        plan = _interleave_cells(plan)
        if chosen is not None and not share:  # the design's own -r, cold repetitions not counted
            store.state.put(study_id, REPS_STATE, [*store.state.get(study_id, REPS_STATE, []), chosen])
        if placement:
            plan = _verbose_first(store, study_id, spec, plan)
        store.writes.add_trials(study_id, plan)
        if on_round:
            on_round(len(open_cells), max(open_cells.values()))
    # (a shared process holds both arms: its trials are not processes of their own, so the
    # between/within split and the -r it suggests would be about another design)
    n = None if share else noise.estimate(store, study_id)
    if n is not None:
        store.state.put(study_id, NOISE_STATE, n.to_json())
    store.writes.finish_study(study_id)
    return analyze(store, study_id, spec)


RoundTrials = list[tuple[str, str, list[str], int, int, int]]


def round_trials(open_cells: Mapping[CellKey, int], have: Mapping[CellKey, int], cold: Mapping[CellKey, int],
                 joins: Callable[[Sequence[str]], bool] | None) -> RoundTrials:
    """What the next round runs: (model, the trial's workload as stored, the workloads it runs,
    cold repetitions, first pair, pairs to have) per kind of trial. ``joins`` (None: a process per
    workload): one trial runs every open workload of its model that is at the same pair, where
    the engines can (each a test of its own); a cell once decided is left out of later trials,
    as it would be with a process each."""
    if joins is None:
        return [(model, w, [w], cold.get((model, w), 0), have.get((model, w), 0), target)
                for (model, w), target in open_cells.items()]
    groups: dict[tuple[str, int], list[str]] = defaultdict(list)
    for model, w in open_cells:
        groups[(model, have.get((model, w), 0))].append(w)
    out: RoundTrials = []
    for (model, start), ws in groups.items():
        target = max(open_cells[(model, w)] for w in ws)
        if len(ws) > 1 and joins(ws):
            out.append((model, JOINED.join(ws), ws, max(cold.get((model, w), 0) for w in ws), start, target))
        else:
            out += [(model, w, [w], cold.get((model, w), 0), start, target) for w in ws]
    return out


# What decides when to stop, not what is measured: a study asked again with another band
# or pair budget continues the pairs it has (bisect re-judges at twice the pairs).
STOPPING_RULES = ("band", "min_pairs", "max_pairs", "budget_s", "edge", "confounders")


def still_open(c: Comparison, spec: CompareSpec) -> bool:
    """Whether the cell's question is still open: its verdict is unresolved, or, for a
    one-sided question, its interval still straddles the edge."""
    if spec.edge is not None:
        return stats.side(c.estimate, spec.edge) is None  # (a steered cell's interval straddles it)
    return c.verdict == "unresolved"


def spec_dump(spec: CompareSpec) -> dict[str, Any]:
    """The spec as stored: an arm's default engine kind is left out, so a llama-bench study
    keeps the identity it had before arms named their kind (its --resume still finds it)."""
    out = spec.model_dump()
    if not out.get("hosts"):
        out.pop("hosts", None)  # a study without a fleet keeps the identity it always had
    if out.get("edge") is None:
        out.pop("edge", None)
    if out.get("confounders") == "said":
        out.pop("confounders", None)
    for key in ("separate_processes", "in_process"):  # only when asked: a study keeps its identity
        if not out.get(key):
            out.pop(key, None)
    for arm in out["arms"]:
        if arm.get("kind") == DEFAULT_KIND:
            del arm["kind"]
        if arm.get("api_key_env") is None:
            arm.pop("api_key_env", None)
    return out


def measurement_identity(spec_json: dict[str, Any]) -> dict[str, Any]:
    """The spec without its stopping rules: two specs that measure the same thing hash alike."""
    return {k: v for k, v in spec_json.items() if k not in STOPPING_RULES}


def _planned_pairs(store: Store, study_id: str) -> dict[CellKey, int]:
    """Pairs planned so far per cell (done, failed or still planned)."""
    out: dict[CellKey, int] = {}
    for t in store.reads.trials(study_id):
        for w in trial_workloads(t["workload"]):
            key = (t["model"], w)
            out[key] = max(out.get(key, 0), int(t["pair"]) + 1)
    return out


def _broken_cells(store: Store, study_id: str) -> set[CellKey]:
    """Cells where an arm failed twice and never succeeded: more pairs would only fail again."""
    fails: dict[tuple[str, str, str], int] = defaultdict(int)
    dones: set[tuple[str, str, str]] = set()
    for t in store.reads.trials(study_id):
        for w in trial_workloads(t["workload"]):
            k = (t["model"], w, t["arm"])
            if t["status"] == "done":
                dones.add(k)
            elif t["status"] in ("failed", "crashed", "timeout", "garbage"):
                fails[k] += 1
    return {(m, w) for (m, w, a), n in fails.items() if n >= 2 and (m, w, a) not in dones}


def _interleave_cells(plan: list[Any]) -> list[Any]:
    """Order a round pair by pair across cells, so drift hits every cell alike."""
    by_pair: dict[int, list[Any]] = defaultdict(list)
    for t in plan:
        by_pair[t.pair].append(t)
    return [t for p in sorted(by_pair) for t in by_pair[p]]


# -- rendering helpers used by cli and report -----------------------------------------


