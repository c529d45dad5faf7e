"""False alarms of A/A studies run beside a correlated load, with and without the confounder
rule (comparisons.guard): the same stored studies, read as compare says them ("said") and as
bisect, decompose and scan decide on them ("wait").

Each study is a real A/A compare of the default engine (tiny dense model, pp128, -t 2 on this
machine's CPUs, or --threads; ±5%, 5 pairs then 10), run beside another llama-bench that a loop starts and
stops on its own schedule (busy for 2-6 s, then idle for 2-6 s, drawn at random): whichever
trials it lands on run slower, and the monitor names it (busy-process). A false alarm is a
`slower` or `faster` verdict; with the rule, a verdict the clean pairs do not give too waits.

    .venv/bin/python bench/confounded_aa.py [--studies 8] [--threads 2] [--db /tmp/confounded.sqlite]
"""

from __future__ import annotations

import argparse
import os
import random
import subprocess
import threading
import time
from pathlib import Path

from _common import default_engine, tiny_model

from tokensleuth.drivers.verdicts.comparisons import analyze
from tokensleuth.drivers.verdicts.pairs import run_compare
from tokensleuth.store import Store
from tokensleuth.trials.spec import build_compare_spec


def load_loop(bench: Path, model: Path, stop: threading.Event, seed: int) -> None:
    """Another llama-bench, on and off on a schedule of its own."""
    rng = random.Random(seed)
    while not stop.is_set():
        p = subprocess.Popen([str(bench), "-m", str(model), "-p", "512", "-n", "0", "-r", "1000", "-t", "1"],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        stop.wait(rng.uniform(2, 6))
        p.kill()
        p.wait()
        stop.wait(rng.uniform(2, 6))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--studies", type=int, default=8)
    ap.add_argument("--db", type=Path, default=Path("/tmp/confounded.sqlite"))
    ap.add_argument("--threads", type=int, default=2, help="the engine's -t (2: every CPU of this machine)")
    a = ap.parse_args()
    rev = subprocess.run(["git", "describe", "--always", "--dirty"], capture_output=True, text=True).stdout.strip()
    print(f"# .venv/bin/python bench/confounded_aa.py --studies {a.studies} --threads {a.threads} at {rev}, "
          f"{time.strftime('%Y-%m-%dT%H:%MZ', time.gmtime())}, {os.cpu_count()} CPUs", flush=True)
    engine = default_engine()
    model = tiny_model(engine, "llama")
    bench = Path(engine.bin_dir) / "llama-bench"
    rows = []
    with Store(a.db) as store:
        for i in range(a.studies):
            spec = build_compare_spec({"arms": [{"name": "a", "source": engine.source,
                                                 "env": {"TOKENSLEUTH_MEASUREMENT": f"confounded-{i}-t{a.threads}"}},
                                                {"name": "b", "source": engine.source,
                                                 "env": {"TOKENSLEUTH_MEASUREMENT": f"confounded-{i}-t{a.threads}"}}],
                                       "models": [str(model)], "workloads": ["pp128"], "band": 0.05,
                                       "max_pairs": 10, "common_flags": ["-t", str(a.threads), "-r", "3"],
                                       "separate_processes": True}, "bench")
            stop = threading.Event()
            loop = threading.Thread(target=load_loop, args=(bench, model, stop, i), daemon=True)
            loop.start()
            try:
                sid, _ = run_compare(store, spec, {"a": engine, "b": engine}, resume=True, create=True)
            finally:
                stop.set()
                loop.join()
            (said,) = analyze(store, sid, spec)
            (waits,) = analyze(store, sid, spec.model_copy(update={"confounders": "wait"}))
            rows.append((sid, said, waits))
            e = said.estimate
            print(f"study {i + 1} {sid}: {said.pairs} pairs, said {said.verdict}"
                  + (f" {e.ratio:.3f} [{e.lo:.3f}, {e.hi:.3f}]" if e else "")
                  + f"; confounded pairs {said.confounded or 'none'}; with the rule: {waits.verdict}"
                  + (" (waits)" if waits.steered else ""), flush=True)
            time.sleep(1)
    n = len(rows)
    said_false = sum(s.verdict in ("slower", "faster") for _, s, _ in rows)
    wait_false = sum(w.verdict in ("slower", "faster") for _, _, w in rows)
    print(f"{n} A/A studies beside a correlated load: false alarms {said_false} of {n} as said, "
          f"{wait_false} of {n} with the rule; confounded studies {sum(bool(s.confounded) for _, s, _ in rows)}")


if __name__ == "__main__":
    main()
