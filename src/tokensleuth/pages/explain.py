"""Explanations beside a verdict: which op or kernel changed (why), where the cost sits
(depth), where the weights live (placement) and how close a rate is to the memory system's
limit (roofline).

Each explanation is a pure function of the store and returns a page ``Section`` (and a
Markdown line for the text report) when the study has what it needs, nothing otherwise.
"""

from __future__ import annotations

import contextlib
import functools
import json
import math
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from tokensleuth.analysis.stats import t_quantile
from tokensleuth.core.errors import UserError
from tokensleuth.core.workloads import parse as parse_workload
from tokensleuth.pages.html import WHY, Part, Section
from tokensleuth.store import Store, stored_json

# -- depth: per-token constant vs depth-dependent cost --------------------------------------


@dataclass(frozen=True, slots=True)
class Line:
    """ms per token = const_ms + slope_us_per_k × depth / 1000, with 99% half-widths.

    ``slope`` is in µs per token per 1000 tokens of depth: how much each token gets slower
    for every 1000 tokens already in the KV cache."""

    const_ms: float
    const_hw: float
    slope: float
    slope_hw: float
    n: int
    var_const: float
    var_slope: float
    df: int


def fit_line(depths: Sequence[float], ms_per_token: Sequence[float], confidence: float = 0.99) -> Line | None:
    """Ordinary least squares of per-trial ms/token on depth (needs two depths, 3 points)."""
    x = np.asarray(depths, dtype=float) / 1000.0
    y = np.asarray(ms_per_token, dtype=float)
    if len(set(x.tolist())) < 2 or len(x) < 3:
        return None
    a = np.column_stack([np.ones_like(x), x])
    coef, *_ = np.linalg.lstsq(a, y, rcond=None)
    df = len(x) - 2
    resid = y - a @ coef
    s2 = float(resid @ resid) / df if df > 0 else 0.0
    cov = s2 * np.linalg.inv(a.T @ a)
    t = t_quantile(0.5 + confidence / 2, df) if df > 0 else math.inf
    return Line(float(coef[0]), t * math.sqrt(cov[0, 0]), float(coef[1]) * 1000.0, t * math.sqrt(cov[1, 1]) * 1000.0,
                len(x), float(cov[0, 0]), float(cov[1, 1]) * 1e6, df)


def _diff(b: Line, c: Line, which: str, confidence: float = 0.99) -> tuple[float, float]:
    """Candidate minus baseline for the constant or the slope, with a Welch-Satterthwaite interval."""
    vb, vc = (b.var_const, c.var_const) if which == "const" else (b.var_slope, c.var_slope)
    d = (c.const_ms - b.const_ms) if which == "const" else (c.slope - b.slope)
    se2 = vb + vc
    dof_den = (vb ** 2 / b.df if b.df else 0) + (vc ** 2 / c.df if c.df else 0)
    dof = se2 ** 2 / dof_den if dof_den > 0 else max(b.df + c.df, 1)
    return d, t_quantile(0.5 + confidence / 2, dof) * math.sqrt(se2)


def depth_section(store: Store, study_id: str, obj: dict[str, Any]) -> tuple[Section, str] | None:
    """For a compare with the same test at several depths: each arm's line and where the
    change is (the per-token constant, the depth-dependent slope, or both)."""
    from tokensleuth.drivers.verdicts.comparisons import analyze, stored_spec
    from tokensleuth.studies import kind_of

    if not kind_of(str(store.reads.study(study_id)["kind"])).paired:
        return None
    spec = stored_spec(store, study_id)
    groups: dict[tuple[str, str, str], list[Any]] = defaultdict(list)
    for c in analyze(store, study_id, spec):
        w = parse_workload(c.workload)
        if w.n_prompt and w.n_gen:  # pp+tg mixes two costs: not a line in depth
            continue
        base = "tg%d" % w.n_gen if w.n_gen else "pp%d" % w.n_prompt
        groups[(c.model, c.candidate, base)].append((w.n_depth, w.n_gen or w.n_prompt, c))
    rows: list[tuple[str, ...]] = []
    lines: list[str] = []
    for (model, cand, base), cells in sorted(groups.items()):
        if len({d for d, _, _ in cells}) < 2:
            continue
        fits: dict[str, Line | None] = {}
        for side in ("baseline", "candidate"):
            xs, ys = [], []
            for depth, _, c in cells:
                for v in (c.base_ts if side == "baseline" else c.cand_ts):
                    xs.append(float(depth))
                    ys.append(1000.0 / v)
            fits[side] = fit_line(xs, ys)
        fb, fc = fits["baseline"], fits["candidate"]
        if fb is None or fc is None:
            continue
        label = f"{Path(model).stem} {base}"
        for name, f in (("baseline", fb), ("candidate", fc)):
            rows.append((label, name, f"{f.const_ms:.4f} ± {f.const_hw:.4f}", f"{f.slope:.3f} ± {f.slope_hw:.3f}",
                         str(f.n)))
        dc, hc = _diff(fb, fc, "const")
        ds, hs = _diff(fb, fc, "slope")
        const_moved, slope_moved = abs(dc) > hc, abs(ds) > hs
        where = {(True, True): "in both the per-token constant and the depth-dependent part",
                 (True, False): "in the per-token constant, not in the depth-dependent part",
                 (False, True): "in the depth-dependent part (it grows with context), not in the constant",
                 (False, False): "in neither part beyond its interval"}[(const_moved, slope_moved)]
        lines.append(f"{label} ({cand} vs {spec.baseline_name()}): the change is {where} — constant "
                     f"{dc:+.4f} ms/token [{dc - hc:+.4f}, {dc + hc:+.4f}], slope {ds:+.3f} µs/token per 1k "
                     f"depth [{ds - hs:+.3f}, {ds + hs:+.3f}] (99% intervals).")
    if not lines:
        return None
    sec = Section("depth", "Per-token cost vs depth", tuple(lines),
                  ("cell", "arm", "ms/token at depth 0 (99%)", "µs/token per 1k depth (99%)", "trials"), tuple(rows))
    return sec, "\n".join(lines)


