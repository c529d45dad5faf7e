"""scan studies: every step of a history, its commit and its cause; what stayed undecided."""

from __future__ import annotations

import re
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from tokensleuth.core.errors import UserError
from tokensleuth.report.figures import Figure
from tokensleuth.report.markdown import table
from tokensleuth.store import Store
from tokensleuth.studies import ResultKind


def _ratio(c: dict[str, Any]) -> str:
    if c.get("ratio") is None:
        return "—"
    ci = c.get("ci") or [None, None]
    inner = f" [{ci[0]:.3f}, {ci[1]:.3f}]" if ci[0] is not None else ""
    return f"{c['ratio']:.3f}{inner}"


def _cell(c: dict[str, Any]) -> str:
    return f"{Path(c['model']).stem} {c['workload']}"


def _diffs(ds: list[dict[str, Any]]) -> str:
    return ", ".join(f"{d['field']} {d.get('baseline')} → {d.get('candidate')}" for d in ds)


def step_line(n: int, s: dict[str, Any]) -> str:
    """One step in one line: where, which way, how much where it moved, and why."""
    moved = [c for c in s["cells"] if c["verdict"] in ("slower", "faster")]
    still = [c for c in s["cells"] if c["verdict"] == "same"]
    what = "; ".join(f"{_cell(c)} {c['verdict']} {_ratio(c)}" for c in moved) or "no cell beyond its band"
    if still:
        what += " (the same: " + ", ".join(_cell(c) for c in still) + ")"
    cause = {"settings": "llama-bench's own settings changed (" + _diffs(s.get("param_diffs") or []) + "): with them pinned "
        "the step is gone — a default change, not the engine",
        "engine": "the engine", "undecided": "undecided (the pinned measurement could not decide)",
        "pending": "llama-bench's settings changed; the measurement with them pinned is still to come"}[s["cause"]]
    subject = f" — {s['subject']}" if s.get("subject") else ""
    return f"{n}. **{s['parent']} → {s['first_bad']}**{subject}: {s['direction']}: {what}. Cause: {cause}."


def _models(s: dict[str, Any]) -> str:
    """Which models a step moved: the scanned ones only (the control models still), all, or by name."""
    if s.get("specific_to_model") is not None:
        return "scanned only (controls still)" if s["specific_to_model"] else "all (a control moved)"
    # the controls the bisect measured count too: undecided there, they are said undecided here
    cells = [*s["cells"], *((s.get("controls") or {}).get("parent_vs_culprit") or [])]
    every = {Path(str(c["model"])).stem for c in cells}
    moved = {Path(str(c["model"])).stem for c in cells if c["verdict"] in ("faster", "slower")}
    open_ = {Path(str(c["model"])).stem for c in cells if c["verdict"] not in ("faster", "slower", "same")}
    if len(every) == 1 and moved:  # one model measured: "all" would say nothing
        return f"{next(iter(moved))} (the only model measured)"
    if not moved or moved == every:
        return "all" if moved else "—"
    open_ -= moved  # (a model with a moved cell moved, whatever its other cells say)
    return ", ".join(sorted(moved)) + (f"; {', '.join(sorted(open_))} undecided" if open_ else " only")


def _kernel(s: dict[str, Any]) -> str:
    """The profile's headline of a step, short: the kernel (GPU) or op (CPU) that moved most."""
    pr = s.get("profile") or {}
    text = str(pr.get("headline") or "")
    text = re.sub(r"^\S+ vs \S+, [^:]+: ", "", text)  # (the two engines and the cell: the row says them)
    return (text[:70] + "…" if len(text) > 70 else text) or "—"


def _files(files: list[dict[str, Any]], most: int = 8) -> str:
    """The compiled files a step changed, the engine's own first (ggml, then llama's src, then
    common and the tools: a release changes dozens, and the kernels must not fall off the end)."""
    rank = {"ggml": 0, "src": 1, "common": 2, "tools": 3}
    paths = sorted((str(f["path"]) for f in files), key=lambda p: (rank.get(p.split("/", 1)[0], 4), p))
    more = f" and {len(paths) - most} more" if len(paths) > most else ""
    return ", ".join(f"`{p}`" for p in paths[:most]) + more


def _cost(r: dict[str, Any]) -> str:
    """What the scan cost, over all its runs (a result stored before engine time was kept says
    builds and wall only)."""
    builds = r.get("builds", 0)
    every = r.get("builds_all")
    made = (f"{every} builds over all its runs ({builds} by the last)" if every is not None and every != builds
            else f"{builds} builds")
    engine = (f", {r['engine_s'] / 60:.1f} min of it engine time" if r.get("engine_s") is not None else
              " (engine time not known: a run of it before tokensleuth kept it)" if "engine_s" in r else "")
    return f"Cost: {made}, {r.get('wall_s', 0) / 60:.1f} min of wall time{engine}."


