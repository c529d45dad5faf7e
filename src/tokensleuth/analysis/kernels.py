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
from tokensleuth.kernels import LAUNCH, WORK, Trace

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
    traced_tokens: int | None = None  # the tokens whose kernels are in the records (sampled: fewer); None: all
    lost: int = 0  # records the tracer knows it missed

    @property
    def traced(self) -> int:
        return self.tokens if self.traced_tokens is None else self.traced_tokens

    def ms_per_token(self, name: str) -> float:
        return self.busy_ns.get(name, 0) / self.traced / 1e6 if self.traced else 0.0

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
                "traced_tokens": self.traced_tokens, "lost": self.lost}

    @classmethod
    def from_state(cls, d: dict[str, Any]) -> ProcessKernels:
        launches = {n: {(tuple(x[0]), tuple(x[1]), int(x[2]), int(x[3])) for x in v}
                    for n, v in d.get("launches", {}).items()}
        return cls(int(d["tokens"]), int(d["window_ns"]), d.get("bench_ns"), dict(d["calls"]), dict(d["busy_ns"]),
                   launches, d.get("union_ns"), list(d.get("notes", [])), d.get("span_ns"), d.get("traced_tokens"),
                   int(d.get("lost", 0)))

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
    union = span = traced = 0
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
            inside |= m
            if trace.timeline and m.any():
                # a repetition: its first kernel to its last; a sampled token: its launch to the next
                # (the host's gaps between tokens counted as a repetition's span counts them)
                lo = int(trace.start[m].min()) if whole else lo_t
                hi = min(int(trace.end[m].max()), hi_t) if whole else hi_t
                union += _union_within(trace.start[m], trace.end[m], lo, hi)
                span += max(0, hi - lo)
    out.union_ns = union if trace.timeline else None
    out.span_ns = span if trace.timeline else None
    out.traced_tokens = traced if sampled else None
    for why, n in skipped.items():
        out.notes.append(f"{n} repetition(s) {why}: left out of the kernel figures")
    idx = np.flatnonzero(inside)
    devices = sorted({int(d) for d in trace.device[idx]})
    names = [trace.names[trace.name[i]] + (f" [GPU {int(trace.device[i])}]" if len(devices) > 1 else "") for i in idx]
    for i, name in zip(idx, names, strict=True):  # two records' names may read alike once shortened: one row
        out.calls[name] = out.calls.get(name, 0) + int(trace.calls[i])
        out.busy_ns[name] = out.busy_ns.get(name, 0) + int(trace.busy_ns[i])
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
    """(the GPU's busy time + its idle time between kernels) per token, over llama-bench's ms per
    token: of untraced processes of the same build where given (what the trace explains), else
    of this same process. Near 1 where the trace saw every token whole and did not slow it;
    below where host time lies outside the kernels' span (or records are missing); above where
    the trace stretched the gaps between kernels (its own cost)."""
    busy, idle = p.busy_ms_per_token, p.idle_ms_per_token
    bench = untraced_ms_per_token or p.bench_ms_per_token
    if busy is None or idle is None or not bench:
        return None
    return (busy + idle) / bench


COVERAGE = 0.05  # (busy + idle) within 5% of the untraced ms/token, or the shares are withheld
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


