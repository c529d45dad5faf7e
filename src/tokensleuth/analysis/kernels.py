"""Kernel figures from GPU traces (tokensleuth.kernels): per process, and the diff of two builds.

A process's records are assigned to llama-bench's timed repetitions by their GPU timestamps,
which the tracers put on the host's monotonic clock, the clock of the repetitions' windows. Over
the repetitions kept (a cold or stalled one is left out, as of t/s), each kernel gets its calls
per token, GPU ms per token and share of the GPU time; the GPU's idle time per token is the
windows' length less the union of the kernels' busy intervals (what launches and
synchronisation cost between kernels: where fusion and CUDA graphs win). The kernels' sum plus
the idle time is set beside llama-bench's own ms per token: the check that the trace saw the
whole repetition (concurrent kernels make the sum larger than the busy union).

The diff takes the process as the unit of replication: a kernel's ms/token in each process of
each build, a Welch interval on the difference, at a confidence shared out over the rows (the
table's, not each row's). A kernel present in every process of one build and none of the other
appeared or vanished; one whose launch (grid, block, registers, shared memory) changed is named
so even when its time did not; the idle time is a row of its own; and one sentence says how much
of the measured difference (llama-bench's ms/token, the same processes) the named kernels and
the idle time account for.

Floor 2: imports core, kernels (floor 1) and stats.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tokensleuth.analysis.stats import change_verdict, welch
from tokensleuth.kernels import Trace

CONFIDENCE = 0.95


@dataclass(frozen=True, slots=True)
class Window:
    """One timed repetition: its edges on the monotonic clock, its tokens and llama-bench's own duration."""

    start_ns: int
    end_ns: int
    tokens: int
    bench_ns: int | None = None


Launch = tuple[tuple[int, int, int], tuple[int, int, int], int, int]  # grid, block, registers, shared bytes


@dataclass(slots=True)
class ProcessKernels:
    """One process's kernels over its kept repetitions."""

    tokens: int
    window_ns: int
    bench_ns: int | None
    calls: dict[str, int] = field(default_factory=dict)
    busy_ns: dict[str, int] = field(default_factory=dict)
    launches: dict[str, set[Launch]] = field(default_factory=dict)
    union_ns: int | None = 0  # None: the trace has no timeline (totals per block)
    notes: list[str] = field(default_factory=list)
    span_ns: int | None = 0  # per window, its first kernel's start to its last one's end, summed

    def ms_per_token(self, name: str) -> float:
        return self.busy_ns.get(name, 0) / self.tokens / 1e6 if self.tokens else 0.0

    @property
    def kernel_ms_per_token(self) -> float:
        return sum(self.busy_ns.values()) / self.tokens / 1e6 if self.tokens else 0.0

    @property
    def idle_ms_per_token(self) -> float | None:
        """The GPU's idle time between kernels (the gaps inside each repetition's kernel span), per token."""
        if self.union_ns is None or self.span_ns is None or not self.tokens:
            return None
        return (self.span_ns - self.union_ns) / self.tokens / 1e6

    @property
    def outside_ms_per_token(self) -> float | None:
        """Each repetition's time before its first kernel and after its last (host work, launch
        latency and the windows' own edges), per token: not the GPU's idle time between kernels."""
        if self.span_ns is None or not self.tokens:
            return None
        return (self.window_ns - self.span_ns) / self.tokens / 1e6

    @property
    def bench_ms_per_token(self) -> float | None:
        return None if self.bench_ns is None or not self.tokens else self.bench_ns / self.tokens / 1e6

    def to_state(self) -> dict[str, Any]:
        """What the store keeps of the process (from_state reads it back)."""
        return {"tokens": self.tokens, "window_ns": self.window_ns, "bench_ns": self.bench_ns,
                "union_ns": self.union_ns, "span_ns": self.span_ns, "calls": self.calls, "busy_ns": self.busy_ns,
                "launches": {n: [[list(x[0]), list(x[1]), x[2], x[3]] for x in sorted(v)]
                             for n, v in self.launches.items()}, "notes": self.notes}

    @classmethod
    def from_state(cls, d: dict[str, Any]) -> ProcessKernels:
        launches = {n: {(tuple(x[0]), tuple(x[1]), int(x[2]), int(x[3])) for x in v}
                    for n, v in d.get("launches", {}).items()}
        return cls(int(d["tokens"]), int(d["window_ns"]), d.get("bench_ns"), dict(d["calls"]), dict(d["busy_ns"]),
                   launches, d.get("union_ns"), list(d.get("notes", [])), d.get("span_ns"))

    def to_json(self) -> dict[str, Any]:
        total = sum(self.busy_ns.values()) or 1
        rows = sorted(self.busy_ns, key=lambda n: -self.busy_ns[n])
        return {"tokens": self.tokens, "kernel_ms_per_token": self.kernel_ms_per_token,
                "idle_ms_per_token": self.idle_ms_per_token, "outside_ms_per_token": self.outside_ms_per_token,
                "bench_ms_per_token": self.bench_ms_per_token,
                "kernels": [{"name": n, "calls_per_token": self.calls[n] / self.tokens,
                             "ms_per_token": self.ms_per_token(n), "share": self.busy_ns[n] / total,
                             "launches": [launch_json(x) for x in sorted(self.launches.get(n, ()))]} for n in rows],
                "notes": self.notes}


