"""Figures as inline SVG text (matplotlib, Agg): pure functions of numbers, no store.

Every function returns one ``<svg>`` string, deterministic for the same input (a fixed
hash salt, no date), so a regenerated page differs only where the data does. Text in a
figure is escaped by matplotlib's SVG writer; callers still pass only short labels
(commit SHAs, cell names) and put long engine strings in the tables beside the figure.
"""

from __future__ import annotations

import io
import math
from collections.abc import Mapping, Sequence
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.patches import Rectangle  # noqa: E402
from matplotlib.ticker import MaxNLocator  # noqa: E402

plt.rcParams.update({"svg.hashsalt": "tokensleuth", "svg.fonttype": "none", "font.size": 9,
                     "axes.spines.top": False, "axes.spines.right": False})

VERDICT_COLOURS = {"faster": "#1a7f37", "slower": "#cf222e", "same": "#57606a", "unresolved": "#9a6700"}
ARM_COLOURS = ("#0969da", "#bf3989", "#1a7f37", "#9a6700", "#8250df", "#cf222e")


def _svg(fig: Any) -> str:
    buf = io.StringIO()
    fig.savefig(buf, format="svg", bbox_inches="tight", metadata={"Date": None})
    plt.close(fig)
    text = buf.getvalue()
    return text[text.index("<svg"):]  # drop the XML prologue and doctype: the page is HTML


def _pct(r: float) -> float:
    return (r - 1.0) * 100.0


def forest(rows: Sequence[tuple[str, float | None, float | None, float | None, str]], band: float) -> str:
    """Per-cell ratio (as % change) with its interval, against the ±band (shaded).

    rows: (label, ratio, lo, hi, verdict); a cell with no estimate is drawn as a gap."""
    n = max(len(rows), 1)
    fig, ax = plt.subplots(figsize=(6.4, 0.45 * n + 0.9))
    ax.axvspan(-band * 100, band * 100, color="#d0d7de", alpha=0.5, lw=0, label=f"±{band:.0%} band")
    ax.axvline(0, color="#57606a", lw=0.8)
    for i, (_label, r, lo, hi, verdict) in enumerate(rows):
        y = n - 1 - i
        if r is None or lo is None or hi is None:
            ax.text(0, y, "no estimate", ha="center", va="center", color="#57606a")
            continue
        c = VERDICT_COLOURS.get(verdict, "#57606a")
        ax.plot([_pct(lo), _pct(hi)], [y, y], color=c, lw=2.2)
        ax.plot([_pct(r)], [y], "o", color=c, ms=6)
    ax.set_yticks(range(n), [r[0] for r in reversed(rows)] if rows else [""])
    ax.set_xlabel("candidate vs baseline, % change in tokens/s (99% CI)")
    ax.legend(loc="lower right", frameon=False, fontsize=8)
    return _svg(fig)


def pair_strip(cells: Sequence[tuple[str, Sequence[float]]], band: float) -> str:
    """The per-pair ratios behind each interval, one row of dots per cell."""
    n = max(len(cells), 1)
    fig, ax = plt.subplots(figsize=(6.4, 0.45 * n + 0.9))
    ax.axvspan(-band * 100, band * 100, color="#d0d7de", alpha=0.5, lw=0)
    ax.axvline(0, color="#57606a", lw=0.8)
    for i, (_label, ratios) in enumerate(cells):
        y = n - 1 - i
        xs = [_pct(r) for r in ratios]
        # spread the dots a little in y so equal ratios stay visible
        ys = [y + ((k % 5) - 2) * 0.06 for k in range(len(xs))]
        ax.plot(xs, ys, "o", ms=4, alpha=0.75, color=ARM_COLOURS[0])
    ax.set_yticks(range(n), [c[0] for c in reversed(cells)] if cells else [""])
    ax.set_xlabel("per-pair ratio, % change in tokens/s (one dot = one pair of engine processes)")
    return _svg(fig)