def _bootstrap_share(num: tuple[Sequence[float], Sequence[float]], den: tuple[Sequence[float], Sequence[float]],
                     draws: int = 2000, seed: int = 0) -> tuple[float, float]:
    """A 95% interval of (mean num[1] - mean num[0]) / (mean den[1] - mean den[0]), the processes
    of each of the four groups resampled (the process is the unit)."""
    rng = np.random.default_rng(seed)

    def mean_draws(xs: Sequence[float]) -> np.ndarray:
        x = np.asarray(xs, dtype=float)
        drawn: np.ndarray = x[rng.integers(0, len(x), (draws, len(x)))].mean(axis=1)
        return drawn

    ratio = (mean_draws(num[1]) - mean_draws(num[0])) / (mean_draws(den[1]) - mean_draws(den[0]))
    lo, hi = np.nanpercentile(ratio, [2.5, 97.5])
    return float(lo), float(hi)


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
        calls_a = float(np.mean([p.calls.get(n, 0) / p.traced for p in base]))
        calls_b = float(np.mean([p.calls.get(n, 0) / p.traced for p in cand]))
        rows.append({"kernel": n, "ms_per_token": [float(np.mean(xa)), float(np.mean(xb))], "delta_ms_per_token": d,
                     "ci": [lo, hi], "calls_per_token": [calls_a, calls_b], "verdict": verdict,
                     "launch_changed": _launch_words(la, lb),
                     "presence": [in_a, len(base), in_b, len(cand)]})
    rows.sort(key=lambda r: -abs(r["delta_ms_per_token"]))
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
    if why:
        out["withheld"] = "; ".join(why) + " — the kernel table is withheld: trace again"
    mean_a = float(np.mean([x or 0.0 for x in bench_a])) if untraced else None
    mean_b = float(np.mean([x or 0.0 for x in bench_b])) if untraced else None
    cover = [c for c in ([coverage(p, mean_a) for p in base] + [coverage(p, mean_b) for p in cand]) if c is not None]
    if cover:
        out["coverage"] = [min(cover), max(cover)]
    if len(bench_a) >= 2 and len(bench_b) >= 2 and all(bench_a) and all(bench_b):
        d, lo, hi = welch([x or 0.0 for x in bench_a], [x or 0.0 for x in bench_b], CONFIDENCE)
        out["measured"] = {"delta_ms_per_token": d, "ci": [lo, hi]}
        moved = not math.isnan(lo) and (lo > 0 or hi < 0)  # a share of noise says nothing
        off = [c for c in cover if abs(c - 1) > COVERAGE]
        if moved and off:
            out["shares_withheld"] = (f"the busy and idle time per token came to {min(cover):.2f}–{max(cover):.2f} × "
                                      f"llama-bench's (untraced) ms/token, beyond ±{COVERAGE:.0%}: the trace does not "
                                      "account for the program it explains")
        elif moved and "withheld" not in out:
            den = ([x or 0.0 for x in bench_a], [x or 0.0 for x in bench_b])
            # the kernels' busy time (concurrent kernels once) and the idle time: they add up to the
            # span, which coverage held within 5% of the measured ms/token
            for key, attr in (("kernels", "busy_ms_per_token"), ("idle", "idle_ms_per_token")):
                num = ([getattr(p, attr) for p in base], [getattr(p, attr) for p in cand])
                if any(x is None for x in (*num[0], *num[1])):
                    continue
                xa, xb = [x or 0.0 for x in num[0]], [x or 0.0 for x in num[1]]
                share = (float(np.mean(xb)) - float(np.mean(xa))) / d
                lo_s, hi_s = _bootstrap_share((xa, xb), den)
                out[f"{key}_share"] = {"share": share, "ci": [lo_s, hi_s]}
            k = out.get("kernels_share", {}).get("share", 0.0)
            i = out.get("idle_share", {}).get("share", 0.0)
            out["unexplained_share"] = 1.0 - k - i
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
    """One line: how much of the measured difference the kernels' own time and the idle time
    between kernels account for (95% intervals over processes), and what is left unexplained;
    or why no share is given."""
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
    if d.get("shares_withheld"):
        return f"llama-bench measured {m['delta_ms_per_token']:+.3g} ms/token ({by}); no shares: {d['shares_withheld']}."
    if "kernels_share" not in d:
        return (f"llama-bench measured no difference beyond its interval ({m['delta_ms_per_token']:+.3g} ms/token, "
                f"{by}); {traced}.")
    idle = f", idle time between kernels {_pct(d['idle_share'])}" if "idle_share" in d else ""
    rest = d["unexplained_share"] if abs(d["unexplained_share"]) >= 0.005 else 0.0
    return (f"Of the measured difference of {m['delta_ms_per_token']:+.3g} ms/token ({by}), the kernels' busy time "
            f"accounts for {_pct(d['kernels_share'])}{idle}; {rest:.0%} is unexplained by the trace ({traced}).")
