"""decompose studies: a patch series measured one patch at a time."""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tokensleuth.report.figures import Figure, cell_label, num
from tokensleuth.report.markdown import table
from tokensleuth.store import Store
from tokensleuth.studies import ResultKind


def _ratio_ci(ratio: float | None, ci: Sequence[float] | None) -> str:
    if ratio is None:
        return "—"
    return f"{ratio:.4f}" + (f" [{ci[0]:.4f}, {ci[1]:.4f}]" if ci else "")


def render_decompose(r: dict[str, Any]) -> str:
    """The patch decomposition report, the step log (one row per patch x cell) and the scoreboard of a decompose."""
    steps = r.get("steps") or []
    kept = [s["patch"] for s in steps if s["decision"] == "kept"]
    out = [f"Decompose of {len(steps)} patch(es) on {str(r['base'])[:10]}: kept {len(kept)}"
           + (f" ({', '.join(kept)})" if kept else "") + f"; final state {str(r['final'])[:10]}."]
    if r.get("status") != "done":
        out.append(f"INCOMPLETE: {r.get('reason') or 'not every step was decided'}.")
        if (d := r.get("diagnosis")) and d.get("advice"):
            out.append(f"Why {d.get('patch', 'a step')} is unresolved:\n"
                       + "\n".join(f"  - {line}" for line in d["advice"]))
    out += render_report(r) + _skipped_table(steps) + _steps_table(steps) + _profile_lines(steps)
    board = r.get("scoreboard") or []
    if board:
        out += _scoreboard_table(board)
    elif not kept:
        out.append("No patch was kept: the final state is the base.")
    if r.get("out_branch"):
        out.append(f"\nKept patches written as branch {r['out_branch']}.")
    if r.get("out_dir"):
        out.append(f"\nKept patches written: {', '.join(r['out_dir'])}.")
    out.append(f"\nstudy: {r.get('study')}")
    return "\n".join(out)


# -- the patch decomposition report: one row per state, in the form of a hand-made one ----------

Cell = tuple[str, str]  # (model path, workload)
REPORT_CAPTION = (
    "Patch decomposition report (t/s: each state's mean; Δ vs last kept: this state / the last kept state; "
    "Δ vs base: the product of the step ratios along the kept chain, an estimate — the scoreboard below "
    "measures the final state against the base afresh):")


def _cell(c: dict[str, Any]) -> Cell:
    return str(c["model"]), str(c["workload"])


def _cell_name(k: Cell) -> str:
    return f"{Path(k[0]).stem} {k[1]}"


def _pct(ratio: float | None) -> str:
    return "—" if ratio is None else f"{(ratio - 1) * 100:+.2f}%"


def _tps(v: float | None) -> str:
    return "—" if v is None else f"{v:.2f}"


def _chain(r: dict[str, Any]) -> list[tuple[int, dict[str, Any], str]]:
    """Each step (its place in the series, 1-based) with the state it was measured against:
    the last kept one before it (the stored result drops the driver's parent link)."""
    kept, out = str(r["base"]), []
    for i, s in enumerate(r.get("steps") or [], 1):
        out.append((i, s, str(s.get("parent") or kept)))
        if s["decision"] == "kept" and s.get("state"):
            kept = str(s["state"])
    return out


def _vs_base(base: str, chain: Sequence[tuple[int, dict[str, Any], str]],
             keys: Sequence[Cell]) -> list[dict[Cell, float | None]]:
    """Per step and cell: its step ratio times its parent's product of step ratios (the base's is 1);
    None where a factor is missing."""
    product: dict[str, dict[Cell, float | None]] = {base: dict.fromkeys(keys, 1.0)}
    out = []
    for _, s, parent in chain:
        ratios = {_cell(c): c.get("ratio") for c in s.get("cells") or []}
        before = product.get(parent, {})
        mine: dict[Cell, float | None] = {}
        for k in keys:
            a, b = ratios.get(k), before.get(k)
            mine[k] = None if a is None or b is None else float(a) * b
        out.append(mine)
        if s["decision"] == "kept" and s.get("state"):
            product[str(s["state"])] = mine
    return out


def _band(r: dict[str, Any]) -> str:
    b = r.get("band", (r.get("spec") or {}).get("band"))
    if b is None or b == "":
        return ""
    return f"±{float(b) * 100:g}%" if isinstance(b, (int, float)) else "±" + str(b).lstrip("±")


def _listed(cells: Sequence[dict[str, Any]], ratio: bool) -> str:
    return ", ".join(_cell_name(_cell(c)) + (f" {_pct(c.get('ratio'))}" if ratio else "") for c in cells)


