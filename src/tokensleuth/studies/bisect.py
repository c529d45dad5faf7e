"""bisect studies: the first slower commit, or why there is none yet."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tokensleuth.engines import show_setting
from tokensleuth.report.figures import Figure, num
from tokensleuth.report.markdown import table
from tokensleuth.store import Store
from tokensleuth.studies import ResultKind


def kld_figures(o: dict[str, Any]) -> str:
    floor = o.get("floor") or {}
    return (f"mean KLD {o['mean_kld']:.6f} (floor {floor.get('mean_kld', 0.0):.6f}), 99% KLD {o['kld_99']:.6f}, "
            f"same top p {o['same_top_p']:.3f}%")


def outputs_line(o: dict[str, Any], good: str, bad: str) -> str:
    """A bisect's outputs answer: the first commit whose outputs changed, beside the speed one."""
    end = o.get("endpoint")
    if not end:
        return f"Outputs: not checked ({bad} did not build with llama-perplexity)."
    if end["verdict"] != "changed":
        return f"Outputs: {end['verdict']} between {good} and {bad} ({kld_figures(end)})."
    if o.get("first_changed"):
        c = o.get("culprit") or {}
        who = f" — {c['subject']}" if c.get("subject") else ""
        return f"Outputs first changed at: {c.get('sha') or o['first_changed']}{who} ({kld_figures(c)})."
    return (f"Outputs changed between {good} and {bad}; first changed within "
            f"{', '.join(o.get('culprit_range') or [])} (commits between did not build).")


def bisected_change(r: dict[str, Any]) -> str:
    """What the bisect followed, from the ratio of the endpoints' cell it chose: "slowdown" or
    "speed-up"; "change" for a result stored without it."""
    ratio = r.get("endpoint_ratio")
    return "change" if ratio is None else "slowdown" if ratio < 1 else "speed-up"


def render_bisect(r: dict[str, Any]) -> str:
    """Culprit, evidence table, controls and the step log of a bisect result."""
    out = []
    status = r.get("status") or ("no-regression" if r.get("reason") else None)  # results stored before 0.2
    change = bisected_change(r)
    if status == "no-regression":
        out.append(f"No bisect: {r['reason']} ({r['good']} vs {r['bad']}).")
    elif status == "crash":
        out.append(f"Bisect stopped, endpoint crashed: {r['reason']}.")
    elif status == "unresolved":
        out.append(f"UNRESOLVED ({r['good']} vs {r['bad']}): {r.get('reason') or 'no answer yet'}.")
        if (d := r.get("diagnosis")) and d.get("advice"):
            out.append("Why unresolved:\n" + "\n".join(f"  - {line}" for line in d["advice"]))
    elif r.get("first_bad"):
        c = r.get("culprit") or {}
        who = f" — {c.get('subject')} ({c.get('author')}, {c.get('date')})" if c.get("subject") else ""
        ok = "verified against its parent" if r.get("verified") else "NOT confirmed against its parent"
        first = "First faster" if change == "speed-up" else "First bad"
        out.append(f"{first}: {c.get('sha') or r['first_bad']}{who}; {ok}.")
    else:
        out.append(f"Culprit range (skipped or undecided commits border it): {', '.join(r['culprit_range'])}.")
    if "specific_to_model" in r:
        half = f" (within ±{r['control_band']:.1%}, half the {change})" if r.get("control_band") else ""
        out.append({True: f"Control models did not move at the culprit{half}: the {change} is specific to"
                          " the measured model.",
                    False: "Control models moved at the culprit too: not model-specific.",
                    None: f"Control models were too noisy to say whether the {change} is model-specific."}
                   [r["specific_to_model"]])
    for key, where in (("culprit_param_diffs", "at the culprit"), ("param_diffs", "between the endpoints")):
        if r.get(key):
            changed = ", ".join(f"{d['field']}: {show_setting(d['field'], d['baseline'])} → "
                                f"{show_setting(d['field'], d['candidate'])}" for d in r[key])
            out.append(f"llama-bench's own settings changed {where} ({changed}): likely the cause, not the "
                       "engine — rerun with --pin-params to hold them at the good side's values.")
            break
    if (pr := r.get("profile")) is not None:
        where = f"{Path(str(pr.get('model', ''))).stem} {pr.get('workload', '')}".strip()
        which = "Which kernel: the culprit's kernel trace" if pr.get("kernels") else "Which op: the culprit's per-op profile"
        if pr.get("headline"):
            out.append(f"{which} against its parent ({where}; `tokensleuth report {pr['study']}` has it all): "
                       f"{pr['headline']}.")
        else:
            out.append(f"{which.split(':')[0]}: not profiled ({pr.get('skipped', 'no profile')}).")
    if (o := r.get("outputs")) is not None:
        out.append(outputs_line(o, r["good"], r["bad"]))
    if r.get("skipped"):
        out.append(f"Skipped (did not build): {', '.join(r['skipped'])}.")
    if r.get("crashed"):
        out.append(f"Crashed or hung on the workload: {', '.join(r['crashed'])}.")
    if (ch := r.get("changes")) and ch.get("files"):
        from tokensleuth.sources.changes import render_changes

        out += ["", render_changes(ch)]
    ev_rows = []
    for name, comps in (("good → bad", r.get("endpoints", [])), ("parent → culprit", r.get("verification", [])),
                        *(((f"control {k.replace('_vs_', ' → ')}", v) for k, v in (r.get("controls") or {}).items()))):
        for c in comps:
            ci = c.get("ci")
            ev_rows.append([name, Path(c["model"]).stem, c["workload"],
                            "—" if c["ratio"] is None else f"{c['ratio']:.4f}",
                            "—" if not ci else f"[{ci[0]:.4f}, {ci[1]:.4f}]", c["verdict"], str(c["pairs"])])
    if ev_rows:
        out += ["", table(["evidence", "model", "test", "ratio", "99% CI", "verdict", "pairs"], ev_rows,
                          [False, False, True, True, True, False, True])]
    if r.get("steps"):
        rows = [[s["commit"], s["outcome"], "—" if s["ratio"] is None else f"{s['ratio']:.4f}",
                 "—" if not s["ci"] else f"[{s['ci'][0]:.4f}, {s['ci'][1]:.4f}]", str(s["pairs"]),
                 "—" if s.get("build_s") is None else f"{s['build_s']:.0f}"] for s in r["steps"]]
        out += ["", "Steps:", table(["commit", "outcome", "ratio vs good", "99% CI", "pairs", "build s"], rows,
                                    [False, False, True, True, True, True])]
    out.append(f"\nstudy: {r['study']}")
    return "\n".join(out)


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
        tuple((str(s["commit"])[:12], subject(s), str(s.get("outcome")), num(p[1]), num(p[2]),
               num(p[3]), str(s.get("pairs", ""))) for s, p in zip(steps, pts, strict=True)))]


