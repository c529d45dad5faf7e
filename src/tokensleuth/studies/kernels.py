"""kernels studies: each engine's GPU kernels per token, and which kernel changed between builds."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from tokensleuth.analysis.kernel_diff import BESIDE
from tokensleuth.analysis.traces import analyze
from tokensleuth.core.errors import UserError
from tokensleuth.drivers.slower.kernels import RUNS_STATE
from tokensleuth.report.figures import Figure, cell_label, num, share_cells
from tokensleuth.report.markdown import table
from tokensleuth.store import Store
from tokensleuth.studies import DiffKind, Why

TOP = 12  # kernels listed per engine (the rest summed in one line)
MOVED = ("appeared", "vanished", "grew", "shrank", "grew" + BESIDE, "shrank" + BESIDE)


def _ci(lo: float | None, hi: float | None) -> str:
    return "—" if lo is None or hi is None or math.isnan(lo) else f"[{lo:+.4f}, {hi:+.4f}]"


def _opt(x: float | None, fmt: str = "{:.3f}") -> str:
    return "—" if x is None else fmt.format(x)


def headline(d: dict[str, Any]) -> str:
    """One line on a diff: the kernels that changed on their own time (the largest first), then
    those that changed only beside others, the launches that changed, the share accounted for. A
    withheld table names no kernel: its reason instead."""
    if d.get("withheld"):
        a, b = d["engines"]
        return f"{b} vs {a}, {d['workload']}: {d['withheld']}."
    rows = d.get("rows", [])
    alone = [r for r in rows if r["verdict"] in MOVED and not r["verdict"].endswith(BESIDE)]
    beside = [r for r in rows if r["verdict"].endswith(BESIDE)]

    def own(r: dict[str, Any]) -> str:
        o = r.get("own")
        return "" if not o or r["verdict"] in ("appeared", "vanished") else \
            f", its own time {o['delta_ms_per_token']:+.4f}"

    parts = [f"{r['kernel']} {r['verdict']} ({r['delta_ms_per_token']:+.4f} ms/token{own(r)})" for r in alone[:4]]
    if len(alone) > 4:
        parts.append(f"{len(alone) - 4} more")
    if beside:
        parts.append("changed only while beside other kernels (their own time not beyond its interval and the band): "
                     + ", ".join(f"{r['kernel']} ({r['delta_ms_per_token']:+.4f})" for r in beside[:3])
                     + (f" and {len(beside) - 3} more" if len(beside) > 3 else ""))
    launches = [r for r in rows if r.get("launch_changed") and r["verdict"] not in ("appeared", "vanished")]
    if launches:
        parts.append("launch changed: " + "; ".join(f"{r['kernel']} ({r['launch_changed']})" for r in launches[:3]))
    what = "; ".join(parts) or d.get("why") or "no kernel changed beyond its interval"
    a, b = d["engines"]
    return f"{b} vs {a}, {d['workload']}: {what}. {d.get('sentence', '')}".strip()


def render(sid: str, obj: dict[str, Any]) -> str:
    """A kernels study as Markdown: the tracers and their cost, each side's busy and idle time per
    token against llama-bench, the kernels that changed and their shares of the difference."""
    out = [f"## Kernels {sid}", ""]
    tracers = obj.get("tracers") or {}
    mode = f" (recording {obj['mode']})" if obj.get("mode") else ""
    out += ["Traced by " + ", ".join(f"{e}: {t}" for e, t in tracers.items()) + mode + "; llama-bench ran with "
            + (" ".join(obj.get("flags") or []) or "its defaults") + ".", ""]
    for name, env in (obj.get("env") or {}).items():
        out += [f"{name} ran with " + " ".join(f"{k}={v}" for k, v in env.items()), ""]
    for c in obj["cells"]:
        out.append(f"### {c['engine']} · {Path(c['model']).stem} · {c['workload']}")
        cover = c.get("coverage")
        cost = c.get("trace_cost")
        untraced = c.get("untraced_ms_per_token")
        overlap = c.get("overlap_ms_per_token")
        if c.get("withheld"):
            out.append(f"GPU: the kernel figures are withheld ({c['withheld']}); llama-bench "
                       f"{_opt(c['bench_ms_per_token'])} ms/token traced"
                       + (f", {untraced:.3f} untraced" if untraced else "") + f"; {c['processes']} processes.")
            out += [f"Note: {n}" for n in c.get("notes", [])]
            continue
        out.append(f"GPU: {c['kernel_ms_per_token']:.3f} ms/token in kernels"
                   + (f" ({overlap:.3f} of it beside another kernel)" if overlap else "")
                   + f", {_opt(c['idle_ms_per_token'])} idle between them, "
                   f"{_opt(c.get('outside_ms_per_token'))} before the first and after the last; llama-bench "
                   f"{_opt(c['bench_ms_per_token'])} ms/token traced"
                   + (f", {untraced:.3f} untraced" if untraced else "")
                   + (f" (traced/untraced {cost['ratio']:.3f}, 95% CI {cost['ci'][0]:.3f}–{cost['ci'][1]:.3f})"
                      if cost else "")
                   + ((f"; busy + outside = {cover:.2f} × llama-bench's untraced ms/token" if untraced else
                       f"; busy + idle = {cover:.2f} × llama-bench's ms/token") if cover else "")
                   + f"; {c['processes']} processes.")
        if c.get("withheld"):
            out.append(f"Withheld: {c['withheld']}.")
        out += [f"Note: {n}" for n in c.get("notes", [])]
        rows = [[k["name"], f"{k['calls_per_token']:g}", f"{k['ms_per_token']:.4f}", f"{k['share']:.1%}"]
                for k in c["kernels"][:TOP]]
        rest = c["kernels"][TOP:]
        if rest:
            rows.append([f"… {len(rest)} more", f"{sum(k['calls_per_token'] for k in rest):g}",
                         f"{sum(k['ms_per_token'] for k in rest):.4f}", f"{sum(k['share'] for k in rest):.1%}"])
        out += ["", table(["kernel", "calls/token", "GPU ms/token", "share"], rows, [False, True, True, True]), ""]
    for d in obj.get("diffs", []):
        a, b = d["engines"]
        out += [f"### Diff: {b} vs {a} · {Path(d['model']).stem} · {d['workload']}", "", headline(d), ""]
        if d.get("withheld"):
            continue
        changed = [r for r in d.get("rows", []) if r["verdict"] != "same" or r.get("launch_changed")]
        rows = [[r["kernel"], f"{r['ms_per_token'][0]:.4f}", f"{r['ms_per_token'][1]:.4f}",
                 f"{r['delta_ms_per_token']:+.4f}", _ci(*r["ci"]),
                 f"{r['own']['delta_ms_per_token']:+.4f}" if r.get("own") else "—",
                 f"{r['calls_per_token'][0]:g} → {r['calls_per_token'][1]:g}", r["verdict"],
                 r.get("launch_changed") or ""] for r in changed]
        for key, label in (("kernels", "(all kernels)"), ("overlap", "(kernels beside another)"),
                           ("idle", "(GPU idle between kernels)"), ("outside", "(before the first, after the last)")):
            if key in d:
                i = d[key]
                rows.append([label, f"{i['ms_per_token'][0]:.4f}", f"{i['ms_per_token'][1]:.4f}",
                             f"{i['delta_ms_per_token']:+.4f}", _ci(*i["ci"]), "", "", "", ""])
        if rows:
            out += [table(["kernel", f"{a} ms/tok", f"{b} ms/tok", "Δ ms/tok", "95% CI (table)", "Δ own ms/tok",
                           "calls/token", "verdict", "launch"], rows,
                          [False, True, True, True, True, True, True, False, False]), ""]
        same = len(d.get("rows", [])) - len([r for r in d.get("rows", []) if r["verdict"] != "same"])
        out += [f"{same} kernel(s) within their interval or the ±{d.get('band', 0.02):.0%} band.", ""]
    return "\n".join(out).rstrip() + "\n"


def stored(store: Store, study_id: str) -> dict[str, Any]:
    runs = store.state.get(study_id, RUNS_STATE)
    if not runs:
        raise UserError(f"kernels {study_id} has no traced process yet — run it again with --resume")
    return analyze(store.reads.study(study_id).spec, runs)


def summary(sid: str, obj: dict[str, Any], most: int = 5) -> dict[str, Any]:
    """What a verdict's report shows of its kernel diff: the study, one line, the top changes."""
    d = (obj.get("diffs") or [None])[0]
    if d is None:
        return {"study": sid, "headline": "no kernel diff (a trace did not run)"}
    return {"study": sid, "headline": headline(d), "kernels": True,
            "rows": [r for r in d.get("rows", []) if r["verdict"] in MOVED][:most]}


