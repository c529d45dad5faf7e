"""The compare driver: sequential, paired A/B(/C…) verdicts per (model, workload).

Orchestration only: the plan comes from :mod:`tokensleuth.plan`, trials run in
:mod:`tokensleuth.runner`, verdicts come from :mod:`tokensleuth.stats`.
"""

from __future__ import annotations

import dataclasses
import json
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tokensleuth import stats
from tokensleuth.engines import engine_for
from tokensleuth.engines.base import DEFAULT_KIND, ArmRuntime
from tokensleuth.engines.shared import differing_setting, per_instance
from tokensleuth.engines import llamabench_params as params
from tokensleuth import noise
from tokensleuth.plan import pair_round
from tokensleuth.results import load_cells
from tokensleuth.executors import Executor, execute
from tokensleuth.runner import TrialCallback, arm_runtime
from tokensleuth.sources.build import EngineBuild
from tokensleuth.spec import CompareSpec, spec_hash
from tokensleuth.store import PlannedTrial, Store, StudyHandle
from tokensleuth.workloads import planned_argv

if TYPE_CHECKING:
    from tokensleuth.outputs import PlannedCheck

CellKey = tuple[str, str]  # (model, workload)


@dataclass(slots=True)
class Comparison:
    """One candidate vs the baseline on one (model, workload)."""

    model: str
    workload: str
    baseline: str
    candidate: str
    pairs: int
    base_ts: list[float]
    cand_ts: list[float]
    estimate: stats.RatioEstimate | None
    verdict: str
    cpu_estimate: stats.RatioEstimate | None = None
    cpu_verdict: str = "unresolved"
    base_res: dict[str, Any] = field(default_factory=dict)
    cand_res: dict[str, Any] = field(default_factory=dict)
    # llama-bench's own settings that differ between the arms' runs (requested or not)
    param_diffs: list[params.ParamDiff] = field(default_factory=list)
    # server arms: TTFT / inter-token latency percentiles (results.Cell.latency)
    base_latency: dict[str, Any] | None = None
    cand_latency: dict[str, Any] | None = None
    # leading repetitions every trial of this cell left out (stats.cold_leading), None when none
    cold: stats.Cold | None = None
    shared: bool = False  # each pair ran in one engine process (engines.shared), not one per trial

    def warnings(self) -> list[str]:
        """Confounders visible only across arms: GPU clocks that drifted > 5% between them."""
        b, c = self.base_res.get("gpu_clock_mhz"), self.cand_res.get("gpu_clock_mhz")
        if b and c and abs(c - b) / b > 0.05:
            return [f"gpu-clock-drift: mean GPU clock {b:.0f} MHz ({self.baseline}) vs {c:.0f} MHz "
                    f"({self.candidate}) — lock clocks or let the GPU cool between runs"]
        return []

    def to_json(self) -> dict[str, Any]:
        e = self.estimate
        ce = self.cpu_estimate
        return {
            "model": self.model,
            "workload": self.workload,
            "baseline": self.baseline,
            "candidate": self.candidate,
            "ratio": e.ratio if e else None,
            "ci": [e.lo, e.hi] if e else None,
            "confidence": e.confidence if e else None,
            "method": e.method if e else None,
            "verdict": self.verdict,
            "pairs": self.pairs,
            "tokens_per_s": {
                "baseline": _mean_sd(self.base_ts),
                "candidate": _mean_sd(self.cand_ts),
            },
            "resources": {"baseline": self.base_res, "candidate": self.cand_res},
            "param_diffs": [d.to_json() for d in self.param_diffs],
            "warnings": self.warnings(),
            "resource_verdicts": {
                "cpu_ms_per_token": {
                    "ratio": ce.ratio if ce else None,
                    "ci": [ce.lo, ce.hi] if ce else None,
                    # the ratio is CPU ms/token candidate/baseline: above the band is "costlier"
                    "verdict": self.cpu_verdict,
                }
            },
            # leading repetitions left out of every trial's t/s: how many and how slow they ran
            "cold_repetitions": {"per_trial": self.cold.count if self.cold else 0,
                                 "per_instance": per_instance(self.cold.count) if self.cold and self.shared
                                 else None,
                                 "ratio": self.cold.ratio if self.cold else None},
            "design": SHARED_DESIGN if self.shared else "one process per trial",
            # server arms only: client-side TTFT / inter-token latency (None for a llama-bench arm)
            **({"latency": {"baseline": self.base_latency, "candidate": self.cand_latency}}
               if self.base_latency or self.cand_latency else {}),
        }


