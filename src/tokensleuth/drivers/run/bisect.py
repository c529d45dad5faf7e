"""bisect's request run to its result: the candidates from the history its request names, its
spec checked, the search here or on a fleet, the culprit diagnosed and profiled."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tokensleuth.core.errors import UserError
from tokensleuth.drivers import shared
from tokensleuth.drivers import bisect as bis
from tokensleuth.drivers.requests import BisectRequest, Say
from tokensleuth.drivers.shared import Summarize
from tokensleuth.engines import engine_for
from tokensleuth.sources import history, parse_source
from tokensleuth.sources.build import BuildCache
from tokensleuth.sources.history import Candidate
from tokensleuth.sources.pack import open_repo


def candidates(request: BisectRequest) -> list[Candidate]:
    """good to bad: a git range, a PyPI package's versions, or prebuilt folders in order."""
    good, bad = request.good, request.bad
    given = [o for o, v in (("--repo", request.repo), ("--source", request.source), ("--bin", request.bins)) if v]
    if len(given) > 1:
        raise UserError(f"{' and '.join(given)} each name a history to bisect — give one of them")
    if request.repo is not None:
        if not good or not bad:
            raise UserError("bisect needs --good REV and --bad REV — name the last good and first bad revisions")
        repo = open_repo(Path(request.repo).expanduser().resolve())  # a packed history (a git bundle): its clone
        parse_source(f"git:{repo}@{good}")
        return history.git_candidates(str(repo), good, bad)
    if request.source is not None:
        prefix, _, name = request.source.partition(":")
        if prefix != "pypi" or not name or "==" in name:
            raise UserError(f"--source {request.source!r}: write pypi:NAME (versions come from --good/--bad)")
        return history.pypi_candidates(name, good, bad)
    if request.bins:
        for d in request.bins:
            b = BuildCache().get(f"bin:{d}")  # each folder's llama-bench can run, before any trial
            if request.check_outputs:
                b.binary("llama-perplexity")
        return history.bin_candidates([str(Path(d).resolve()) for d in request.bins])
    raise UserError("nothing to bisect — pass --repo PATH, --source pypi:NAME or --bin DIR (twice or more)")


def run(request: BisectRequest, say: Say, summarize: Summarize) -> dict[str, Any]:
    """The bisect's result object (its ``status`` says how it ended)."""
    spec = shared.judged_spec(request, ["pp512"])
    if request.pin_params:  # only when asked: older bisects keep their identity
        spec["pin_params"] = True
    if request.check_outputs:
        shared.check_outputs_flags(request.flags)
        spec["check_outputs"] = True
    shared.set_kind(spec, request.kind)
    shared.check_judged(spec, "bisect")  # before the history is listed or anything built
    cands = candidates(request)
    fleet = shared.open_fleet(request, say)
    shared.refuse_on_fleet(fleet, pin_params=request.pin_params, check_outputs=request.check_outputs)
    if fleet is not None:
        fleet.check_files(shared.fleet_paths(spec["models"] + spec["control_models"], [c.source for c in cands]))
    shared.doctor_line(say)
    profile = request.profile and fleet is None and engine_for(request.kind).profiles
    with shared.open_store(request.db) as store:
        return bis.run_bisect(store, cands, spec, resume=request.resume, log=say.line, fleet=fleet,
                          diagnose=shared.diagnoser(store, request, request.probe and fleet is None, say),
                          profile=shared.profiler(store, request.cmake, request.flags, request.timeout_s, say,
                                                  summarize) if profile else None)
