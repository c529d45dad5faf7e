"""bench (and import) studies: llama-bench tables of every arm's samples."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from tokensleuth.analysis.results import Cell, load_cells
from tokensleuth.analysis.stats import summarize
from tokensleuth.core.records import JSON_SCHEMA_VERSION
from tokensleuth.report.figures import Figure, timeline_figure
from tokensleuth.report.markdown import (
    flags_label,
    fmt_ts,
    lat_cell,
    model_label,
    params_label,
    size_label,
    table,
    varying_params,
)
from tokensleuth.store import Store
from tokensleuth.studies import KindBase

_SHORT = {"n_threads": "threads", "n_gpu_layers": "ngl", "n_batch": "n_batch",
          "n_ubatch": "n_ubatch", "flash_attn": "fa", "type_k": "type_k", "type_v": "type_v",
          "poll": "poll", "n_cpu_moe": "n_cpu_moe", "cpu_mask": "cpu_mask", "split_mode": "sm"}


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
            str(c.meta.get("backends") or "?"), *("—" if c.meta.get(p) is None else str(c.meta[p]) for p in params),
            c.test, fmt_ts(c.kept_tokens_per_s, c.avg_ts, c.stddev_ts), str(len(c.kept_tokens_per_s)),
            "—" if cpu is None else f"{cpu:.3f}", "—" if busy is None else f"{busy:.2f}",
            *("—" if res[k] is None else f.format(res[k]) for _, k, f in gpu_cols),
            *([lat_cell(lat or {}, "ttft_ms"), lat_cell(lat or {}, "itl_ms")] if lat_cols else []),
            *([flags_label(res)] if flagged else []),
        ])
    commit = engine.get("commit") or "unknown"
    number = engine.get("build_number")
    foot = f"build: {commit[:9]} ({number if number is not None else '?'}) · engine {engine.get('source')}"
    if engine.get("tool"):  # another tool's results (engines/peers.py): its definitions, not ours
        foot = "\n".join([f"measured by {engine['tool']} {engine.get('tool_version') or ''} · {engine.get('source')}",
                          *(f"- {k}: {v}" for k, v in (engine.get("definitions") or {}).items())])
    cold = bench_cold_sentence(cells)
    return "\n".join([table(headers, rows, right), "", *([cold.strip(), ""] if cold else []), foot,
                      f"study: {study_id}"])


def bench_cold_sentence(cells: Sequence[Cell]) -> str:
    """compare's sentence on cold repetitions, for a bench's cells (cold.cold_leading)."""
    from tokensleuth.drivers.verdicts.sentences import cold_words

    seen = {c.test: c.cold for c in cells if c.cold is not None and c.cold.count}
    said = cold_words(seen, added=any(len(c.trial_means) > 1 for c in cells)) if seen else ""
    doubt = {c.test: c.cold for c in cells if c.cold is not None and c.cold.undecided is not None}
    if doubt:
        said += (" Undecided: " + "; ".join(
            f"{w}: the first repetition ran {(1 - (k.undecided or 1)) * 100:.1f}% slower than every later one"
            + (f" in {k.doubtful} of {k.processes} processes" if k.processes > 1 else "")
            for w, k in doubt.items())
            + " — too few repetitions to tell a cold start from scatter, so it counts in the figure"
              " (rerun with more repetitions, e.g. -r 10, to decide).")
    return said


def bench_json(cells: Sequence[Cell], study_id: str, engine: dict[str, Any]) -> dict[str, Any]:
    results = []
    for c in cells:
        tps: dict[str, float | None]
        if c.kept_tokens_per_s:  # stalled repetitions left out, as in the table; "samples" keeps them
            s = summarize(c.kept_tokens_per_s)
            tps = {"mean": s.mean, "sd": s.sd}
        else:
            tps = {"mean": c.avg_ts, "sd": c.stddev_ts}
        results.append({
            "model": c.model,
            "model_type": c.meta.get("model_type"),
            "workload": c.test,
            "params": {k: v for k, v in c.meta.items() if k not in ("model_type",)},
            "tokens_per_s": tps,
            "samples": list(c.tokens_per_s),
            # leading repetitions left out of every trial's t/s and resources (cold.cold_leading)
            "cold_repetitions": {"per_trial": c.cold.count if c.cold else 0,
                                 "ratio": c.cold.ratio if c.cold else None,
                                 "processes": c.cold.processes if c.cold else len(c.trial_means),
                                 # kept in, but slower than every later repetition: the rule could not decide
                                 **({"undecided_ratio": c.cold.undecided}
                                    if c.cold is not None and c.cold.undecided is not None else {})},
            "resources": c.resources(),
            **({"latency": lat} if (lat := c.latency()) is not None else {}),
        })
    return {
        "schema_version": JSON_SCHEMA_VERSION,
        "study": study_id,
        "engine": {
            "source": engine.get("source"),
            "commit": engine.get("commit"),
            "build_number": engine.get("build_number"),
            "backends": list(engine.get("backends") or []),
            "cmake_flags": list(engine.get("cmake_flags") or []),
            "compiler": engine.get("compiler"),
        },
        "results": results,
    }


def bench_figures(store: Store, study_id: str, obj: dict[str, Any]) -> list[Figure]:
    tl = timeline_figure(store, study_id)
    sw = sweep_figure(obj.get("results") or [])
    return [f for f in (tl, sw) if f is not None]


def sweep_figure(results: Sequence[Mapping[str, Any]]) -> Figure | None:
    """A server's concurrency sweep, from the study's JSON results (bench_json): where one
    workload ran at two or more concurrencies (``tg128``, ``tg128xc4``, ``tg128xc16``), output
    tokens/s of all streams against the ITL p50, one point per concurrency. Output tokens/s is
    the mean t/s times its generated share of the tokens it counts: at ``xcN`` every stream's
    tokens over the burst's wall clock, at concurrency 1 over the server's own prompt and decode
    time."""
    from tokensleuth.core.errors import UserError
    from tokensleuth.core.workloads import parse
    from tokensleuth.report import plots

    groups: dict[tuple[str, str], list[tuple[int, float, float]]] = {}
    for r in results:
        itl = ((r.get("latency") or {}).get("itl_ms") or {}).get("p50")
        mean = (r.get("tokens_per_s") or {}).get("mean")
        try:
            w = parse(str(r.get("workload")))
        except UserError:
            continue
        if itl is None or mean is None or not w.n_gen:
            continue
        share = w.n_gen / (w.n_gen + w.n_prompt)  # (a tg sample counts generated tokens only)
        base = parse(str(r["workload"]).split("xc")[0]).name
        label = model_label({"model_type": r.get("model_type")}, str(r.get("model")))
        groups.setdefault((label, base), []).append((w.concurrency, float(itl), float(mean) * share))
    series = [(f"{model} {base}", sorted(pts)) for (model, base), pts in groups.items() if len({p[0] for p in pts}) >= 2]
    if not series:
        return None
    rows = tuple((label, str(conc), f"{x:.2f}", f"{y:.1f}") for label, pts in series for conc, x, y in pts)
    return Figure("sweep", "Throughput against latency, by concurrency",
                  "One point per concurrency: output tokens/s of all streams against the inter-token latency "
                  "p50 a stream sees.", plots.sweep(series), ("cell", "concurrency", "ITL p50 ms", "output t/s"), rows)


class BenchKind(KindBase):
    name = "bench"
    history = True
    bandwidth = True
    bundles = True

    def describe(self, spec: dict[str, Any]) -> str:
        return str(spec.get("engine") or spec.get("file") or "")

    def render_stored(self, store: Store, study_id: str) -> tuple[str, dict[str, Any]]:
        cells = load_cells(store, study_id)
        engine_json = store.reads.arms(study_id)[0].engine
        return render_bench(cells, study_id, engine_json), bench_json(cells, study_id, engine_json)

    def figures(self, store: Store, study_id: str, obj: dict[str, Any]) -> list[Figure]:
        return bench_figures(store, study_id, obj)


class ImportKind(BenchKind):
    """An imported llama-bench output: its tables and history; no build of ours to explain."""

    name = "import"
    bandwidth = False


KIND = BenchKind()
IMPORT = ImportKind()
