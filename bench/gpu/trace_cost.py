"""What the CUDA kernel tracer costs the program it explains, and whether its sums add up, per
recording mode (kernels: every kernel node; graphs: one record per graph launch; sample:N: the
kernels of one graph launch in N), against untraced processes of the same build.

Processes of every mode alternate, one round after another (the mode order rotates each
round), each its own llama-bench process with every repetition's window stamped; each one is
appended to the JSON-lines file the moment it ends, so a killed run, started again, measures
only what is missing (--resume is the default: the file is the store). It prints, per mode and
workload:

* t/s over processes, and llama-bench's ms/token traced over untraced with its 95% interval
  (analysis.traces.trace_cost: what a kernels study says beside its table);
* from the traced timeline, per token as a kernels study reads it (process_kernels): the
  kernels' sum, their busy union, the overlap, the idle time between kernels, the time outside
  the span, with the graphs' execution time (graphs mode) and the graph launches traced (sample
  mode); and (busy + idle) against llama-bench's ms/token of the same process and of the
  untraced processes.

    python3 bench/gpu/trace_cost.py --bin DIR --model M.gguf -w tg32 -w pp2048 \\
        --modes plain,kernels,graphs,sample:16 --processes 3 --out trace_cost.jsonl -- -ngl 99 -fa 1
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from tokensleuth.analysis.kernels import Window, process_kernels
from tokensleuth.analysis.traces import trace_cost
from tokensleuth.drivers.slower.kernels import kept_windows
from tokensleuth.engines import engine_for
from tokensleuth.engines.base import DEFAULT_KIND, ArmRuntime
from tokensleuth.kernels import GRAPH, LAUNCH, WORK, Trace
from tokensleuth.kernels.cupti import TRACER


def one(bin_dir: Path, model: str, workload: str, mode: str, flags: list[str], reps: int,
        arm_env: dict[str, str] | None = None, keep: Path | None = None) -> dict[str, Any]:
    """One process of one mode: its figures, and (keep) its raw trace files and kept windows copied
    into that folder, for a replay of the analysis elsewhere."""
    engine = engine_for(DEFAULT_KIND)
    with tempfile.TemporaryDirectory(prefix="tokensleuth-trace-cost-") as tmp:
        out = Path(tmp)
        env = dict(arm_env or {}) | ({} if mode == "plain" else TRACER.env(out, mode))
        arm = ArmRuntime(mode, bin_dir, tuple(flags), env)
        t0 = time.monotonic()
        run = engine.run_trial(arm, model, workload, engine.argv_for([workload], reps) or [], timeout_s=600,
                               probe=None, host_env={})
        row: dict[str, Any] = {"mode": mode, "workload": workload, "status": run.outcome.status,
                               "wall_s": time.monotonic() - t0, "message": run.outcome.message}
        if run.outcome.status != "done" or not run.outcome.results:
            return row
        windows = kept_windows(run.outcome)
        row["tokens"] = sum(w.tokens for w in windows)
        if not row["tokens"]:
            row["status"] = "no repetition kept"
            return row
        row["bench_ms_per_token"] = sum(w.bench_ns or 0 for w in windows) / row["tokens"] / 1e6
        row["ts"] = [s.tokens / (s.duration_ns / 1e9) for s in run.outcome.results[0].samples]
        row["kept"] = len(windows)
        if mode == "plain":
            return row
        traces = TRACER.read(out, run.stderr)
        errs = [p.read_text().strip() for p in out.glob("kernels-*.err")]
        if keep is not None:
            keep.mkdir(parents=True, exist_ok=True)
            for f in out.glob("kernels-*.bin"):
                shutil.copy(f, keep / f.name)
            (keep / "windows.json").write_text(json.dumps(
                {"windows": [[w.start_ns, w.end_ns, w.tokens, w.bench_ns] for w in windows],
                 "bench_ms_per_token": row["bench_ms_per_token"], "mode": mode, "workload": workload}))
    row["errors"] = errs
    if traces:
        row.update(figures(max(traces, key=len), windows, mode, row["tokens"]))
    return row


def figures(t: Trace, windows: list[Window], mode: str, tokens: int) -> dict[str, Any]:
    """One traced process's record counts, and its per-token figures as a kernels study reads
    them (analysis.kernels.process_kernels: the sampled tokens, the busy union, the idle gaps),
    with the graphs' execution time beside them (graphs mode)."""
    row: dict[str, Any] = {"records": {str(k): int((t.kind == k).sum()) for k in np.unique(t.kind)},
                           "lost": t.lost, "notes": t.notes,
                           "streams": sorted({int(s) for s in t.stream[np.isin(t.kind, WORK)]}),
                           "devices": sorted({int(d) for d in t.device})}
    launch = t.kind == LAUNCH
    graph = t.kind == GRAPH
    inside = [(t.start >= w.start_ns) & (t.start < w.end_ns) for w in windows]
    row["launches"] = [sum(int((launch & m).sum()) for m in inside),
                       sum(int((launch & m & (t.flags == 1)).sum()) for m in inside)]
    row["graph_ms_per_token"] = sum(int((t.end - t.start)[graph & m].sum()) for m in inside) / tokens / 1e6
    pk = process_kernels(t, windows)
    row["traced_tokens"] = pk.traced
    row["ms_per_token"] = {"kernels": pk.kernel_ms_per_token, "busy": pk.busy_ms_per_token,
                           "overlap": pk.overlap_ms_per_token, "idle": pk.idle_ms_per_token,
                           "outside": pk.outside_ms_per_token}
    row["kernel_names"] = len(pk.busy_ns)
    row["pk_notes"] = pk.notes[len(t.notes):]
    return row


