"""The real scan on simulated histories: what it finds, what it calls falsely, what it builds.

Each history has ``--releases`` releases and ``--steps`` planted steps (3-10% either way, at
random releases), or none. Behind the engine seam stands a simulated llama-bench (an engine
kind registered for this script): a trial of release i is a real process drawn whole from
measured ones (its level, its repetitions with the cold first one, its tails: the H200's A/A
processes of the 30B shape, or this machine's, bench/inprocess_aa.py) times the release's true
level. Builds come from a cache that makes none (a release's "build" is its index). Everything
else is the real code: ``tokensleuth.drivers.scan.run_scan`` — its sample, level rounds, step fit,
verdicts by the real compare driver, splits, bisects and budget — in a real store.

A planted step is found when a step of the scan names its release (first_bad); a false step is
one named where none was planted. Printed per history: planted, found, false, undecided
intervals, builds (releases measured), trials; then the totals.

    .venv/bin/python bench/sim_scan.py [--scans 20] [--releases 60] [--steps 2] [--band 0.05]
        [--processes FILE.jsonl --design separate --workload tg32]
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
import time
import types
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from sim_compare import H200, Processes, _outcome, _reps

import tokensleuth.drivers.judge as judge_mod
import tokensleuth.engines as engines
from tokensleuth.sources.history import Candidate
from tokensleuth.drivers.scan import run_scan
from tokensleuth.engines import llamabench_argv as bench_argv
from tokensleuth.engines.base import ArmRuntime, EngineRun
from tokensleuth.sources.build import EngineBuild
from tokensleuth.store import Store


class SimEngine:
    """llama-bench as the scan sees it: a trial of release i (its build's folder /sim/i) is a
    measured process drawn whole, at that release's true level."""

    kind = "sim"
    targets = ("llama-bench",)
    attaches = False
    builds = True
    reps_per_process = True
    bench_flags = False
    shares_process = False
    load_log_flag = None
    default_workloads: tuple[str, ...] = ()
    settings = None
    # its argv is llama-bench's (the plan's -r is what _reps reads)
    default_repetitions = bench_argv.DEFAULT_REPETITIONS
    workload_flags = bench_argv.WORKLOAD_FLAGS
    profiles = False
    argv_for = staticmethod(bench_argv.argv_for)
    repetitions = staticmethod(bench_argv.repetitions)
    sets_repetitions = staticmethod(bench_argv.sets_repetitions)
    flag_tests = staticmethod(bench_argv.flag_tests)

    def __init__(self) -> None:
        self.procs: Processes | None = None
        self.level: np.ndarray = np.zeros(1)
        self.rng = np.random.default_rng(0)
        self.trials = 0

    def check(self, arm: ArmRuntime, workloads: Sequence[str]) -> None:
        return None

    def run_trial(self, arm: ArmRuntime, model: str, workload: str, argv: Sequence[str], *,
                  timeout_s: float | None, probe: Any, host_env: dict[str, Any]) -> EngineRun:
        assert self.procs is not None and arm.bin_dir is not None
        i = int(Path(arm.bin_dir).name)
        (logs,) = self.procs.draw(self.rng, _reps(argv, arm.flags))[:1]
        self.trials += 1
        return EngineRun(_outcome(workload, [v + float(self.level[i]) for v in logs], self.trials), None)


class SimCache:
    """Builds nothing: release i's build is the folder /sim/i (and its flags need no check)."""

    def __init__(self, *_: Any, **__: Any) -> None:
        pass

    def get(self, source: str, cmake_flags: Sequence[str] = (), targets: Sequence[str] = ()) -> EngineBuild:
        i = source.rsplit("/", 1)[1]
        return EngineBuild(source, f"/sim/{i}", f"sim{i}", None, int(i), (), "", ("CPU",), ("llama-bench",))

    def check_arm(self, *_: Any, **__: Any) -> None:
        return None


ENGINE = SimEngine()


def install() -> None:
    """The simulated kind behind engine_for, and the cache behind the scan's Judge."""
    mod = types.ModuleType("tokensleuth.engines.simulated")
    mod.ENGINE = ENGINE  # type: ignore[attr-defined]
    sys.modules[mod.__name__] = mod
    engines.KINDS["sim"] = "simulated"
    judge_mod.BuildCache = SimCache  # type: ignore[assignment,attr-defined]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--scans", type=int, default=20)
    ap.add_argument("--releases", type=int, default=60)
    ap.add_argument("--steps", type=int, default=2)
    ap.add_argument("--band", type=float, default=0.05)
    ap.add_argument("--max-pairs", type=int, default=20)
    ap.add_argument("--processes", type=Path, default=H200)
    ap.add_argument("--design", default="separate")
    ap.add_argument("--workload", default="tg32")
    a = ap.parse_args()
    install()
    rows = [json.loads(ln) for ln in a.processes.read_text().splitlines() if ln.strip()]
    tokens = int(a.workload[2:])
    ENGINE.procs = Processes([[[math.log(tokens / (ns / 1e9)) for ns in r["samples_ns"]] for r in p["rows"]]
                              for p in rows if p["label"] == "aa" and p["design"] == a.design
                              and p["workload"] == a.workload])
    print(f"{a.releases} releases, {a.steps} planted steps of 3-10% per history (none in every fourth), band "
          f"±{a.band:.0%}, --max-pairs {a.max_pairs}; processes: {len(ENGINE.procs.logs)} of {a.processes.name} "
          f"({a.design}, {a.workload})")
    rng = np.random.default_rng(43)
    ENGINE.rng = rng
    tot = {"planted": 0, "found": 0, "false": 0, "undecided": 0, "builds": 0, "trials": 0}
    with tempfile.TemporaryDirectory(dir="/dev/shm" if Path("/dev/shm").is_dir() else None) as td:
        model = Path(td) / "m.gguf"
        model.write_bytes(b"GGUF")
        for k in range(a.scans):
            n_steps = 0 if k % 4 == 3 else a.steps
            at = sorted(int(x) for x in rng.choice(np.arange(2, a.releases - 1), size=n_steps, replace=False))
            sizes = rng.uniform(0.03, 0.10, size=n_steps) * rng.choice([-1, 1], size=n_steps)
            steps = dict(zip(at, (math.log1p(float(s)) for s in sizes), strict=True))
            ENGINE.level = np.cumsum([steps.get(i, 0.0) for i in range(a.releases)])
            ENGINE.trials = 0
            cands = [Candidate(f"r{i}", f"bin:/sim/{i}") for i in range(a.releases)]
            spec = {"models": [str(model)], "control_models": [], "workloads": [a.workload], "band": a.band,
                    "max_pairs": a.max_pairs, "cmake": [], "flags": [], "timeout_s": 60.0, "samples": 8,
                    "rounds": 2, "max_gap": 32, "budget": None, "kind": "sim"}
            t0 = time.monotonic()
            with Store(Path(td) / f"scan{k}.db") as store:
                res = run_scan(store, cands, spec)
            named = {int(s["first_bad"][1:]) for s in res["steps"]}
            found = len(named & set(steps))
            false = len(named - set(steps))
            tot["planted"] += len(steps)
            tot["found"] += found
            tot["false"] += false
            tot["undecided"] += len(res["undecided"])
            tot["builds"] += int(res["builds"])
            tot["trials"] += ENGINE.trials
            print(f"scan {k:2d}: planted {', '.join(f'r{i} {math.expm1(v):+.1%}' for i, v in steps.items()) or '-':28s}"
                  f" found {found}, false {false} ({', '.join(f'r{i}' for i in sorted(named - set(steps))) or '-'}),"
                  f" undecided {len(res['undecided'])}, builds {res['builds']}, trials {ENGINE.trials}, "
                  f"{time.monotonic() - t0:.0f} s", flush=True)
    print(f"\ntotal: {tot['found']} of {tot['planted']} planted steps found, {tot['false']} false steps, "
          f"{tot['undecided']} intervals undecided, {tot['builds'] / a.scans:.1f} builds and "
          f"{tot['trials'] / a.scans:.0f} trials a scan")


if __name__ == "__main__":
    main()
