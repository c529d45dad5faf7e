"""Kernel figures from GPU traces (tokensleuth.kernels), per process; the diff of two builds is
:mod:`tokensleuth.analysis.kernel_diff`'s.

A process's records are assigned to llama-bench's timed repetitions by their GPU timestamps,
which the tracers put on the host's monotonic clock, the clock of the repetitions' windows. Over
the repetitions kept (a cold or stalled one is left out, as of t/s), each kernel gets its calls
per token, GPU ms per token and share of the GPU time; the GPU's idle time per token is the
windows' length less the union of the kernels' busy intervals (what launches and
synchronisation cost between kernels: where fusion and CUDA graphs win). A sampled trace
(sample:N) counts only tokens whose records end before the next token's launch. Each kernel's
time is split into its own (no earlier-started kernel still running; the own times add up to
the busy union) and its time beside others.

Floor 2: imports core and kernels (floor 1).
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tokensleuth.kernels import LAUNCH, WORK, Trace


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


def whole_windows(windows: Sequence[Window]) -> tuple[list[Window], str | None]:
    """The windows that hold their whole repetition, and a note on those left out. A window opens at
    its progress line's stamp and lasts llama-bench's own duration at most (it closes earlier at
    the next line): one shorter than that by more than RECORDS had its opening line read late (a
    loaded host: the reader thread woke late), and the kernels of the repetition's start fell
    before it. Counted, they read as records missing (the tool said so of the suite's fake-tracer
    runs on a loaded 2-core machine, whose last window was once 30% of its repetition). When no
    window is whole, all are kept, and said so."""
    share = [(w.end_ns - w.start_ns) / w.bench_ns if w.bench_ns else 1.0 for w in windows]
    whole = [w for w, f in zip(windows, share, strict=True) if f >= 1 - RECORDS]
    if len(whole) == len(windows):
        return whole, None
    worst = min(share)
    if not whole:
        return list(windows), (f"every repetition's window was read short (its first line read late; down to "
                               f"{worst:.0%} of the repetition): kept, and records of their starts may be missing")
    return whole, (f"{len(windows) - len(whole)} repetition(s) whose window was read short (its first line read "
                   f"late; down to {worst:.0%} of the repetition): left out of the kernel figures")


def missing_records(ps: Sequence[ProcessKernels]) -> str | None:
    """Why a side's records cannot be trusted whole, or None: records the tracer knows it lost,
    or a process with fewer records per token than the others (one build's graph runs the same
    kernels every token: a shortfall is records missing)."""
    lost = sum(p.lost for p in ps)
    if lost:
        return f"{lost} records were lost by the tracer"
    per = [p.calls_per_token for p in ps if p.traced]
    if len(per) >= 2 and max(per) > 0 and (max(per) - min(per)) / max(per) > RECORDS:
        return (f"records per token differ across processes ({min(per):.4g} to {max(per):.4g}, beyond "
                f"{RECORDS:.0%}): some are missing")
    return None
