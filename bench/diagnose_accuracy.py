"""How often the diagnosis names a planted noise source, and what the threads fix buys here.

Each run is a real A/A compare (the default engine against itself, tiny dense model, tg128,
-r 5, a fixed number of pairs at a ±0.1% band, so it ends unresolved) with one noise source
planted, and the diagnosis's first finding is checked against it:

- ``busy``:    -t 1 beside a process that keeps a core busy           -> busy-process
- ``threads``: the engine's threads = the CPUs it may use, machine quiet -> threads
- ``stall``:   -t 1; every ~2 s the engine is stopped for 1 s            -> stall
- ``drift``:   -t 1; the engine is duty-cycled (SIGSTOP/SIGCONT every
               10 ms) with a stopped share growing from 0 to 50%         -> drift

Then the figure the prescription rests on: pairs for ±2% at the default threads and at one
thread fewer, each from an A/A of its own (doctor.run_aa), on the quiet machine.

    .venv/bin/python bench/diagnose_accuracy.py [--pairs 8] [--plan busy,busy,threads,...]
"""

from __future__ import annotations

import argparse
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil
from _common import default_engine, tiny_model

from tokensleuth.drivers import doctor
from tokensleuth.drivers.verdicts import causes, diagnose
from tokensleuth.drivers.verdicts.pairs import run_compare
from tokensleuth.store import Store
from tokensleuth.trials.spec import build_compare_spec

PLAN = ["busy", "threads", "stall", "drift", "busy", "threads", "stall", "drift", "busy", "stall"]
WANT = {"busy": "busy-process", "threads": "threads", "stall": "stall", "drift": "drift"}


def engines() -> list[psutil.Process]:
    me = psutil.Process()
    return [p for p in me.children(recursive=True) if p.name() == "llama-bench"]


class Plant(threading.Thread):
    """Stops and continues the engine processes this script started."""

    def __init__(self, kind: str, processes: int) -> None:
        super().__init__(daemon=True)
        self.kind, self.processes, self.done = kind, processes, threading.Event()
        self.seen: set[int] = set()

    def signal_all(self, sig: int) -> None:
        for p in engines():
            self.seen.add(p.pid)
            try:
                p.send_signal(sig)
            except psutil.Error:
                pass

    def run(self) -> None:
        while not self.done.is_set():
            if self.kind == "stall":
                if self.done.wait(1.0):
                    break
                self.signal_all(signal.SIGSTOP)
                time.sleep(1.0)
                self.signal_all(signal.SIGCONT)
            elif self.kind == "drift":
                # grows with the study: the share of its processes started so far
                share = min(0.5, 0.5 * len(self.seen) / self.processes)
                self.signal_all(signal.SIGSTOP)
                time.sleep(0.01 * share)
                self.signal_all(signal.SIGCONT)
                time.sleep(0.01 * (1 - share))
        self.signal_all(signal.SIGCONT)


def one(kind: str, build: object, model: Path, pairs: int, cpus: int) -> causes.Diagnosis:
    threads = cpus if kind == "threads" else 1
    spec = build_compare_spec({"arms": [{"name": "a", "source": build.source},  # type: ignore[attr-defined]
                                        {"name": "b", "source": build.source}],  # type: ignore[attr-defined]
                               "models": [str(model)], "workloads": ["tg128"], "min_pairs": pairs, "max_pairs": pairs,
                               "band": 0.001, "common_flags": ["-r", "5", "-t", str(threads)]}, "bench")
    busy = None
    if kind == "busy":
        exe = Path(tempfile.mkdtemp()) / "tsbusy"
        exe.symlink_to(sys.executable)
        busy = subprocess.Popen([str(exe), "-c", "while 1: pass"])
    plant = Plant(kind, 2 * pairs)
    if kind in ("stall", "drift"):
        plant.start()
    try:
        with tempfile.TemporaryDirectory() as td, Store(Path(td) / "s.sqlite") as store:
            sid, _ = run_compare(store, spec, {"a": build, "b": build})  # type: ignore[dict-item]
            return causes.classify(diagnose.load_procs(store, sid), cpus)
    finally:
        plant.done.set()
        if plant.is_alive():
            plant.join()
        if busy is not None:
            busy.kill()
            busy.wait()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--pairs", type=int, default=8)
    ap.add_argument("--plan", default=",".join(PLAN))
    ap.add_argument("--no-threads-figure", action="store_true")
    args = ap.parse_args()
    build = default_engine()
    model = tiny_model(build, "llama")
    cpus = diagnose.allowed_cpus()
    right = 0
    plan = args.plan.split(",")
    for i, kind in enumerate(plan, 1):
        t0 = time.monotonic()
        d = one(kind, build, model, args.pairs, cpus)
        ok = d.cause == WANT[kind]
        right += ok
        print(f"{i:2d}. planted {kind:8s} -> {d.cause:13s} {'right' if ok else 'WRONG'}  "
              f"[{', '.join(d.codes())}]  ({time.monotonic() - t0:.0f} s)", flush=True)
    print(f"diagnosis right in {right} of {len(plan)}")
    if args.no_threads_figure:
        return
    if cpus < 2:
        print("one CPU: no thread fewer to measure")
        return
    base = doctor.run_aa(build, model)
    fewer = doctor.run_aa(build, model, ["-t", str((base.threads or cpus) - 1)])
    print(base.line())
    print(fewer.line())
    print(f"pairs for ±2%: {base.pairs_needed[0.02]} at the default {base.threads} threads, "
          f"{fewer.pairs_needed[0.02]} at {fewer.threads}")


if __name__ == "__main__":
    main()
