"""compare studies: paired verdicts per model x workload — their JSON and their stored rendering
(what `compare` prints as it ends and what `report` prints later are one code)."""

from __future__ import annotations

import json
import shlex
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from tokensleuth.analysis import stats
from tokensleuth.core.records import JSON_SCHEMA_VERSION
from tokensleuth.drivers.verdicts.agreement import RERUN_STATE, machine_of, rerun_cells
from tokensleuth.drivers.verdicts.comparisons import (
    OUTPUTS_STATE,
    Comparison,
    analyze,
    noise_of,
    spec_of,
    stored_spec,
)
from tokensleuth.drivers.verdicts.sentences import summary_sentence
from tokensleuth.engines import kind_for
from tokensleuth.report.figures import Figure, cell_label, num, timeline_figure
from tokensleuth.report.markdown import flags_label, fmt_ts, lat_cell, table
from tokensleuth.store import Store
from tokensleuth.studies import DROP_KEYS, KindBase
from tokensleuth.trials.arms import arm_differences
from tokensleuth.trials.spec import CompareSpec, parse_duration, parse_percent


def compare_json(study_id: str, spec: CompareSpec, comps: list[Comparison],
                 builds: Mapping[str, dict[str, Any]],
                 outputs: Sequence[Mapping[str, Any]] | None = None) -> dict[str, Any]:
    # "outputs" only when --check-outputs ran: absent means "not checked", never "no change"
    extra: dict[str, Any] = {} if outputs is None else {"outputs": [dict(o) for o in outputs]}
    apart = arm_differences(spec, builds)
    # absent where the arms differ in their source only (the engines say how) or in nothing (an A/A):
    # a landed store's reports keep their shape
    if apart.said and apart.differ_in:
        extra["differences"] = apart.to_json()
    return {
        "schema_version": JSON_SCHEMA_VERSION,
        "study": study_id,
        "band": spec.band,
        "arms": {a.name: {"source": a.source, "flags": a.flags, "env": a.env,
                          "engine": {k: builds[a.name].get(k) for k in
                                     ("source", "commit", "build_number", "backends", "cmake_flags")}}
                 for a in spec.arms},
        "summary": summary_sentence(comps, spec.band, apart.labels()),
        "comparisons": [c.to_json() for c in comps],
        **extra,
    }


def render_stored_compare(store: Store, study_id: str) -> tuple[str, dict[str, Any]]:
    from tokensleuth.trials.outputs import render_output_checks

    spec = stored_spec(store, study_id)
    comps = analyze(store, study_id, spec)
    engines = store.reads.engines(study_id)
    apart = arm_differences(spec, engines)
    md = render_compare(comps, study_id, spec.band, summary_sentence(comps, spec.band, apart.labels()),
                        apart.shared_line())
    checks = store.state.get(study_id, OUTPUTS_STATE)  # None: outputs were never checked
    if checks:
        md += "\n\n" + render_output_checks(checks)
    obj = compare_json(study_id, spec, comps, engines, checks)
    from tokensleuth.drivers.slower.ops import PROFILES_STATE

    profiled = store.state.get(study_id, PROFILES_STATE)  # compare --profile: which op
    if profiled is not None:
        obj["profile"] = profiled
        md += "\n\n" + "\n".join(
            f"{'Which kernel' if p.get('kernels') else 'Which op'} ({p['candidate']}, {Path(p['model']).stem} "
            f"{p['workload']}): "
            + (f"{p['headline']} (`tokensleuth report {p['study']}`)" if p.get("headline") else
               f"not profiled — {p.get('skipped')}") for p in profiled)
    found = noise_of(store, study_id)
    if found:  # studies made before noise was measured have none
        md += "\n\n" + found[0]
        obj["noise"] = found[1]
    rerun = store.state.get(study_id, RERUN_STATE)  # `tokensleuth rerun`: what agrees with the original
    if rerun:
        obj["rerun"] = rerun_json(rerun, comps, machine_of(store, study_id))
        md = render_rerun(obj["rerun"]) + "\n\n" + md
    return md, obj


def rerun_json(rerun: dict[str, Any], comps: list[Comparison], here: dict[str, Any] | None) -> dict[str, Any]:
    """A re-run's answer: per cell the original's verdict and this machine's, and whether they agree."""
    cells = rerun_cells(rerun, comps)
    bundle = rerun.get("bundle") or {}
    return {"original": rerun.get("original"), "bundle": bundle,
            "machines": {"original": bundle.get("machine"), "here": here}, "cells": cells,
            "agreement": {w: sum(c["agreement"] == w for c in cells) for w in ("agrees", "disagrees", "unresolved")}}