def _bars(d: dict[str, Any], key: str, most: int = 16) -> Figure | None:
    """One diff's two builds' GPU ms/token of each kernel, the largest changes first (none where the
    table is withheld: it has no rows)."""
    from tokensleuth.report import plots

    rows = d.get("rows", [])[:most]
    if not rows:
        return None
    a, b = d["engines"]
    return Figure(
        key, f"Per-kernel GPU time, {cell_label(d['model'], d['workload'])}",
        f"GPU ms per token of each kernel in the two builds, the {len(rows)} largest changes first.",
        plots.op_bars([(r["kernel"][:48], r["ms_per_token"][0], r["ms_per_token"][1]) for r in rows], ("A", "B")),
        ("kernel", f"A: {a}", f"B: {b}", "Δ ms/token", "verdict", "launch"),
        tuple((r["kernel"], num(r["ms_per_token"][0]), num(r["ms_per_token"][1]),
               num(r["delta_ms_per_token"], "{:+.4f}"), r["verdict"], r.get("launch_changed") or "")
              for r in rows))


def kernel_figures(obj: dict[str, Any], most: int = 16) -> list[Figure]:
    """Per diff, the two builds' GPU ms/token of each kernel (largest changes first); per cell, one token's timeline."""
    from tokensleuth.report import plots

    out: list[Figure] = []
    for d in obj.get("diffs") or []:
        fig = _bars(d, f"kernels-{len(out)}", most)
        if fig is not None:
            out.append(fig)
    for c in obj.get("cells") or []:
        recs = [(str(r[0]), int(r[1]), int(r[2]), int(r[3])) for r in c.get("timeline") or []]
        if not recs:
            continue
        out.append(Figure(
            f"timeline-{len(out)}", f"One token on the GPU, {c['engine']} · {cell_label(c['model'], c['workload'])}",
            "The kernels of one token in the middle repetition of the first process, by stream; blank is idle.",
            plots.kernel_timeline(recs),
            ("kernel", "stream", "start µs", "µs"),
            tuple((str(r[0]), str(r[1]), num(r[2] / 1e3, "{:.1f}"), num(r[3] / 1e3, "{:.1f}")) for r in recs[:200])))
    return out