def sequential(histories: Sequence[tuple[str, Sequence[tuple[int, float, float, float]]]], band: float) -> str:
    """How each interval narrowed as pairs were added: (pairs, ratio, lo, hi) per step."""
    fig, ax = plt.subplots(figsize=(6.4, 3.0))
    ax.axhspan(-band * 100, band * 100, color="#d0d7de", alpha=0.5, lw=0)
    ax.axhline(0, color="#57606a", lw=0.8)
    # the first intervals (2-3 pairs) can span orders of magnitude: frame the estimates and the
    # final intervals, and let the early bands run off the edge
    ys = [_pct(s[1]) for _, st in histories for s in st]
    ys += [_pct(v) for _, st in histories if st for v in (st[-1][2], st[-1][3])]
    ys = [y for y in ys if math.isfinite(y)]
    lo, hi = min(ys + [-band * 100]), max(ys + [band * 100])
    pad = 0.25 * (hi - lo or 1.0)
    # what runs off the edge is cut just past it: a 2-pair interval of ±10^14 % drawn as such
    # wrote path coordinates a browser refuses ("Expected number")
    edge_lo, edge_hi = lo - 4 * pad, hi + 4 * pad

    def cut(v: float) -> float:
        return min(max(v, edge_lo), edge_hi) if math.isfinite(v) else (edge_hi if v > 0 else edge_lo)

    for k, (label, steps) in enumerate(histories):
        if not steps:
            continue
        c = ARM_COLOURS[k % len(ARM_COLOURS)]
        xs = [s[0] for s in steps]
        ax.fill_between(xs, [cut(_pct(s[2])) for s in steps], [cut(_pct(s[3])) for s in steps], color=c,
                        alpha=0.15, lw=0)
        ax.plot(xs, [cut(_pct(s[1])) for s in steps], "-o", color=c, ms=3, lw=1.2, label=label)
    ax.set_ylim(lo - pad, hi + pad)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("pairs")
    ax.set_ylabel("% change (99% CI)")
    if histories:
        ax.legend(frameon=False, fontsize=8)
    return _svg(fig)


def timelines(series: Sequence[tuple[str, Sequence[float], Mapping[str, Sequence[float | None]]]],
              windows: Mapping[str, Sequence[tuple[float, float]]], metrics: Sequence[tuple[str, str]]) -> str:
    """Resource timelines per arm: one panel per metric, one line per arm, timed windows shaded.

    series: (arm, t_s, {metric: values}); windows: arm -> [(t0_s, t1_s)]; metrics: (key, label)."""
    fig, axes = plt.subplots(len(metrics), 1, figsize=(6.4, 1.7 * len(metrics) + 0.4), sharex=True, squeeze=False)
    for row, (key, label) in enumerate(metrics):
        ax = axes[row][0]
        for k, (arm, ts, values) in enumerate(series):
            c = ARM_COLOURS[k % len(ARM_COLOURS)]
            for t0, t1 in windows.get(arm, ()):
                ax.axvspan(t0, t1, color=c, alpha=0.08, lw=0)
            ys = values.get(key) or []
            pts = [(t, y) for t, y in zip(ts, ys, strict=False) if y is not None and not math.isnan(y)]
            if pts:
                ax.plot([p[0] for p in pts], [p[1] for p in pts], color=c, lw=1.1, label=arm)
        ax.set_ylabel(label, fontsize=8)
        if row == 0 and series:
            ax.legend(frameon=False, fontsize=8, ncol=len(series))
    axes[-1][0].set_xlabel("seconds since the trial started (shaded: timed windows)")
    return _svg(fig)


def bisect_steps(points: Sequence[tuple[str, float | None, float | None, float | None, str]],
                 culprit: str | None, band: float) -> str:
    """Ratio vs commit (in history order) with an outcome marker per probed commit.

    points: (short sha, ratio, lo, hi, outcome) in history order."""
    markers = {"good": ("o", "#1a7f37"), "bad": ("v", "#cf222e"), "skip": ("x", "#57606a"),
               "crash": ("X", "#8250df"), "unresolved": ("s", "#9a6700")}
    fig, ax = plt.subplots(figsize=(6.4, 3.0))
    ax.axhspan(-band * 100, band * 100, color="#d0d7de", alpha=0.5, lw=0)
    ax.axhline(0, color="#57606a", lw=0.8)
    seen: set[str] = set()
    for x, (_sha, r, lo, hi, outcome) in enumerate(points):
        m, c = markers.get(outcome, ("o", "#57606a"))
        y = 0.0 if r is None else _pct(r)
        if lo is not None and hi is not None:
            ax.plot([x, x], [_pct(lo), _pct(hi)], color=c, lw=1.5)
        ax.plot([x], [y], m, color=c, ms=7, label=outcome if outcome not in seen else None)
        seen.add(outcome)
    if culprit is not None:
        xs = [i for i, p in enumerate(points) if p[0] == culprit]
        if xs:
            ax.axvline(xs[0], color="#cf222e", ls="--", lw=1)
            ax.annotate("first bad", (xs[0], ax.get_ylim()[1]), ha="center", va="bottom", color="#cf222e")
    ax.set_xticks(range(len(points)), [p[0] for p in points], rotation=60, fontsize=7)
    ax.set_ylabel("% change vs good (99% CI)")
    if seen:
        ax.legend(frameon=False, fontsize=8)
    return _svg(fig)


