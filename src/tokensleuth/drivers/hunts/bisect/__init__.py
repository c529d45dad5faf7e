"""The bisect driver: find the first slower commit (or release), with proof.

The search itself is :func:`search`, a pure function of an ordered candidate list
and a ``judge(index) -> outcome`` callable, so it is tested with a dict. The
driver :func:`run_bisect` supplies a judge that builds the candidate through the
build cache and classifies it with compare's sequential verdicts, and persists
every outcome in the store so a killed bisect resumes without re-measuring.

The package, split along the bisect's seams:

- ``search.py``: the pure search (one candidate at a time, or k at once);
- ``steps.py``: :class:`Bisector`, which judges a candidate and persists its step;
- ``verdicts.py``: the rules from verdicts to answers (the edge, the endpoints, the controls);
- ``answer.py``: from the endpoints to the answer: search, verification, controls;
- ``culprit.py``: the culprit's source changes, its profile, and the outputs search.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tokensleuth.core.errors import UserError
from tokensleuth.drivers import shared
from tokensleuth.drivers.hunts.bisect.answer import answer_bisect, store_answer
from tokensleuth.drivers.hunts.bisect.culprit import bisect_outputs, culprit_profile, source_changes
from tokensleuth.drivers.hunts.bisect.search import (
    OUTCOMES,
    SearchResult,
    probe_points,
    search,
    search_parallel,
)
from tokensleuth.drivers.hunts.bisect.steps import Bisector, Log, Step
from tokensleuth.drivers.hunts.bisect.verdicts import (
    ANSWERED,
    endpoint_answer,
    half_regression_band,
    regression_edge,
    specific_to_model,
)
from tokensleuth.drivers.machine import doctor_line
from tokensleuth.drivers.requests import BisectRequest, Say
from tokensleuth.drivers.slower import Profiler, Summarize, profiler
from tokensleuth.drivers.verdicts.diagnose import Diagnoser, diagnoser
from tokensleuth.drivers.verdicts.judge import Judge
from tokensleuth.engines import engine_for
from tokensleuth.sources import history, parse_source
from tokensleuth.sources.build import BuildCache
from tokensleuth.sources.history import Candidate
from tokensleuth.sources.pack import open_repo
from tokensleuth.trials.spec import spec_hash

if TYPE_CHECKING:
    from tokensleuth.fleet import Fleet
    from tokensleuth.store import Store

__all__ = [
    "ANSWERED", "OUTCOMES", "Bisector", "Log", "SearchResult", "Step", "answer_bisect", "bisect_outputs",
    "culprit_profile", "endpoint_answer", "half_regression_band", "probe_points", "regression_edge",
    "run_bisect", "search", "search_parallel", "source_changes", "specific_to_model",
]


def run_bisect(store: Store, cands: Sequence[Candidate], spec: dict[str, Any], *, resume: bool = False,
               log: Log | None = None, fleet: Fleet | None = None,
               diagnose: Diagnoser | None = None, profile: Profiler | None = None,
               judge: Judge | None = None, search_outputs: bool = True) -> dict[str, Any]:
    """Bisect ``cands`` (good first, bad last); returns the bisect object of docs/architecture.md.

    ``result["status"]`` says how it ended (see ANSWERED); an unresolved bisect stays
    resumable, and resuming it adds pairs where the answer was missing. ``diagnose`` (study
    id, builds by arm name) says why undecided endpoints stayed undecided (diagnose.py).
    ``judge``: a caller's own (a scan's: its builds and the pairs it asked for are this
    bisect's too); ``search_outputs``: False when the caller searches the outputs itself.
    """
    log = log or (lambda s: None)
    key = dict(spec, candidates=[c.source for c in cands])
    h = spec_hash(key)
    handle = store.writes.begin_study("bisect", key, h, resume=resume)
    stored = store.state.get(handle.id, "result")
    if handle.finished and stored is not None:
        log(f"bisect {handle.id} already finished — its stored result follows")
        return dict(stored)
    with store.leases.hold(handle.id):
        store.state.put(handle.id, "result", None)  # running again: the stored answer is no longer current
        bis = Bisector(store, handle.id, cands, spec, log, judge=judge, fleet=fleet)
        result = answer_bisect(bis, store, handle.id, cands, spec, log, diagnose)
        if spec.get("check_outputs") and search_outputs and result["status"] != "crash":
            result["outputs"] = bisect_outputs(bis, log)
        if profile is not None and result["status"] == "found":
            result["profile"] = culprit_profile(result, cands, spec, profile, log)
        return store_answer(store, handle.id, result)


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
    doctor_line(say)
    profile = request.profile and fleet is None and engine_for(request.kind).profiles
    with shared.open_store(request.db) as store:
        return run_bisect(store, cands, spec, resume=request.resume, log=say.line, fleet=fleet,
                          diagnose=diagnoser(store, request, request.probe and fleet is None, say),
                          profile=profiler(store, request.cmake, request.flags, request.timeout_s, say,
                                                  summarize) if profile else None)