def render(r: dict[str, Any]) -> str:
    """A scan as Markdown: the releases sampled, each step found with its bisected culprit, its
    verification and kernel diff, the intervals left undecided, and what the scan cost."""
    steps = r.get("steps") or []
    out = [f"## Scan {r['study']}: {r['first']} → {r['last']}", "",
           f"{r['candidates']} commits or releases, {len(r.get('sampled') or [])} sampled; band ±{r['band']:.1%}. "
           + _cost(r), ""]
    state = {"done": "Every interval between sampled neighbours is the same or a step of one commit.",
             "undecided": "Some intervals stayed undecided (below): they are not \"no change\" — rerun with "
                          "--resume to add pairs.",
             "budget": "The budget was spent before every interval was decided (below) — rerun with --resume "
                       "and a larger --budget.",
             "running": "Still running (or killed: `--resume` goes on): {open} of {intervals} intervals between its "
                        "{points} sampled points are not decided yet (below).".format(**r.get("progress") or
                                                                                    {"open": "?", "intervals": "?",
                                                                                     "points": "?"})}[r["status"]]
    out += [f"**{len(steps)} step(s).** {state}", ""]
    for live in r.get("live") or []:  # a scan under way: its latest live line, and when it was said
        at = datetime.fromtimestamp(live["at"], tz=timezone.utc)
        out += [f"Latest progress ({at:%Y-%m-%d %H:%M:%S} UTC): {live['line']}", ""]
    for n, s in enumerate(steps, 1):
        out.append(step_line(n, s))
        extra = []
        if s.get("files"):
            extra.append("compiled files changed: " + _files(s["files"]))
        which = "which kernel" if (pr := s.get("profile")) and pr.get("kernels") else "which op"
        if pr and pr.get("headline"):
            extra.append(f"{which}: {pr['headline']}")
        elif pr and pr.get("skipped"):
            extra.append(f"{which}: not profiled ({pr['skipped']})")
        if s.get("specific_to_model") is True:
            extra.append("the control models did not move")
        elif s.get("specific_to_model") is False:
            extra.append("a control model moved too")
        if s.get("verified") is False:
            said = "; ".join(f"{_cell(c)} {_ratio(c)} {c['verdict']} after {c.get('pairs')} pairs"
                             for c in s.get("verification") or [])
            extra.append("not verified against its parent in the bisect's own cell"
                         + (f" (parent vs it: {said})" if said else ""))
        out += [f"   - {e}" for e in extra]
    rows = [[str(n), s["parent"], s["first_bad"], s.get("subject") or "—", s["direction"], s["cause"],
             "; ".join(f"{_cell(c)} {_ratio(c)} {c['verdict']}" for c in s["cells"]), _models(s), _kernel(s)]
            for n, s in enumerate(steps, 1)]
    if rows:
        out += ["", table(["#", "parent", "first bad", "release", "direction", "cause", "cells (ratio [99% CI])",
                           "models", "kernel or op"], rows, [True, False, False, False, False, False, False, False,
                                                            False])]
    for oc in r.get("output_changes") or []:
        out += ["", f"Outputs changed first at **{oc['first_changed']}** (parent {oc['parent']})"
                + (f" — {oc['subject']}" if oc.get("subject") else "")
                + (f": mean KLD {oc['mean_kld']:.3g}" if oc.get("mean_kld") is not None else "")
                + (f", same top token {oc['same_top_p']:.1f}%" if oc.get("same_top_p") is not None else "") + "."]
    if r.get("pinned") is not None:  # --pin-params: the settings each build was given, said
        held = "; ".join(f"{k} ran with {' '.join(v)}" for k, v in r["pinned"].items())
        out += ["", f"llama-bench's settings were held at {r['first']}'s (--pin-params): "
                + (held or "no build was given a flag for it") + "."]
    if r.get("settings_changes"):
        out += ["", "### Settings changes with no step", ""]
        for sc in r["settings_changes"]:
            diffs = _diffs(sc["param_diffs"])
            where = (f"at **{sc['first_changed']}** (parent {sc['parent']})" if sc.get("first_changed") else
                     f"between {sc['from']} and {sc['to']} ({sc['commits']} commits: not located)")
            subject = f" — {sc['subject']}" if sc.get("subject") else ""
            cells = "; ".join(f"{_cell(c)} {_ratio(c)}" for c in sc.get("cells") or [])
            speed = ("the speed stayed within the band" if sc.get("verdict", "same") == "same" else
                     "the speed is undecided (below)")
            out.append(f"- llama-bench's own settings changed {where}{subject}: {diffs}; {speed} ({cells}) — a "
                       "default change, not the engine, and no step.")
    if r.get("undecided"):
        out += ["", "### Undecided", ""]
        for u in r["undecided"]:
            figs = "; ".join(f"{_cell(c)} {_ratio(c)} after {c.get('pairs', 0)} pairs" for c in u.get("cells") or [])
            need = (f"; ±{r['band']:.1%} would take ~{u['pairs_needed']} pairs at the spread seen"
                    if u.get("pairs_needed") else "")
            out.append(f"- {u['from']} → {u['to']} ({u['commits']} commits): {u['reason']}" + (f" — {figs}" if figs else "")
                       + need)
    res = r.get("resolution") or {}
    seen = res.get("smallest_step_seen")
    out += ["", "### Resolution", "",
            (f"A slowdown of {seen:.1%} or more in any interval judged the same would have been seen with 95% "
             "probability (the noisiest such interval sets it). " if seen is not None else "")
            + (f"Longest interval left unsampled: {res['longest_unsampled']} commits between neighbours "
               f"judged the same (longer ones are split past {res.get('max_gap')})."
               if res.get("longest_unsampled") is not None else
               "No interval between sampled neighbours is judged the same yet: none is said to hold no change.")]
    if r.get("noise"):  # what the level rounds' noise resolves, and the band chosen (drivers/hunts/scan/resolve.py)
        from tokensleuth.drivers.hunts.scan.resolve import noise_line

        out += ["", noise_line(r["noise"]).replace("noise: ", "Noise: ", 1) + "."]
    if r.get("skipped"):
        out += ["", "Left out of the sample: " + "; ".join(f"{k} ({v})" for k, v in r["skipped"].items()) + "."]
    return "\n".join(out).rstrip() + "\n"