def why(d: dict[str, Any]) -> Why:
    """One kernel diff beside a verdict: the two builds' bars and the shares of the measured
    difference (the kernels' busy time, the host's time outside them or the idle time, and what the
    trace leaves), or only why none is given (records lost, a trace that does not account for the
    program, no timeline, a difference not beyond its interval or within the band): then no kernel
    is named and nothing drawn."""
    title = f"Which kernel: {d['engines'][1]} vs {d['engines'][0]}, {cell_label(d['model'], d['workload'])}"
    fig = _bars(d, "why-kernels") if "kernels_share" in d and not d.get("withheld") else None
    if fig is None:
        reason = d.get("withheld") or d.get("shares_withheld") or d.get("sentence") or d.get("why") or \
            "no share of a measured difference"
        return Why(title, f"No bars and no shares: {str(reason).rstrip('.')}.", withheld=True)
    shares = [("the kernels' busy time", *share_cells(d["kernels_share"]))]
    if "outside_share" in d:
        shares.append(("the host's time before the first kernel and after the last", *share_cells(d["outside_share"])))
    if "idle_share" in d:
        shares.append(("the GPU's idle time between kernels", *share_cells(d["idle_share"])))
    if "gaps_share" in d:
        shares.append(("the rest: the gaps between kernels of the untraced program", f"{d['gaps_share']:.1%}",
                       "— (what the parts above leave)"))
    if "unexplained_share" in d:
        shares.append(("the rest: unexplained by the trace", f"{d['unexplained_share']:.1%}",
                       "— (what the parts above leave)"))
    return Why(title, str(d.get("sentence") or ""), fig, tuple(shares))


KIND = DiffKind("kernels", stored, render, kernel_figures, headline, why)
