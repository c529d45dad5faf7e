"""A settings change inside an interval: located by probes, and a step's cause checked with its
parent's settings pinned."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from tokensleuth.core.errors import EngineError
from tokensleuth.drivers.hunts.scan.plan import first_changed
from tokensleuth.drivers.hunts.scan.state import CAUSES, PROBES, SETTINGS, Scan, interval_key
from tokensleuth.drivers.verdicts.judge import Judge
from tokensleuth.engines.base import DEFAULT_KIND
from tokensleuth.sources.history import Candidate


def settings_moved(scan: Scan, verdicts: Mapping[tuple[int, int], str],
                   stored: Mapping[str, Any]) -> set[tuple[int, int]]:
    """Intervals judged the same or undecided whose ends' llama-bench settings differ unasked,
    not searched yet. (On a fleet the builds are the machines', not here to probe: such an
    interval is reported with its ends only.)"""
    if scan.node_label is not None:
        return set()
    located = scan.get(SETTINGS, {})
    out = set()
    for (p, q), v in verdicts.items():
        key = interval_key(scan.cands[p], scan.cands[q])
        if v in ("same", "undecided") and q - p > 1 and stored[key].get("param_diffs") and key not in located:
            out.add((p, q))
    return out


def locate(scan: Scan, p: int, q: int, diffs: Sequence[dict[str, Any]]) -> None:
    """The first commit inside (p, q] whose llama-bench settings differ from ``p``'s (a build
    and a probe of each point halving the interval, stored as they come), its parent and it
    added to the points."""
    from tokensleuth.engines import engine_for

    params = engine_for(scan.spec.get("kind", DEFAULT_KIND)).settings
    assert params is not None  # (settings differ only where the engine reports them)
    key = interval_key(scan.cands[p], scan.cands[q])
    fields = ", ".join(d["field"] for d in diffs)
    flags = list(scan.spec["flags"])
    asked = params.flag_fields(flags)

    def settings_of(i: int) -> dict[str, Any] | None:
        label = scan.cands[i].label
        got = scan.get(PROBES, {}).get(label)
        if got is None:
            b = scan.judge.build(scan.cands[i].source)
            if b is None:
                return None
            got = params.probe(b, scan.spec["models"][0], flags, scan.spec["timeout_s"])
            scan.set_item(PROBES, label, got)
        return dict(got)

    base = settings_of(p)
    if base is None:  # (a sampled point: it built before)
        raise EngineError(f"{scan.cands[p].label} no longer builds — rerun with --resume")
    scan.log(f"  {key}: llama-bench's settings differ ({fields}) — finding the commit where they change")

    def differs(i: int) -> bool | None:
        got = settings_of(i)
        return None if got is None else bool(params.diff(base, got, asked))

    lo, hi = first_changed(p, q, differs)
    last = settings_of(hi) or {}
    found = [d.to_json() for d in params.diff(base, last, asked)] or list(diffs)
    scan.set_item(SETTINGS, key, {"last_same": scan.cands[lo].label, "first_changed": scan.cands[hi].label,
                                  "diffs": found})
    scan.log(f"  settings change ({', '.join(d['field'] for d in found)}) first at {scan.cands[hi].label}"
             + (f" (after {scan.cands[lo].label})" if hi - lo == 1 else
                f" (somewhere after {scan.cands[lo].label}: nothing between builds)"))
    scan.add_points([lo, hi])


def cause(scan: Scan, parent: Candidate, culprit: Candidate, diffs: list[dict[str, Any]],
           moved: Sequence[tuple[str, str]], measure: bool = True) -> dict[str, Any]:
    """engine, or settings when the step goes away, in the cells it ``moved``, with the culprit
    given its parent's llama-bench settings (one more paired comparison, stored; its pairs
    doubled once while a moved cell is undecided; ``measure=False``: pending until the scan has
    made it)."""
    if not diffs:
        return {"cause": "engine"}
    causes = scan.get(CAUSES, {})
    key = interval_key(parent, culprit)
    got = causes.get(key)

    def cause_of(entry: dict[str, Any]) -> str:
        verdicts = {c["verdict"] for c in entry["cells"] if (c["model"], c["workload"]) in moved}
        return "settings" if verdicts == {"same"} else "engine" if verdicts & {"slower", "faster"} else "undecided"

    if got is None and not measure:
        return {"cause": "pending"}
    if measure and (got is None or (cause_of(got) == "undecided" and not got.get("doubled"))):
        scan.log(f"  {culprit.label}: llama-bench's settings changed ({', '.join(d['field'] for d in diffs)}) — "
                 f"measuring it again with {parent.label}'s")
        pinned = Judge(scan.store, workloads=scan.spec["workloads"], flags=scan.spec["flags"],
                       cmake=scan.spec["cmake"], timeout_s=scan.spec["timeout_s"], log=scan.log,
                       pin_to=parent.source, targets=scan.targets, kind=scan.spec.get("kind", DEFAULT_KIND))
        pinned.settled(parent.source, culprit.source, scan.spec["models"])
        most = scan.spec["max_pairs"] * (2 if got is not None else 1)
        j = pinned.compare(parent.source, culprit.source, scan.spec["models"], scan.spec["band"], most)
        got = {"study": j.study, "doubled": got is not None, "cells": [
            {"model": c.model, "workload": c.workload, "ratio": c.estimate.ratio if c.estimate else None,
             "ci": [c.estimate.lo, c.estimate.hi] if c.estimate else None, "verdict": c.verdict}
            for c in j.comparisons]}
        causes[key] = got
        scan.put(CAUSES, causes)
        if cause_of(got) == "undecided" and not got["doubled"]:
            return cause(scan, parent, culprit, diffs, moved, measure)
    assert got is not None
    return {"cause": cause_of(got), "pinned": got}
