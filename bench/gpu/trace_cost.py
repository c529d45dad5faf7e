"""What the CUDA kernel tracer costs the program it explains, and whether its sums add up, per
recording mode (kernels: every kernel node; graphs: one record per graph launch; sample:N: the
kernels of one graph launch in N), against untraced processes of the same build.

Processes of every mode alternate, one round after another (the mode order rotates each
round), each its own llama-bench process with every repetition's window stamped; each one is
appended to the JSON-lines file the moment it ends, so a killed run, started again, measures
only what is missing (--resume is the default: the file is the store). It prints, per mode and
workload:

* t/s (llama-bench's own, kept repetitions) over processes, and the ratio to the untraced
  processes with its 95% Welch interval on the log scale (the tracer's cost);
* from the traced timeline, per token: the kernels' sum, the GPU busy union, the overlap of
  concurrent kernels (sum - union), the idle time between kernels inside the span, the time
  outside the span, the graphs' execution time (graphs mode), and how many graph launches were
  traced (sample mode); and (union + idle) against llama-bench's own ms/token of the same
  process and of the untraced processes.

    python3 bench/gpu/trace_cost.py --bin DIR --model M.gguf -w tg32 -w pp2048 \\
        --modes plain,kernels,graphs,sample:16 --processes 3 --out trace_cost.jsonl -- -ngl 99 -fa 1
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from tokensleuth.analysis.kernels import Window, _union_within
from tokensleuth.drivers.kernels import kept_windows
from tokensleuth.engines import engine_for
from tokensleuth.engines.base import DEFAULT_KIND, ArmRuntime
from tokensleuth.kernels import GRAPH, LAUNCH, WORK, Trace
from tokensleuth.kernels.cupti import TRACER


def one(bin_dir: Path, model: str, workload: str, mode: str, flags: list[str], reps: int) -> dict[str, Any]:
    engine = engine_for(DEFAULT_KIND)
    with tempfile.TemporaryDirectory(prefix="tokensleuth-trace-cost-") as tmp:
        out = Path(tmp)
        env = {} if mode == "plain" else TRACER.env(out, mode)
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
    row["errors"] = errs
    if traces:
        row.update(figures(max(traces, key=len), windows, mode, row["tokens"]))
    return row


def figures(t: Trace, windows: list[Window], mode: str, tokens: int) -> dict[str, Any]:
    """One traced process's record counts and per-token sums over its kept windows."""
    row: dict[str, Any] = {"tokens": tokens}
    row["records"] = {str(k): int((t.kind == k).sum()) for k in np.unique(t.kind)}
    row["lost"] = t.lost
    row["notes"] = t.notes
    row["streams"] = sorted({int(s) for s in t.stream[np.isin(t.kind, WORK)]})
    row["devices"] = sorted({int(d) for d in t.device})
    work = np.isin(t.kind, WORK)
    launches = t.kind == LAUNCH
    graphs = t.kind == GRAPH
    per: dict[str, float] = {"sum": 0, "union": 0, "span": 0, "window": 0, "graph": 0, "seg_union": 0, "seg_span": 0}
    traced_tokens = 0
    launches_in = sampled_in = 0
    for w in windows:
        inw = work & (t.start >= w.start_ns) & (t.start < w.end_ns)
        li = launches & (t.start >= w.start_ns) & (t.start < w.end_ns)
        n_l, n_s = int(li.sum()), int((li & (t.flags == 1)).sum())
        launches_in += n_l
        sampled_in += n_s
        if inw.any():
            lo, hi = int(t.start[inw].min()), min(int(t.end[inw].max()), w.end_ns)
            per["union"] += _union_within(t.start[inw], t.end[inw], lo, hi)
            per["span"] += max(0, hi - lo)
            per["sum"] += int(t.busy_ns[inw].sum())
        per["window"] += w.end_ns - w.start_ns
        # sample mode: each traced launch's own token, from its launch to the next launch
        marks = np.sort(t.start[li])
        for j in np.flatnonzero(li & (t.flags == 1)):
            a0 = int(t.start[j])
            later = marks[marks > a0]
            a1 = int(later[0]) if len(later) else w.end_ns
            seg = work & (t.start >= a0) & (t.start < a1)
            if seg.any():  # a traced token: its launch to the next launch (process_kernels's span)
                per["seg_union"] += _union_within(t.start[seg], t.end[seg], a0, a1)
                per["seg_span"] += a1 - a0
        gi = graphs & (t.start >= w.start_ns) & (t.start < w.end_ns)
        per["graph"] += int((t.end[gi] - t.start[gi]).sum())
        # tokens whose kernels are in the records: every token, but in sample mode the sampled launches
        traced_tokens += w.tokens if n_l == 0 or not mode.startswith("sample") else n_s
    row["launches"] = [launches_in, sampled_in]
    row["traced_tokens"] = traced_tokens
    row["ms_per_token"] = {k: v / max(1, traced_tokens if k in ("sum", "union") else sampled_in if k.startswith("seg")
                                      else tokens) / 1e6 for k, v in per.items()}
    row["kernel_names"] = len({t.names[i] for i in t.name[work]})
    del row["tokens"]
    return row