def _profit(cells: Sequence[dict[str, Any]]) -> str:
    """PROFIT on the faster cells; NEUTRAL on the same ones; what stayed unresolved says so."""
    said = [f"PROFIT on {_listed([c for c in cells if c['verdict'] == 'faster'], True)}"]
    if same := [c for c in cells if c["verdict"] == "same"]:
        said.append(f"NEUTRAL on {_listed(same, False)}")
    if other := [c for c in cells if c["verdict"] not in ("faster", "same")]:
        said.append(f"unresolved on {_listed(other, False)}")
    return "; ".join(said)


def _verdict(s: dict[str, Any], band: str) -> str:
    """The step's decision in the report's words (never NEUTRAL for an unresolved step)."""
    reason, cells = str(s["reason"]), s.get("cells") or []
    head, _, rest = reason.partition(";")
    if s["decision"] == "failed":
        return f"FAILED: {reason}"
    if s["decision"] == "kept":
        said = _profit(cells) if head == "faster" else "NEUTRAL" if head.startswith("neutral") else head
    elif head == "outputs changed":
        kld = (s.get("outputs") or {}).get("mean_kld")
        said = "OUTPUTS CHANGED" + (f" (mean KLD {kld:.2g})" if kld is not None else "")
    elif head == "regression":
        said = f"REGRESSION on {_listed([c for c in cells if c['verdict'] == 'slower'], True)}"
    elif head == "unresolved":
        said = f"UNRESOLVED after {max((int(c.get('pairs') or 0) for c in cells), default=0)} pairs"
    elif head == "neutral":
        said = "NEUTRAL" + (f" (within {band})" if band else "")
    else:
        said = head
    said += f";{rest}" if rest else ""  # "outputs changed", allowed or not
    return f"{said} → {'committed' if s['decision'] == 'kept' else 'reverted'}"


def _step_delta(c: dict[str, Any] | None) -> str:
    if c is None or c.get("ratio") is None:
        return "—"
    return _pct(c["ratio"]) + ("" if c["verdict"] == "same" else f" ({c['verdict']})")


def _base_tps(base: str, chain: Sequence[tuple[int, dict[str, Any], str]], k: Cell) -> str:
    """The base's t/s in a cell: the A arm of the first step measured against the base there."""
    for _, s, parent in chain:
        c = next((c for c in s.get("cells") or [] if _cell(c) == k), None)
        if parent == base and c is not None:
            return _tps(c.get("baseline_tokens_per_s"))
    return "—"


def render_report(r: dict[str, Any]) -> list[str]:
    """The patch decomposition report: the base, then each patch built (skipped ones aside)."""
    base, chain = str(r["base"]), _chain(r)
    if all(s["decision"] == "skipped" for _, s, _ in chain):
        return []
    keys = [_cell(c) for c in next((s["cells"] for _, s, _ in chain if s.get("cells")), [])]
    dash = ["—"] * len(keys)
    rows = [["0", "(base, no patches)", *(_base_tps(base, chain, k) for k in keys), *dash, *dash, "reference",
             f"`{base[:10]}`"]]
    for (i, s, _), total in zip(chain, _vs_base(base, chain, keys), strict=True):
        if s["decision"] == "skipped":
            continue
        cells = {_cell(c): c for c in s.get("cells") or []}
        rows.append([str(i), f"+{s['patch']}", *(_tps((cells.get(k) or {}).get("candidate_tokens_per_s"))
                                                    for k in keys),
                     *(_step_delta(cells.get(k)) for k in keys), *(_pct(total[k]) for k in keys),
                     _verdict(s, _band(r)),
                     f"`{str(s['state'])[:10]}`" if s["decision"] == "kept" and s.get("state") else "(none)"])
    names = [_cell_name(k) for k in keys]
    heads = ["State", "Patch", *names, *(f"Δ vs last kept {n}" for n in names), *(f"Δ vs base {n}" for n in names),
             "Verdict", "Commit"]
    return ["", REPORT_CAPTION, table(heads, rows, [True, False, *(True for _ in range(3 * len(keys))), False, False])]


def _skipped_table(steps: Sequence[dict[str, Any]]) -> list[str]:
    rows = [[s["patch"], f"`{m.group(1)}`" if (m := re.search(r"already upstream as ([0-9a-f]+)", s["reason"]))
             else "—", s["reason"]] for s in steps if s["decision"] == "skipped"]
    if not rows:
        return []
    return ["", "Patches already in the base (skipped — no source change):",
            table(["Patch", "Upstream commit", "Reason"], rows, [False, False, False])]


# -- the step log, the profiles and the scoreboard ------------------------------------------