def _mean_sd(v: list[float]) -> dict[str, float | None]:
    if not v:
        return {"mean": None, "sd": None}
    s = stats.summarize(v)
    return {"mean": s.mean, "sd": s.sd}


def analyze(store: Store, study_id: str, spec: CompareSpec) -> list[Comparison]:
    """Pure read of the store into comparisons (one per candidate x model x workload)."""
    # (model, workload, arm) -> pair -> (mean t/s, cpu_ms, tokens)
    per: dict[tuple[str, str, str], dict[int, tuple[float, float | None, int]]] = defaultdict(dict)
    loaded = load_cells(store, study_id)
    # The per-trial statistic: mean t/s over the repetitions that did not stall, and the CPU
    # attributed to their timed durations (stats.trial_tokens_per_s, results.load_cells).
    trial_ts = {(tid, c.test_idx): v for c in loaded for tid, v in c.trial_means.items()}
    trial_cpu = {(tid, c.test_idx): v for c in loaded for tid, v in c.trial_cpu.items()}
    for r in store.trial_stats(study_id):
        key = (int(r["trial_id"]), int(r["test_idx"]))
        cpu_ms, tokens = trial_cpu.get(key, (r["cpu_ms"], int(r["tokens"])))
        per[(r["model"], r["workload"], r["arm"])][int(r["pair"])] = (
            trial_ts.get(key, float(r["mean_ts"])), cpu_ms, tokens)
    base = spec.baseline_name()
    cells = {(c.arm, c.model, c.test): c for c in loaded}

    def res(arm: str, model: str, w: str) -> dict[str, Any]:
        c = cells.get((arm, model, w))
        return c.resources() if c else {}

    def lat(arm: str, model: str, w: str) -> dict[str, Any] | None:
        c = cells.get((arm, model, w))
        return c.latency() if c else None

    reported = arm_settings(store, study_id)
    arm_flags = {a.name: a.flags for a in spec.arms}
    shared = json.loads(store.study(study_id)["spec_json"]).get("design") == SHARED_DESIGN

    def diffs(cand: str) -> list[params.ParamDiff]:
        if base not in reported or cand not in reported:
            return []
        asked = params.flag_fields(arm_flags[base]) | params.flag_fields(arm_flags[cand])
        return params.diff(reported[base], reported[cand], asked)

    out = []
    for model in spec.models:
        for w in spec.workloads:
            b = per.get((model, w, base), {})
            for cand in spec.candidates():
                c = per.get((model, w, cand), {})
                pairs = sorted(set(b) & set(c))  # a pair with a failed member is dropped whole
                bt = [b[p][0] for p in pairs]
                ct = [c[p][0] for p in pairs]
                est = stats.ratio_interval(bt, ct) if len(pairs) >= 2 else None
                verdict = stats.verdict(est, spec.band)
                cpu_pairs = [p for p in pairs if b[p][1] is not None and c[p][1] is not None
                             and b[p][2] and c[p][2]]
                cpu_est = None
                cpu_verdict = "unresolved"
                if len(cpu_pairs) >= 2:
                    bc = [b[p][1] / b[p][2] for p in cpu_pairs]  # type: ignore[operator]
                    cc = [c[p][1] / c[p][2] for p in cpu_pairs]  # type: ignore[operator]
                    if min(bc) > 0 and min(cc) > 0:
                        cpu_est = stats.ratio_interval(bc, cc)
                        # more CPU per token is worse: name it like a throughput verdict
                        v = stats.verdict(cpu_est, spec.band)
                        cpu_verdict = {"faster": "costlier", "slower": "cheaper"}.get(v, v)
                out.append(Comparison(
                    model, w, base, cand, len(pairs), bt, ct, est, verdict, cpu_est, cpu_verdict,
                    res(base, model, w), res(cand, model, w), diffs(cand), lat(base, model, w),
                    lat(cand, model, w), getattr(cells.get((base, model, w)), "cold", None), shared))
    return out


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
    """
    spec_json = dict(spec_dump(spec), **(identity or {}))
    spec_json["build_keys"] = {n: b.key for n, b in builds.items()}
    share = shares_process(spec, builds)
    if share:  # what is measured: a pair's ratio inside one process (absent: a process per trial)
        spec_json["design"] = SHARED_DESIGN
    h = spec_hash(measurement_identity(spec_json))
    if not measure:
        study_id = (store.find_resumable("compare", h) if resume else None) or (
            store.find_study("compare", h) if create else None)
        return (study_id, analyze(store, study_id, spec)) if study_id else ("", [])
    arms = [(a.name, a.source, dict(builds[a.name].to_json(), engine_kind=a.kind), a.flags, a.env)
            for a in spec.arms]
    handle = store.begin_study("compare", spec_json, h, resume=resume or create, arms=arms)
    if on_study:
        on_study(handle)
    with store.lease(handle.id):
        return handle.id, _run_rounds(store, handle.id, spec, builds, on_trial, on_round, add_pairs_to, executor,
                                      placement, share)


SHARED_DESIGN = "one process per pair (A,B,B,A)"
# what run_compare adds to a spec for the study's identity: the builds, a per-host study's
# machine, the design (a pair in one process)
IDENTITY_EXTRAS = ("build_keys", "host", "design")


def stored_spec(store: Store, study_id: str) -> CompareSpec:
    """The spec a compare study was run with, as stored (without what only its identity holds)."""
    spec_json = json.loads(store.study(study_id)["spec_json"])
    for k in IDENTITY_EXTRAS:
        spec_json.pop(k, None)
    return CompareSpec.model_validate(spec_json)


def _runtimes(spec: CompareSpec, builds: Mapping[str, EngineBuild]) -> dict[str, ArmRuntime]:
    return {a.name: arm_runtime(a.name, builds[a.name], (*a.flags, *spec.common_flags), a.env, a.kind, a.api_key_env)
            for a in spec.arms}


def shares_process(spec: CompareSpec, builds: Mapping[str, EngineBuild]) -> bool:
    """Whether the study's pairs run in one engine process each (tokensleuth.engines.shared):
    two arms of an engine kind that can, one build and environment, one context setting apart,
    and the user did not ask for a process per trial."""
    if spec.separate_processes or len(spec.arms) != 2:
        return False
    if not all(engine_for(a.kind).shares_process for a in spec.arms):
        return False
    a, b = _runtimes(spec, builds).values()
    return differing_setting(a, b) is not None


PLACEMENT_STATE = "placement"  # {arm: {model: Placement.to_json() or {"error": …}}}


def _verbose_first(store: Store, study_id: str, spec: CompareSpec, plan: list[PlannedTrial]) -> list[PlannedTrial]:
    """The first planned trial of each arm and model whose placement is not yet known runs with
    its engine's load log on (llama-bench's ``-v``): the placement comes from a real trial, not
    from a load of its own. (An A/A of -v against none on the tiny MoE model, 40 pairs: tg32
    0.998 [0.924, 1.078], pp64 1.014 [0.958, 1.073]; bench/device_verbose.sh asks the same at
    30B scale.)"""
    got = store.get_state(study_id, PLACEMENT_STATE, {})
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
    got: dict[str, dict[str, Any]] = dict(store.get_state(study_id, PLACEMENT_STATE, {}))
    new = False
    for t in store.trials(study_id):
        if t["status"] == "planned" or t["model"] in got.get(t["arm"], {}) or not t["env_json"]:
            continue
        entry = json.loads(t["env_json"]).get("placement")
        if entry is not None:
            got.setdefault(t["arm"], {})[t["model"]] = entry
            new = True
    if new:
        store.put_state(study_id, PLACEMENT_STATE, got)


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
) -> list[Comparison]:
    """Run rounds of pairs until no cell is open, finish the study, return its comparisons."""
    runtimes = _runtimes(spec, builds)
    if share:
        runtimes = {n: dataclasses.replace(r, options={**r.options, "share": True}) for n, r in runtimes.items()}
    names = [a.name for a in spec.arms]
    while True:
        execute(store, study_id, runtimes, timeout_s=spec.timeout_s, on_trial=on_trial,
                interval_s=spec.sample_interval_s, executor=executor)
        if placement:
            record_placements(store, study_id)
        comps = analyze(store, study_id, spec)
        if spec.budget_s is not None and store.engine_seconds(study_id) >= spec.budget_s:
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
        for (model, w), target in open_cells.items():
            start = have.get((model, w), 0)
            # cold leading repetitions are left out, so they are added: the measured ones stay as many
            # (the user's own -r is only ever added to, never restated)
            n_cold = cold.get((model, w), 0)
            if share:  # a shared trial's repetitions are its two instances', interleaved
                n_cold = per_instance(n_cold)
            extra: tuple[str, ...] = (("-r", str(chosen + n_cold)) if chosen is not None else
                                      ("-r", str(asked + n_cold)) if asked is not None and n_cold else ())
            plan += pair_round(names, model, w, (*planned_argv(w), *extra), start, target)
        plan = _interleave_cells(plan)
        if placement:
            plan = _verbose_first(store, study_id, spec, plan)
        store.add_trials(study_id, plan)
        if on_round:
            on_round(len(open_cells), max(open_cells.values()))
    # (a shared process holds both arms: its trials are not processes of their own, so the
    # between/within split and the -r it suggests would be about another design)
    n = None if share else noise.estimate(store, study_id)
    if n is not None:
        store.put_state(study_id, NOISE_STATE, n.to_json())
    store.finish_study(study_id)
    return analyze(store, study_id, spec)


NOISE_STATE = "noise"  # noise.Noise.to_json() of the finished study
FIRST_REPS = 3  # the first round's repetitions per process when the design is chosen for the user


def user_reps(spec: CompareSpec) -> bool:
    return any(f in ("-r", "--repetitions") for f in [*spec.common_flags, *(f for a in spec.arms for f in a.flags)])


def asked_reps(spec: CompareSpec) -> int | None:
    """The -r every llama-bench arm was given (the last one of its flags counts), None when
    none was, the arms differ or one is a server (its -r is requests per trial)."""
    if not all(engine_for(a.kind).reps_per_process for a in spec.arms):
        return None
    got = set()
    for a in spec.arms:
        flags = [*spec.common_flags, *a.flags]
        r = None
        for i, f in enumerate(flags[:-1]):
            if f in ("-r", "--repetitions") and flags[i + 1].isdigit():
                r = int(flags[i + 1])
        got.add(r)
    return got.pop() if len(got) == 1 else None


def adaptive_reps(store: Store, study_id: str, spec: CompareSpec) -> int | None:
    """Repetitions per process for the next round: the user's -r wins (None: keep it), as does
    a server arm (its -r is requests per trial); else FIRST_REPS until the study's own noise
    can be estimated, then the cheapest allocation for it (noise.Noise.best_reps)."""
    if user_reps(spec) or not all(engine_for(a.kind).reps_per_process for a in spec.arms):
        return None
    n = noise.estimate(store, study_id)
    if n is None:
        return FIRST_REPS
    # damped: at most double or halve per round. An early between-process estimate is noisy
    # (from 5 pairs it is often clipped at 0, which alone would send r to its bound)
    prev = last_reps(store, study_id) or FIRST_REPS
    return max(noise.R_MIN, max(prev // 2, min(2 * prev, n.best_reps())))


def last_reps(store: Store, study_id: str) -> int | None:
    """The -r of the study's most recently planned trial (None: none planned with one)."""
    row = store.db.execute("SELECT argv_json FROM trials WHERE study_id=? ORDER BY seq DESC LIMIT 1",
                           (study_id,)).fetchone()
    if row is None:
        return None
    argv = json.loads(row["argv_json"])
    for i, a in enumerate(argv[:-1]):
        if a in ("-r", "--repetitions") and argv[i + 1].isdigit():
            return int(argv[i + 1])
    return None


