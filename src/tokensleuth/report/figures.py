"""The figures of a study's HTML page, each with the table of the numbers it draws.

matplotlib is imported only when a figure is drawn: the text report never pays for it.

The primitives: :class:`Figure`, the number and cell labels, and the resources timeline any
study with trials shows. Each study kind draws its own figures in its module
(``studies.<kind>``, ``KIND.figures``); the page renders them.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

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


def num(x: float | None, fmt: str = "{:.4f}") -> str:
    return "—" if x is None else fmt.format(x)


def share_cells(x: dict[str, Any]) -> tuple[str, str]:
    """A share of a difference ({share, ci}) and its interval, as a table writes them."""
    lo, hi = x["ci"]
    return f"{x['share']:.1%}", "—" if lo is None or hi is None or lo != lo else f"[{lo:.1%}, {hi:.1%}]"


def cell_label(model: str, workload: str, candidate: str | None = None) -> str:
    return f"{Path(model).stem} {workload}" + (f" · {candidate}" if candidate else "")


# -- timelines (any study with trials) ------------------------------------------------------

TIMELINE_METRICS = (("gpu0_busy_pct", "GPU busy %"), ("gpu0_sm_clock_mhz", "GPU clock MHz"),
                    ("gpu0_power_w", "GPU power W"), ("busy_cores", "CPU busy cores"))


def timeline_figure(store: Store, study_id: str) -> Figure | None:
    """The last finished trial of each arm: sampled GPU values, and CPU busy cores per timed
    window (the engine's CPU time over the window's length), windows shaded."""
    from tokensleuth.report import plots

    last: dict[str, Any] = {}
    for t in store.reads.trials(study_id):
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
        tl = store.reads.timeline(int(t["id"]))
        ts = [(tn - t0) / 1e9 for tn, _ in tl]
        values: dict[str, list[float | None]] = defaultdict(list)
        for _, v in tl:
            for key, _label in TIMELINE_METRICS[:3]:
                values[key].append(v.get(key))
                if v.get(key) is not None:
                    present.add(key)
        wins = store.reads.windows(int(t["id"]))
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
