"""The figures of a study's HTML page, each with the table of the numbers it draws.

matplotlib is imported only when a figure is drawn: the text report never pays for it.

Pure reads of the store (or of a driver's stored result): no engine runs. Each study kind
asks for the figures that fit it (``studies.*.KIND.figures``); the page renders them.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tokensleuth.analysis import stats
from tokensleuth.store import Store


@dataclass(frozen=True, slots=True)
class Figure:
    """One plot and the table of every number it shows (for copy-paste and screen readers)."""

    key: str
    title: str
    caption: str
    svg: str
    headers: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]

    def __post_init__(self) -> None:
        if not self.svg.startswith("<svg"):
            raise ValueError("a figure's svg must be an <svg> element")
        if any(len(r) != len(self.headers) for r in self.rows):
            raise ValueError("every table row needs one value per header")


def _f(x: float | None, fmt: str = "{:.4f}") -> str:
    return "—" if x is None else fmt.format(x)


def cell_label(model: str, workload: str, candidate: str | None = None) -> str:
    return f"{Path(model).stem} {workload}" + (f" · {candidate}" if candidate else "")


# -- compare ---------------------------------------------------------------------------------


def compare_figures(store: Store, study_id: str) -> list[Figure]:
    from tokensleuth.drivers.comparisons import analyze, stored_spec
    from tokensleuth.report import plots

    spec = stored_spec(store, study_id)
    comps = analyze(store, study_id, spec)
    many = len({c.candidate for c in comps}) > 1
    label = {id(c): cell_label(c.model, c.workload, c.candidate if many else None) for c in comps}
    band = spec.band

    forest_rows = [(label[id(c)], c.estimate.ratio if c.estimate else None, c.estimate.lo if c.estimate else None,
                    c.estimate.hi if c.estimate else None, c.verdict) for c in comps]
    out = [Figure(
        "forest", "Ratio per cell", f"candidate / baseline tokens/s with its 99% interval; shaded: the ±{band:.0%} "
        "band inside which two arms count as the same.", plots.forest(forest_rows, band),
        ("cell", "baseline", "candidate", "ratio", "99% CI low", "99% CI high", "verdict", "pairs"),
        tuple((label[id(c)], c.baseline, c.candidate, _f(r[1]), _f(r[2]), _f(r[3]), c.verdict, str(c.pairs))
              for c, r in zip(comps, forest_rows, strict=True)))]

    per_pair = [(label[id(c)], [ct / bt for bt, ct in zip(c.base_ts, c.cand_ts, strict=True)]) for c in comps]
    out.append(Figure(
        "pairs", "Per-pair ratios", "each dot is one pair: the candidate's engine process over the baseline's, "
        "run back to back in alternating order.", plots.pair_strip(per_pair, band),
        ("cell", "pair", "baseline t/s", "candidate t/s", "ratio"),
        tuple((label[id(c)], str(i + 1), _f(bt, "{:.2f}"), _f(ct, "{:.2f}"), _f(ct / bt))
              for c in comps for i, (bt, ct) in enumerate(zip(c.base_ts, c.cand_ts, strict=True)))))

    hist = []
    for c in comps:
        steps = []
        for k in range(2, len(c.base_ts) + 1):
            e = stats.ratio_interval(c.base_ts[:k], c.cand_ts[:k])
            steps.append((k, e.ratio, e.lo, e.hi))
        hist.append((label[id(c)], steps))
    out.append(Figure(
        "sequential", "The interval as pairs were added", "the estimate and its 99% interval after each pair; "
        "the study stops a cell once its interval settles it against the band.", plots.sequential(hist, band),
        ("cell", "pairs", "ratio", "99% CI low", "99% CI high"),
        tuple((lab, str(k), _f(r), _f(lo), _f(hi)) for lab, steps in hist for k, r, lo, hi in steps)))
    tl = timeline_figure(store, study_id)
    if tl:
        out.append(tl)
    return out


# -- timelines (any study with trials) ------------------------------------------------------

TIMELINE_METRICS = (("gpu0_busy_pct", "GPU busy %"), ("gpu0_sm_clock_mhz", "GPU clock MHz"),
                    ("gpu0_power_w", "GPU power W"), ("busy_cores", "CPU busy cores"))


def timeline_figure(store: Store, study_id: str) -> Figure | None:
    """The last finished trial of each arm: sampled GPU values, and CPU busy cores per timed
    window (the engine's CPU time over the window's length), windows shaded."""
    from tokensleuth.report import plots

    last: dict[str, Any] = {}
    for t in store.trials(study_id):
        if t["status"] == "done" and t["t0_ns"] is not None:
            last[str(t["arm"])] = t
    if not last:
        return None
    series: list[tuple[str, Sequence[float], dict[str, Sequence[float | None]]]] = []
    windows: dict[str, list[tuple[float, float]]] = {}
    rows: list[tuple[str, ...]] = []
    present: set[str] = set()
    for arm, t in last.items():
        t0 = int(t["t0_ns"])
        tl = store.timeline(int(t["id"]))
        ts = [(tn - t0) / 1e9 for tn, _ in tl]
        values: dict[str, list[float | None]] = defaultdict(list)
        for _, v in tl:
            for key, _label in TIMELINE_METRICS[:3]:
                values[key].append(v.get(key))
                if v.get(key) is not None:
                    present.add(key)
        wins = store.windows(int(t["id"]))
        windows[arm] = [((w["start_ns"] - t0) / 1e9, (w["end_ns"] - t0) / 1e9) for w in wins]
        # CPU busy cores as a step per window: drawn at both edges of each window
        busy_t: list[float] = []
        busy: list[float | None] = []
        for w in wins:
            dur = (w["end_ns"] - w["start_ns"]) / 1e9
            if w["cpu_ms"] is not None and dur > 0:
                b = w["cpu_ms"] / 1e3 / dur
                busy_t += [(w["start_ns"] - t0) / 1e9, (w["end_ns"] - t0) / 1e9]
                busy += [b, b]
                present.add("busy_cores")
                rows.append((arm, f"{(w['start_ns'] - t0) / 1e9:.3f}", f"{(w['end_ns'] - t0) / 1e9:.3f}",
                             "busy cores", f"{b:.2f}"))
        for i, (_, v) in enumerate(tl):
            for key, lab in TIMELINE_METRICS[:3]:
                if v.get(key) is not None:
                    rows.append((arm, f"{ts[i]:.3f}", "", lab, f"{v[key]:.1f}"))
        series.append((arm, ts, dict(values)))
        if busy_t:
            series.append((arm + " (CPU)", busy_t, {"busy_cores": busy}))
            windows[arm + " (CPU)"] = []
    metrics = [m for m in TIMELINE_METRICS if m[0] in present]
    if not metrics:
        return None
    return Figure(
        "timeline", "Resources over time", "the last trial of each arm; shaded: the timed windows. GPU values "
        "are sampled; CPU busy cores is the engine's CPU time over each window.", plots.timelines(series, windows,
                                                                                                     metrics),
        ("arm", "t s (start)", "t s (end)", "metric", "value"), tuple(rows))


# -- bench -------------------------------------------------------------------------------------


def bench_figures(store: Store, study_id: str) -> list[Figure]:
    tl = timeline_figure(store, study_id)
    return [tl] if tl else []


# -- bisect ------------------------------------------------------------------------------------


def bisect_figures(result: dict[str, Any], band: float, history: Sequence[str]) -> list[Figure]:
    """history: the candidates' labels, good first (the study's spec). Good is drawn at 1 (it
    is the reference), bad at the endpoints' ratio, each probed commit at its own."""
    good, bad = str(result.get("good") or ""), str(result.get("bad") or "")
    ends = [c for c in result.get("endpoints") or [] if c.get("ratio") is not None]
    worst = max(ends, key=lambda c: abs(1 - c["ratio"]), default=None)
    steps = [dict(s) for s in result.get("steps") or []]
    probed = {str(s["commit"]) for s in steps}
    if good and good not in probed:
        steps.append({"commit": good, "outcome": "good", "ratio": 1.0, "ci": None, "pairs": 0, "note": "reference"})
    if bad and bad not in probed and worst is not None:
        steps.append({"commit": bad, "outcome": "bad" if worst["verdict"] in ("slower", "faster") else worst["verdict"],
                      "ratio": worst["ratio"], "ci": worst.get("ci"), "pairs": worst.get("pairs", 0),
                      "note": f"endpoint ({Path(worst['model']).stem} {worst['workload']})"})
    if len(steps) < 2:
        return []
    from tokensleuth.report import plots

    order = {str(c): i for i, c in enumerate(history)}
    steps.sort(key=lambda s: order.get(str(s["commit"]), len(order)))
    culprit = str(result.get("first_bad") or "")[:9] or None
    c = result.get("culprit") or {}

    def subject(step: dict[str, Any]) -> str:
        # the culprit's subject is known (git bisects); other steps carry a note at most
        if c.get("subject") and str(step["commit"]) == str(result.get("first_bad")):
            return str(c["subject"])
        return str(step.get("note") or "")

    pts = [(str(s["commit"])[:9], s.get("ratio"), (s.get("ci") or [None, None])[0], (s.get("ci") or [None, None])[1],
            str(s.get("outcome"))) for s in steps]
    return [Figure(
        "bisect", "Ratio at each probed commit", "each probed commit against good, in history order, with its "
        "outcome; the dashed line is the first bad commit.", plots.bisect_steps(pts, culprit, band),
        ("commit", "subject", "outcome", "ratio", "99% CI low", "99% CI high", "pairs"),
        tuple((str(s["commit"])[:12], subject(s), str(s.get("outcome")), _f(p[1]), _f(p[2]),
               _f(p[3]), str(s.get("pairs", ""))) for s, p in zip(steps, pts, strict=True)))]


