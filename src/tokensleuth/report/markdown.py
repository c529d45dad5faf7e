"""Markdown tables in llama-bench's style, ready to paste into an issue."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tokensleuth.analysis.results import PARAM_FIELDS, Cell
from tokensleuth.analysis.stats import summarize
from tokensleuth.engines import show_setting

_SHORT = {"n_threads": "threads", "n_gpu_layers": "ngl", "n_batch": "n_batch",
          "n_ubatch": "n_ubatch", "flash_attn": "fa", "type_k": "type_k", "type_v": "type_v",
          "poll": "poll", "n_cpu_moe": "n_cpu_moe", "cpu_mask": "cpu_mask", "split_mode": "sm"}


def table(headers: Sequence[str], rows: Sequence[Sequence[str]], right: Sequence[bool]) -> str:
    widths = [max(3, len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(headers)]
    def line(cells: Sequence[str]) -> str:
        return "| " + " | ".join(c.rjust(w) if r else c.ljust(w)
                                 for c, w, r in zip(cells, widths, right, strict=False)) + " |"
    sep = "| " + " | ".join(("-" * (w - 1) + ":") if r else "-" * w
                            for w, r in zip(widths, right, strict=False)) + " |"
    return "\n".join([line(headers), sep, *(line(r) for r in rows)])


def model_label(meta: dict[str, Any], path: str) -> str:
    return str(meta.get("model_type") or Path(path).stem)


def size_label(meta: dict[str, Any]) -> str:
    size = meta.get("model_size")
    return f"{int(size) / (1 << 30):.2f} GiB" if size not in (None, "") else "?"


def params_label(meta: dict[str, Any]) -> str:
    n = meta.get("model_n_params")
    if n in (None, ""):
        return "?"
    n = int(n)
    if n >= 1e9:
        return f"{n / 1e9:.2f} B"
    return f"{n / 1e6:.2f} M"


def varying_params(cells: Sequence[Cell]) -> list[str]:
    """ngl and threads always (as llama-bench shows), other parameters when they vary."""
    out = ["n_gpu_layers", "n_threads"]
    for f in PARAM_FIELDS:
        if f not in out and len({str(c.meta.get(f)) for c in cells}) > 1:
            out.append(f)
    return out


def fmt_ts(values: Sequence[float], avg: float | None = None, sd: float | None = None) -> str:
    if values:
        s = summarize(values)
        return f"{s.mean:.2f} ± {s.sd:.2f}"
    if avg is not None:
        return f"{avg:.2f} ± {(sd or 0):.2f}"
    return "—"


def flags_label(res: dict[str, Any]) -> str:
    """A cell's own confounders in a few characters: ``stall×2, short-window``."""
    out = []
    for code in res.get("flags") or []:
        n = res.get("stalled_repetitions") if code == "stall" else None
        out.append(f"{code}×{n}" if n else code)
    return ", ".join(out)


def render_bench(cells: Sequence[Cell], study_id: str, engine: dict[str, Any],
                 resources: bool = False) -> str:
    params = varying_params(cells)
    all_res = [c.resources() for c in cells]
    gpu = resources or any(r["power_w"] is not None or r["gpu_busy_pct"] is not None for r in all_res)
    gpu_cols = [("GPU %", "gpu_busy_pct", "{:.0f}"), ("clock MHz", "gpu_clock_mhz", "{:.0f}"),
                ("power W", "power_w", "{:.1f}"), ("J/tok", "joules_per_token", "{:.4f}"),
                ("tok/J", "tokens_per_joule", "{:.2f}")] if gpu else []
    # confounders the cells' own samples show (stall, short-window, impossible-figure): a column
    # only when some cell has one, so a clean table keeps llama-bench's shape
    flagged = any(r["flags"] for r in all_res)
    lats = [c.latency() for c in cells]
    lat_cols = ["TTFT ms p50/p90/p99", "ITL ms p50/p90/p99"] if any(lats) else []
    headers = ["model", "size", "params", "backend", *(_SHORT[p] for p in params), "test", "t/s",
               "n", "CPU ms/tok", "busy cores", *(h for h, _, _ in gpu_cols), *lat_cols,
               *(["flags"] if flagged else [])]
    right = [False, True, True, False, *([True] * len(params)), True, True, True, True, True,
             *([True] * len(gpu_cols)), *([True] * len(lat_cols)), *([False] if flagged else [])]
    rows = []
    for c, res, lat in zip(cells, all_res, lats, strict=False):
        cpu = res["cpu_ms_per_token"]
        busy = res["busy_cores"]
        rows.append([
            model_label(c.meta, c.model), size_label(c.meta), params_label(c.meta),
            str(c.meta.get("backends") or "?"), *(str(c.meta.get(p, "")) for p in params),
            c.test, fmt_ts(c.kept_tokens_per_s, c.avg_ts, c.stddev_ts), str(len(c.kept_tokens_per_s)),
            "—" if cpu is None else f"{cpu:.3f}", "—" if busy is None else f"{busy:.2f}",
            *("—" if res[k] is None else f.format(res[k]) for _, k, f in gpu_cols),
            *([lat_cell(lat or {}, "ttft_ms"), lat_cell(lat or {}, "itl_ms")] if lat_cols else []),
            *([flags_label(res)] if flagged else []),
        ])
    commit = engine.get("commit") or "unknown"
    number = engine.get("build_number")
    foot = f"build: {commit[:9]} ({number if number is not None else '?'}) · engine {engine.get('source')}"
    cold = bench_cold_sentence(cells)
    return "\n".join([table(headers, rows, right), "", *([cold.strip(), ""] if cold else []), foot,
                      f"study: {study_id}"])


