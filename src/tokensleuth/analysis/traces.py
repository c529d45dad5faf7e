"""A kernel trace's stored processes as figures: per engine, model and workload its kernels and what
tracing cost it, and each engine's diff against the first, set against the untraced processes'
ms/token (the rules themselves are analysis/kernels.py's and analysis/kernel_diff.py's)."""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from tokensleuth.analysis.kernel_diff import diff
from tokensleuth.analysis.kernels import ProcessKernels, coverage, missing_records
from tokensleuth.analysis.stats import welch
from tokensleuth.core.records import JSON_SCHEMA_VERSION


def _mean(xs: Sequence[float | None]) -> float | None:
    got = [x for x in xs if x is not None]
    return float(np.mean(got)) if got and len(got) == len(xs) else None


def trace_cost(traced: Sequence[float], untraced: Sequence[float]) -> dict[str, Any] | None:
    """How much slower the traced program ran than the untraced one (llama-bench's own ms/token
    of each process): the ratio of their means with a 95% Welch interval on the log scale, and
    whether it is measurably slower."""
    a = [math.log(x) for x in untraced if x and x > 0]
    b = [math.log(x) for x in traced if x and x > 0]
    if len(a) < 2 or len(b) < 2:
        return None
    d, lo, hi = welch(a, b, 0.95)
    return {"ratio": math.exp(d), "ci": [math.exp(lo), math.exp(hi)], "slower": lo > 0}


def analyze(spec: Mapping[str, Any], runs: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The stored processes as figures: per engine, model and workload its kernels (means over the
    processes) and what tracing cost it, and per model and workload each engine's diff against the
    first, set against the untraced processes' ms/token."""
    procs: dict[tuple[str, str, str], list[ProcessKernels]] = defaultdict(list)
    plain: dict[tuple[str, str, str], list[float]] = defaultdict(list)
    timelines: dict[tuple[str, str, str], list[list[Any]]] = {}
    for r in sorted(runs, key=lambda r: r["process"]):
        key = (r["engine"], r["model"], r["workload"])
        if "kernels" in r:
            procs[key].append(ProcessKernels.from_state(r["kernels"]))
        if r.get("untraced_ms_per_token"):
            plain[key].append(float(r["untraced_ms_per_token"]))
        if r.get("timeline"):
            timelines.setdefault(key, r["timeline"])
    engines = list(spec["engines"])
    cells = []
    for (e, m, w), ps in procs.items():
        ps = [p for p in ps if p.tokens and p.traced]
        if not ps:
            continue
        names = sorted({n for p in ps for n in p.busy_ns}, key=lambda n: -sum(p.ms_per_token(n) for p in ps))
        total = sum(sum(p.busy_ns.values()) for p in ps) or 1
        untraced = plain.get((e, m, w), [])
        cost = trace_cost([p.bench_ms_per_token or 0.0 for p in ps], untraced)
        notes = sorted({x for p in ps for x in p.notes})
        if cost and cost["slower"]:
            notes.append(f"the traced program ran {cost['ratio'] - 1:.1%} slower (95% CI {cost['ci'][0] - 1:.1%} to "
                         f"{cost['ci'][1] - 1:.1%}) than untraced processes of the same build: the kernels' own times "
                         "are the traced run's")
        missing = missing_records(ps)
        cells.append({
            "engine": e, "model": m, "workload": w, "processes": len(ps),
            # a side whose records cannot be trusted whole shows none of their sums (withheld everywhere)
            "kernel_ms_per_token": None if missing else float(np.mean([p.kernel_ms_per_token for p in ps])),
            "busy_ms_per_token": None if missing else _mean([p.busy_ms_per_token for p in ps]),
            "overlap_ms_per_token": None if missing else _mean([p.overlap_ms_per_token for p in ps]),
            "idle_ms_per_token": None if missing else _mean([p.idle_ms_per_token for p in ps]),
            "outside_ms_per_token": None if missing else _mean([p.outside_ms_per_token for p in ps]),
            "bench_ms_per_token": _mean([p.bench_ms_per_token for p in ps]),
            "untraced_ms_per_token": float(np.mean(untraced)) if untraced else None,
            "trace_cost": cost,
            "coverage": None if missing else _mean([coverage(p, float(np.mean(untraced)) if untraced else None)
                                                    for p in ps]),
            "withheld": f"{missing} — the kernel table is withheld: trace again" if missing else None,
            "kernels": [] if missing else [
                {"name": n, "calls_per_token": float(np.mean([p.calls.get(n, 0) / p.traced for p in ps])),
                 "ms_per_token": float(np.mean([p.ms_per_token(n) for p in ps])),
                 "share": sum(p.busy_ns.get(n, 0) for p in ps) / total} for n in names],
            "notes": notes,
            "timeline": timelines.get((e, m, w), [])})
    diffs = []
    for e in engines[1:]:
        for m in spec["models"]:
            for w in spec["workloads"]:
                a, b = procs.get((engines[0], m, w)), procs.get((e, m, w))
                ua, ub = plain.get((engines[0], m, w), []), plain.get((e, m, w), [])
                if a and b:
                    diffs.append(dict(diff(a, b, float(spec.get("band", 0.02)),
                                           untraced=(ua, ub) if len(ua) >= 2 and len(ub) >= 2 else None),
                                      engines=[engines[0], e], model=m, workload=w))
    return {"schema_version": JSON_SCHEMA_VERSION, "engines": engines, "tracers": dict(spec.get("tracers", {})),
            "mode": spec.get("mode"), "cells": cells, "diffs": diffs, "env": dict(spec.get("env") or {}),
            "flags": list(spec.get("flags", []))}