# -- decompose ---------------------------------------------------------------------------------


def decompose_figures(result: dict[str, Any]) -> list[Figure]:
    from tokensleuth.report import plots

    out: list[Figure] = []
    for b in result.get("scoreboard") or []:
        parts = [(str(x["patch"]), float(x["ratio"])) for x in b["steps"] if x.get("ratio")]
        total = b.get("ratio")
        lab = cell_label(b["model"], b["workload"])
        out.append(Figure(
            f"waterfall-{len(out)}", f"What each kept patch contributed — {lab}",
            "each kept patch's step ratio (its state over the one before), stacked in log space; the last bar "
            "is the final state measured afresh against the base.", plots.waterfall(parts, total),
            ("patch", "step ratio", "% change"),
            tuple((name, _f(r), f"{(r - 1) * 100:+.2f}%") for name, r in parts)
            + ((("measured total", _f(total), f"{(total - 1) * 100:+.2f}%"),) if total else ())))
    return out


# -- profile -----------------------------------------------------------------------------------


def profile_figures(obj: dict[str, Any], most: int = 16) -> list[Figure]:
    """Per diff: the two builds' ms/token of each op, side by side, the largest changes first."""
    from tokensleuth.report import plots

    out: list[Figure] = []
    for d in obj.get("diffs") or []:
        rows = d["rows"][:most]
        if not rows:
            continue
        a, b = d["engines"]
        label = cell_label(d["model"], d["workload"])
        bars = [(f"{r['op']} {r['signature'][:28]}", r["ms_per_token"][0], r["ms_per_token"][1]) for r in rows]
        out.append(Figure(
            f"ops-{len(out)}", f"Per-op time, {label}",
            f"ms per token of each op signature in the two builds, the {len(rows)} largest changes first.",
            plots.op_bars(bars, ("A", "B")),
            ("op", "signature", f"A: {a}", f"B: {b}", "Δ ms/token", "Δ nodes/token", "verdict"),
            tuple((r["op"], r["signature"], _f(r["ms_per_token"][0]), _f(r["ms_per_token"][1]),
                   _f(r["delta_ms_per_token"], "{:+.4f}"), f"{r['delta_nodes_per_token']:+g}", r["verdict"])
                  for r in rows)))
    return out
