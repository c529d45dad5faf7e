#!/usr/bin/env python3
"""Bisect cost: tokensleuth bisect vs `git bisect run` with clean rebuilds.

A 24-commit history on the real llama.cpp source (neutral commits that force a
recompile, one that breaks the build and its fix, one MoE-only slowdown).
tokensleuth bisect runs 5 times: run 1 from an empty build cache and an empty
ccache, runs 2-5 from an empty build cache with ccache warm. The baseline is the
method of llama.cpp's scripts: `git bisect run` with a clean CMake rebuild (no
ccache) and one llama-bench run per step, judged against the midpoint of one
good and one bad run.

    .venv/bin/python bench/bisect_cost.py [--runs 5] [--skip-baseline]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _common import default_engine, tiny_model, tokensleuth_cmd

from tests.planted import bisect_history

NAMES = (*(f"n{i}" for i in range(1, 14)), "broken", "fix", "n14", "n15", "culprit",
         *(f"n{i}" for i in range(16, 22)))
assert len(NAMES) == 24
BENCH = ["-p", "0", "-n", "32", "-r", "5"]


def tokensleuth_run(repo: Path, shas: dict[str, str], moe: Path, dense: Path, cache: Path, ccache: Path) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as td:
        out = Path(td) / "b.json"
        env = dict(os.environ, TOKENSLEUTH_CACHE=str(cache), CCACHE_DIR=str(ccache),
                   TOKENSLEUTH_DB=str(Path(td) / "db.sqlite"))
        # the synthetic models live in the default cache; the engine builds go to `cache`
        t0 = time.monotonic()
        p = subprocess.run([*tokensleuth_cmd(), "bisect", "--repo", str(repo),
                            "--good", shas["base"], "--bad", shas["n21"], "--model", str(moe),
                            "--control-model", str(dense), "-w", "tg32", "--json", str(out), "--", "-r", "5"],
                           env=env, capture_output=True, text=True)
        wall = time.monotonic() - t0
        if p.returncode != 0:
            print(p.stderr[-2000:])
            raise SystemExit("tokensleuth bisect failed")
        r = json.loads(out.read_text())
        con = __import__("sqlite3").connect(Path(td) / "db.sqlite")
        runs = con.execute("SELECT COUNT(*) FROM trials WHERE status IN ('done','failed','crashed','timeout','garbage')"
                           ).fetchone()[0]
    return {"wall_s": wall, "first_bad": r["first_bad"], "builds": r.get("builds"), "engine_runs": runs,
            "skipped": r["skipped"], "verified": r["verified"]}


def baseline(repo: Path, shas: dict[str, str], moe: Path) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as td:
        clone = Path(td) / "llama.cpp"
        subprocess.run(["git", "clone", "-q", str(repo), str(clone)], check=True)

        def build_and_bench(rev: str) -> float | None:
            subprocess.run(["git", "-C", str(clone), "checkout", "-q", "--force", rev], check=True)
            b = clone / "build"
            shutil.rmtree(b, ignore_errors=True)
            env = dict(os.environ, CCACHE_DISABLE="1")
            flags = ["-DCMAKE_BUILD_TYPE=Release", "-DLLAMA_BUILD_TESTS=OFF", "-DLLAMA_OPENSSL=OFF",
                     "-DCMAKE_C_FLAGS=-mno-amx-tile -mno-amx-int8 -mno-amx-bf16",
                     "-DCMAKE_CXX_FLAGS=-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"]
            if subprocess.run(["cmake", "-S", str(clone), "-B", str(b), "-G", "Ninja", *flags], env=env,
                              capture_output=True).returncode:
                return None
            if subprocess.run(["cmake", "--build", str(b), "--target", "llama-bench", "-j2"], env=env,
                              capture_output=True).returncode:
                return None
            o = subprocess.run([str(b / "bin" / "llama-bench"), "-m", str(moe), *BENCH, "-o", "jsonl"],
                               capture_output=True, text=True, check=True)
            return float(json.loads(o.stdout)["avg_ts"])

        t0 = time.monotonic()
        good, bad = build_and_bench(shas["base"]), build_and_bench(shas["n21"])
        assert good and bad
        threshold = (good + bad) / 2
        script = Path(td) / "step.py"
        script.write_text(f'''import sys
sys.path.insert(0, {str(Path(__file__).parent)!r})
from bisect_cost import step
sys.exit(step({str(clone)!r}, {str(moe)!r}, {threshold!r}))
''')
        subprocess.run(["git", "-C", str(clone), "bisect", "start", shas["n21"], shas["base"]], check=True,
                       capture_output=True)
        p = subprocess.run(["git", "-C", str(clone), "bisect", "run", sys.executable, str(script)],
                           capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path)))
        wall = time.monotonic() - t0
        found = None
        for line in p.stdout.splitlines():
            if "is the first bad commit" in line:
                found = line.split()[0][:10]
        steps = p.stdout.count("running")
    return {"wall_s": wall, "first_bad": found, "builds": steps + 2, "engine_runs": steps + 2}


def step(clone: str, moe: str, threshold: float) -> int:
    """One `git bisect run` step: clean rebuild, one llama-bench run, compare to the threshold."""
    b = Path(clone) / "build"
    shutil.rmtree(b, ignore_errors=True)
    env = dict(os.environ, CCACHE_DISABLE="1")
    flags = ["-DCMAKE_BUILD_TYPE=Release", "-DLLAMA_BUILD_TESTS=OFF", "-DLLAMA_OPENSSL=OFF",
             "-DCMAKE_C_FLAGS=-mno-amx-tile -mno-amx-int8 -mno-amx-bf16",
             "-DCMAKE_CXX_FLAGS=-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"]
    if subprocess.run(["cmake", "-S", clone, "-B", str(b), "-G", "Ninja", *flags], env=env,
                      capture_output=True).returncode:
        return 125
    if subprocess.run(["cmake", "--build", str(b), "--target", "llama-bench", "-j2"], env=env,
                      capture_output=True).returncode:
        return 125  # does not build: skip
    o = subprocess.run([str(b / "bin" / "llama-bench"), "-m", moe, *BENCH, "-o", "jsonl"],
                       capture_output=True, text=True)
    if o.returncode:
        return 125
    return 0 if float(json.loads(o.stdout)["avg_ts"]) > threshold else 1


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--skip-baseline", action="store_true")
    args = ap.parse_args()
    engine = default_engine()
    moe, dense = tiny_model(engine, "qwen3moe"), tiny_model(engine, "llama")
    repo, shas = bisect_history(NAMES, "bisect24")
    culprit = shas["culprit"][:10]
    n = len(NAMES)
    print(f"history: {n} commits; culprit {culprit}; broken {shas['broken'][:10]}; machine {os.cpu_count()} cores")
    results = []
    with tempfile.TemporaryDirectory() as td:
        ccache = Path(td) / "ccache"
        for i in range(args.runs):
            cache = Path(td) / f"cache{i}"
            r = tokensleuth_run(repo, shas, moe, dense, cache, ccache)
            shutil.rmtree(cache, ignore_errors=True)
            results.append(r)
            print(f"tokensleuth run {i + 1} ({'cold ccache' if i == 0 else 'warm ccache'}): {r['wall_s']:.0f} s, "
                  f"builds {r['builds']}, engine runs {r['engine_runs']}, first_bad {r['first_bad']} "
                  f"({'right' if r['first_bad'] == culprit else 'WRONG'}), skipped {r['skipped']}, "
                  f"verified {r['verified']}")
    right = sum(r["first_bad"] == culprit for r in results)
    import math

    print(f"tokensleuth: right culprit {right}/{len(results)}; builds bound ceil(log2 {n}) + 2 = "
          f"{math.ceil(math.log2(n)) + 2} plus skips")
    if not args.skip_baseline:
        b = baseline(repo, shas, moe)
        print(f"git bisect run, clean rebuild + one llama-bench per step: {b['wall_s']:.0f} s, builds {b['builds']}, "
              f"engine runs {b['engine_runs']}, first_bad {b['first_bad']} "
              f"({'right' if b['first_bad'] == culprit else 'WRONG'})")
        cold = results[0]["wall_s"]
        warm = sum(r["wall_s"] for r in results[1:]) / max(1, len(results) - 1)
        print(f"wall time ratio tokensleuth/baseline: cold {cold / b['wall_s']:.2f}, warm {warm / b['wall_s']:.2f}")


if __name__ == "__main__":
    main()