# -- placement: where each arm's weights and buffers live ------------------------------------


def placement_section(store: Store, study_id: str, obj: dict[str, Any]) -> tuple[Section, str] | None:
    """Per arm and model: buffers per device, offloaded layers, named tensors; and for each
    candidate one sentence on how its placement differs from the baseline's, beside the
    measured ratios of that model."""
    from tokensleuth.drivers.verdicts.comparisons import PLACEMENT_STATE
    from tokensleuth.engines.placement import Placement, difference
    from tokensleuth.studies import kind_of

    got = store.state.get(study_id, PLACEMENT_STATE)
    if not got:
        return None
    row = store.reads.study(study_id)
    spec = row.spec
    arms = [a["name"] for a in spec.get("arms", [])]
    base = spec.get("baseline") or (arms[0] if arms else None)
    rows: list[tuple[str, ...]] = []
    lines: list[str] = []
    ratios = kind_of(str(row["kind"])).ratio_lines(obj)
    for arm in arms:
        for model, entry in (got.get(arm) or {}).items():
            if "error" in entry:
                rows.append((arm, Path(model).stem, "load log not captured: " + str(entry["error"]), "", "", "", ""))
                continue
            p = Placement.from_json(entry)
            named = ", ".join(f"{t} → {b}" for t, b in sorted(p.tensors.items())) or "—"
            rows.append((arm, Path(model).stem, " + ".join(f"{k} {v:.1f}" for k, v in p.model_mib.items()),
                         " + ".join(f"{k} {v:.1f}" for k, v in p.kv_mib.items()) or "—",
                         " + ".join(f"{k} {v:.1f}" for k, v in p.compute_mib.items()) or "—",
                         f"{p.layers[0]}/{p.layers[1]}" if p.layers else "—", named))
    for arm in arms:
        if arm == base or base is None:
            continue
        for model, entry in (got.get(arm) or {}).items():
            b_entry = (got.get(base) or {}).get(model)
            if not b_entry or "error" in entry or "error" in b_entry:
                continue
            sentence = difference(base, Placement.from_json(b_entry), arm, Placement.from_json(entry))
            measured = ratios.get((arm, model))
            lines.append(f"{Path(model).stem}: {sentence}" + (f" Measured {arm}/{base}: {'; '.join(measured)}."
                                                              if measured else ""))
    if not rows:
        return None
    sec = Section("placement", "Where the weights and buffers live", tuple(lines),
                  ("arm", "model", "model MiB", "KV MiB", "compute MiB", "layers offloaded", "named tensors"),
                  tuple(rows))
    return sec, "Placement (from each arm's load log):\n" + "\n".join(f"- {ln}" for ln in lines)


# -- roofline: achieved memory bandwidth against the memory system's peak ---------------------


@functools.lru_cache(maxsize=64)
def experts(model: Path) -> bool:
    """Whether the model routes tokens to experts (a MoE); False where the file is gone."""
    from tokensleuth.models.info import model_info

    try:
        return model_info(model).n_expert > 0
    except (UserError, OSError, ValueError):  # gone or unreadable since: bytes_per_token has given up too
        return False


