"""The planted kernel bisect's figures from the JSON files a device run wrote (bench/gpu/planted_kernel_bisect.sh):

* a compare of the same build without and with the CUDA tracer injected: the tracer's overhead
  per workload (the paired ratio, its interval, the verdict at the band);
* a kernels profile (profile --by kernels): per engine and cell, the GPU's kernel and idle ms per
  token against llama-bench's (coverage: within 5% is the aim), the top kernels; per diff, the
  rows that moved, the idle time and the share of the measured difference accounted for;
* a bisect: its culprit and the culprit's kernel diff headline.

    .venv/bin/python bench/kernel_figures.py FILE.json [...]
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any


def overhead(name: str, o: dict[str, Any]) -> None:
    print(f"{name}: the tracer's overhead (traced / plain t/s, paired)")
    for c in o["comparisons"]:
        ci = c.get("ci") or [None, None]
        print(f"  {Path(c['model']).stem} {c['workload']}: ratio {c.get('ratio')} CI {ci} -> {c['verdict']} "
              f"({c.get('pairs')} pairs)")


def kernels(name: str, o: dict[str, Any], most: int = 8) -> None:
    print(f"{name}: kernels traced by {o.get('tracers')}")
    for c in o["cells"]:
        print(f"  {c['engine']} {Path(c['model']).stem} {c['workload']}: kernels {c['kernel_ms_per_token']:.4f} + idle "
              f"{c['idle_ms_per_token']} ms/token vs llama-bench {c['bench_ms_per_token']} (coverage {c['coverage']}), "
              f"{len(c['kernels'])} kernels, {c['processes']} processes")
        for k in c["kernels"][:most]:
            print(f"      {k['ms_per_token']:.4f} ms {k['share']:6.1%} {k['calls_per_token']:8.2f}/tok  {k['name'][:90]}")
        for n in c.get("notes", []):
            print(f"      note: {n}")
    for d in o.get("diffs", []):
        print(f"  diff {d['engines'][1]} vs {d['engines'][0]} {Path(d['model']).stem} {d['workload']}: {d.get('sentence')}")
        for r in [r for r in d["rows"] if r["verdict"] != "same" or r.get("launch_changed")][:most * 2]:
            print(f"      {r['verdict']:10} {r['delta_ms_per_token']:+.4f} ms/tok {r['ci']} "
                  f"calls {r['calls_per_token']} {r['kernel'][:80]} {r.get('launch_changed') or ''}")
        if "idle" in d:
            print(f"      idle {d['idle']['delta_ms_per_token']:+.4f} ms/tok {d['idle']['ci']}")


def bisect(name: str, o: dict[str, Any]) -> None:
    print(f"{name}: bisect {o.get('status')}, first bad {o.get('first_bad')} "
          f"({(o.get('culprit') or {}).get('subject')}), verified {o.get('verified')}")
    pr = o.get("profile") or {}
    print(f"  culprit's profile ({'kernels' if pr.get('kernels') else 'ops'}): {pr.get('headline') or pr.get('skipped')}")
    for r in pr.get("rows", []):
        print(f"      {r.get('verdict')} {r.get('delta_ms_per_token')} {r.get('kernel') or r.get('op')} "
              f"{r.get('launch_changed') or ''}")


def main() -> None:
    for arg in sys.argv[1:]:
        p = Path(arg)
        try:
            o = json.loads(p.read_text())
        except (OSError, ValueError) as exc:
            print(f"{p.name}: not read ({exc})")
            continue
        if "tracers" in o:
            kernels(p.name, o)
        elif "comparisons" in o:
            overhead(p.name, o)
        elif "first_bad" in o:
            bisect(p.name, o)
        print()


if __name__ == "__main__":
    main()