class BisectKind(ResultKind):
    name = "bisect"

    def describe(self, spec: dict[str, Any]) -> str:
        cands = spec.get("candidates") or []
        return f"{cands[0]} .. {cands[-1]}" if cands else ""

    def render(self, result: dict[str, Any]) -> str:
        return render_bisect(result)

    def figures(self, store: Store, study_id: str, obj: dict[str, Any]) -> list[Figure]:
        spec = store.reads.study(study_id).spec
        return bisect_figures(obj, float(spec.get("band", 0.01)), [label_of(str(c)) for c in spec.get("candidates") or []])

    def headline(self, obj: dict[str, Any], md: str) -> str:
        if obj.get("summary"):
            return str(obj["summary"])
        if obj.get("first_bad"):
            return f"first bad: {obj['first_bad']}"
        return str(obj.get("reason") or obj.get("status") or "")

    def source_changes(self, obj: dict[str, Any]) -> dict[str, Any]:
        return dict(obj.get("changes") or {})  # the bisect stored them when it ended

    def beside(self, obj: dict[str, Any]) -> list[dict[str, Any]]:
        pr = obj.get("profile")
        return [] if pr is None else [dict(pr, label=f"the culprit {obj.get('first_bad')} against its parent")]

    def culprit(self, obj: dict[str, Any]) -> tuple[str, str]:
        diff = str(self.source_changes(obj).get("diff") or "")
        if obj.get("first_bad"):
            c = obj.get("culprit") or {}
            return f"{c.get('sha') or obj['first_bad']}" + (f" — {c['subject']}" if c.get("subject") else ""), diff
        if obj.get("culprit_range"):
            return "between " + ", ".join(map(str, obj["culprit_range"])), diff
        return "n/a (not bisected)", diff


def label_of(source: str) -> str:
    """A candidate's step label from its source (bisect.git/pypi/bin_candidates name them so)."""
    if source.startswith("git:"):
        return source.rsplit("@", 1)[-1][:10]
    if source.startswith("pypi:"):
        return source.split("==", 1)[-1]
    return Path(source.removeprefix("bin:")).name


KIND = BisectKind()