def history_figures(r: dict[str, Any]) -> list[Figure]:
    """t/s against version per cell, a ring at each step's first bad commit."""
    from tokensleuth.report import plots

    sampled = r.get("sampled") or []
    firsts = {s["first_bad"] for s in r.get("steps") or []}
    figs = []
    cells = list(dict.fromkeys(k for p in sampled for k in p["ts"]))
    for cell in cells:
        pts = [(p["label"][:10], p["ts"][cell], p["label"] in firsts) for p in sampled if p["ts"].get(cell)]
        if len(pts) < 2:
            continue
        figs.append(Figure(
            f"scan-{cell}", f"History: {cell}", "t/s of each sampled build (the mean of its interleaved rounds), "
            "oldest first; a ring marks a step's first bad commit.", plots.history(pts, cell),
            ("commit", "subject", "t/s", "step"),
            tuple((p["label"], str(p.get("subject") or ""), f"{p['ts'][cell]:.2f}", "first bad" if p["label"] in firsts
                   else "") for p in sampled if p["ts"].get(cell))))
    return figs


class ScanKind(ResultKind):
    name = "scan"

    def describe(self, spec: dict[str, Any]) -> str:
        return f"from {spec.get('first', '')}"

    def render(self, result: dict[str, Any]) -> str:
        return render(result)

    def stored(self, store: Store, study_id: str) -> dict[str, Any]:
        if store.state.get(study_id, "result") is None:  # under way: what it has so far
            from tokensleuth.drivers.hunts.scan import partial

            return partial(store, study_id)
        return super().stored(store, study_id)

    def figures(self, store: Store, study_id: str, obj: dict[str, Any]) -> list[Figure]:
        return history_figures(obj)

    def headline(self, obj: dict[str, Any], md: str) -> str:
        steps = obj.get("steps") or []
        return f"{len(steps)} step(s): " + ", ".join(f"{s['first_bad']} {s['direction']} ({s['cause']})"
                                                     for s in steps) if steps else "no step found"

    def culprit(self, obj: dict[str, Any]) -> tuple[str, str]:
        steps = obj.get("steps") or []
        if not steps:
            return "n/a (no step)", ""
        s = steps[0]
        return s["first_bad"] + (f" — {s['subject']}" if s.get("subject") else ""), ""


    def beside(self, obj: dict[str, Any]) -> list[dict[str, Any]]:
        return [dict(s["profile"], label=f"step {n}: {s['first_bad']} against {s.get('parent')}")
                for n, s in enumerate(obj.get("steps") or [], 1) if s.get("profile") is not None]

    def step_study(self, obj: dict[str, Any], n: int) -> str:
        steps = obj.get("steps") or []
        if not 1 <= n <= len(steps):
            raise UserError(f"--step {n}: this scan has {len(steps)} step(s) — pick one of 1..{len(steps)}")
        if not steps[n - 1].get("bisect"):
            raise UserError(f"--step {n}: its bisect is not stored — resume the scan with --resume")
        return str(steps[n - 1]["bisect"])


KIND = ScanKind()