def bench_cold_sentence(cells: Sequence[Cell]) -> str:
    """compare's sentence on cold repetitions, for a bench's cells (stats.cold_leading)."""
    from tokensleuth.drivers.comparisons import cold_words

    seen = {c.test: c.cold for c in cells if c.cold is not None and c.cold.count}
    return cold_words(seen, added=any(len(c.trial_means) > 1 for c in cells)) if seen else ""


def render_compare(comps: Sequence[Any], study_id: str, band: float, summary: str) -> str:
    """Compare table: per model x workload, both arms' t/s, ratio, 99% CI, verdict, pairs."""
    flagged = any(c.base_res.get("flags") or c.cand_res.get("flags") for c in comps)
    headers = ["model", "test", "baseline", "t/s", "candidate", "t/s", "ratio", "99% CI", "verdict",
               "pairs", "CPU ms/tok", "CPU verdict", *(["flags"] if flagged else [])]
    right = [False, True, False, True, False, True, True, True, False, True, True, False,
             *([False] if flagged else [])]
    rows = []
    for c in comps:
        e = c.estimate
        bcpu = c.base_res.get("cpu_ms_per_token")
        ccpu = c.cand_res.get("cpu_ms_per_token")
        cpu = "—" if bcpu is None or ccpu is None else f"{bcpu:.3f} → {ccpu:.3f}"
        rows.append([
            Path(c.model).stem, c.workload, c.baseline, fmt_ts(c.base_ts), c.candidate, fmt_ts(c.cand_ts),
            "—" if e is None else f"{e.ratio:.4f}",
            "—" if e is None else f"[{e.lo:.4f}, {e.hi:.4f}]",
            f"**{c.verdict}**" if c.verdict in ("faster", "slower") else c.verdict,
            str(c.pairs), cpu, c.cpu_verdict,
            *(["; ".join(f"{arm}: {flags_label(r)}" for arm, r in ((c.baseline, c.base_res),
                                                                   (c.candidate, c.cand_res)) if r.get("flags"))]
              if flagged else []),
        ])
    drift = [w for c in comps for w in c.warnings()]
    tail = ["", "Warnings:", *(f"- {w}" for w in drift)] if drift else []
    lat_rows = [[Path(c.model).stem, c.workload, arm, lat_cell(lat, "ttft_ms"), lat_cell(lat, "itl_ms")]
                for c in comps for arm, lat in ((c.baseline, c.base_latency), (c.candidate, c.cand_latency))
                if lat]
    if lat_rows:
        tail = ["", "Latency (client side, every request; ms p50 / p90 / p99):",
                table(["model", "test", "arm", "TTFT", "inter-token"], lat_rows, [False, True, False, True, True]),
                *tail]
    design = ("one pair = one engine process, A, B, B, A on one load, order-balanced"
              if any(getattr(c, "shared", False) for c in comps) else
              "one pair = one engine process per arm, order-balanced")
    return "\n".join([summary, "", table(headers, rows, right), "",
                      f"band ±{band * 100:g}% · {design}"
                      f" · study: {study_id}", *tail])


def lat_cell(lat: dict[str, Any], key: str) -> str:
    p = lat.get(key)
    return "—" if not p else f"{p['p50']:.2f} / {p['p90']:.2f} / {p['p99']:.2f}"


def render_warnings(rows: Sequence[Any]) -> str:
    """Confounder warnings, once each: what was seen, where, and the remedy."""
    from tokensleuth.analysis.confounders import REMEDY

    if not rows:
        return ""
    seen: dict[str, list[str]] = {}
    for r in rows:
        seen.setdefault(r["code"], []).append(f"{r['arm']}: {r['detail']}")
    lines = ["", "Warnings:"]
    for code, details in seen.items():
        uniq = list(dict.fromkeys(details))
        more = f" (+{len(uniq) - 3} more)" if len(uniq) > 3 else ""
        lines.append(f"- {code} in {len(details)} trial(s): {'; '.join(uniq[:3])}{more} — "
                     f"{REMEDY.get(code, 'check the system and rerun')}")
    return "\n".join(lines)


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


def render_bisect(r: dict[str, Any]) -> str:
    """Culprit, evidence table, controls and the step log of a bisect result."""
    out = []
    status = r.get("status") or ("no-regression" if r.get("reason") else None)  # results stored before 0.2
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
        out.append(f"First bad: {c.get('sha') or r['first_bad']}{who}; {ok}.")
    else:
        out.append(f"Culprit range (skipped or undecided commits border it): {', '.join(r['culprit_range'])}.")
    if "specific_to_model" in r:
        half = f" (within ±{r['control_band']:.1%}, half the regression)" if r.get("control_band") else ""
        out.append({True: f"Control models did not move at the culprit{half}: the regression is specific to"
                          " the measured model.",
                    False: "Control models moved at the culprit too: not model-specific.",
                    None: "Control models were too noisy to say whether the regression is model-specific."}
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
        if pr.get("headline"):
            out.append(f"Which op: the culprit's per-op profile against its parent ({where}; `tokensleuth report "
                       f"{pr['study']}` has it all): {pr['headline']}.")
        else:
            out.append(f"Which op: not profiled ({pr.get('skipped', 'no profile')}).")
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
