#!/usr/bin/env python3
"""Decompose cost: tokensleuth decompose vs the by-hand method of the field report.

The series is the test's (tests/planted.py ``decompose_series``) on the real llama.cpp
source: a base with a planted busy wait per decode call, then six patches whose right
decisions are known: 0001 the plant itself (skipped: already in base), 0002 removes the
wait (kept), 0003 a neutral one-line change (dropped), 0004 a 20 ms wait per prompt
batch (dropped: regression), 0005 does not apply once 0003 is dropped (failed), 0006
multiplies the rms_norm epsilon by 10^4 (dropped: outputs changed; speed unchanged).

tokensleuth decompose runs ``--runs`` times, outputs checked (the default), each with a
fresh store and an empty build cache: run 1 with an empty ccache too (cold), the others
with ccache warm. The by-hand method: apply each patch on top of the last kept state
(``git apply``), a clean CMake build with no ccache, one llama-bench run (its default
5 repetitions), and the ±0.5% rule: keep when some test is more than 0.5% faster and
none more than 0.5% slower, else revert; no output check per state. Its wall time is
measured once, for real; its decisions are taken ``--runs`` times (the later passes get
their binaries from the build cache: only the llama-bench runs are repeated).

    .venv/bin/python bench/decompose_cost.py [--runs 5] [--band 5%] [--skip-baseline]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sqlite3
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from _common import default_engine, tiny_model, tokensleuth_cmd, tps_by_test

from tests.planted import decompose_series
from tokensleuth.sources.build import BASE_FLAGS, BuildCache, host_flags

RIGHT = {"0001": "skipped", "0002": "kept", "0003": "dropped", "0004": "dropped", "0005": "failed",
         "0006": "dropped"}
RIGHT_REASON = {"0003": "neutral", "0004": "regression", "0006": "outputs changed"}
ENGINE_FLAGS = ["-r", "3", "-t", "1"]
BY_HAND_BENCH = ["-p", "64", "-n", "64", "-t", "1"]  # llama-bench's default -r 5
SPIN = {"TOKENSLEUTH_SPIN_US": "10000"}  # the base's planted wait: 10 ms per decode call


def tokensleuth_run(repo: Path, base: str, files: list[Path], model: Path, band: str, cache: Path,
                    ccache: Path) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as td:
        out, db = Path(td) / "d.json", Path(td) / "db.sqlite"
        env = dict(os.environ, TOKENSLEUTH_CACHE=str(cache), CCACHE_DIR=str(ccache), TOKENSLEUTH_DB=str(db),
                   **SPIN)
        t0 = time.monotonic()
        p = subprocess.run([*tokensleuth_cmd(), "decompose", "--repo", str(repo), "--base", base,
                            *(x for f in files for x in ("--patches", str(f))), "--model", str(model),
                            "-w", "pp64", "-w", "tg64", "--band", band, "--max-pairs", "12", "--json", str(out),
                            "--", *ENGINE_FLAGS], env=env, capture_output=True, text=True)
        wall = time.monotonic() - t0
        if not out.exists():
            print(p.stderr[-3000:])
            raise SystemExit("tokensleuth decompose wrote no result")
        r = json.loads(out.read_text())
        con = sqlite3.connect(db)
        runs = con.execute("SELECT COUNT(*) FROM trials WHERE status IN ('done','failed','crashed','timeout',"
                           "'garbage')").fetchone()[0]
    steps = r["steps"]
    built = [s for s in steps if s["build_s"] is not None]
    return {"wall_s": wall, "status": r["status"], "rc": p.returncode,
            "decisions": {s["patch"][:4]: s["decision"] for s in steps},
            "reasons": {s["patch"][:4]: s["reason"] for s in steps},
            "builds": 1 + len(built), "compiled": sum(1 for s in built if not s["cache_hit"]),
            "build_s": sum(float(s["build_s"]) for s in built),
            "engine_runs": runs, "outputs": [s["outputs"] for s in steps if s.get("outputs")],
            "pairs": {s["patch"][:4]: s["pairs"] for s in steps},
            "scoreboard": [(b["workload"], b["ratio"], b["ci"]) for b in r["scoreboard"]]}


def right(decisions: dict[str, str], reasons: dict[str, str] | None = None) -> list[str]:
    """The patches decided wrongly (by decision, and by reason where tokensleuth gives one)."""
    wrong = [k for k, v in RIGHT.items() if decisions.get(k) != v]
    if reasons is not None:
        wrong += [k for k, v in RIGHT_REASON.items() if k not in wrong and reasons.get(k) != v]
    return wrong


def clean_build(tree: Path) -> tuple[Path | None, float]:
    """A clean CMake build of llama-bench, no ccache: the by-hand rebuild of one state."""
    b = tree / "build"
    shutil.rmtree(b, ignore_errors=True)
    env = dict(os.environ, CCACHE_DISABLE="1")
    t0 = time.monotonic()
    flags = [*BASE_FLAGS, *host_flags([])]
    ok = (subprocess.run(["cmake", "-S", str(tree), "-B", str(b), "-G", "Ninja", *flags], env=env,
                         capture_output=True).returncode == 0
          and subprocess.run(["cmake", "--build", str(b), "--target", "llama-bench", "-j", str(os.cpu_count())],
                             env=env, capture_output=True).returncode == 0)
    return (b / "bin" / "llama-bench" if ok else None), time.monotonic() - t0


def bench_once(bench: Path, model: Path) -> dict[str, float]:
    o = subprocess.run([str(bench), "-m", str(model), *BY_HAND_BENCH, "-o", "jsonl"], capture_output=True,
                       text=True, check=True, env=dict(os.environ, **SPIN))
    return tps_by_test(o.stdout)


def half_percent_rule(new: dict[str, float], kept: dict[str, float]) -> str:
    d = [new[t] / kept[t] - 1 for t in kept]
    return "kept" if max(d) > 0.005 and min(d) >= -0.005 else "dropped"


def by_hand(repo: Path, base: str, files: list[Path], model: Path, real_builds: bool) -> dict[str, Any]:
    """One pass of the field report's method; builds are clean and timed when ``real_builds``."""
    with tempfile.TemporaryDirectory() as td:
        tree = Path(td) / "llama.cpp"
        subprocess.run(["git", "clone", "-q", str(repo), str(tree)], check=True)
        subprocess.run(["git", "-C", str(tree), "checkout", "-q", base], check=True)
        git = ["git", "-C", str(tree), "-c", "user.name=h", "-c", "user.email=h@h"]
        t0 = time.monotonic()
        build_s = 0.0
        builds = 0

        def build_and_bench() -> dict[str, float] | None:
            nonlocal build_s, builds
            if real_builds:
                bench, s = clean_build(tree)
                build_s += s
                builds += 1
            else:
                sha = subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
                try:
                    bench = Path(BuildCache().get(f"git:{tree}@{sha}").bin_dir) / "llama-bench"
                except Exception:
                    bench = None
            return None if bench is None else bench_once(bench, model)

        kept = build_and_bench()
        assert kept is not None
        decisions: dict[str, str] = {}
        for f in files:
            k = f.name[:4]
            if subprocess.run([*git, "apply", "--check", str(f)], capture_output=True).returncode != 0:
                decisions[k] = "failed"  # by hand: "does not apply" (an applied one looks the same)
                continue
            subprocess.run([*git, "am", "-q", str(f)], check=True, capture_output=True)
            got = build_and_bench()
            decisions[k] = "failed" if got is None else half_percent_rule(got, kept)
            if decisions[k] == "kept":
                assert got is not None
                kept = got
            else:
                subprocess.run([*git, "reset", "-q", "--hard", "HEAD~1"], check=True)
        wall = time.monotonic() - t0
    # by hand, "does not apply" is all one can tell of 0001: already in base, or a conflict
    decisions["0001"] = "skipped" if decisions.get("0001") == "failed" else decisions.get("0001", "")
    return {"wall_s": wall, "build_s": build_s, "builds": builds, "engine_runs": builds or None,
            "decisions": decisions}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--band", default="5%")
    ap.add_argument("--skip-baseline", action="store_true")
    args = ap.parse_args()
    engine = default_engine()
    model = tiny_model(engine, "qwen3moe")
    with tempfile.TemporaryDirectory() as td:
        repo, base, files = decompose_series(Path(td) / "patches")
        print(f"series: {len(files)} patches on {base[:10]}; band {args.band}; machine {os.cpu_count()} cores; "
              f"engine flags {' '.join(ENGINE_FLAGS)}, workloads pp64 tg64, outputs checked")
        print("right decisions: " + ", ".join(f"{k} {v}" + (f" ({RIGHT_REASON[k]})" if k in RIGHT_REASON else "")
                                              for k, v in RIGHT.items()))
        results = []
        ccache = Path(td) / "ccache"
        for i in range(args.runs):
            cache = Path(td) / f"cache{i}"
            r = tokensleuth_run(repo, base, files, model, args.band, cache, ccache)
            shutil.rmtree(cache, ignore_errors=True)
            results.append(r)
            wrong = right(r["decisions"], r["reasons"])
            secs = [o["seconds"] for o in r["outputs"]]
            print(f"tokensleuth run {i + 1} ({'cold ccache' if i == 0 else 'warm ccache'}): {r['wall_s']:.0f} s, "
                  f"{r['status']}, builds {r['builds']} (compiled {r['compiled']}, {r['build_s']:.0f} s), "
                  f"engine runs {r['engine_runs']}, pairs {r['pairs']}, "
                  f"output checks {len(secs)} ({min(secs):.1f}-{max(secs):.1f} s each), "
                  f"{'all right' if not wrong else 'WRONG: ' + ', '.join(wrong)}")
            print(f"    decisions {r['reasons']}")
            print(f"    scoreboard {[(w, round(x, 3), [round(c, 3) for c in ci]) for w, x, ci in r['scoreboard']]}")
        n_right = sum(not right(r["decisions"], r["reasons"]) for r in results)
        floors = [o["floor"] for r in results for o in r["outputs"]]
        print(f"tokensleuth: right decisions in {n_right}/{len(results)} runs")
        if floors:
            f = floors[0]
            print(f"KLD noise floor (base vs base, separate process): mean KLD {f['mean_kld']:.6f}, "
                  f"99% KLD {f['kld_99']:.6f}, same top p {f['same_top_p']:.3f}%")
        eps = [o for r in results for o in r["outputs"] if o["verdict"] == "changed"]
        if eps:
            print(f"0006 (epsilon x1e4): mean KLD {eps[0]['mean_kld']:.6f}, 99% KLD {eps[0]['kld_99']:.6f}, "
                  f"same top p {eps[0]['same_top_p']:.3f}%")
        checks = [o["seconds"] for r in results[1:] or results for o in r["outputs"]]
        print(f"output check per state: {sum(checks) / len(checks):.1f} s mean ({min(checks):.1f}-{max(checks):.1f})")
        if args.skip_baseline:
            return
        hand = [by_hand(repo, base, files, model, real_builds=(i == 0)) for i in range(args.runs)]
        h = hand[0]
        print(f"by hand, pass 1 (clean builds, timed): {h['wall_s']:.0f} s, builds {h['builds']} "
              f"({h['build_s']:.0f} s), engine runs {h['engine_runs']}, no output check")
        wrongs = []
        for i, x in enumerate(hand):
            w = right(x["decisions"])
            wrongs.append(len(w))
            print(f"by hand, pass {i + 1}: decisions {x['decisions']} — "
                  f"{'all right' if not w else 'WRONG: ' + ', '.join(w)}")
        print(f"by hand (±0.5% rule): {sum(wrongs)} wrong decisions in {len(hand)} passes "
              f"({sum(1 for w in wrongs if w)} passes with at least one)")
        cold = results[0]["wall_s"]
        warm = sum(r["wall_s"] for r in results[1:]) / max(1, len(results) - 1)
        print(f"wall time tokensleuth/by hand: cold {cold / h['wall_s']:.2f}, warm {warm / h['wall_s']:.2f}")


if __name__ == "__main__":
    main()