def waterfall(steps: Sequence[tuple[str, float]], total: float | None) -> str:
    """Each kept patch's contribution (its step ratio, as % change) stacked to the total.

    steps: (patch, step ratio); total: the measured final/base ratio, drawn beside the sum."""
    fig, ax = plt.subplots(figsize=(6.4, 3.0))
    level = 0.0
    for i, (_name, r) in enumerate(steps):
        d = math.log(r) * 100  # contributions add up in log space; shown in %
        ax.bar(i, d, bottom=level, color="#1a7f37" if d >= 0 else "#cf222e")
        level += d
    if total is not None:
        ax.bar(len(steps), math.log(total) * 100, color="#0969da")
    names = [s[0] for s in steps] + (["measured total"] if total is not None else [])
    ax.axhline(0, color="#57606a", lw=0.8)
    ax.set_xticks(range(len(names)), names, rotation=30, ha="right", fontsize=7)
    ax.set_ylabel("contribution, % (log-additive)")
    return _svg(fig)


def history(points: Sequence[tuple[str, float, bool]], title: str) -> str:
    """t/s over engine versions or commits (in order); a ring marks a version where a verdict
    said the speed changed."""
    fig, ax = plt.subplots(figsize=(6.4, 2.8))
    xs = list(range(len(points)))
    ax.plot(xs, [p[1] for p in points], "-o", color=ARM_COLOURS[0], ms=4, lw=1.2)
    for x, (_label, y, changed) in zip(xs, points, strict=True):
        if changed:
            ax.plot([x], [y], "o", ms=12, mfc="none", mec="#cf222e", mew=1.5)
    ax.set_xticks(xs, [p[0] for p in points], rotation=45, ha="right", fontsize=7)
    ax.set_ylabel("tokens/s")
    ax.set_title(title, fontsize=9)
    return _svg(fig)


def op_bars(rows: Sequence[tuple[str, float, float]], names: tuple[str, str]) -> str:
    """Two builds' ms/token per op, side by side (rows: label, first build's, second's), in
    the order given (the caller sorts them by their change)."""
    fig, ax = plt.subplots(figsize=(6.4, max(2.0, 0.28 * len(rows) + 0.8)))
    ys = list(range(len(rows)))[::-1]
    h = 0.4
    ax.barh([y + h / 2 for y in ys], [r[1] for r in rows], h, color=ARM_COLOURS[0], label=names[0])
    ax.barh([y - h / 2 for y in ys], [r[2] for r in rows], h, color=ARM_COLOURS[1], label=names[1])
    ax.set_yticks(ys, [r[0] for r in rows], fontsize=7)
    ax.set_xlabel("ms per token")
    ax.legend(fontsize=7, loc="lower right")
    return _svg(fig)


def kernel_timeline(records: Sequence[tuple[str, int, int, int]], most: int = 10) -> str:
    """One token's kernels on the GPU (records: name, stream, start offset ns, duration ns): a row
    per stream, the ``most`` busiest kernels in their own colours, the rest grey, gaps blank."""
    busiest = sorted({r[0] for r in records}, key=lambda n: -sum(r[3] for r in records if r[0] == n))[:most]
    colours = {n: plt.get_cmap("tab10")(i % 10) for i, n in enumerate(busiest)}
    streams = sorted({r[1] for r in records})
    fig, ax = plt.subplots(figsize=(6.4, 0.5 * len(streams) + 1.6))
    for y, s in enumerate(streams):
        rows = [r for r in records if r[1] == s]
        ax.broken_barh([(r[2] / 1e3, max(r[3], 1) / 1e3) for r in rows], (y - 0.4, 0.8),
                       facecolors=[colours.get(r[0], "#bbbbbb") for r in rows], linewidth=0)
    ax.set_yticks(range(len(streams)), [f"stream {s}" for s in streams], fontsize=7)
    ax.set_xlabel("µs from the token's start")
    handles = [Rectangle((0, 0), 1, 1, color=colours[n]) for n in busiest]
    ax.legend(handles, [n[:40] for n in busiest], fontsize=6, loc="upper center", bbox_to_anchor=(0.5, -0.25),
              ncol=2, frameon=False)
    return _svg(fig)


def sweep(series: Sequence[tuple[str, Sequence[tuple[int, float, float]]]]) -> str:
    """Serving's usual trade-off: output tokens/s of all streams against the per-token latency a
    user sees (ITL p50), one point per concurrency, joined in order; series: (label, [(conc,
    latency ms, tokens/s)])."""
    fig, ax = plt.subplots(figsize=(6.4, 3.2))
    for i, (label, pts) in enumerate(series):
        pts = sorted(pts)
        c = ARM_COLOURS[i % len(ARM_COLOURS)]
        ax.plot([p[1] for p in pts], [p[2] for p in pts], "-o", color=c, ms=5, lw=1.2, label=label)
        for conc, x, y in pts:
            ax.annotate(f"c={conc}", (x, y), textcoords="offset points", xytext=(4, 4), fontsize=7, color=c)
    ax.set_xlabel("inter-token latency p50, ms (per stream)")
    ax.set_ylabel("output tokens/s (all streams)")
    ax.legend(loc="lower right", frameon=False, fontsize=8)
    return _svg(fig)