def summary(rows: list[dict[str, Any]]) -> None:
    by: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for r in rows:
        if r.get("status") == "done" and r.get("ts"):
            by.setdefault((r["workload"], r["mode"]), []).append(r)
    for (w, mode), rs in sorted(by.items()):
        ts = [statistics.fmean(r["ts"][-r["kept"]:]) for r in rs]
        plain = [statistics.fmean(r["ts"][-r["kept"]:]) for r in by.get((w, "plain"), [])]
        line = f"{w:8} {mode:10} n={len(rs)} t/s {statistics.fmean(ts):9.2f}"
        if mode != "plain" and len(plain) >= 2 and len(ts) >= 2:
            la, lb = [math.log(x) for x in plain], [math.log(x) for x in ts]
            d = statistics.fmean(lb) - statistics.fmean(la)
            se = math.sqrt(statistics.variance(la) / len(la) + statistics.variance(lb) / len(lb))
            from scipy import stats as sps

            h = float(sps.t.ppf(0.975, max(1, len(la) + len(lb) - 2))) * se
            line += f"  vs plain {math.exp(d):.4f} [{math.exp(d - h):.4f}, {math.exp(d + h):.4f}]"
        mp = [r["ms_per_token"] for r in rs if r.get("ms_per_token")]
        if mp:
            m = {k: statistics.fmean(x[k] for x in mp) for k in mp[0]}
            own = statistics.fmean(r["bench_ms_per_token"] for r in rs)
            untraced = statistics.fmean(r["bench_ms_per_token"] for r in by.get((w, "plain"), rs))
            # (sample mode: the union is per traced token, the span per token of all: idle from the segments)
            idle = m["seg_span"] - m["seg_union"] if m["seg_span"] else m["span"] - m["union"]
            line += (f"\n{'':20}per token: kernels {m['sum']:.4f} union {m['union']:.4f} overlap {m['sum'] - m['union']:.4f}"
                     f" idle {idle:.4f} outside {m['window'] - m['span']:.4f} graphs {m['graph']:.4f} | llama-bench "
                     f"{own:.4f} (untraced {untraced:.4f}) | (union+idle)/own {(m['union'] + idle) / own:.3f}, "
                     f"/untraced {(m['union'] + idle) / untraced:.3f}")
            if m["seg_span"]:
                line += (f"\n{'':20}sampled tokens alone: union {m['seg_union']:.4f} idle "
                         f"{m['seg_span'] - m['seg_union']:.4f} span {m['seg_span']:.4f} ms/token")
            line += (f"\n{'':20}records {rs[0].get('records')} lost {[r.get('lost') for r in rs]} streams "
                     f"{rs[0].get('streams')} devices {rs[0].get('devices')} launches {rs[0].get('launches')} "
                     f"kernel names {rs[0].get('kernel_names')}")
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
    ap.add_argument("flags", nargs="*")
    a = ap.parse_args()
    t0 = time.monotonic()
    modes = a.modes.split(",")
    rows = [json.loads(x) for x in a.out.read_text().splitlines()] if a.out.exists() else []
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
                r = dict(one(a.bin, a.model, w, mode, a.flags, a.reps), round=i)
                rows.append(r)
                with a.out.open("a") as fh:
                    fh.write(json.dumps(r) + "\n")
                print(f"  {w} {mode} round {i}: {r.get('status')} "
                      f"{statistics.fmean(r['ts']) if r.get('ts') else ''} t/s {r.get('message') or ''}", file=sys.stderr)
    summary(rows)


if __name__ == "__main__":
    main()