def launch_json(x: Launch) -> dict[str, Any]:
    return {"grid": list(x[0]), "block": list(x[1]), "registers": x[2], "shared_bytes": x[3]}


def _union_within(start: np.ndarray, end: np.ndarray, lo: int, hi: int) -> int:
    """Length of the union of [start, end) clipped to [lo, hi)."""
    s, e = np.clip(start, lo, hi), np.clip(end, lo, hi)
    keep = e > s
    s, e = s[keep], e[keep]
    if not len(s):
        return 0
    order = np.argsort(s, kind="stable")
    s, e = s[order], e[order]
    reach = np.maximum.accumulate(e)
    new = np.empty(len(s), dtype=bool)  # an interval starting beyond all before it opens a new run
    new[0] = True
    new[1:] = s[1:] > reach[:-1]
    starts = s[new]
    ends = np.append(reach[np.flatnonzero(new)[1:] - 1], reach[-1])
    return int((ends - starts).sum())


def process_kernels(trace: Trace, windows: Sequence[Window]) -> ProcessKernels:
    """The process's kernels in ``windows`` (its kept repetitions). A timeline's record counts in
    the window its start falls in; a block of totals (no timeline) in the window its end falls in."""
    bench = [w.bench_ns for w in windows]
    out = ProcessKernels(sum(w.tokens for w in windows), sum(w.end_ns - w.start_ns for w in windows),
                         None if any(b is None for b in bench) else sum(b or 0 for b in bench),
                         notes=list(trace.notes))
    at = trace.start if trace.timeline else trace.end
    inside = np.zeros(len(trace), dtype=bool)
    union = span = 0
    for w in windows:
        m = (at >= w.start_ns) & (at < w.end_ns) if trace.timeline else (at > w.start_ns) & (at <= w.end_ns)
        inside |= m
        if trace.timeline and m.any():
            lo, hi = int(trace.start[m].min()), min(int(trace.end[m].max()), w.end_ns)
            union += _union_within(trace.start, trace.end, lo, hi)
            span += max(0, hi - lo)
    out.union_ns = union if trace.timeline else None
    out.span_ns = span if trace.timeline else None
    idx = np.flatnonzero(inside)
    names = trace.name[idx]
    calls = np.bincount(names, weights=trace.calls[idx], minlength=len(trace.names))
    busy = np.bincount(names, weights=trace.busy_ns[idx], minlength=len(trace.names))
    for i in np.flatnonzero(calls):  # two records' names may read alike once shortened: one row
        name = trace.names[i]
        out.calls[name] = out.calls.get(name, 0) + int(calls[i])
        out.busy_ns[name] = out.busy_ns.get(name, 0) + int(busy[i])
    if trace.timeline:
        for i in idx:
            launch: Launch = (tuple(int(x) for x in trace.grid[i]), tuple(int(x) for x in trace.block[i]),  # type: ignore[assignment]
                              int(trace.registers[i]), int(trace.shared[i]))
            out.launches.setdefault(trace.names[trace.name[i]], set()).add(launch)
    if out.tokens == 0:
        out.notes.append("no repetition of this process was kept: no kernel figures")
    elif trace.timeline and len(trace) and not inside.any():
        out.notes.append("no kernel fell inside a timed repetition: the trace's clock is not the windows'")
    return out