def arm_settings(store: Store, study_id: str) -> dict[str, dict[str, Any]]:
    """Each arm's llama-bench settings as its first finished run reported them."""
    out: dict[str, dict[str, Any]] = {}
    for r in store.results(study_id):
        if r["arm"] not in out:
            try:
                out[r["arm"]] = params.settings(json.loads(r["raw_json"]))
            except (ValueError, TypeError, AttributeError):
                continue  # an imported row without an object: nothing to diff
    return out


def unasked_diffs_sentence(comps: list[Comparison]) -> str:
    """Settings that differ between arms without the user asking: the likely cause."""
    seen: dict[str, list[str]] = {}
    for c in comps:
        labels = [d.label() for d in c.param_diffs if not d.requested]
        if labels and c.candidate not in seen:
            seen[c.candidate] = labels
    if not seen:
        return ""
    base = comps[0].baseline
    parts = [f"{cand}'s llama-bench ran with other settings than {base}'s ({', '.join(labels)})"
             for cand, labels in seen.items()]
    return (" Not asked for: " + "; ".join(parts) + " — likely part of the difference; rerun with "
            "--pin-params to give every arm the baseline's values.")


def pin_params(spec: CompareSpec, builds: Mapping[str, EngineBuild],
               log: Callable[[str], None] | None = None) -> CompareSpec:
    """The spec with every candidate given the baseline's llama-bench settings where they
    differ unasked (read from one short run of each arm on the first model)."""
    base = spec.baseline_name()
    arms = {a.name: a for a in spec.arms}
    probe = {n: params.probe_settings(params.bench(builds[n]), spec.models[0],
                                      [*a.flags, *spec.common_flags], spec.timeout_s)
             for n, a in arms.items()}
    new_arms = []
    for a in spec.arms:
        if a.name == base:
            new_arms.append(a)
            continue
        asked = params.flag_fields(arms[base].flags) | params.flag_fields(a.flags)
        flags, cannot = params.pin_flags(probe[base], probe[a.name],
                                         params.help_text(params.bench(builds[a.name])), asked)
        if log:
            log(f"pinned {a.name} to {base}'s settings: {' '.join(flags) or 'nothing differed'}"
                + (f"; cannot pin {', '.join(cannot)}" if cannot else ""))
        new_arms.append(a.model_copy(update={"flags": [*a.flags, *flags]}))
    return spec.model_copy(update={"arms": new_arms})


