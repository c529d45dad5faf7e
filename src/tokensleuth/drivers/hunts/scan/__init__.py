"""The scan driver: every performance change across a history, found, bisected and explained.

Sample, measure, detect, refine:

- **sample**: both ends and evenly spaced points between (:func:`initial_sample`);
- **levels**: interleaved rounds, each running every sampled build once per cell, forward
  then backward (:func:`round_order`), so the machine's drift falls on every build alike.
  They draw the history and feed the step fit (:func:`fit_steps`);
- **decide**: each interval between sampled neighbours gets a paired sequential verdict
  (``Judge.compare``: its pairs are stored, resumed and reused by everything after): ``same``,
  a step (``slower``/``faster`` in some cell) or undecided. The fit orders the work (where it
  sees a step is judged first) and says what the scan could have seen; the verdicts decide;
- **refine**: an interval judged the same but longer than ``max_gap`` could hide a step and
  its revert, so it gets its middle point; an interval that holds a step is bisected inside
  (``bisect.run_bisect`` on the sub-range: skips, crashes, verification, controls, the
  culprit's profile), and its parent and culprit join the points, so the intervals on either
  side are judged too. It ends when every interval between neighbours is the same (and short),
  a step of one commit, or undecided (reported so, with its figures: never as "no change");
- **explain**: each step's cells, its direction, llama-bench's own settings that changed at the
  culprit (and what is left of the step with them pinned: a default change is reported as
  such), the files it changed that the build compiles, the op that grew; with
  ``check_outputs`` the first commit whose outputs changed, searched over the whole range;
- **settings**: an interval judged the same (or undecided after its pairs) whose ends run
  llama-bench with different settings nobody asked for (a default changed inside it, its speed effect inside the band or cancelled
  by another change) is searched for the first commit whose settings differ (a build and a
  one-second probe per step, no pairs: :func:`first_changed`); its parent and it join the points,
  and their interval is judged like any other — a step there is explained as a default change,
  and one within the band is still reported (``settings_changes``), never dropped.

Every verdict, level and bisect is stored as soon as it exists (the scan study's state and
the compare and bisect studies it asks for), so a killed scan resumes losing nothing, and a
finished one resumed with a later end extends the history without redoing any of it.

The step fit is PELT (``ruptures``) on the mean log t/s of the sampled points per cell, with a
penalty from the noise measured between rounds (BIC-like: ``2 log n`` times the variance of a
point's mean), each step kept only when a Welch t-test between the segments says it is real and
its size is beyond the band (the test Otava puts after E-divisive). Why not E-divisive: the
sampled sequences are short (tens of points), the noise is measured directly rather than
inferred from the sequence, and an exact penalised fit (what asv uses) is then both the best
and the cheapest.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tokensleuth.core.errors import UserError
from tokensleuth.drivers import shared
from tokensleuth.drivers.hunts.bisect import Bisector, bisect_outputs
from tokensleuth.drivers.hunts.scan.lanes import run_lanes
from tokensleuth.drivers.hunts.scan.plan import (
    blocks_of,
    first_changed,
    initial_sample,
    next_work,
    pieces,
    remaining,
    round_order,
)
from tokensleuth.drivers.hunts.scan.progress import build_pace, builds_left, eta_text, parse_budget
from tokensleuth.drivers.hunts.scan.refine import run_block
from tokensleuth.drivers.hunts.scan.result import finish, partial
from tokensleuth.drivers.hunts.scan.state import BLOCKS, CANDIDATES, POINTS, Log, Scan
from tokensleuth.drivers.hunts.scan.steps import FitStep, fit_steps, smallest_seen
from tokensleuth.drivers.machine import doctor_line
from tokensleuth.drivers.requests import Say, ScanRequest
from tokensleuth.drivers.slower import Profiler, Summarize, profiler
from tokensleuth.sources import history
from tokensleuth.sources.history import Candidate
from tokensleuth.trials.spec import spec_hash

if TYPE_CHECKING:
    from tokensleuth.fleet import Fleet
    from tokensleuth.store import Store

__all__ = [
    "FitStep", "Scan", "blocks_of", "build_pace", "builds_left", "eta_text", "finish", "first_changed",
    "fit_steps", "initial_sample", "next_work", "parse_budget", "partial", "pieces", "remaining", "round_order",
    "run_scan", "smallest_seen",
]


def run_scan(store: Store, cands: Sequence[Candidate], spec: dict[str, Any], *, resume: bool = False,
             log: Log | None = None, profile: Profiler | None = None, fleet: Fleet | None = None) -> dict[str, Any]:
    """Scan ``cands`` (oldest first); returns the scan's JSON object (docs/architecture.md's scan contract).

    With ``fleet``, the machines scan blocks of the range at once (:func:`run_lanes`).

    The scan's identity leaves out its end, so ``--resume`` with a later end extends a finished
    scan: every stored verdict, level and bisect is kept and only the new part is measured."""
    log = log or (lambda s: None)
    spec = dict(spec)  # (the band the noise resolves is set in this run's copy: drivers/hunts/scan/levels.settle_band)
    # (whether the band was given is how to run it, as the budget is: the band asked is in its identity)
    key = {k: v for k, v in spec.items() if k not in ("budget", "band_given", "band_asked")}
    key["first"] = cands[0].source
    handle = store.writes.begin_study("scan", key, spec_hash(key), resume=resume)
    sid = handle.id
    stored = store.state.get(sid, "result")
    rng = [c.source for c in cands]
    if handle.finished and stored is not None and [c["source"] for c in store.state.get(sid, CANDIDATES, [])] == rng:
        log(f"scan {sid} already finished — its stored result follows")
        return dict(stored)
    with store.leases.hold(sid):
        if handle.finished:
            store.writes.finish_study(sid, "running")  # extended to a later end, or resumed with budget left
        store.state.put(sid, "result", None)
        scan = Scan(store, sid, cands, spec, log, profile)
        store.state.put(sid, CANDIDATES, [asdict(c) for c in cands])  # what `report` reads while it runs
        if not scan.get(POINTS, []):
            scan.add_points(initial_sample(len(cands), int(spec["samples"])))
        else:  # an extension keeps every stored point and adds the new end
            scan.add_points([0, len(cands) - 1])
        log(f"scan {sid}: {len(cands)} candidates, {len(scan.points())} sampled")
        if fleet is None:
            if scan.get(BLOCKS, None):  # an earlier run on a cluster: its levels stay its machines'
                scan.put(BLOCKS, None)
            run_block(scan, 0, len(cands) - 1)
        else:
            run_lanes(scan, fleet)
        result = finish(scan)
        if spec.get("check_outputs"):
            bis = Bisector(store, sid, cands, dict(spec, check_outputs=True), log, judge=scan.judge)
            result["outputs_search"] = bisect_outputs(bis, log)
            first = result["outputs_search"].get("culprit")
            if first:
                i = scan.index[first["label"]]
                result["output_changes"] = [{"first_changed": first["label"], "parent": cands[i - 1].label,
                                             "mean_kld": first.get("mean_kld"), "same_top_p": first.get("same_top_p"),
                                             "subject": first.get("subject")}]
        store.state.put(sid, "result", result)
        if not result["undecided"]:  # undecided: the study stays open, and --resume adds pairs
            store.writes.finish_study(sid)
        return result


def candidates(request: ScanRequest, say: Say) -> list[Candidate]:
    """Oldest first: a git range's first-parent commits, or a PyPI package's published versions."""
    from_, to = request.from_, request.to
    if request.repo is not None and request.source is not None:
        raise UserError("--repo and --source each name a history to scan — give one of them")
    if request.repo is not None:
        return history.git_candidates(str(Path(request.repo).expanduser()), from_, to, ("--from", "--to"))
    if request.source is not None:
        prefix, _, name = request.source.partition(":")
        if prefix != "pypi" or not name or "==" in name:
            raise UserError(f"--source {request.source!r}: write pypi:NAME (versions come from --from/--to)")
        cands = history.pypi_candidates(name, from_, to, within=True, names=("--from", "--to"))
        first, last = cands[0].label, cands[-1].label
        if first.split(".")[0] != from_.split(".")[0] or last.split(".")[0] != to.split(".")[0]:
            say.line(f"releases {first} to {last}: the published ones from {from_} to {to} ({len(cands)})")
        return cands
    raise UserError("nothing to scan — pass --repo PATH or --source pypi:NAME")


def run(request: ScanRequest, say: Say, summarize: Summarize) -> dict[str, Any]:
    """The scan's result object (``status`` done, else undecided intervals or budget spent)."""
    if not request.from_ or not request.to:
        raise UserError("scan needs --from and --to — the oldest and newest revisions (or versions) of the range")
    if not request.models:
        raise UserError("scan needs --model (repeatable) — the GGUF models to measure")
    parse_budget(request.budget)
    fleet = shared.open_fleet(request, say)  # (an address that cannot be read, or answers not, is one line now)
    shared.refuse_on_fleet(fleet, pin_params=request.pin_params, check_outputs=request.check_outputs)
    spec = shared.judged_spec(request, ["pp512"], samples=request.samples, rounds=request.rounds,
                              max_gap=request.max_gap, budget=request.budget)
    spec["band_given"] = request.band_given  # (not in the scan's identity: drivers/hunts/scan/__init__.py)
    if request.pin_params:
        spec["pin_params"] = True
    if request.check_outputs:
        shared.check_outputs_flags(request.flags)
        spec["check_outputs"] = True
    shared.check_judged(spec, "scan")  # before the range is listed or anything built
    cands = candidates(request, say)
    if fleet is not None:
        fleet.check_files(shared.fleet_paths(spec["models"] + spec["control_models"], [c.source for c in cands]))
    doctor_line(say)
    with shared.open_store(request.db) as store:
        return run_scan(store, cands, spec, resume=request.resume, log=say.line, fleet=fleet,
                        profile=profiler(store, request.cmake, request.flags, request.timeout_s, say, summarize)
                        if request.profile and fleet is None else None)
