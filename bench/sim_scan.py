"""The real scan on simulated histories: what it finds, what it calls falsely, what it builds.

Each history has ``--releases`` releases and ``--steps`` planted steps (3-10% either way, at
random releases), or none. Behind the engine seam stands a simulated llama-bench (an engine
kind registered for this script): a trial of release i is a real process drawn whole from
measured ones (its level, its repetitions with the cold first one, its tails: the H200's A/A
processes of the 30B shape, or this machine's, bench/inprocess_aa.py) times the release's true
level. Builds come from a cache that makes none (a release's "build" is its index). Everything
else is the real code: ``tokensleuth.drivers.hunts.scan.run_scan`` — its sample, level rounds, step fit,
verdicts by the real compare driver, splits, bisects and budget — in a real store.

A planted step is found when a step of the scan names its release (first_bad); a false step is
one named where none was planted. Printed per history: planted, found, false, undecided
intervals, builds (releases measured), trials; then the totals.

    .venv/bin/python bench/sim_scan.py [--scans 20] [--releases 60] [--steps 2] [--band 0.05]
        [--processes FILE.jsonl --design separate --workload tg32 --label aa]
        [--step-min 0.03 --step-max 0.10 --neutral-every 4] [--auto-band] [--before] [--independent]

``--auto-band``: the band is not given (the scan uses what its noise resolves where that is wider,
drivers/hunts/scan/resolve.py); ``--before``: the scan as before issue 43's change (the band as given,
and every interval undecided after its pairs split), for the figures beside it.
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

import tokensleuth.drivers.verdicts.judge as judge_mod
import tokensleuth.engines as engines
from tokensleuth.drivers.hunts.scan import run_scan
from tokensleuth.engines.base import ArmRuntime, EngineRun, NoFlags
from tokensleuth.engines.llamabench import argv as bench_argv
from tokensleuth.sources.build import EngineBuild
from tokensleuth.sources.history import Candidate
from tokensleuth.store import Store


class SimEngine(NoFlags):
    """llama-bench as the scan sees it: a trial of release i (its build's folder /sim/i) is a
    measured process drawn whole, at that release's true level."""

    kind = "sim"
    targets = ("llama-bench",)
    attaches = False
    builds = True
    reps_per_process = True
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
        self.order = True  # draw the processes in their measured order (--independent: each at random)
        self.at = 0

    def check(self, arm: ArmRuntime, workloads: Sequence[str]) -> None:
        return None

    def run_trial(self, arm: ArmRuntime, model: str, workload: str, argv: Sequence[str], *,
                  timeout_s: float | None, probe: Any, host_env: dict[str, Any]) -> EngineRun:
        assert self.procs is not None and arm.bin_dir is not None
        i = int(Path(arm.bin_dir).name)
        # the measured processes in the order they ran, from a random place in each scan (wrapping
        # round): the spells in which the machine is noisy come along, as in sim_compare's studies
        if self.trials == 0 or self.order:
            if self.trials == 0:
                self.at = int(self.rng.integers(len(self.procs.logs)))
            (logs,) = self.procs.draw(self.rng, _reps(argv, arm.flags), self.at if self.order else None)[:1]
            self.at += 1
        else:
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
    ap.add_argument("--label", default="aa", help="the processes' label in the file (tiny-pairing: aa-llama, …)")
    ap.add_argument("--step-min", type=float, default=0.03)
    ap.add_argument("--step-max", type=float, default=0.10)
    ap.add_argument("--neutral-every", type=int, default=4, help="every n-th history has no step (0: none)")
    ap.add_argument("--auto-band", action="store_true", help="the band not given: the noise may widen it")
    ap.add_argument("--before", action="store_true", help="the split rule and band of before issue 43")
    ap.add_argument("--independent", action="store_true",
                    help="draw each process at random (the default draws them in their measured order)")
    ap.add_argument("--seed", type=int, default=43)
    a = ap.parse_args()
    install()
    if a.before:  # every undecided interval split, the band as given: the scan before issue 43
        import tokensleuth.drivers.hunts.scan.refine as refine_mod

        setattr(refine_mod, "split_limit", lambda noise: None)  # noqa: B010 - the old rule, for the figures
    rows = [json.loads(ln) for ln in a.processes.read_text().splitlines() if ln.strip()]
    tokens = int(a.workload[2:])
    ENGINE.procs = Processes([[[math.log(tokens / (ns / 1e9)) for ns in r["samples_ns"]] for r in p["rows"]]
                              for p in rows if p["label"] == a.label and p["design"] == a.design
                              and p["workload"] == a.workload])
    lv = [float(np.mean([x for inst in p for x in inst])) for p in ENGINE.procs.logs]
    print(f"{a.releases} releases, {a.steps} planted steps of {a.step_min:.0%}-{a.step_max:.0%} per history"
          + (f" (none in every {a.neutral_every}th)" if a.neutral_every else "")
          + f", band ±{a.band:.0%} {'not given (auto)' if a.auto_band else 'given'}, --max-pairs {a.max_pairs}"
          + (", BEFORE issue 43's change" if a.before else "")
          + f"; processes: {len(ENGINE.procs.logs)} of {a.processes.name} ({a.label}, {a.design}, {a.workload}; "
          f"between-process sd of log t/s {np.std(lv, ddof=1):.1%})")
    rng = np.random.default_rng(a.seed)
    ENGINE.rng = rng
    ENGINE.order = not a.independent
    tot = {"planted": 0, "found": 0, "false": 0, "undecided": 0, "builds": 0, "trials": 0, "same": 0, "wall": 0.0}
    with tempfile.TemporaryDirectory(dir="/dev/shm" if Path("/dev/shm").is_dir() else None) as td:
        model = Path(td) / "m.gguf"
        model.write_bytes(b"GGUF")
        for k in range(a.scans):
            n_steps = 0 if a.neutral_every and k % a.neutral_every == a.neutral_every - 1 else a.steps
            at = sorted(int(x) for x in rng.choice(np.arange(2, a.releases - 1), size=n_steps, replace=False))
            sizes = rng.uniform(a.step_min, a.step_max, size=n_steps) * rng.choice([-1, 1], size=n_steps)
            steps = dict(zip(at, (math.log1p(float(s)) for s in sizes), strict=True))
            ENGINE.level = np.cumsum([steps.get(i, 0.0) for i in range(a.releases)])
            ENGINE.trials = 0
            cands = [Candidate(f"r{i}", f"bin:/sim/{i}") for i in range(a.releases)]
            spec = {"models": [str(model)], "control_models": [], "workloads": [a.workload], "band": a.band,
                    "max_pairs": a.max_pairs, "cmake": [], "flags": [], "timeout_s": 60.0, "samples": 8,
                    "rounds": 2, "max_gap": 32, "budget": None, "kind": "sim",
                    "band_given": not a.auto_band or a.before}
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
            tot["same"] += len(res["same"])
            wall = time.monotonic() - t0
            tot["wall"] += wall
            undec = sorted(res["undecided"], key=lambda u: int(u["from"][1:]))
            near = {u["from"] + ".." + u["to"] for u in undec if any(int(u["from"][1:]) < i <= int(u["to"][1:])
                                                                    for i in steps)}
            noise = res.get("noise") or {}
            print(f"scan {k:2d}: planted {', '.join(f'r{i} {math.expm1(v):+.1%}' for i, v in steps.items()) or '-'}"
                  f"\n   found {found}, false {false} ({', '.join(f'r{i}' for i in sorted(named - set(steps))) or '-'}),"
                  f" same {len(res['same'])}, undecided {len(res['undecided'])} "
                  f"({', '.join(u['from'] + '..' + u['to'] + ('*' if u['from'] + '..' + u['to'] in near else '') for u in undec) or '-'}),"
                  f" builds {res['builds']}, trials {ENGINE.trials}, {wall:.0f} s; band used ±{res['band']:.1%}, "
                  + (f"resolvable ±{noise['resolvable_band']:.1%} (pair sd {noise['pair_sd']:.1%})"
                     if noise.get("resolvable_band") is not None else "resolvable -"), flush=True)
    print(f"\ntotal: {tot['found']} of {tot['planted']} planted steps found, {tot['false']} false steps, "
          f"{tot['undecided']} intervals undecided (* above: a planted step inside), {tot['same']} same; "
          f"{tot['builds'] / a.scans:.1f} builds and {tot['trials'] / a.scans:.0f} trials a scan, "
          f"{tot['wall'] / a.scans:.0f} s wall a scan")


if __name__ == "__main__":
    main()