@functools.lru_cache(maxsize=64)
def bytes_per_token(model: Path) -> int | None:
    """The model's active weight bytes per generated token (models.info), remembered in the
    user cache by (path, size, mtime): reading a GGUF's header takes seconds for a 150k vocab.
    None when the file is gone (a study copied from another machine)."""
    from tokensleuth.core.paths import cache_dir, write_atomic
    from tokensleuth.models.info import model_info

    try:
        st = model.stat()
    except OSError:
        return None
    key = f"{model.resolve()}|{st.st_size}|{st.st_mtime_ns}"
    cache = cache_dir() / "model-bytes-per-token.json"
    try:
        known: dict[str, int] = json.loads(cache.read_text())
    except (OSError, ValueError):
        known = {}
    if key not in known:
        try:
            known[key] = model_info(model).bytes_per_token
        except Exception:  # noqa: BLE001 - not a readable GGUF any more: no roofline for it
            return None
        with contextlib.suppress(OSError):  # a read-only cache only costs the next report the read
            write_atomic(cache, json.dumps(known))
    return int(known[key])


def roofline_section(store: Store, study_id: str, obj: dict[str, Any],
                     cpu_peak_gbs: float | None = None) -> tuple[Section, str] | None:
    """Decode (tgN) reads the model's active weights once per token: achieved bandwidth =
    bytes per token x tokens/s. Against the GPU's peak (NVML: bus width x memory clock x 2)
    when the arm ran on a GPU build on a host with one, else against this machine's CPU read
    bandwidth (monitor.membw, probed once and cached). ``cpu_peak_gbs`` replaces the probe."""
    from tokensleuth.analysis.results import load_cells
    from tokensleuth.engines.placement import GPU_BACKENDS
    from tokensleuth.studies import kind_of

    if not kind_of(str(store.reads.study(study_id)["kind"])).bandwidth:
        return None
    backends = {str(a["name"]): a.engine.get("backends") or [] for a in store.reads.arms(study_id)}
    gpu_peak: dict[str, float] = {}
    for t in store.reads.trials(study_id):
        if t["status"] == "done" and t["env_json"]:
            devs = ((stored_json(t, "env_json").get("monitor") or {}).get("nvidia") or {}).get("devices") or []
            if devs and devs[0].get("peak_mem_gbs"):
                gpu_peak.setdefault(str(t["arm"]), float(devs[0]["peak_mem_gbs"]))
    rows: list[tuple[str, ...]] = []
    lines: list[str] = []
    bpt: dict[str, int | None] = {}
    for c in load_cells(store, study_id):
        w = parse_workload(c.test.split("xc")[0]) if c.test else None
        if w is None or not w.n_gen or w.n_prompt or not c.kept_tokens_per_s:
            continue
        if c.model not in bpt:
            bpt[c.model] = bytes_per_token(Path(c.model))
        b = bpt[c.model]
        if not b:
            continue
        tps = float(np.mean(c.kept_tokens_per_s))
        conc = parse_workload(c.test).concurrency
        if conc > 1 and experts(Path(c.model)):
            # C streams of a MoE: each step reads the shared weights once, and the experts the C
            # tokens route to, between one token's worth and C: no one figure to give
            lines.append(f"{c.arm} {Path(c.model).stem} {c.test}: withheld — {conc} streams of a MoE read "
                         f"between one and {conc} tokens' worth of expert weights a step, so no one figure holds.")
            continue
        achieved = b * tps / conc / 1e9  # C streams: one step reads the weights once for C tokens
        gpu_build = any(x in GPU_BACKENDS for x in backends.get(c.arm, []))
        if gpu_build and c.arm not in gpu_peak:
            # a GPU build with no peak to compare against (NVML gives it; amdgpu's sysfs has no
            # memory bus width): the CPU's peak would be the wrong roof
            rows.append((c.arm, Path(c.model).stem, c.test, f"{b / 1e6:.1f}", f"{tps:.1f}", f"{achieved:.1f}",
                         "—", "no GPU peak known", "—"))
            lines.append(f"{c.arm} {Path(c.model).stem} {c.test}: {achieved:.1f} GB/s achieved; no peak known for "
                         "this GPU (NVML reports it; amdgpu's sysfs has no memory bus width).")
            continue
        if gpu_build:
            peak, source = gpu_peak[c.arm], "GPU (NVML)"
        else:
            if cpu_peak_gbs is None:
                from tokensleuth.core.paths import cache_dir
                from tokensleuth.monitor.membw import cpu_peak_gbs as probe

                cpu_peak_gbs = probe(cache_dir() / "membw.json")
            peak, source = cpu_peak_gbs, "CPU (probe)"
        pct = 100 * achieved / peak if peak else float("nan")
        rows.append((c.arm, Path(c.model).stem, c.test, f"{b / 1e6:.1f}", f"{tps:.1f}", f"{achieved:.1f}",
                     f"{peak:.1f}", source, f"{pct:.1f}%"))
        per = f"per token x {tps:.1f} t/s" if conc == 1 else f"a step x {tps:.1f} t/s / {conc} streams"
        lines.append(f"{c.arm} {Path(c.model).stem} {c.test}: {b / 1e6:.1f} MB of weights {per} "
                     f"= {achieved:.1f} GB/s, {pct:.1f}% of the {source} peak of {peak:.0f} GB/s.")
    if not rows:
        return None
    sec = Section("roofline", "Memory bandwidth: achieved vs peak", tuple(lines),
                  ("arm", "model", "test", "MB/token", "t/s", "achieved GB/s", "peak GB/s", "peak from", "of peak"),
                  tuple(rows))
    return sec, ("Roofline (decode reads the active weights once a step: for one token, or for C at xcC):\n"
                 + "\n".join(f"- {ln}" for ln in lines))


