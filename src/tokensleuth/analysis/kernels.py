"""Kernel figures from GPU traces (tokensleuth.kernels): per process, and the diff of two builds.

A process's records are assigned to llama-bench's timed repetitions by their GPU timestamps,
which the tracers put on the host's monotonic clock, the clock of the repetitions' windows. Over
the repetitions kept (a cold or stalled one is left out, as of t/s), each kernel gets its calls
per token, GPU ms per token and share of the GPU time; the GPU's idle time per token is the
windows' length less the union of the kernels' busy intervals (what launches and
synchronisation cost between kernels: where fusion and CUDA graphs win). A sampled trace
(sample:N) counts only tokens whose records end before the next token's launch.

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

import heapq
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tokensleuth.analysis.stats import bootstrap_share, change_verdict, welch
from tokensleuth.kernels import LAUNCH, WORK, Trace

CONFIDENCE = 0.95
BESIDE = " beside others"  # a verdict's suffix: the kernel's own time did not move with it


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
    traced_tokens: int | None = None  # the tokens whose kernels are in the records (sampled: fewer); None: all
    lost: int = 0  # records the tracer knows it missed
    own_ns: dict[str, int] | None = None  # each kernel's own time (_own_within); None: not known

    @property
    def traced(self) -> int:
        return self.tokens if self.traced_tokens is None else self.traced_tokens

    def ms_per_token(self, name: str) -> float:
        return self.busy_ns.get(name, 0) / self.traced / 1e6 if self.traced else 0.0

    def own_ms_per_token(self, name: str) -> float | None:
        """A kernel's own time per token (None where the trace has no timeline): the time it ran
        with no earlier-started kernel still running, apart from its time beside others."""
        if self.own_ns is None:
            return None
        return self.own_ns.get(name, 0) / self.traced / 1e6 if self.traced else 0.0

    @property
    def calls_per_token(self) -> float:
        return sum(self.calls.values()) / self.traced if self.traced else 0.0

    @property
    def kernel_ms_per_token(self) -> float:
        """The kernels' GPU time per token, each kernel's own (concurrent ones each in full)."""
        return sum(self.busy_ns.values()) / self.traced / 1e6 if self.traced else 0.0

    @property
    def busy_ms_per_token(self) -> float | None:
        """The GPU's busy time per token: the union of the kernels (concurrent ones once)."""
        return None if self.union_ns is None or not self.traced else self.union_ns / self.traced / 1e6

    @property
    def overlap_ms_per_token(self) -> float | None:
        """The kernels' time that ran beside another kernel: their sum less their union."""
        busy = self.busy_ms_per_token
        return None if busy is None else self.kernel_ms_per_token - busy

    @property
    def idle_ms_per_token(self) -> float | None:
        """The GPU's idle time between kernels (the gaps inside each traced token's or repetition's
        kernel span: launch and synchronisation gaps), per token."""
        if self.union_ns is None or self.span_ns is None or not self.traced:
            return None
        return (self.span_ns - self.union_ns) / self.traced / 1e6

    @property
    def outside_ms_per_token(self) -> float | None:
        """Each repetition's time before its first kernel and after its last (host work, launch
        latency and the windows' own edges), per token: not the GPU's idle time between kernels.
        (Not measured where only some tokens were traced.)"""
        if self.span_ns is None or not self.tokens or self.traced_tokens is not None:
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
                             for n, v in self.launches.items()}, "notes": self.notes,
                "traced_tokens": self.traced_tokens, "lost": self.lost, "own_ns": self.own_ns}

    @classmethod
    def from_state(cls, d: dict[str, Any]) -> ProcessKernels:
        launches = {n: {(tuple(x[0]), tuple(x[1]), int(x[2]), int(x[3])) for x in v}
                    for n, v in d.get("launches", {}).items()}
        return cls(int(d["tokens"]), int(d["window_ns"]), d.get("bench_ns"), dict(d["calls"]), dict(d["busy_ns"]),
                   launches, d.get("union_ns"), list(d.get("notes", [])), d.get("span_ns"), d.get("traced_tokens"),
                   int(d.get("lost", 0)), None if d.get("own_ns") is None else dict(d["own_ns"]))

    def to_json(self) -> dict[str, Any]:
        total = sum(self.busy_ns.values()) or 1
        rows = sorted(self.busy_ns, key=lambda n: -self.busy_ns[n])
        return {"tokens": self.tokens, "kernel_ms_per_token": self.kernel_ms_per_token,
                "idle_ms_per_token": self.idle_ms_per_token, "outside_ms_per_token": self.outside_ms_per_token,
                "bench_ms_per_token": self.bench_ms_per_token,
                "kernels": [{"name": n, "calls_per_token": self.calls[n] / self.traced,
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


def _own_within(start: np.ndarray, end: np.ndarray, lo: int, hi: int) -> np.ndarray:
    """Each interval's own time, clipped to [lo, hi): the time it ran with no earlier-started
    interval still running. Time when several run counts once, to the one that started first (the
    one a later kernel waits beside: a launch that starts early and waits on its predecessor, as
    programmatic dependent launch does, has that wait beside it, not of its own), so the own times
    add up to the busy union."""
    s = np.clip(start, lo, hi).astype(np.int64)
    e = np.maximum(np.clip(end, lo, hi), s).astype(np.int64)
    own = np.zeros(len(s), dtype=np.int64)
    if not len(s):
        return own
    order = np.argsort(s, kind="stable")
    ss, es = s[order].tolist(), e[order].tolist()
    credit = [0] * len(ss)
    running: list[int] = []  # a heap of ranks in start order: its top is the earliest started still running
    i, n, t = 0, len(ss), ss[0]
    while i < n or running:
        while running and es[running[0]] <= t:
            heapq.heappop(running)
        if not running:
            if i >= n:
                break
            t = max(t, ss[i])
        while i < n and ss[i] <= t:
            if es[i] > t:
                heapq.heappush(running, i)
            i += 1
        if not running:
            continue
        lead = running[0]
        nxt = min(es[lead], ss[i]) if i < n else es[lead]
        credit[lead] += nxt - t
        t = nxt
    own[order] = credit
    return own


def _segments(trace: Trace, w: Window) -> tuple[list[tuple[int, int]] | None, str | None]:
    """Where in window ``w`` a sampled trace (sample:N) holds every kernel: from each traced graph
    launch to the next launch (one token each); None where the window holds no launch (every
    kernel, if kernel records were on). The second value says why the window cannot be counted
    (records off throughout; or not one graph launch a token: a launch per GPU, a prompt beside
    the generation), else None."""
    launch = trace.kind == LAUNCH
    if not launch.any():
        return None, None
    inside = launch & (trace.start >= w.start_ns) & (trace.start < w.end_ns)
    if not inside.any():
        before = np.flatnonzero(launch & (trace.start < w.start_ns))
        return None, (None if not len(before) or bool(trace.flags[before[-1]])
                      else "fell between traced graph launches")
    if int(inside.sum()) != w.tokens:
        return None, f"had {int(inside.sum())} graph launches for {w.tokens} tokens (not one a token)"
    marks = np.sort(trace.start[inside])
    out = []
    for j in np.flatnonzero(inside & (trace.flags == 1)):
        later = marks[marks > trace.start[j]]
        out.append((int(trace.start[j]), int(later[0]) if len(later) else w.end_ns))
    return out, None


def process_kernels(trace: Trace, windows: Sequence[Window]) -> ProcessKernels:
    """The process's kernels in ``windows`` (its kept repetitions). A timeline's record counts in
    the window its start falls in; a block of totals (no timeline) in the window its end falls in.
    A sampled trace (sample:N) counts the tokens it traced: from each traced graph launch to the
    next. Graph-level records and launch markers are no kernels. On several GPUs each kernel's row
    names its device."""
    bench = [w.bench_ns for w in windows]
    out = ProcessKernels(sum(w.tokens for w in windows), sum(w.end_ns - w.start_ns for w in windows),
                         None if any(b is None for b in bench) else sum(b or 0 for b in bench),
                         notes=list(trace.notes), lost=trace.lost)
    work = np.isin(trace.kind, WORK)
    if trace.timeline and windows:
        # a record that ends before it starts, or lasts longer than the longest repetition, cannot
        # be a kernel's: sample:16 on the 30B shape (H200) gave a few that put 54,000-65,000 ms of
        # kernels in tokens of 3.9 ms. Left out and counted as lost, so the side's figures are
        # withheld (missing_records) rather than summed.
        longest = max(w.end_ns - w.start_ns for w in windows)
        bad = work & ((trace.end < trace.start) | (trace.end - trace.start > longest))
        if bad.any():
            work &= ~bad
            out.lost += int(bad.sum())
            out.notes.append(f"{int(bad.sum())} kernel record(s) with impossible timestamps (ending before they "
                             "start, or longer than a repetition): left out, and the kernel figures withheld")
    at = trace.start if trace.timeline else trace.end
    inside = np.zeros(len(trace), dtype=bool)
    own = np.zeros(len(trace), dtype=np.int64)
    union = span = traced = crossing = 0
    sampled = trace.mode.startswith("sample")
    skipped: dict[str, int] = {}
    for w in windows:
        parts, why = _segments(trace, w) if sampled else (None, None)
        if why is not None:  # what of this window's kernels was recorded is not known: left out
            skipped[why] = skipped.get(why, 0) + 1
            continue
        whole = parts is None
        if parts is None:
            parts = [(w.start_ns, w.end_ns)]
            traced += w.tokens
        else:
            traced += len(parts)
        for lo_t, hi_t in parts:
            m = work & ((at >= lo_t) & (at < hi_t) if trace.timeline else (at > lo_t) & (at <= hi_t))
            if not whole:
                # a sampled token's kernels end before the next token's graph launch (llama-bench reads
                # each token before it launches the next): one that ends later holds the end of another
                # launch (sample:16 on the 30B shape, H100: every record of a traced token, 63 ms long)
                late = m & (trace.end > hi_t)
                crossing += int(late.sum())
                m &= ~late
            inside |= m
            if trace.timeline and m.any():
                # a repetition: its first kernel to its last; a sampled token: its launch to the next
                # (the host's gaps between tokens counted as a repetition's span counts them)
                lo = int(trace.start[m].min()) if whole else lo_t
                hi = min(int(trace.end[m].max()), hi_t) if whole else hi_t
                union += _union_within(trace.start[m], trace.end[m], lo, hi)
                span += max(0, hi - lo)
                idx = np.flatnonzero(m)
                own[idx] += _own_within(trace.start[idx], trace.end[idx], lo, hi)
    if crossing:
        out.lost += crossing
        out.notes.append(f"{crossing} kernel record(s) of sampled tokens end after the next token's graph launch "
                         "(their start and end are of different launches): left out, and the kernel figures withheld")
    out.union_ns = union if trace.timeline else None
    out.span_ns = span if trace.timeline else None
    out.traced_tokens = traced if sampled else None
    for why, n in skipped.items():
        out.notes.append(f"{n} repetition(s) {why}: left out of the kernel figures")
    idx = np.flatnonzero(inside)
    devices = sorted({int(d) for d in trace.device[idx]})
    names = [trace.names[trace.name[i]] + (f" [GPU {int(trace.device[i])}]" if len(devices) > 1 else "") for i in idx]
    out.own_ns = {} if trace.timeline else None
    for i, name in zip(idx, names, strict=True):  # two records' names may read alike once shortened: one row
        out.calls[name] = out.calls.get(name, 0) + int(trace.calls[i])
        out.busy_ns[name] = out.busy_ns.get(name, 0) + int(trace.busy_ns[i])
        if out.own_ns is not None:
            out.own_ns[name] = out.own_ns.get(name, 0) + int(own[i])
        if trace.timeline:
            launch: Launch = (tuple(int(x) for x in trace.grid[i]), tuple(int(x) for x in trace.block[i]),  # type: ignore[assignment]
                              int(trace.registers[i]), int(trace.shared[i]))
            out.launches.setdefault(name, set()).add(launch)
    if len(devices) > 1:
        out.notes.append(f"kernels ran on {len(devices)} GPUs ({', '.join(map(str, devices))}): each row names its "
                         "GPU; the busy and idle times are over all of them")
    if out.tokens == 0:
        out.notes.append("no repetition of this process was kept: no kernel figures")
    elif trace.timeline and work.any() and not inside.any() and not skipped:
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


def coverage(p: ProcessKernels, untraced_ms_per_token: float | None = None) -> float | None:
    """What the trace accounts for, over llama-bench's ms per token. Against untraced processes of
    the same build (where given): the kernels' busy time (their union: concurrent kernels once) and
    the host's time before each repetition's first kernel and after its last; the gaps between
    kernels are left out, since the trace lengthens them (its own cost: 30% at tg32 on the 30B
    shape, while busy + outside stayed within 1% of the untraced ms/token,
    bench/results/gpu/raw_traces_h100/). Above 1 where the trace stretched the kernels themselves.
    Without untraced processes: busy + idle over the same traced process's ms/token."""
    busy, idle, outside = p.busy_ms_per_token, p.idle_ms_per_token, p.outside_ms_per_token
    if busy is None:
        return None
    if untraced_ms_per_token:
        return (busy + (outside or 0.0)) / untraced_ms_per_token
    bench = p.bench_ms_per_token
    if idle is None or not bench:
        return None
    return (busy + idle) / bench


def reach(p: ProcessKernels, untraced_ms_per_token: float) -> float | None:
    """The whole traced span (busy, the gaps between kernels, the time outside them) over the
    untraced ms/token: below 1 where the trace missed time the untraced program spends (records
    missing), since the trace can only lengthen the program."""
    busy, idle, outside = p.busy_ms_per_token, p.idle_ms_per_token, p.outside_ms_per_token
    if busy is None or idle is None or not untraced_ms_per_token:
        return None
    return (busy + idle + (outside or 0.0)) / untraced_ms_per_token


# untraced processes: busy + outside at most 5% above the untraced ms/token, and busy + idle + outside
# at least 5% below it; traced alone: busy + idle within 5% of the ms/token. Else the shares are withheld
COVERAGE = 0.05
RECORDS = 0.01  # records per token alike within 1% across a side's processes, or the table is withheld


def missing_records(ps: Sequence[ProcessKernels]) -> str | None:
    """Why a side's records cannot be trusted whole, or None: records the tracer knows it lost,
    or a process with fewer records per token than the others (one build's graph runs the same
    kernels every token: a shortfall is records missing)."""
    lost = sum(p.lost for p in ps)
    if lost:
        return f"{lost} records were lost by the tracer"
    per = [p.calls_per_token for p in ps if p.traced]
    if len(per) >= 2 and max(per) > 0 and (max(per) - min(per)) / max(per) > RECORDS:
        return (f"records per token differ across processes ({min(per):.1f} to {max(per):.1f}, beyond "
                f"{RECORDS:.0%}): some are missing")
    return None


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