# What decides when to stop, not what is measured: a study asked again with another band
# or pair budget continues the pairs it has (bisect re-judges at twice the pairs).
STOPPING_RULES = ("band", "min_pairs", "max_pairs", "budget_s", "edge")


def still_open(c: Comparison, spec: CompareSpec) -> bool:
    """Whether the cell's question is still open: its verdict is unresolved, or, for a
    one-sided question, its interval still straddles the edge."""
    if spec.edge is not None:
        return stats.side(c.estimate, spec.edge) is None
    return c.verdict == "unresolved"


def spec_dump(spec: CompareSpec) -> dict[str, Any]:
    """The spec as stored: an arm's default engine kind is left out, so a llama-bench study
    keeps the identity it had before arms named their kind (its --resume still finds it)."""
    out = spec.model_dump()
    if not out.get("hosts"):
        out.pop("hosts", None)  # a study without a fleet keeps the identity it always had
    if out.get("edge") is None:
        out.pop("edge", None)
    if not out.get("separate_processes"):
        out.pop("separate_processes", None)
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
    for t in store.trials(study_id):
        key = (t["model"], t["workload"])
        out[key] = max(out.get(key, 0), int(t["pair"]) + 1)
    return out


def _broken_cells(store: Store, study_id: str) -> set[CellKey]:
    """Cells where an arm failed twice and never succeeded: more pairs would only fail again."""
    fails: dict[tuple[str, str, str], int] = defaultdict(int)
    dones: set[tuple[str, str, str]] = set()
    for t in store.trials(study_id):
        k = (t["model"], t["workload"], t["arm"])
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


