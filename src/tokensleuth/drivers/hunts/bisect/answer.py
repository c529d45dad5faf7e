"""A bisect from its endpoints to its answer (:func:`answer_bisect`): the endpoints built and compared
(twice the pairs when undecided), the candidates searched (k at once on a fleet), the first bad
verified against its parent, the source changes and llama-bench's settings at the culprit, the
controls; and the answer stored (:func:`store_answer`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tokensleuth.core.errors import EngineError
from tokensleuth.drivers.hunts.bisect.culprit import source_changes
from tokensleuth.drivers.hunts.bisect.search import search, search_parallel
from tokensleuth.drivers.hunts.bisect.steps import Bisector, Log
from tokensleuth.drivers.hunts.bisect.verdicts import (
    ANSWERED,
    endpoint_answer,
    half_regression_band,
    specific_to_model,
)
from tokensleuth.drivers.verdicts.diagnose import Diagnoser
from tokensleuth.drivers.verdicts.judge import manifest_build
from tokensleuth.sources.history import Candidate
from tokensleuth.store import Store


def answer_bisect(bis: Bisector, store: Store, sid: str, cands: Sequence[Candidate], spec: dict[str, Any],
         log: Log, diagnose: Diagnoser | None = None) -> dict[str, Any]:
    """The bisect of ``cands`` under study ``sid``, judged by ``bis``: its result object (see
    :func:`tokensleuth.drivers.hunts.bisect.run_bisect`), not yet stored."""
    good, bad = cands[0], cands[-1]
    result: dict[str, Any] = {"study": sid, "good": good.label, "bad": bad.label, "status": "unresolved",
                              "first_bad": None, "culprit_range": [], "skipped": [], "crashed": [],
                              "steps": [], "verified": False}
    log(f"endpoints: {good.label} vs {bad.label}")
    # (endpoints measured before, on a fresh machine: read back, neither built until a step needs it)
    known = bis.answered(0, len(cands) - 1, spec["models"], spec["band"], spec["max_pairs"])
    if known is not None:
        log(f"  measured before (study {known.study}): neither endpoint is built for it")
        ends = known  # (no cell of it is unresolved: no more pairs to ask for)
    else:
        for i in (0, len(cands) - 1):
            if bis.build(i) is None:
                raise EngineError(f"endpoint {cands[i].label} does not build — choose another endpoint")
        for max_pairs in (spec["max_pairs"], spec["max_pairs"] * 2):  # unresolved: the same pairs go on
            ends = bis.compare(0, len(cands) - 1, spec["models"], spec["band"], max_pairs)
            if "unresolved" not in ends.verdicts() or ends.failed("A") or ends.failed("B"):
                break
    result["endpoints"] = [c.to_json() for c in ends.comparisons]
    result["param_diffs"] = [d.to_json() for d in ends.param_diffs]
    stop = endpoint_answer(ends, spec["band"], good.label, bad.label)
    if stop is not None:
        result["status"], result["reason"] = stop
        builds = {"A": bis.builds.get(good.source), "B": bis.builds.get(bad.source)}
        if stop[0] == "unresolved" and diagnose is not None and ends.study:
            why = diagnose(ends.study, {k: b for k, b in builds.items() if b is not None})
            if why:
                result["diagnosis"] = why
        return result
    regress = [c for c in ends.comparisons if c.verdict in ("slower", "faster")]
    if spec.get("cells"):  # bisect on these cells only (a scan's: the one that moved most)
        regress = [c for c in regress if [c.model, c.workload] in spec["cells"]] or regress
    worst = max(regress, key=lambda c: abs(1 - c.estimate.ratio) if c.estimate else 0.0)
    assert worst.estimate is not None
    store.state.put(sid, "endpoint_ratio", worst.estimate.ratio)
    result["endpoint_ratio"] = worst.estimate.ratio  # (its direction words the answer: slowdown or speed-up)
    store.state.put(sid, "endpoint_cells", [[c.model, c.workload] for c in regress
                                            if c.verdict == worst.verdict])
    if bis.width() > 1:  # k machines: k candidates a round
        found, rounds = search_parallel(len(cands), bis.judge_many, bis.width(), bis.width)
        result["rounds"], result["machines"] = rounds, bis.width()
    else:
        found = search(len(cands), bis.judge)
        result["rounds"], result["machines"] = len(found.order), 1
    if bis.fleet is not None and bis.fleet.lost:
        result["lost_machines"] = [{"node": n.label, "at": bis.fleet.lost[n.id]}
                                   for n in bis.fleet.nodes if n.id in bis.fleet.lost]
    steps = store.state.get(sid, "steps", {})
    result["steps"] = [steps[str(i)] for i in found.order]
    result["skipped"] = [cands[i].label for i in found.skipped]
    result["crashed"] = [cands[i].label for i in found.crashed]
    result["culprit_range"] = [cands[i].label for i in found.culprit_range]
    result["builds"] = sum(1 for b in bis.builds.values() if b is not None and not b.cache_hit)
    if found.first_bad is None:
        # Between the last good and the first bad only skips, crashes or undecided commits:
        # a range is an answer when only skips border it; an undecided commit is not.
        inner = set(found.culprit_range[:-1])
        undecided = inner & (set(found.unresolved) | set(found.crashed))
        result["status"] = "unresolved" if undecided else "range"
        if undecided:
            result["reason"] = ("commits inside the culprit range could not be judged ("
                                + ", ".join(cands[i].label for i in sorted(undecided))
                                + ") — rerun with --resume to add pairs")
        return result
    fb = cands[found.first_bad]
    result["status"] = "found"
    result["first_bad"] = fb.label
    result["culprit"] = {"sha": fb.commit, "label": fb.label, "subject": fb.subject, "author": fb.author,
                         "date": fb.date}
    parent = found.first_bad - 1
    log(f"verifying {fb.label} against its parent {cands[parent].label}")
    verify = bis.compare(parent, found.first_bad, spec["models"], spec["band"], spec["max_pairs"])
    want = "slower" if worst.estimate.ratio < 1 else "faster"
    result["verified"] = all(c.verdict == want for c in verify.comparisons if c.workload == worst.workload
                             and c.model == worst.model)
    result["verification"] = [c.to_json() for c in verify.comparisons]
    # (the culprit's backends: its build here, else the one its verification ran, as stored)
    fb_build = bis.builds.get(fb.source) or next(
        (manifest_build(a.engine) for a in store.reads.arms(verify.study) if a.name == "B"), None)
    result["changes"] = source_changes(cands[parent], fb, fb_build)
    # llama-bench's own settings that changed at the culprit: the likely cause, not the engine
    result["culprit_param_diffs"] = [d.to_json() for d in verify.param_diffs]
    if spec.get("control_models"):
        # The control question is "did the control move like the measured model?", so
        # it is judged in the same band as the candidates: a control inside it did not
        # move like the regression; one beyond it did. (A ±1% band leaves noisy
        # controls unresolved.)
        cband = half_regression_band(worst.estimate.ratio, spec["band"])
        result["control_band"] = cband
        log(f"controls at good, parent and culprit (band ±{cband:.1%})")
        result["controls"] = {
            "good_vs_culprit": [c.to_json() for c in bis.compare(
                0, found.first_bad, spec["control_models"], cband, spec["max_pairs"]).comparisons],
            "parent_vs_culprit": [c.to_json() for c in bis.compare(
                parent, found.first_bad, spec["control_models"], cband, spec["max_pairs"] * 2).comparisons],
        }
        result["specific_to_model"] = specific_to_model(
            worst.estimate.ratio, [c["verdict"] for c in result["controls"]["parent_vs_culprit"]])
    return result


def store_answer(store: Store, sid: str, result: dict[str, Any]) -> dict[str, Any]:
    """Store the answer; an unresolved bisect stays open (``--resume`` adds pairs), others end."""
    store.state.put(sid, "result", result)
    if result["status"] in ANSWERED:
        store.writes.finish_study(sid)
    elif result["status"] == "crash":
        store.writes.finish_study(sid, "failed")
    return result