def _machine_words(hw: dict[str, Any] | None) -> str:
    if not hw:
        return "an unknown machine"
    return ", ".join(str(x) for x in (hw.get("cpu"), hw.get("gpu")) if x) or str(hw.get("host") or "a machine")


def _ci(ci: Any) -> str:
    return f"[{ci[0]:.4f}, {ci[1]:.4f}]" if isinstance(ci, list) and len(ci) == 2 and None not in ci else "—"


def render_rerun(r: dict[str, Any]) -> str:
    """The re-run's table: per cell, the original's verdict and interval, this machine's, and the word."""
    n = r["agreement"]
    head = (f"Re-run of study {r['original']} (bundle {r['bundle'].get('file')}; there: "
            f"{_machine_words(r['machines']['original'])}; here: {_machine_words(r['machines']['here'])}): "
            f"{n['agrees']} cell{'s' if n['agrees'] != 1 else ''} agree{'s' if n['agrees'] == 1 else ''}, "
            f"{n['disagrees']} disagree{'s' if n['disagrees'] == 1 else ''}, {n['unresolved']} unresolved "
            "(a cell unresolved on either side is never counted as agreeing).")
    rows = [[Path(c["model"]).stem, c["workload"], c["candidate"], c["original"]["verdict"],
             _ci(c["original"].get("ci")), str(c["original"].get("pairs") or "—"), c["here"]["verdict"],
             _ci(c["here"]["ci"]), str(c["here"]["pairs"]), f"**{c['agreement']}**" if c["agreement"] == "disagrees"
             else c["agreement"]] for c in r["cells"]]
    return "\n".join([head, "", table(["model", "test", "candidate", "original", "99% CI", "pairs", "here", "99% CI",
                                       "pairs", "agreement"], rows,
                                      [False, True, False, False, True, True, False, True, True, False]),
                      "", f"the original: `tokensleuth report {r['original']}`"])


def toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, str):
        return json.dumps(v)  # a JSON string is a valid TOML basic string
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(toml_value(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{ " + ", ".join(f"{json.dumps(str(k))} = {toml_value(x)}" for k, x in v.items()) + " }"
    raise TypeError(f"no TOML for {type(v).__name__}")


def compare_study_toml(spec: dict[str, Any]) -> str:
    """A compare study file that reruns this study (tokensleuth compare --study FILE)."""
    lines = [f"{k} = {toml_value(v)}" for k, v in spec.items()
             if k not in DROP_KEYS and k != "arms" and v is not None]
    for arm in spec.get("arms", []):
        lines += ["", "[[arms]]"] + [f"{k} = {toml_value(v)}" for k, v in arm.items() if v not in (None, [], {})]
    return "\n".join(lines)


def _exact(text: str, value: float, read: Any) -> str:
    """``text`` where it reads back as ``value``, else the number as Python writes it (which does)."""
    return text if read(text) == value else repr(value)


def compare_command(spec: CompareSpec) -> str | None:
    """The one `tokensleuth compare` command that runs this study again: every arm with its source,
    flags, environment and kind, the build flags, models, workloads and settings, and the common
    engine flags after `--`. None where the command line cannot say the study (build flags or an
    API key variable that differ between arms, [[hosts]], a one-sided edge, confounders = "wait",
    both designs asked): its study file says it then."""
    cmake = {tuple(a.cmake) for a in spec.arms}
    remote = [a for a in spec.arms if a.source.startswith("url:")]
    keys = {a.api_key_env for a in remote}
    if (len(cmake) > 1 or len(keys) > 1 or any(a.api_key_env for a in spec.arms if a not in remote)
            or spec.hosts or spec.edge is not None or spec.confounders != "said"
            or (spec.separate_processes and spec.in_process)):
        return None
    words = ["tokensleuth", "compare"]
    for a in spec.arms:
        words += ["--arm", f"{a.name}={a.source}"]
    for a in spec.arms:
        if a.flags:
            words += ["--flags", f"{a.name}={shlex.join(a.flags)}"]
        words += [w for k, v in a.env.items() for w in ("--env", f"{a.name}:{k}={v}")]
        if a.kind != kind_for(a.source, None):
            words += ["--kind", f"{a.name}={a.kind}"]
    words += [f"--cmake={f}" for f in spec.arms[0].cmake]
    key = next(iter(keys), None)
    if key:
        words += ["--api-key-env", key]
    for m in spec.models:
        words += ["-m", m]
    if spec.workloads != CompareSpec.model_fields["workloads"].default:
        words += [w for wl in spec.workloads for w in ("-w", wl)]
    if spec.baseline:
        words += ["--baseline", spec.baseline]
    words += ["--band", _exact(f"{spec.band * 100:g}%", spec.band, parse_percent)]
    budget = spec.budget_s
    if budget is not None:
        words += ["--budget", _exact(f"{budget:g}s", budget, parse_duration)]
    for option, name in (("--min-pairs", "min_pairs"), ("--max-pairs", "max_pairs"), ("--timeout", "timeout_s"),
                         ("--sample-interval", "sample_interval_s")):
        value = getattr(spec, name)
        if value != CompareSpec.model_fields[name].default:  # (the command's defaults are the spec's)
            words += [option, str(value) if isinstance(value, int) else _exact(f"{value:g}", value, float)]
    words += [f for f, on in (("--separate-processes", spec.separate_processes),
                              ("--in-process", spec.in_process)) if on]
    if spec.common_flags:
        words += ["--", *spec.common_flags]
    return shlex.join(words)


def render_compare(comps: Sequence[Any], study_id: str, band: float, summary: str, shared: str = "") -> str:
    """Compare table: per model x workload, both arms' t/s, ratio, 99% CI, verdict, pairs.
    ``shared``: the line that says what the arms share, under the summary."""
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
    return "\n".join([summary, *(["", shared] if shared else []), "", table(headers, rows, right), "",
                      f"band ±{band * 100:g}% · {design}"
                      f" · study: {study_id}", *tail])


def compare_figures(store: Store, study_id: str) -> list[Figure]:
    """A compare study's figures: each cell's pair ratios with their interval, and the timeline."""
    from tokensleuth.drivers.verdicts.comparisons import analyze, stored_spec
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
        tuple((label[id(c)], c.baseline, c.candidate, num(r[1]), num(r[2]), num(r[3]), c.verdict, str(c.pairs))
              for c, r in zip(comps, forest_rows, strict=True)))]

    per_pair = [(label[id(c)], [ct / bt for bt, ct in zip(c.base_ts, c.cand_ts, strict=True)]) for c in comps]
    out.append(Figure(
        "pairs", "Per-pair ratios", "each dot is one pair: the candidate's engine process over the baseline's, "
        "run back to back in alternating order.", plots.pair_strip(per_pair, band),
        ("cell", "pair", "baseline t/s", "candidate t/s", "ratio"),
        tuple((label[id(c)], str(i + 1), num(bt, "{:.2f}"), num(ct, "{:.2f}"), num(ct / bt))
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
        tuple((lab, str(k), num(r), num(lo), num(hi)) for lab, steps in hist for k, r, lo, hi in steps)))
    tl = timeline_figure(store, study_id)
    if tl:
        out.append(tl)
    return out


class CompareKind(KindBase):
    name = "compare"
    history = True
    bandwidth = True
    paired = True
    bundles = True
    reruns = True

    def describe(self, spec: dict[str, Any]) -> str:
        return ", ".join(str(a.get("name")) for a in spec.get("arms", []))

    def render_stored(self, store: Store, study_id: str) -> tuple[str, dict[str, Any]]:
        return render_stored_compare(store, study_id)

    def figures(self, store: Store, study_id: str, obj: dict[str, Any]) -> list[Figure]:
        return compare_figures(store, study_id)

    def changes(self, obj: dict[str, Any]) -> list[tuple[str, str, str]]:
        return [(c["candidate"], c["model"], c["workload"]) for c in obj.get("comparisons", [])
                if c["verdict"] in ("faster", "slower")]

    def ratio_lines(self, obj: dict[str, Any]) -> dict[tuple[str, str], list[str]]:
        out: dict[tuple[str, str], list[str]] = {}
        for c in obj.get("comparisons", []):
            if c["ratio"] is not None:
                out.setdefault((c["candidate"], c["model"]), []).append(
                    f"{c['workload']} {c['ratio']:.3f} [{c['ci'][0]:.3f}, {c['ci'][1]:.3f}]")
        return out

    def beside(self, obj: dict[str, Any]) -> list[dict[str, Any]]:
        return [dict(p, label=f"{p['candidate']}, {Path(p['model']).stem} {p['workload']}")
                for p in obj.get("profile") or []]

    def reproduce(self, spec: dict[str, Any], study_id: str) -> list[str]:
        command = compare_command(spec_of(spec))
        if command is not None:
            return ["```shell", command, "```", ""]
        return ["```toml", compare_study_toml(spec), "```", "", "```shell", "tokensleuth compare --study study.toml",
                "```", ""]


KIND = CompareKind()
