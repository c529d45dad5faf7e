"""profile studies: the per-op profile of each engine, and what changed between them."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from tokensleuth.core.errors import UserError
from tokensleuth.drivers.slower.ops import BENCH_STATE, RUNS_STATE, analyze
from tokensleuth.report.figures import Figure, cell_label, num, share_cells
from tokensleuth.report.markdown import table
from tokensleuth.store import Store
from tokensleuth.studies import DiffKind, Why

TOP = 12  # ops listed per engine (the rest are summed in one line)


def _ci(lo: float, hi: float, digits: int = 3) -> str:
    return "—" if math.isnan(lo) else f"[{lo:.{digits}f}, {hi:.{digits}f}]"


def headline(d: dict[str, Any]) -> str:
    """One line on a diff: the ops that changed, each with its share of the whole change."""
    total = d["delta_total_ms_per_token"]
    parts = []
    unresolved = sum(r["verdict"] == "unresolved" for r in d["rows"])
    for r in d["rows"]:
        if r["verdict"] in ("same", "unresolved"):
            continue
        dn = r["delta_nodes_per_token"]
        nodes = f"{dn:+g} {r['op']} per token" if dn else f"{r['op']} ({r['verdict']})"
        parts.append(f"{nodes} {r['signature']}: {r['delta_ms_per_token']:+.3f} ms/token")
    if d["outside_changed"]:
        parts.append(f"time outside the graph: {d['delta_outside_ms_per_token']:+.3f} ms/token")
    if unresolved:
        parts.append(f"{unresolved} op signature(s) unresolved (fewer than 2 processes of an engine: no interval "
                     "— profile with --processes 3 or more)")
    what = "; ".join(parts) or "no op changed beyond its interval"
    return f"{d['engines'][1]} vs {d['engines'][0]}, {d['workload']}: {what} (of {total:+.3f} ms/token in all)"


def render(sid: str, obj: dict[str, Any]) -> str:
    """An op profile as Markdown: ms per token per op signature with its interval, and with two
    engines the ops whose time changed."""
    out = [f"## Profile {sid}", ""]
    if obj.get("groups"):
        out += ["Timed in groups: a chain of dependent ops (A+B: B reads A) runs as one piece, as a GPU backend "
                "may fuse it; matrix products and attention start a group of their own.", ""]
    if obj.get("synchronised"):
        gone = "every group: the overlap between groups is" if obj.get("groups") else "every node: overlap and fusion are"
        out += [f"On a GPU backend the profiler synchronises {gone} gone, so the node times add up to more than "
                "the real time; compare them between builds, not with llama-bench.", ""]
    for name, env in (obj.get("env") or {}).items():
        out += [f"{name} ran with " + " ".join(f"{k}={v}" for k, v in env.items()), ""]
    by: dict[tuple[str, str, str], list[dict[str, Any]]] = {}
    for o in obj["ops"]:
        by.setdefault((o["engine"], o["model"], o["workload"]), []).append(o)
    for (engine, model, workload), ops in by.items():
        label = workload if len({k[1] for k in by}) == 1 else f"{Path(model).stem} {workload}"
        ratio = (obj.get("node_sum_ratio") or {}).get(engine, {}).get(label)
        wall = (obj.get("wall_ratio") or {}).get(engine, {}).get(label)
        graph = sum(o["ms_per_token"] for o in ops)
        out.append(f"### {engine} · {Path(model).stem} · {workload}")
        out.append(f"graph: {graph:.3f} ms/token in {sum(o['nodes_per_token'] for o in ops):g} nodes per token"
                   + (f" = {ratio:.2f} × llama-bench's ms/token" if ratio else "")
                   + (f" ({wall:.2f} × with the time outside the graph)" if wall else ""))
        by_op: dict[str, float] = {}
        for o in ops:
            by_op[o["op"]] = by_op.get(o["op"], 0.0) + o["ms_per_token"]
        out.append("by op type: " + ", ".join(f"{op} {ms:.3f} ms ({ms / graph:.0%})" if graph else f"{op} {ms:.3f} ms"
                                              for op, ms in sorted(by_op.items(), key=lambda kv: -kv[1])[:8]))
        rows = [[o["op"], o["signature"], f"{o['nodes_per_token']:g}", f"{o['ms_per_token']:.4f}",
                 _ci(o["ci"][0], o["ci"][1], 4), f"{(o['share'] or 0):.1%}"] for o in ops[:TOP]]
        if len(ops) > TOP:
            rest = ops[TOP:]
            rows.append([f"… {len(rest)} more", "", f"{sum(o['nodes_per_token'] for o in rest):g}",
                         f"{sum(o['ms_per_token'] for o in rest):.4f}", "", ""])
        out += ["", table(["op", "signature", "nodes/token", "ms/token", "99% CI", "share"], rows,
                          [False, False, True, True, True, True]), ""]
    for d in obj.get("diffs", []):
        a, b = d["engines"]
        out += [f"### Diff: {b} vs {a} · {Path(d['model']).stem} · {d['workload']}", "", headline(d), ""]
        changed = [r for r in d["rows"] if r["verdict"] != "same"]
        rows = [[r["op"], r["signature"], f"{r['ms_per_token'][0]:.4f}", f"{r['ms_per_token'][1]:.4f}",
                 f"{r['delta_ms_per_token']:+.4f}", _ci(r["ci"][0], r["ci"][1], 4), f"{r['delta_nodes_per_token']:+g}",
                 r["verdict"]] for r in changed]
        if rows:
            out += [table(["op", "signature", f"{a} ms/tok", f"{b} ms/tok", "Δ ms/tok", "99% CI (table)",
                           "Δ nodes/tok", "verdict"], rows, [False, False, True, True, True, True, True, False]), ""]
        same = len(d["rows"]) - len(changed)
        out.append(f"{same} op signature(s) within their interval or the ±{d['band']:.0%} band; "
                   f"time outside the graph {d['outside_ms_per_token'][0]:.3f} → {d['outside_ms_per_token'][1]:.3f} "
                   f"ms/token ({d['delta_outside_ms_per_token']:+.3f} {_ci(*d['delta_outside_ci'])}).")
        if d.get("sentence"):  # the shares of the measured difference, or why none is given
            out += ["", str(d["sentence"])]
        out.append("")
    return "\n".join(out).rstrip() + "\n"


def stored(store: Store, study_id: str) -> dict[str, Any]:
    spec = store.reads.study(study_id).spec
    runs = store.state.get(study_id, RUNS_STATE)
    if not runs:
        raise UserError(f"profile {study_id} has no finished profile yet — run it again with --resume")
    return analyze(spec, runs, store.state.get(study_id, BENCH_STATE, []))


def summary(sid: str, obj: dict[str, Any], most: int = 5) -> dict[str, Any]:
    """What a culprit's report shows of its profile diff: the study, one line, the top changes
    (a kernel trace's: the kernels kind's, studies/kernels.py)."""
    if "tracers" in obj:
        from tokensleuth.studies.kernels import summary as kernel_summary

        return kernel_summary(sid, obj, most)
    d = (obj.get("diffs") or [None])[0]
    if d is None:
        return {"study": sid, "headline": "no profile diff (a profile did not run)"}
    return {"study": sid, "headline": headline(d),
            "rows": [r for r in d["rows"] if r["verdict"] != "same"][:most]}


def _bars(d: dict[str, Any], key: str, most: int = 16) -> Figure | None:
    """One diff's two builds' ms/token of each op, side by side, the largest changes first."""
    from tokensleuth.report import plots

    rows = d["rows"][:most]
    if not rows:
        return None
    a, b = d["engines"]
    bars = [(f"{r['op']} {r['signature'][:28]}", r["ms_per_token"][0], r["ms_per_token"][1]) for r in rows]
    return Figure(
        key, f"Per-op time, {cell_label(d['model'], d['workload'])}",
        f"ms per token of each op signature in the two builds, the {len(rows)} largest changes first.",
        plots.op_bars(bars, ("A", "B")),
        ("op", "signature", f"A: {a}", f"B: {b}", "Δ ms/token", "Δ nodes/token", "verdict"),
        tuple((r["op"], r["signature"], num(r["ms_per_token"][0]), num(r["ms_per_token"][1]),
               num(r["delta_ms_per_token"], "{:+.4f}"), f"{r['delta_nodes_per_token']:+g}", r["verdict"])
              for r in rows))


def profile_figures(obj: dict[str, Any], most: int = 16) -> list[Figure]:
    """Per diff: the two builds' ms/token of each op, side by side, the largest changes first."""
    out: list[Figure] = []
    for d in obj.get("diffs") or []:
        fig = _bars(d, f"ops-{len(out)}", most)
        if fig is not None:
            out.append(fig)
    return out


def why(d: dict[str, Any]) -> Why:
    """One op diff beside a verdict: the two builds' bars and the shares of the profiler's measured
    difference (the graph's nodes, the time outside it, each changed op), or only why no share is
    given: then no op is named and nothing drawn."""
    title = f"Which op: {d['engines'][1]} vs {d['engines'][0]}, {cell_label(d['model'], d['workload'])}"
    fig = _bars(d, "why-ops") if "graph_share" in d else None
    if fig is None:
        reason = d.get("shares_withheld") or "the diff has no op to show"
        return Why(title, f"No bars and no shares: {reason}.", withheld=True)
    shares = [("the graph's nodes", *share_cells(d["graph_share"])),
              ("the time outside the graph", *share_cells(d["outside_share"]))]
    shares += [(f"{o['op']} {o['signature']}", *share_cells(o)) for o in d.get("op_shares", [])]
    return Why(title, str(d["sentence"]), fig, tuple(shares))


KIND = DiffKind("profile", stored, render, profile_figures, headline, why)