def _steps_table(steps: Sequence[dict[str, Any]]) -> list[str]:
    rows = []
    for s in steps:
        o = s.get("outputs") or {}
        verdict = o.get("verdict", "—") if o else "—"
        if o.get("mean_kld") is not None:
            verdict += f" (KLD {o['mean_kld']:.2g}, 99% {o.get('kld_99') or 0:.2g}, top p {o.get('same_top_p') or 0:.1f}%)"
        build = ("cached" if s.get("cache_hit") else f"{s['build_s']:.0f}") if s.get("build_s") is not None else "—"
        cells = s.get("cells") or [None]
        for k, c in enumerate(cells):
            head = [s["patch"], s["subject"][:40], s["decision"], s["reason"]] if k == 0 else ["", "", "", ""]
            cell = ([f"{Path(c['model']).stem} {c['workload']}", _ratio_ci(c["ratio"], c["ci"]), c["verdict"],
                     str(c["pairs"])] if c else ["—", "—", "—", "0"])
            rows.append([*head, *cell, build if k == 0 else "", verdict if k == 0 else ""])
    if not rows:
        return []
    return ["", "Steps (ratio = this state / last kept state, 99% CI):",
            table(["patch", "subject", "decision", "reason", "cell", "ratio", "verdict", "pairs", "build s",
                   "outputs"], rows, [False, False, False, False, False, True, False, True, True, False])]


def _profile_lines(steps: Sequence[dict[str, Any]]) -> list[str]:
    out = []
    for s in steps:
        if (pr := s.get("profile")) is not None:
            which = "which kernel" if pr.get("kernels") else "which op"
            where = f"{Path(str(pr.get('model', ''))).stem} {pr.get('workload', '')}".strip()
            said = (f"{pr['headline']} (`tokensleuth report {pr['study']}`)" if pr.get("headline")
                    else f"not profiled ({pr.get('skipped', 'no profile')})")
            out.append(f"{s['patch']} ({s['decision']}), {which} on {where}: {said}")
    return out


def _scoreboard_table(board: Sequence[dict[str, Any]]) -> list[str]:
    names = [x["patch"] for x in board[0]["steps"]]
    brows = [[Path(b["model"]).stem, b["workload"],
              "—" if b["base_tokens_per_s"] is None else f"{b['base_tokens_per_s']:.2f}",
              "—" if b["final_tokens_per_s"] is None else f"{b['final_tokens_per_s']:.2f}",
              _ratio_ci(b["ratio"], b["ci"]), b["verdict"],
              *("—" if x["ratio"] is None else f"{x['ratio']:.4f}" for x in b["steps"])] for b in board]
    return ["", "Scoreboard (final kept state vs base, measured afresh; then each kept patch's step ratio):",
            table(["model", "test", "base t/s", "final t/s", "speedup [99% CI]", "verdict", *names], brows,
                  [False, False, True, True, True, False, *(True for _ in names)])]


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
            tuple((name, num(r), f"{(r - 1) * 100:+.2f}%") for name, r in parts)
            + ((("measured total", num(total), f"{(total - 1) * 100:+.2f}%"),) if total else ())))
    return out


def partial_result(store: Store, study_id: str) -> dict[str, Any] | None:
    """What a decompose that has not ended (running, or killed) has decided so far: its stored
    steps as a result marked incomplete, with no scoreboard (None: no step decided yet)."""
    from tokensleuth.drivers.hunts.decompose.steps import (
        public,  # (the steps as the driver's result shows them)
    )

    steps = store.state.get(study_id, "steps")
    if not steps:
        return None
    spec = store.reads.study(study_id)["spec"]
    kept = [s for s in steps if s["decision"] == "kept"]
    base = str(spec.get("base") or steps[0]["parent"])
    return {"study": study_id, "base": base, "final": kept[-1]["state"] if kept else base, "status": "incomplete",
            "reason": f"still running, or killed: {len(steps)} of {len(spec.get('patches') or [])} patches decided so "
                      "far — the same command with --resume goes on",
            "steps": [public(s) for s in steps],
            "scoreboard": [], "kept": [s["patch"] for s in kept], "band": spec.get("band")}


class DecomposeKind(ResultKind):
    name = "decompose"

    def stored(self, store: Store, study_id: str) -> dict[str, Any]:
        """The result the driver stored when it ended; before that, the steps decided so far."""
        if store.state.get(study_id, "result") is None and (part := partial_result(store, study_id)) is not None:
            return part
        return super().stored(store, study_id)

    def describe(self, spec: dict[str, Any]) -> str:
        return f"{str(spec.get('base', ''))[:10]} + {len(spec.get('patches') or [])} patches"

    def render(self, result: dict[str, Any]) -> str:
        return render_decompose(result)

    def figures(self, store: Store, study_id: str, obj: dict[str, Any]) -> list[Figure]:
        return decompose_figures(obj)

    def beside(self, obj: dict[str, Any]) -> list[dict[str, Any]]:
        return [dict(s["profile"], label=f"{s['patch']} ({s['decision']}) against the state before it")
                for s in obj.get("steps") or [] if s.get("profile") is not None]


KIND = DecomposeKind()