def one_token(trace: Trace, w: Window, most: int = 4000) -> list[list[Any]]:
    """The records of one token in the middle of repetition ``w`` (its span: the window's length
    over its tokens), clipped to that span, as [name, stream, start offset ns, duration ns]: the
    page's timeline."""
    if not trace.timeline or w.tokens <= 0:
        return []
    span = (w.end_ns - w.start_ns) / w.tokens
    lo = int(w.start_ns + (w.tokens // 2) * span)
    hi = int(lo + span)
    idx = np.flatnonzero((trace.start < hi) & (trace.end > lo))[:most]
    return [[trace.names[trace.name[i]], int(trace.stream[i]), int(max(trace.start[i], lo) - lo),
             int(min(trace.end[i], hi) - max(trace.start[i], lo))] for i in idx]


def coverage(p: ProcessKernels) -> float | None:
    """(kernel sum + the idle time between kernels) / llama-bench's ms per token. Near 1 where the
    trace saw every repetition whole; below where kernels are missing at a repetition's edges or
    host time lies outside the kernels' span (outside_ms_per_token); above where kernels ran
    concurrently (their sum counts overlap twice)."""
    idle, bench = p.idle_ms_per_token, p.bench_ms_per_token
    if idle is None or not bench:
        return None
    return (p.kernel_ms_per_token + idle) / bench


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


def diff(base: Sequence[ProcessKernels], cand: Sequence[ProcessKernels], band: float = 0.02) -> dict[str, Any]:
    """What changed from ``base``'s processes to ``cand``'s: a row per kernel, largest change first."""
    base = [p for p in base if p.tokens]
    cand = [p for p in cand if p.tokens]
    if not base or not cand:
        return {"rows": [], "why": "a build has no process with kept repetitions: no kernel diff"}
    names = sorted({n for p in (*base, *cand) for n in p.busy_ns})
    conf = 1 - (1 - CONFIDENCE) / max(1, len(names) + 1)
    bench_a = [p.bench_ms_per_token for p in base]
    bench_b = [p.bench_ms_per_token for p in cand]
    level = float(np.mean([p.kernel_ms_per_token for p in base]))
    practical = band * (float(np.mean([x for x in bench_a if x])) if all(bench_a) else level)
    rows: list[dict[str, Any]] = []
    for n in names:
        xa = [p.ms_per_token(n) for p in base]
        xb = [p.ms_per_token(n) for p in cand]
        d, lo, hi = welch(xa, xb, conf)
        in_a = sum(n in p.busy_ns for p in base)
        in_b = sum(n in p.busy_ns for p in cand)
        la = set().union(*(p.launches.get(n, set()) for p in base))
        lb = set().union(*(p.launches.get(n, set()) for p in cand))
        verdict = change_verdict(d, lo, hi, practical, appeared=in_a == 0 and in_b == len(cand),
                                 vanished=in_b == 0 and in_a == len(base))
        calls_a = float(np.mean([p.calls.get(n, 0) / p.tokens for p in base]))
        calls_b = float(np.mean([p.calls.get(n, 0) / p.tokens for p in cand]))
        rows.append({"kernel": n, "ms_per_token": [float(np.mean(xa)), float(np.mean(xb))], "delta_ms_per_token": d,
                     "ci": [lo, hi], "calls_per_token": [calls_a, calls_b], "verdict": verdict,
                     "launch_changed": _launch_words(la, lb)})
    rows.sort(key=lambda r: -abs(r["delta_ms_per_token"]))
    out: dict[str, Any] = {"rows": rows, "band": band, "processes": [len(base), len(cand)]}
    named = float(sum(r["delta_ms_per_token"] for r in rows if r["verdict"] in ("appeared", "vanished", "grew", "shrank")))
    for key in ("idle", "outside"):
        xa = [getattr(p, f"{key}_ms_per_token") for p in base]
        xb = [getattr(p, f"{key}_ms_per_token") for p in cand]
        if all(x is not None for x in (*xa, *xb)):
            d, lo, hi = welch([x or 0.0 for x in xa], [x or 0.0 for x in xb], conf)
            out[key] = {"ms_per_token": [float(np.mean([x or 0.0 for x in xa])), float(np.mean([x or 0.0 for x in xb]))],
                        "delta_ms_per_token": d, "ci": [lo, hi]}
    if all(bench_a) and all(bench_b):
        d, lo, hi = welch([x or 0.0 for x in bench_a], [x or 0.0 for x in bench_b], CONFIDENCE)
        out["measured"] = {"delta_ms_per_token": d, "ci": [lo, hi]}
        moved = not math.isnan(lo) and (lo > 0 or hi < 0)  # a share of noise says nothing
        out["kernels_share"] = named / d if moved else None
        out["idle_share"] = out["idle"]["delta_ms_per_token"] / d if moved and "idle" in out else None
        out["accounted"] = (named + (out["idle"]["delta_ms_per_token"] if "idle" in out else 0.0)) / d if moved \
            else None
    out["sentence"] = sentence(out, named)
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


def sentence(d: dict[str, Any], named: float) -> str:
    """One line: how much of the measured difference the named kernels and the idle time between
    kernels account for, each share said (none where no difference was measured)."""
    m = d.get("measured")
    idle = d.get("idle")
    parts = [f"kernels {named:+.3g}"] + ([f"idle between kernels {idle['delta_ms_per_token']:+.3g}"] if idle else [])
    if d.get("outside"):
        parts.append(f"outside the kernels' span {d['outside']['delta_ms_per_token']:+.3g}")
    if not m:
        return f"The named kernels changed by {named:+.3g} ms/token ({', '.join(parts)})."
    if d.get("accounted") is None:
        return (f"llama-bench measured no difference beyond its interval ({m['delta_ms_per_token']:+.3g} ms/token); "
                f"the trace: {', '.join(parts)} ms/token.")
    shares = f"kernels {d['kernels_share']:.0%}" + (f", idle {d['idle_share']:.0%}" if d.get("idle_share") is not None
                                                       else "")
    return (f"The named kernels{' and the idle time' if idle else ''} account for {d['accounted']:.0%} of the "
            f"measured difference of {m['delta_ms_per_token']:+.3g} ms/token ({shares}; {', '.join(parts)} "
            f"ms/token).")
