"""The decompose driver: measure a patch series one patch at a time, keep what pays.

State 0 is the base. Each patch is applied on top of the last *kept* state in a private
repository (:mod:`tokensleuth.sources.patches`); a patch already contained there is ``skipped``
(never built), one that does not apply or build is ``failed``, and otherwise the new
state is judged against the last kept one (:class:`tokensleuth.drivers.verdicts.judge.Judge`, all models
x workloads) and ``kept`` or ``dropped``. Every step is persisted in the study's state,
keyed by the state it was applied to, so a killed decompose resumes without rebuilding
or re-measuring, and a step is only reused while the kept chain before it is unchanged.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tokensleuth.core.errors import UserError
from tokensleuth.drivers import shared
from tokensleuth.drivers.hunts.decompose.branches import check_out_branch, prepare, write_branch, write_dir
from tokensleuth.drivers.hunts.decompose.perplexity import perplexity_check
from tokensleuth.drivers.hunts.decompose.steps import Decomposer, Log, OutputCheck
from tokensleuth.drivers.requests import DecomposeRequest, Say
from tokensleuth.drivers.slower import Profiler, Summarize, profiler
from tokensleuth.drivers.verdicts.diagnose import Diagnoser, diagnoser
from tokensleuth.drivers.verdicts.judge import Judge
from tokensleuth.engines import engine_for
from tokensleuth.sources.patches import Patch, PrivateRepo
from tokensleuth.store import Store
from tokensleuth.trials.spec import spec_hash


def run_decompose(store: Store, repo: PrivateRepo, base: str, patches: Sequence[Patch], spec: dict[str, Any], *,
                  resume: bool = False, log: Log | None = None, check_outputs: OutputCheck | None = None,
                  judge: Judge | None = None, diagnose: Diagnoser | None = None,
                  profile: Profiler | None = None) -> dict[str, Any]:
    """Decompose ``patches`` on ``base`` (a commit of ``repo``); returns the decompose object of docs/architecture.md.

    ``diagnose`` (study id, builds by arm name) says why the first undecided step stayed so.

    ``result["status"]`` is ``done`` when every step and the scoreboard were decided,
    else ``incomplete`` (the study stays open: ``--resume`` adds pairs where they were missing).
    """
    log = log or (lambda s: None)
    key = dict(spec, base=base, repo=str(repo.path), patches=[p.digest for p in patches],
               output_check=check_outputs is not None)
    handle = store.writes.begin_study("decompose", key, spec_hash(key), resume=resume)
    stored = store.state.get(handle.id, "result")
    if handle.finished and stored is not None:
        log(f"decompose {handle.id} already finished — its stored result follows")
        return dict(stored)
    with store.leases.hold(handle.id):
        store.state.put(handle.id, "result", None)
        result = Decomposer(store, handle.id, repo, base, patches, spec, judge=judge, log=log,
                            check_outputs=check_outputs, diagnose=diagnose, profile=profile).run()
        store.state.put(handle.id, "result", result)
        if result["status"] == "done":
            store.writes.finish_study(handle.id)
        return result


# -- inputs and outputs ----------------------------------------------------------------


# -- outputs ---------------------------------------------------------------------------


def run(request: DecomposeRequest, say: Say, summarize: Summarize) -> dict[str, Any]:
    """The decompose's result object (``status`` done, else incomplete), with where the kept
    patches were written (``summarize``: what a step shows of its profile, the profile kind's)."""
    repo = request.repo.expanduser().resolve() if request.repo else None
    if not request.models:
        raise UserError("decompose needs --model FILE.gguf — name the model(s) to measure on")
    if request.out_branch is not None:
        check_out_branch(repo, request.out_branch)
    private, base_sha, plist = prepare(request.repo, request.base, request.series, request.patches)
    spec = shared.judged_spec(request, ["pp512", "tg128"], keep_neutral=request.keep_neutral,
                              allow_output_change=request.allow_output_change)
    shared.set_kind(spec, request.kind)
    shared.check_judged(spec, "decompose")
    fleet = shared.open_fleet(request, say)
    if fleet is not None and request.check_outputs:
        raise UserError("the output check runs on this machine only — with --cluster add --no-output-check")
    if fleet is not None:
        fleet.check_files(shared.fleet_paths([*spec["models"], *spec["control_models"]], []))
    checker = None
    if request.check_outputs:
        from tokensleuth.core.paths import cache_dir

        checker = perplexity_check(spec["models"], spec["flags"], cache_dir() / "outputs", request.timeout_s)
    profile = request.profile and fleet is None and engine_for(request.kind).profiles
    with shared.open_store(request.db) as store:
        judge = None
        if fleet is not None:  # pairs spread over the machines; each builds the states itself
            from tokensleuth.drivers.verdicts.judge import Judge

            judge = Judge(store, workloads=spec["workloads"], flags=spec["flags"], cmake=spec["cmake"],
                          timeout_s=request.timeout_s, log=say.line, kind=request.kind,
                          cache=fleet.cache(fleet.nodes[0]),  # type: ignore[arg-type]
                          executor=shared.executor_for(fleet))
        result = run_decompose(store, private, base_sha, plist, spec, resume=request.resume, log=say.line,
                                   check_outputs=checker, judge=judge,
                                   diagnose=diagnoser(store, request, request.probe and fleet is None, say),
                                   profile=profiler(store, request.cmake, request.flags, request.timeout_s, say,
                                                           summarize) if profile else None)
    if request.out_branch is not None and repo is not None:
        write_branch(repo, private, result["final"], request.out_branch)
        result["out_branch"] = request.out_branch
    if request.out_dir is not None:
        result["out_dir"] = [str(p) for p in write_dir(private, result["base"], result["final"], request.out_dir)]
    return result
