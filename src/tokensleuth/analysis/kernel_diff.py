"""The kernel diff of two builds, from their processes' kernel figures (:mod:`.kernels`).

The diff takes the process as the unit of replication: a kernel's ms/token in each process of
each build, a Welch interval on the difference, at a confidence shared out over the rows (the
table's, not each row's). A kernel present in every process of one build and none of the other
appeared or vanished; one whose launch (grid, block, registers, shared memory) changed is named
so even when its time did not. Each kernel's time is split into its own (no earlier-started
kernel still running; the own times add up to the busy union) and its time beside others: one
that grew only beside others (started early and waiting on a slowed kernel, or sharing the GPU
with it) is named so, below those whose own time moved.

Against untraced processes of each build, the trace is held to what it does not stretch: the
kernels' busy time (their union) and the host's time outside them add up to the untraced ms/token
within 5% (on a GPU the trace lengthens the gaps between kernels, its own cost, and nothing else);
the kernels' share of the measured difference is then given with its interval, the host's time
beside it, and the rest lies in the untraced program's gaps between kernels. One sentence says so.

Floor 2: imports core, kernels (floor 1) and stats.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from tokensleuth.analysis.kernels import (
    COVERAGE,
    Launch,
    ProcessKernels,
    coverage,
    missing_records,
    reach,
)
from tokensleuth.analysis.stats import bootstrap_share, change_verdict, welch

CONFIDENCE = 0.95
BESIDE = " beside others"  # a verdict's suffix: the kernel's own time did not move with it


def _launch_words(a: set[Launch], b: set[Launch]) -> str | None:
    if a == b or not a or not b:
        return None
    parts = []
    for i, what in ((2, "registers"), (3, "shared memory (bytes)")):
        va, vb = sorted({x[i] for x in a}), sorted({x[i] for x in b})
        if va != vb:
            parts.append(f"{what} {'/'.join(map(str, va))} -> {'/'.join(map(str, vb))}")
    if {x[:2] for x in a} != {x[:2] for x in b}:
        parts.append("launch shape (grid, block)")
    return ", ".join(parts) or None


def diff(base: Sequence[ProcessKernels], cand: Sequence[ProcessKernels], band: float = 0.02,
         untraced: tuple[Sequence[float], Sequence[float]] | None = None) -> dict[str, Any]:
    """What changed from ``base``'s processes to ``cand``'s: a row per kernel, largest change first.

    ``untraced``: llama-bench's ms/token in untraced processes of each build: the measured
    difference the kernels' share is of (without them, the traced processes' own, said so). A
    row grew, shrank, appeared or vanished only beyond its interval (the table's confidence
    shared out over its rows); appeared and vanished also need the kernel in every process of
    one side and none of the other. The kernels' and the idle time's shares of the measured
    difference come with 95% intervals over processes, and what they leave is unexplained."""
    base = [p for p in base if p.tokens and p.traced]
    cand = [p for p in cand if p.tokens and p.traced]
    if not base or not cand:
        return {"rows": [], "why": "a build has no process with kept repetitions: no kernel diff"}
    names = sorted({n for p in (*base, *cand) for n in p.busy_ns})
    conf = 1 - (1 - CONFIDENCE) / max(1, len(names) + 1)
    level = float(np.mean([p.kernel_ms_per_token for p in base]))
    bench_a: list[float | None] = list(untraced[0]) if untraced else [p.bench_ms_per_token for p in base]
    bench_b: list[float | None] = list(untraced[1]) if untraced else [p.bench_ms_per_token for p in cand]
    practical = band * (float(np.mean([x for x in bench_a if x])) if bench_a and all(bench_a) else level)
    rows: list[dict[str, Any]] = []
    for n in names:
        xa = [p.ms_per_token(n) for p in base]
        xb = [p.ms_per_token(n) for p in cand]
        d, lo, hi = welch(xa, xb, conf)
        in_a = sum(n in p.busy_ns for p in base)
        in_b = sum(n in p.busy_ns for p in cand)
        la = set().union(*(p.launches.get(n, set()) for p in base))
        lb = set().union(*(p.launches.get(n, set()) for p in cand))
        # appeared or vanished: in every process of one side and none of the other, with at least
        # two processes a side (one a side is no evidence of anything)
        both = len(base) >= 2 and len(cand) >= 2
        verdict = change_verdict(d, lo, hi, practical, appeared=both and in_a == 0 and in_b == len(cand),
                                 vanished=both and in_b == 0 and in_a == len(base))
        # its own time (no earlier-started kernel running) apart from its time beside others: one that grew
        # only beside others (waiting beside a slowed one, or sharing the GPU with it) is named so,
        # below those whose own time moved
        own: dict[str, Any] | None = None
        oa, ob = [p.own_ms_per_token(n) for p in base], [p.own_ms_per_token(n) for p in cand]
        if all(x is not None for x in (*oa, *ob)):
            fa, fb = [x or 0.0 for x in oa], [x or 0.0 for x in ob]
            do, lo_o, hi_o = welch(fa, fb, conf)
            own = {"ms_per_token": [float(np.mean(fa)), float(np.mean(fb))], "delta_ms_per_token": do,
                   "ci": [lo_o, hi_o], "beside_delta_ms_per_token": d - do}
            if verdict in ("grew", "shrank") and change_verdict(do, lo_o, hi_o, practical) != verdict:
                verdict = f"{verdict} beside others"
        calls_a = float(np.mean([p.calls.get(n, 0) / p.traced for p in base]))
        calls_b = float(np.mean([p.calls.get(n, 0) / p.traced for p in cand]))
        rows.append({"kernel": n, "ms_per_token": [float(np.mean(xa)), float(np.mean(xb))], "delta_ms_per_token": d,
                     "ci": [lo, hi], "calls_per_token": [calls_a, calls_b], "verdict": verdict,
                     "launch_changed": _launch_words(la, lb),
                     "presence": [in_a, len(base), in_b, len(cand)], "own": own})
    # what moved on its own time first, then what moved only beside others, then the rest; the largest first
    rows.sort(key=lambda r: (2 if r["verdict"] == "same" else int(r["verdict"].endswith(BESIDE)),
                             -abs(r["delta_ms_per_token"])))
    out: dict[str, Any] = {"rows": rows, "band": band, "processes": [len(base), len(cand)],
                           "measured_by": "untraced processes" if untraced else "the traced processes themselves"}
    for key in ("kernel", "busy", "idle", "overlap", "outside"):
        xa = [getattr(p, f"{key}_ms_per_token") for p in base]
        xb = [getattr(p, f"{key}_ms_per_token") for p in cand]
        if all(x is not None for x in (*xa, *xb)):
            d, lo, hi = welch([x or 0.0 for x in xa], [x or 0.0 for x in xb], CONFIDENCE)
            out["kernels" if key == "kernel" else key] = {
                "ms_per_token": [float(np.mean([x or 0.0 for x in xa])), float(np.mean([x or 0.0 for x in xb]))],
                "delta_ms_per_token": d, "ci": [lo, hi]}
    why = [f"{side}: {w}" for side, w in (("A", missing_records(base)), ("B", missing_records(cand))) if w]
    if why:  # withheld everywhere it would show: no row, no sum of the records
        out["withheld"] = "; ".join(why) + " — the kernel table is withheld: trace again"
        out["rows"] = []
        for key in ("kernels", "busy", "idle", "overlap", "outside"):
            out.pop(key, None)
    mean_a = float(np.mean([x or 0.0 for x in bench_a])) if untraced else None
    mean_b = float(np.mean([x or 0.0 for x in bench_b])) if untraced else None
    cover = [c for c in ([coverage(p, mean_a) for p in base] + [coverage(p, mean_b) for p in cand]) if c is not None]
    if cover:
        out["coverage"] = [min(cover), max(cover)]
    spans = [] if not untraced else [
        r for r in ([reach(p, mean_a or 0.0) for p in base] + [reach(p, mean_b or 0.0) for p in cand]) if r is not None]
    if spans:
        out["reach"] = [min(spans), max(spans)]
    if len(bench_a) >= 2 and len(bench_b) >= 2 and all(bench_a) and all(bench_b):
        d, lo, hi = welch([x or 0.0 for x in bench_a], [x or 0.0 for x in bench_b], CONFIDENCE)
        # a share of noise says nothing, nor one of a difference inside the practical band (its shares'
        # intervals span hundreds of percent: the planted wait at pp2048, +0.4% on the H100)
        moved = not math.isnan(lo) and (lo > 0 or hi < 0) and abs(d) > practical
        out["measured"] = {"delta_ms_per_token": d, "ci": [lo, hi], "within_band": abs(d) <= practical}
        # against untraced processes the trace may lengthen the gaps between kernels (its own cost), not
        # the kernels, and may not miss time; against the traced processes themselves, it must cover them
        off = ([c for c in cover if c > 1 + COVERAGE] + [r for r in spans if r < 1 - COVERAGE]) if untraced \
            else [c for c in cover if abs(c - 1) > COVERAGE]
        timeline = all(p.busy_ms_per_token is not None for p in (*base, *cand))
        if moved and not timeline:
            out["shares_withheld"] = ("the trace has no timeline (its tracer gives each kernel's total, not each "
                                      "call's start and end), so the kernels' busy time cannot be told from their "
                                      "sum: no share of the measured difference is given")
        elif moved and off:
            if not untraced:
                what = f"the busy and idle time per token came to {min(cover):.2f}–{max(cover):.2f} ×"
            elif any(c > 1 + COVERAGE for c in cover):
                what = (f"the kernels' busy time and the host's time outside them came to {min(cover):.2f}–"
                        f"{max(cover):.2f} ×")
            else:
                what = f"the whole traced span came to {min(spans):.2f}–{max(spans):.2f} ×"
            out["shares_withheld"] = (f"{what} llama-bench's {'untraced ' if untraced else ''}ms/token, beyond "
                                      f"±{COVERAGE:.0%}: the trace does not account for the program it explains")
        elif moved and "withheld" not in out:
            den = ([x or 0.0 for x in bench_a], [x or 0.0 for x in bench_b])
            # against untraced processes: the kernels' busy time (concurrent kernels once) and the host's
            # time before the first kernel and after the last, which coverage held within 5% of the
            # untraced ms/token; the rest lies in the gaps between kernels, which the trace lengthens
            # (so cannot measure). Against the traced processes themselves: busy and idle time.
            parts = ((("kernels", "busy_ms_per_token"), ("outside", "outside_ms_per_token")) if untraced
                     else (("kernels", "busy_ms_per_token"), ("idle", "idle_ms_per_token")))
            for key, attr in parts:
                num = ([getattr(p, attr) for p in base], [getattr(p, attr) for p in cand])
                if any(x is None for x in (*num[0], *num[1])):
                    continue
                xa, xb = [x or 0.0 for x in num[0]], [x or 0.0 for x in num[1]]
                share = (float(np.mean(xb)) - float(np.mean(xa))) / d
                lo_s, hi_s = bootstrap_share((xa, xb), den)
                out[f"{key}_share"] = {"share": share, "ci": [lo_s, hi_s]}
            rest = 1.0 - sum(out.get(f"{key}_share", {}).get("share", 0.0) for key, _ in parts)
            out["gaps_share" if untraced else "unexplained_share"] = rest
    out["sentence"] = sentence(out)
    clean: dict[str, Any] = finite(out)
    return clean


def finite(o: Any) -> Any:
    """``o`` with every NaN or infinity as None (JSON has neither: an interval that does not exist is null)."""
    if isinstance(o, float):
        return o if math.isfinite(o) else None
    if isinstance(o, dict):
        return {k: finite(v) for k, v in o.items()}
    if isinstance(o, list):
        return [finite(v) for v in o]
    return o


def _pct(x: dict[str, Any]) -> str:
    lo, hi = x["ci"]
    return f"{x['share']:.0%}" + ("" if lo is None or hi is None else f" [{lo:.0%}, {hi:.0%}]")


def sentence(d: dict[str, Any]) -> str:
    """One line: how much of the measured difference the kernels' busy time accounts for (95%
    intervals over processes), with the host's time outside them and what lies in the gaps between
    kernels (against untraced processes), or the idle time and what the trace leaves unexplained
    (against the traced processes themselves); or why no share is given. Whether the difference
    moved is read from the measured interval itself."""
    if d.get("withheld"):
        return str(d["withheld"])
    m = d.get("measured")
    k = d.get("busy", d.get("kernels", {})).get("delta_ms_per_token")
    i = d.get("idle", {}).get("delta_ms_per_token")
    parts = ([f"kernels' busy time {k:+.3g}"] if k is not None else []) + (
        [f"idle between kernels {i:+.3g}"] if i is not None else [])
    traced = f"the trace: {', '.join(parts)} ms/token" if parts else "no trace figures"
    if not m:
        return f"No measured difference to set the kernels against ({traced})."
    by = d.get("measured_by", "untraced processes")
    lo, hi = m["ci"]
    if lo is None or hi is None or not (lo > 0 or hi < 0):
        return (f"llama-bench measured no difference beyond its interval ({m['delta_ms_per_token']:+.3g} ms/token, "
                f"{by}); {traced}.")
    if m.get("within_band"):
        return (f"llama-bench measured {m['delta_ms_per_token']:+.3g} ms/token ({by}), beyond its interval but within "
                f"the ±{d.get('band', 0.02):.0%} band: no share is given ({traced}).")
    head = f"Of the measured difference of {m['delta_ms_per_token']:+.3g} ms/token ({by})"
    if d.get("shares_withheld"):
        return f"llama-bench measured {m['delta_ms_per_token']:+.3g} ms/token ({by}); no shares: {d['shares_withheld']}."
    if "kernels_share" not in d:
        return f"{head}, no share is given ({traced})."

    def small(x: float) -> float:
        return x if abs(x) >= 0.005 else 0.0

    if "gaps_share" in d:
        host = f", the host's time before the first kernel and after the last {_pct(d['outside_share'])}" \
            if "outside_share" in d else ""
        return (f"{head}, the kernels' busy time accounts for {_pct(d['kernels_share'])}{host}; "
                f"{small(d['gaps_share']):.0%} lies in the gaps between kernels of the untraced program, which the "
                f"trace can lengthen and so does not measure ({traced}).")
    idle = f", idle time between kernels {_pct(d['idle_share'])}" if "idle_share" in d else ""
    return (f"{head}, the kernels' busy time accounts for {_pct(d['kernels_share'])}{idle}; "
            f"{small(d['unexplained_share']):.0%} is unexplained by the trace ({traced}).")