def summary(rows: list[dict[str, Any]]) -> None:
    by: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for r in rows:
        if r.get("status") == "done" and r.get("ts"):
            by.setdefault((r["workload"], r["mode"]), []).append(r)
    for (w, mode), rs in sorted(by.items()):
        plain = by.get((w, "plain"), [])
        line = f"{w:8} {mode:10} n={len(rs)} t/s {statistics.fmean(1e3 / r['bench_ms_per_token'] for r in rs):9.2f}"
        cost = trace_cost([r["bench_ms_per_token"] for r in rs], [r["bench_ms_per_token"] for r in plain]) \
            if mode != "plain" else None
        if cost:
            line += f"  traced/untraced ms/token {cost['ratio']:.4f} [{cost['ci'][0]:.4f}, {cost['ci'][1]:.4f}]"
        mp = [r["ms_per_token"] for r in rs if r.get("ms_per_token")]
        if mp:
            m = {k: (statistics.fmean(x[k] for x in mp) if all(x[k] is not None for x in mp) else None) for k in mp[0]}
            own = statistics.fmean(r["bench_ms_per_token"] for r in rs)
            untraced = statistics.fmean(r["bench_ms_per_token"] for r in plain) if plain else None
            span = (m["busy"] or 0) + (m["idle"] or 0)
            line += (f"\n{'':20}per token: " + ", ".join(f"{k} {v:.4f}" for k, v in m.items() if v is not None)
                     + f", graphs {statistics.fmean(r['graph_ms_per_token'] for r in rs):.4f} | llama-bench {own:.4f}"
                     + (f" (untraced {untraced:.4f})" if untraced else "")
                     + f" | (busy+idle)/own {span / own:.3f}" + (f", /untraced {span / untraced:.3f}" if untraced else ""))
            line += (f"\n{'':20}records {rs[0].get('records')} lost {[r.get('lost') for r in rs]} streams "
                     f"{rs[0].get('streams')} devices {rs[0].get('devices')} launches {rs[0].get('launches')} "
                     f"traced tokens {[r.get('traced_tokens') for r in rs]} kernel names {rs[0].get('kernel_names')}")
            notes = {n for r in rs for n in r.get("pk_notes", [])}
            if notes:
                line += f"\n{'':20}notes: {sorted(notes)}"
        errs = {e for r in rs for e in r.get("errors", [])}
        if errs:
            line += f"\n{'':20}errors: {sorted(errs)}"
        print(line)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", type=Path, required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("-w", dest="workloads", action="append", required=True)
    ap.add_argument("--modes", default="plain,kernels,graphs,sample:16")
    ap.add_argument("--processes", type=int, default=3)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--deadline", type=float, default=0, help="stop starting processes after this many seconds")
    ap.add_argument("--env", action="append", default=[], help="K=V for the engine's environment, every mode")
    ap.add_argument("--label", default="", help="a name for this arm in the rows (and the kept folders)")
    ap.add_argument("--keep", type=Path, help="copy round 0's raw traces and windows here, one folder each")
    ap.add_argument("flags", nargs="*")
    a = ap.parse_args()
    t0 = time.monotonic()
    modes = a.modes.split(",")
    arm_env = dict(e.split("=", 1) for e in a.env)
    rows = [json.loads(x) for x in a.out.read_text().splitlines()] if a.out.exists() else []
    rows = [r for r in rows if r.get("label", "") == a.label]
    done = {(r["workload"], r["mode"], r.get("round")) for r in rows}
    for w in a.workloads:
        for i in range(a.processes):
            order = modes[i % len(modes):] + modes[:i % len(modes)]
            for mode in order:
                if (w, mode, i) in done:
                    continue
                if a.deadline and time.monotonic() - t0 > a.deadline:
                    print(f"stopped at the deadline ({a.deadline:.0f} s): run again to go on", file=sys.stderr)
                    summary(rows)
                    return
                keep = a.keep / f"{a.label or 'arm'}_{w}_{mode.replace(':', '')}" if a.keep and i == 0 else None
                r = dict(one(a.bin, a.model, w, mode, a.flags, a.reps, arm_env, keep), round=i, label=a.label)
                rows.append(r)
                with a.out.open("a") as fh:
                    fh.write(json.dumps(r) + "\n")
                print(f"  {w} {mode} round {i}: {r.get('status')} "
                      f"{statistics.fmean(r['ts']) if r.get('ts') else ''} t/s {r.get('message') or ''}", file=sys.stderr)
    summary(rows)


if __name__ == "__main__":
    main()