# -- what changed in the source at a bisect's culprit ------------------------------------------


def changes_section(store: Store, study_id: str, obj: dict[str, Any]) -> tuple[Section, str] | None:
    """The culprit's changed files, grouped by whether the measured build compiles them,
    with the diff of those it does (the bisect stored it when it ended)."""
    from tokensleuth.sources.changes import render_changes
    from tokensleuth.studies import kind_of

    ch = kind_of(str(store.reads.study(study_id)["kind"])).source_changes(obj)
    if not ch.get("files"):
        return None
    text = render_changes(ch)
    head = [ln for ln in text.splitlines() if not ln.startswith("- ")]
    order = {"compiled": 0, "other backend": 1, "not compiled": 2}
    rows = tuple((f["path"], "binary" if f["added"] is None else f"+{f['added']} -{f['removed']}", f["group"], f["why"])
                 for f in sorted(ch["files"], key=lambda f: (order.get(f["group"], 3), f["path"])))
    sec = Section("changes", "What changed in the source", tuple(head), ("file", "lines", "group", "why"), rows,
                  pre=str(ch.get("diff") or ""))
    return sec, ""  # the bisect's own Markdown already lists the changes


# -- why: which op or kernel changed, beside the verdict ---------------------------------------


def why_section(store: Store, study_id: str, obj: dict[str, Any]) -> tuple[Section, str] | None:
    """Where a compare, bisect, scan or decompose stored op or kernel diffs beside its verdicts
    (--profile, a culprit's, a step's): per diff, the two arms' bars and the shares of the measured
    difference with their intervals, or only the reason they are withheld (no name, no bar, no
    share: the diff study's kind decides, ``Why``). Its Markdown is empty: the study's own report
    has the diff's line."""
    from tokensleuth.studies import kind_of

    entries = kind_of(str(store.reads.study(study_id)["kind"])).beside(obj)
    if not entries:
        return None
    parts = []
    for n, e in enumerate(entries, 1):
        key, label = f"{WHY}-{n}", str(e.get("label") or f"diff {n}")
        if not e.get("study"):
            parts.append(Part(key, label, lines=(f"Not profiled: {e.get('skipped') or 'no profile was stored'}.",)))
            continue
        try:
            row = store.reads.study(str(e["study"]))
            kind = kind_of(str(row["kind"]))
            _, diffed = kind.render_stored(store, str(row["id"]))
        except UserError as exc:  # a store copied without it, or a diff not finished
            parts.append(Part(key, label, lines=(f"The diff study {e['study']} cannot be read: {exc}",)))
            continue
        why = kind.why(diffed, str(e.get("model") or ""), str(e.get("workload") or ""))
        if why is None:
            parts.append(Part(key, label, lines=(f"Study {row['id']} holds no diff of this cell.",)))
            continue
        shares = ("part of the measured difference", "share", "95% interval (bootstrap over processes)")
        parts.append(Part(key, label, why.figure,
                          (f"{why.title}.", why.sentence, f"The whole diff: tokensleuth report {row['id']}."),
                          shares if why.shares else (), why.shares))
    sec = Section(WHY, "Why: which op or kernel changed",
                  ("Each op or kernel diff stored beside a verdict: the time per token of the two arms (A the "
                   "baseline, B the candidate) and the shares of the measured difference with their intervals, or "
                   "why they are withheld.",), parts=tuple(parts))
    return sec, ""


MAKERS = (why_section, placement_section, depth_section, roofline_section, changes_section)


def explain(store: Store, study_id: str, obj: dict[str, Any]) -> list[tuple[Section, str]]:
    """Every explanation this study can give, once: its page section and its Markdown
    (empty when the study's own report already says it). ``obj``: the kind's JSON object."""
    return [got for make in MAKERS if (got := make(store, study_id, obj)) is not None]


def markdown(explained: Sequence[tuple[Section, str]]) -> str:
    """The explanations' Markdown, for the text and issue reports."""
    return "\n\n".join(md for _, md in explained if md)