def summary_sentence(comps: list[Comparison], band: float) -> str:
    """One paragraph a maintainer can read first."""
    parts = []
    for c in comps:
        model = Path(c.model).stem
        e = c.estimate
        if e is None:
            parts.append(f"{c.candidate} vs {c.baseline} on {c.workload} for {model}: no complete pairs")
            continue
        pct = (e.ratio - 1) * 100
        ci = f"[{(e.lo - 1) * 100:+.1f}%, {(e.hi - 1) * 100:+.1f}%]"
        if c.verdict in ("faster", "slower"):
            parts.append(f"{c.candidate} is {abs(pct):.1f}% {c.verdict} than {c.baseline} on {c.workload} "
                         f"for {model} {ci}")
        elif c.verdict == "same":
            parts.append(f"{c.candidate} is the same as {c.baseline} within ±{band * 100:g}% on {c.workload} "
                         f"for {model} ({pct:+.1f}% {ci})")
        else:
            need = stats.pairs_for_same(e, band)
            hint = (f"; at this noise ±{band * 100:g}% takes about {need} pairs" if need and need > c.pairs
                    else "")
            parts.append(f"{c.candidate} vs {c.baseline} on {c.workload} for {model} is unresolved after "
                         f"{c.pairs} pairs ({pct:+.1f}% {ci}; the interval straddles the ±{band * 100:g}% band"
                         f"{hint})")
    return "; ".join(parts) + "." + shared_sentence(comps) + cold_sentence(comps) + unasked_diffs_sentence(comps)


