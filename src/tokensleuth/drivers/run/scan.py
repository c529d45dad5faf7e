"""scan's request run to its result: the range's candidates, its spec checked, the scan here or
on a fleet, each step's culprit profiled."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tokensleuth.core.errors import UserError
from tokensleuth.drivers import shared
from tokensleuth.drivers.requests import ScanRequest, Say
from tokensleuth.drivers import scan
from tokensleuth.drivers.shared import Summarize
from tokensleuth.sources import history
from tokensleuth.sources.history import Candidate


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
    scan.parse_budget(request.budget)
    fleet = shared.open_fleet(request, say)  # (an address that cannot be read, or answers not, is one line now)
    shared.refuse_on_fleet(fleet, pin_params=request.pin_params, check_outputs=request.check_outputs)
    spec = shared.judged_spec(request, ["pp512"], samples=request.samples, rounds=request.rounds,
                              max_gap=request.max_gap, budget=request.budget)
    spec["band_given"] = request.band_given  # (not in the scan's identity: drivers/scan/__init__.py)
    if request.pin_params:
        spec["pin_params"] = True
    if request.check_outputs:
        shared.check_outputs_flags(request.flags)
        spec["check_outputs"] = True
    shared.check_judged(spec, "scan")  # before the range is listed or anything built
    cands = candidates(request, say)
    if fleet is not None:
        fleet.check_files(shared.fleet_paths(spec["models"] + spec["control_models"], [c.source for c in cands]))
    shared.doctor_line(say)
    with shared.open_store(request.db) as store:
        return scan.run_scan(store, cands, spec, resume=request.resume, log=say.line, fleet=fleet,
                        profile=shared.profiler(store, request.cmake, request.flags, request.timeout_s, say, summarize)
                        if request.profile and fleet is None else None)
