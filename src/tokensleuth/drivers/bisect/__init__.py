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
from typing import TYPE_CHECKING, Any

from tokensleuth.drivers.bisect.answer import answer_bisect, store_answer
from tokensleuth.drivers.bisect.culprit import bisect_outputs, culprit_profile, source_changes
from tokensleuth.drivers.bisect.search import OUTCOMES, SearchResult, probe_points, search, search_parallel
from tokensleuth.drivers.bisect.steps import Bisector, Log, Step
from tokensleuth.drivers.bisect.verdicts import (
    ANSWERED,
    endpoint_answer,
    half_regression_band,
    regression_edge,
    specific_to_model,
)
from tokensleuth.drivers.diagnose import Diagnoser
from tokensleuth.drivers.judge import Judge, Profiler
from tokensleuth.sources.history import Candidate
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