def shared_sentence(comps: Sequence[Comparison]) -> str:
    if not any(c.shared for c in comps):
        return ""
    return (" Each pair ran in one engine process (A, B, B, A on one load; --separate-processes for a "
            "process per trial).")


def cold_sentence(comps: Sequence[Comparison]) -> str:
    """Which cells left cold leading repetitions out of every trial, and how slow they ran."""
    seen: dict[str, stats.Cold] = {}
    for c in comps:
        if c.cold is not None and c.cold.count and c.workload not in seen:
            seen[c.workload] = c.cold
    if not seen:
        return ""
    shared = any(c.shared for c in comps)

    def first(k: stats.Cold) -> str:
        n = per_instance(k.count) if shared else k.count
        return ("the first " + ("repetition" if n == 1 else f"{n} repetitions")
                + (" of each instance" if shared else ""))

    parts = [f"{w}: {first(k)} ran {(1 - (k.ratio or 1)) * 100:.1f}% slower than the rest" for w, k in seen.items()]
    return (" Cold repetitions left out of every trial (and added to -r): " + "; ".join(parts) + ".")


def plan_output_checks(spec: CompareSpec) -> list[PlannedCheck]:
    """``--check-outputs``: each candidate arm x model against the baseline arm.

    Flags are translated here, before any measuring, so a sweep is refused up front.
    """
    from tokensleuth.engines.perplexity import perplexity_flags
    from tokensleuth.outputs import PlannedCheck

    base = spec.baseline_name()
    flags = {a.name: perplexity_flags([*spec.common_flags, *a.flags]) for a in spec.arms}
    return [PlannedCheck(base, a.name, m, flags[base], flags[a.name])
            for a in spec.arms if a.name != base for m in spec.models]


def compare_json(study_id: str, spec: CompareSpec, comps: list[Comparison],
                 builds: Mapping[str, dict[str, Any]],
                 outputs: Sequence[Mapping[str, Any]] | None = None) -> dict[str, Any]:
    from tokensleuth.report.jsonout import JSON_SCHEMA_VERSION

    # "outputs" only when --check-outputs ran: absent means "not checked", never "no change"
    extra = {} if outputs is None else {"outputs": [dict(o) for o in outputs]}
    return {
        "schema_version": JSON_SCHEMA_VERSION,
        "study": study_id,
        "band": spec.band,
        "arms": {a.name: {"source": a.source, "flags": a.flags, "env": a.env,
                          "engine": {k: builds[a.name].get(k) for k in
                                     ("source", "commit", "build_number", "backends", "cmake_flags")}}
                 for a in spec.arms},
        "summary": summary_sentence(comps, spec.band),
        "comparisons": [c.to_json() for c in comps],
        **extra,
    }


OUTPUTS_STATE = "output_checks"  # a compare's output checks ([ArmOutputCheck.to_json()]), when it ran them


def render_stored_compare(store: Store, study_id: str) -> tuple[str, dict[str, Any]]:
    from tokensleuth.outputs import render_output_checks
    from tokensleuth.report.markdown import render_compare

    spec = stored_spec(store, study_id)
    comps = analyze(store, study_id, spec)
    engines = {a["name"]: json.loads(a["engine_json"]) for a in store.arms(study_id)}
    md = render_compare(comps, study_id, spec.band, summary_sentence(comps, spec.band))
    checks = store.get_state(study_id, OUTPUTS_STATE)  # None: outputs were never checked
    if checks:
        md += "\n\n" + render_output_checks(checks)
    obj = compare_json(study_id, spec, comps, engines, checks)
    found = noise_of(store, study_id)
    if found:  # studies made before noise was measured have none
        md += "\n\n" + found[0]
        obj["noise"] = found[1]
    return md, obj


def noise_of(store: Store, study_id: str) -> tuple[str, dict[str, Any]] | None:
    """The study's noise sentence and JSON, when it was measured."""
    n = store.get_state(study_id, NOISE_STATE)
    return (noise.Noise.from_json(n).sentence(), n) if n else None

