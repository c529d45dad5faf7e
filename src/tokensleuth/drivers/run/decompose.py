"""decompose's request run to its result: the series prepared in a private clone, its spec
checked, each patch judged here or on a fleet (the output check here), the kept ones written."""

from __future__ import annotations

from typing import Any

from tokensleuth.core.errors import UserError
from tokensleuth.drivers import decompose as dec
from tokensleuth.drivers import shared
from tokensleuth.drivers.requests import DecomposeRequest, Say
from tokensleuth.drivers.shared import Summarize
from tokensleuth.engines import engine_for


def run(request: DecomposeRequest, say: Say, summarize: Summarize) -> dict[str, Any]:
    """The decompose's result object (``status`` done, else incomplete), with where the kept
    patches were written (``summarize``: what a step shows of its profile, the profile kind's)."""
    repo = request.repo.expanduser().resolve() if request.repo else None
    if not request.models:
        raise UserError("decompose needs --model FILE.gguf — name the model(s) to measure on")
    if request.out_branch is not None:
        dec.check_out_branch(repo, request.out_branch)
    private, base_sha, plist = dec.prepare(request.repo, request.base, request.series, request.patches)
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

        checker = dec.perplexity_check(spec["models"], spec["flags"], cache_dir() / "outputs", request.timeout_s)
    profile = request.profile and fleet is None and engine_for(request.kind).profiles
    with shared.open_store(request.db) as store:
        judge = None
        if fleet is not None:  # pairs spread over the machines; each builds the states itself
            from tokensleuth.drivers.judge import Judge

            judge = Judge(store, workloads=spec["workloads"], flags=spec["flags"], cmake=spec["cmake"],
                          timeout_s=request.timeout_s, log=say.line, kind=request.kind,
                          cache=fleet.cache(fleet.nodes[0]),  # type: ignore[arg-type]
                          executor=shared.executor_for(fleet))
        result = dec.run_decompose(store, private, base_sha, plist, spec, resume=request.resume, log=say.line,
                                   check_outputs=checker, judge=judge,
                                   diagnose=shared.diagnoser(store, request, request.probe and fleet is None, say),
                                   profile=shared.profiler(store, request.cmake, request.flags, request.timeout_s, say,
                                                           summarize) if profile else None)
    if request.out_branch is not None and repo is not None:
        dec.write_branch(repo, private, result["final"], request.out_branch)
        result["out_branch"] = request.out_branch
    if request.out_dir is not None:
        result["out_dir"] = [str(p) for p in dec.write_dir(private, result["base"], result["final"], request.out_dir)]
    return result
