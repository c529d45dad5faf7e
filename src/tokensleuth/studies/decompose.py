"""decompose studies: a patch series measured one patch at a time."""

from __future__ import annotations

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
    """Kept patches, the step log (one row per patch x cell) and the scoreboard of a decompose."""
    steps = r.get("steps") or []
    kept = [s["patch"] for s in steps if s["decision"] == "kept"]
    out = [f"Decompose of {len(steps)} patch(es) on {str(r['base'])[:10]}: kept {len(kept)}"
           + (f" ({', '.join(kept)})" if kept else "") + f"; final state {str(r['final'])[:10]}."]
    if r.get("status") != "done":
        out.append(f"INCOMPLETE: {r.get('reason') or 'not every step was decided'}.")
        if (d := r.get("diagnosis")) and d.get("advice"):
            out.append(f"Why {d.get('patch', 'a step')} is unresolved:\n"
                       + "\n".join(f"  - {line}" for line in d["advice"]))
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
    if rows:
        out += ["", "Steps (ratio = this state / last kept state, 99% CI):",
                table(["patch", "subject", "decision", "reason", "cell", "ratio", "verdict", "pairs", "build s",
                       "outputs"], rows, [False, False, False, False, False, True, False, True, True, False])]
    for s in steps:
        if (pr := s.get("profile")) is not None:
            which = "which kernel" if pr.get("kernels") else "which op"
            where = f"{Path(str(pr.get('model', ''))).stem} {pr.get('workload', '')}".strip()
            said = (f"{pr['headline']} (`tokensleuth report {pr['study']}`)" if pr.get("headline")
                    else f"not profiled ({pr.get('skipped', 'no profile')})")
            out.append(f"{s['patch']} ({s['decision']}), {which} on {where}: {said}")
    board = r.get("scoreboard") or []
    if board:
        names = [x["patch"] for x in board[0]["steps"]]
        brows = [[Path(b["model"]).stem, b["workload"],
                  "—" if b["base_tokens_per_s"] is None else f"{b['base_tokens_per_s']:.2f}",
                  "—" if b["final_tokens_per_s"] is None else f"{b['final_tokens_per_s']:.2f}",
                  _ratio_ci(b["ratio"], b["ci"]), b["verdict"],
                  *("—" if x["ratio"] is None else f"{x['ratio']:.4f}" for x in b["steps"])] for b in board]
        out += ["", "Scoreboard (final kept state vs base, measured afresh; then each kept patch's step ratio):",
                table(["model", "test", "base t/s", "final t/s", "speedup [99% CI]", "verdict", *names], brows,
                      [False, False, True, True, True, False, *(True for _ in names)])]
    elif not kept:
        out.append("No patch was kept: the final state is the base.")
    if r.get("out_branch"):
        out.append(f"\nKept patches written as branch {r['out_branch']}.")
    if r.get("out_dir"):
        out.append(f"\nKept patches written: {', '.join(r['out_dir'])}.")
    out.append(f"\nstudy: {r.get('study')}")
    return "\n".join(out)


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


class DecomposeKind(ResultKind):
    name = "decompose"

    def describe(self, spec: dict[str, Any]) -> str:
        return f"{str(spec.get('base', ''))[:10]} + {len(spec.get('patches') or [])} patches"

    def render(self, result: dict[str, Any]) -> str:
        return render_decompose(result)

    def figures(self, store: Store, study_id: str, obj: dict[str, Any]) -> list[Figure]:
        return decompose_figures(obj)


KIND = DecomposeKind()
