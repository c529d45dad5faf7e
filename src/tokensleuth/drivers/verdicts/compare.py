"""compare's request run to its outcome: every arm's source built and checked, the memory guard,
pinning and output checks planned, the pairs measured here or on a fleet, an unresolved verdict
diagnosed and a changed one profiled."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tokensleuth.core.errors import UserError
from tokensleuth.core.paths import default_db
from tokensleuth.drivers import shared
from tokensleuth.drivers.machine import doctor_line
from tokensleuth.drivers.requests import CompareRequest, Say
from tokensleuth.drivers.slower import Summarize, profiler
from tokensleuth.drivers.verdicts import pairs as compare
from tokensleuth.drivers.verdicts.comparisons import OUTPUTS_STATE, Comparison
from tokensleuth.drivers.verdicts.diagnose import Prescription, diagnose
from tokensleuth.engines import engine_for
from tokensleuth.engines.checks import check_arm
from tokensleuth.sources.build import DEFAULT_TARGETS, EngineBuild
from tokensleuth.trials.memory import MEMORY_STATE
from tokensleuth.trials.spec import CompareSpec

if TYPE_CHECKING:
    from tokensleuth.fleet import Fleet
    from tokensleuth.trials.outputs import ArmOutputCheck, PlannedCheck


@dataclasses.dataclass(frozen=True)
class CompareOutcome:
    """What a compare request ended with; the command renders ``study`` through the kind ``kind``."""

    study: str
    kind: str  # "compare", or "crosshost" (--per-host)
    diagnosis: Prescription | None = None
    warnings: list[Any] = dataclasses.field(default_factory=list)  # the store's rows, rendered by the command
    failure: str | None = None  # said after the result is printed and written (exit 1)
    markup: bool = False  # (a fleet's table is printed as it always was: console markup read)


def run(request: CompareRequest, say: Say, summarize: Summarize) -> CompareOutcome:
    """Build every arm's source, check and guard the arms, pin and plan the output checks, measure,
    diagnose an unresolved verdict and profile a changed one (``summarize``: the profile kind's)."""
    spec = request.spec
    for a in spec.arms:
        for note in spec.joined(a).notes(a.name):  # an arm's flag over a common one: said once
            say.line(note)
        check_arm(None, a.name, a.kind, spec.flags_of(a), a.env, spec.workloads,
                  api_key_env=a.api_key_env, source=a.source)
        if a.source.startswith("url:"):  # an attached server that answers with another model: one line
            engine_for(a.kind).check_served(a.source, spec.models)
    if spec.hosts and request.cluster is None:
        raise UserError("the study file names [[hosts]] — run it with --cluster auto or --cluster HOST:PORT")
    fleet = shared.open_fleet(request, say, "--per-host" if request.per_host else "", [h.on for h in spec.hosts])
    if fleet is not None:
        shared.refuse_on_fleet(fleet, pin_params=request.pin_params, check_outputs=request.check_outputs,
                               profile=request.profile)
        return _on_fleet(fleet, request, say)
    builds, by_source = _build_arms(spec, request.check_outputs, say)
    predicted = _guard_memory(spec, builds, say)
    if request.pin_params:
        spec = pin_params(spec, builds, log=say.line)
    plan = plan_output_checks(spec) if request.check_outputs else None  # a sweep is refused before measuring
    for b in by_source.values() if request.check_outputs else ():
        b.binary("llama-perplexity")  # a bin: engine without it is refused before measuring too
    doctor_line(say)

    def on_round(n_cells: int, target: int) -> None:
        say.line(f"round: {n_cells} open cell(s), up to {target} pairs")

    with shared.open_store(request.db) as store:
        sid, comps = compare.run_compare(store, spec, builds, resume=request.resume,
                                         on_trial=shared.trial_printer(say), on_round=on_round, placement=True,
                                         identity=request.identity)
        if predicted:  # beside the placement the load log reported (state "placement")
            store.state.put(sid, MEMORY_STATE, predicted)
        warnings = store.reads.warnings(sid)
        rx = None
        if any(c.verdict == "unresolved" for c in comps):
            rx = diagnose(store, sid, builds, probe=request.probe, argv=request.argv, log=say.line)
        if request.profile:
            from tokensleuth.drivers.slower.ops import PROFILES_STATE, profile_comparisons

            store.state.put(sid, PROFILES_STATE, profile_comparisons(
                comps, spec, profiler(store, list(spec.arms[0].cmake), [*spec.common_flags], spec.timeout_s,
                                             say, summarize), log=say.line))
        if plan is not None:
            checks = [c.to_json() for c in run_output_checks(plan, builds, spec.timeout_s, say)]
            store.state.put(sid, OUTPUTS_STATE, checks)  # `report` shows them too
    return CompareOutcome(sid, "compare", rx, warnings, _no_pair(sid, comps))


def _no_pair(sid: str, comps: list[Comparison]) -> str | None:
    if all(c.estimate is None for c in comps):
        return f"no complete pair of trials in study {sid} (see the messages above)"
    return None


def _build_arms(spec: CompareSpec, check_outputs: bool,
                say: Say) -> tuple[dict[str, EngineBuild], dict[tuple[str, tuple[str, ...]], EngineBuild]]:
    """Each source built once (with every kind's targets its arms need), every arm checked on it."""
    from tokensleuth.trials.outputs import CHECK_TARGETS

    # --check-outputs: llama-perplexity built beside llama-bench, so both come from one build
    base_targets = CHECK_TARGETS if check_outputs else DEFAULT_TARGETS
    builds: dict[str, EngineBuild] = {}
    by_source: dict[tuple[str, tuple[str, ...]], EngineBuild] = {}
    help_cache: dict[str, str] = {}
    for a in spec.arms:
        key = (a.source, tuple(a.cmake))
        if key not in by_source:
            kinds = [x.kind for x in spec.arms if (x.source, tuple(x.cmake)) == key]
            by_source[key] = shared.build(a.source, a.cmake, shared.targets_for(kinds, base_targets), say)
        check_arm(by_source[key], a.name, a.kind, spec.flags_of(a), a.env, spec.workloads,
                  help_cache, a.api_key_env, a.source)  # every arm's own
        builds[a.name] = by_source[key]
    return builds, by_source


def _guard_memory(spec: CompareSpec, builds: Mapping[str, EngineBuild], say: Say) -> dict[str, dict[str, Any]]:
    """A load that cannot fit is refused before any arm starts; what each arm needs, by model."""
    from tokensleuth.trials.memory import guard

    predicted: dict[str, dict[str, Any]] = {}
    for a in spec.arms:
        needs = guard(spec.models, spec.flags_of(a), spec.workloads, builds[a.name].backends,
                      warn=say.line, kind=a.kind)  # None: the arm's engine has no load to guard
        if needs is not None:
            predicted[a.name] = {m: need.to_json() for m, need in needs}
    return predicted


def _on_fleet(fleet: Fleet, request: CompareRequest, say: Say) -> CompareOutcome:
    """compare --cluster: pairs spread over the machines, or (--per-host) a study on each."""
    spec = request.spec

    def targets(a: Any) -> tuple[str, ...]:
        return shared.targets_for([a.kind], DEFAULT_TARGETS)

    fleet.check_files(shared.fleet_paths(spec.models, [a.source for a in spec.arms]))
    if request.per_host:
        from tokensleuth.drivers.verdicts.crosshost import HOSTS_STATE, run_per_host

        sid = run_per_host(request.db or default_db(), fleet, spec, targets, resume=request.resume, log=say.line,
                           on_trial=lambda label: shared.trial_printer(say, label))
        with shared.open_store(request.db) as store:
            hosts = store.state.get(sid, HOSTS_STATE) or []
        failure = None if any("study" in h for h in hosts) else (
            f"no machine finished its study in {sid} (see the messages above)")
        return CompareOutcome(sid, "crosshost", failure=failure, markup=True)
    builds: dict[str, EngineBuild] = {}
    for a in spec.arms:  # the first machine's builds name the study; every machine makes its own
        builds[a.name] = fleet.build(fleet.nodes[0], a.source, list(a.cmake), targets(a))
        fleet.check_arm(fleet.nodes[0], builds[a.name], a.name, a.kind, spec.flags_of(a), a.env,
                        spec.workloads, a.source)
    with shared.open_store(request.db) as store:
        sid, comps = compare.run_compare(store, spec, builds, resume=request.resume,
                                         on_trial=shared.trial_printer(say), executor=shared.executor_for(fleet),
                                         identity=request.identity)
        warnings = store.reads.warnings(sid)
    return CompareOutcome(sid, "compare", None, warnings, _no_pair(sid, comps), markup=True)


def run_output_checks(plan: list[PlannedCheck], builds: dict[str, EngineBuild], timeout_s: float,
                      say: Say) -> list[ArmOutputCheck]:
    """Output checks of a compare (a line each); base logits cached under the cache dir."""
    from tokensleuth.core.paths import cache_dir
    from tokensleuth.trials.outputs import OutputChecker, run_planned

    def on_check(c: ArmOutputCheck) -> None:
        say.line(f"outputs {c.candidate} vs {c.baseline} on {Path(c.model).stem}: {c.check.verdict} "
                 f"({c.check.seconds:.1f} s)")

    return run_planned(plan, builds, OutputChecker(cache_dir() / "outputs", timeout_s=timeout_s), on_check)


def pin_params(spec: CompareSpec, builds: Mapping[str, EngineBuild],
               log: Callable[[str], None] | None = None) -> CompareSpec:
    """The spec with every candidate given the baseline's llama-bench settings where they
    differ unasked (read from one short run of each arm on the first model)."""
    base = spec.baseline_name()
    arms = {a.name: a for a in spec.arms}
    hooks = {a.name: engine_for(a.kind).settings for a in spec.arms}
    for a in spec.arms:
        if hooks[a.name] is None:
            raise UserError(f"--pin-params: arm {a.name} runs {a.kind}, which reports no settings to pin — "
                            "drop --pin-params or give every arm a kind that reports them (llama-bench)")
    params = hooks[base]
    assert params is not None
    base_settings = params.probe(builds[base], spec.models[0], spec.flags_of(arms[base]), spec.timeout_s)
    new_arms = []
    for a in spec.arms:
        if a.name == base:
            new_arms.append(a)
            continue
        own = hooks[a.name]
        assert own is not None
        asked = params.flag_fields(arms[base].flags) | own.flag_fields(a.flags)
        flags, cannot = own.pin_to(base_settings, builds[a.name], spec.models[0], spec.flags_of(a), asked,
                                   spec.timeout_s)
        if log:
            log(own.pin_line(a.name, base, flags, cannot))
        new_arms.append(a.model_copy(update={"flags": [*a.flags, *flags]}))
    return spec.model_copy(update={"arms": new_arms})


def plan_output_checks(spec: CompareSpec) -> list[PlannedCheck]:
    """``--check-outputs``: each candidate arm x model against the baseline arm.

    Flags are translated here, before any measuring, so a sweep is refused up front.
    """
    from tokensleuth.engines.perplexity import perplexity_flags
    from tokensleuth.trials.outputs import PlannedCheck

    base = spec.baseline_name()
    flags = {a.name: perplexity_flags(spec.flags_of(a)) for a in spec.arms}
    return [PlannedCheck(base, a.name, m, flags[base], flags[a.name])
            for a in spec.arms if a.name != base for m in spec.models]
