"""What the per-op profile costs and how much of the real time it sees, here.

For the default engine (and, with --culprit, the planted MoE culprit of tests/planted.py
against its parent): the seconds the profiler target adds to a cached build, the seconds of
one `tokensleuth profile`, and per model and workload the node sum against llama-bench's own
ms/token (1.0: the node times add up to the real time). Each profile is a real run of the
command, into a store of its own.

    .venv/bin/python bench/profile_cost.py [--threads 1] [--culprit] [--model BIG.gguf -w tg8 -w pp64]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from tests.conftest import _model  # noqa: E402 - after the path
from tokensleuth.sources import DEFAULT_ENGINE  # noqa: E402
from tokensleuth.sources.build import DEFAULT_TARGETS, BuildCache  # noqa: E402
from tokensleuth.sources.profiler import TARGET  # noqa: E402


def profile(engines: list[str], model: Path, workload: str, threads: int, tmp: Path) -> tuple[float, dict[str, Any]]:
    out = tmp / "p.json"
    env = dict(os.environ, TOKENSLEUTH_DB=str(tmp / f"{time.monotonic_ns()}.sqlite"))
    t0 = time.monotonic()
    p = subprocess.run([str(Path(sys.executable).with_name("tokensleuth")), "profile",
                        *(x for e in engines for x in ("--engine", e)), "--model", str(model), "-w", workload,
                        "--json", str(out), "--", "-t", str(threads)], env=env, capture_output=True, text=True)
    if p.returncode != 0:
        raise SystemExit(p.stderr[-2000:])
    return time.monotonic() - t0, json.loads(out.read_text())


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--culprit", action="store_true")
    ap.add_argument("--model", action="append", default=[], help="another model (e.g. a real-size shape)")
    ap.add_argument("-w", "--workload", action="append", default=[], help="default tg32 and pp64")
    a = ap.parse_args()
    cache = BuildCache()
    base = cache.get(DEFAULT_ENGINE)
    tree = cache.llama_tree(DEFAULT_ENGINE)
    t0 = time.monotonic()
    built = cache.get(DEFAULT_ENGINE, (), (*DEFAULT_TARGETS, TARGET))
    print(f"profiler target on the cached default build: {time.monotonic() - t0:.1f} s "
          f"({'cache hit' if built.cache_hit else f'built in {built.build_s:.1f} s'})")
    models = {"dense": _model(base, tree, "llama"), "moe": _model(base, tree, "qwen3moe")}
    models.update({Path(m).stem[:6]: Path(m) for m in a.model})
    print(f"{'model':6} {'workload':8} {'threads':>7} {'profile s':>9} {'graph ms/tok':>12} "
          f"{'node sum / llama-bench':>22} {'wall / llama-bench':>18}")
    with tempfile.TemporaryDirectory() as tmp:
        for name, m in models.items():
            for w in a.workload or ["tg32", "pp64"]:
                s, doc = profile([DEFAULT_ENGINE], m, w, a.threads, Path(tmp))
                graph = sum(o["ms_per_token"] for o in doc["ops"])
                ratio = doc["node_sum_ratio"][DEFAULT_ENGINE][w]
                wall = doc["wall_ratio"][DEFAULT_ENGINE][w]
                print(f"{name:6} {w:8} {a.threads:7d} {s:9.1f} {graph:12.4f} {ratio:22.3f} {wall:18.3f}", flush=True)
        if a.culprit:
            from tests.planted import bisect_history

            repo, shas = bisect_history()
            for name, m in models.items():
                s, doc = profile([f"git:{repo}@{shas['fix']}", f"git:{repo}@{shas['culprit']}"], m, "tg32",
                                 a.threads, Path(tmp))
                print(f"\nculprit vs parent, {name} tg32 ({s:.0f} s):")
                for r in doc["diff"][:5]:
                    print(f"  {r['op']:14} {r['signature'][:40]:40} {r['ms_per_token'][0]:8.4f} → "
                          f"{r['ms_per_token'][1]:8.4f} ms/token  Δ {r['delta_ms_per_token']:+.4f}  "
                          f"Δ nodes {r['delta_nodes_per_token']:+g}  {r['verdict']}")


if __name__ == "__main__":
    main()
