"""The kernel rules on the CUDA tracer's own records from a GPU run (bench/gpu/raw_traces.sh), here:
per arm and workload, the traced program's cost, the busy union, the host's time outside the
kernels and the gaps between them per token, against the untraced processes' ms/token by the rule
before (busy + idle) and now (busy + outside; the whole span not short of it); each arm's
difference from the base and the busy time's part of it; the own-time verdicts (each kept
repetition of the one traced process read as a process); and what sample:N's records hold.

    .venv/bin/python bench/kernel_replay.py [bench/results/gpu/raw_traces_h100]
"""

from __future__ import annotations

import json
import statistics
import sys
import tarfile
import tempfile
from pathlib import Path

from tokensleuth.analysis.kernel_diff import diff
from tokensleuth.analysis.kernels import (
    COVERAGE,
    ProcessKernels,
    Window,
    coverage,
    process_kernels,
    reach,
)
from tokensleuth.kernels.cupti import read_file


def main() -> None:
    raw = Path(sys.argv[1] if len(sys.argv) > 1 else "bench/results/gpu/raw_traces_h100")
    rows = [json.loads(x) for x in (raw / "trace_cost.jsonl").read_text().splitlines()]
    with tempfile.TemporaryDirectory() as tmp:
        for tar in sorted(raw.glob("raw_*.tar.xz")):
            with tarfile.open(tar) as t:
                t.extractall(tmp, filter="data")
        procs: dict[tuple[str, str], list[ProcessKernels]] = {}
        untraced: dict[tuple[str, str], list[float]] = {}
        print(f"{'arm':8} {'workload':8} {'traced/untraced':>15} {'busy':>8} {'outside':>8} {'idle':>8} "
              f"{'untraced':>9} {'(b+i)/u':>8} {'(b+o)/u':>8} {'span/u':>7} shares")
        for d in sorted(Path(tmp).iterdir()):
            arm, workload, mode = d.name.split("_")
            trace = read_file(next(d.glob("kernels-*.bin")))
            windows = [Window(*w) for w in json.loads((d / "windows.json").read_text())["windows"]]
            u = [r["bench_ms_per_token"] for r in rows if (r["label"], r["workload"], r["mode"]) == (arm, workload, "plain")]
            traced = [r["bench_ms_per_token"] for r in rows
                      if (r["label"], r["workload"], r["mode"].replace(":", "")) == (arm, workload, mode)]
            p = process_kernels(trace, windows)
            um = statistics.fmean(u)
            if mode != "kernels":
                print(f"{arm:8} {workload:8} {mode}: {len(trace)} records, {p.lost} lost or impossible; "
                      f"traced/untraced {statistics.fmean(traced) / um:.3f}; notes: {p.notes[-2:]}")
                continue
            procs[arm, workload] = [process_kernels(trace, [w]) for w in windows]
            untraced[arm, workload] = u
            b, o, i = p.busy_ms_per_token or 0.0, p.outside_ms_per_token or 0.0, p.idle_ms_per_token or 0.0
            c, r = coverage(p, um) or 0.0, reach(p, um) or 0.0
            ok = "given" if c <= 1 + COVERAGE and r >= 1 - COVERAGE else "withheld"
            print(f"{arm:8} {workload:8} {statistics.fmean(traced) / um:15.3f} {b:8.4f} {o:8.4f} {i:8.4f} {um:9.4f} "
                  f"{(b + i) / um:8.3f} {c:8.3f} {r:7.3f} {ok}")
        print()
        for arm in ("nofuse", "planted"):
            for w in ("tg32", "pp2048"):
                if (arm, w) not in procs or ("base", w) not in procs:
                    continue
                got = diff(procs["base", w], procs[arm, w], 0.02, untraced=(untraced["base", w], untraced[arm, w]))
                grew = [f"{r['kernel'][:40]} {r['verdict']} {r['delta_ms_per_token']:+.4f} (own "
                        f"{r['own']['delta_ms_per_token']:+.4f})" for r in got["rows"]
                        if r["verdict"] not in ("same",) and r.get("own")][:6]
                print(f"{arm} vs base, {w}: {got['sentence']}")
                print("    " + ("; ".join(grew) or "no kernel moved beyond its interval"))


if __name__ == "__main__":
    main()
