"""How often llama-perplexity's statistics are lost at exit (llama.cpp's logger thread is never
flushed: ggml-org/llama.cpp#22142), without and with tokensleuth's exit drain
(engines/exitdrain.py), and what the drain costs a run on a quiet machine.

Each run is one real ``--kl-divergence`` run of the default engine on the tiny llama model
(4 chunks, 2 threads), pinned to one core beside a busy process pinned there too. The engine
is started two ways: in this script's session (the scheduler groups a session's threads with
the busy one's, as it does for every process of a machine whose tests run in one cgroup) and
through run_process (a session of its own).

    .venv/bin/python bench/lost_tail.py [--runs 20]
    python3 bench/lost_tail.py --cmake -DGGML_CUDA=ON --model big.gguf --flags "-ngl 99" --quiet-only
        (bench/device_drain.sh: what the drain costs a GPU run, where the CUDA runtime has threads)
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import tiny_model

from tokensleuth.core.errors import EngineError
from tokensleuth.engines import exitdrain
from tokensleuth.engines import perplexity as ppl
from tokensleuth.engines.proc import run_process
from tokensleuth.sources import DEFAULT_ENGINE
from tokensleuth.sources.build import BuildCache
from tokensleuth.trials.outputs import CHECK_TARGETS, write_corpus


def run_once(argv: list[str], env: dict[str, str], own_session: bool) -> tuple[bool, float]:
    """(statistics printed, wall seconds) of one run."""
    t = time.monotonic()
    if own_session:
        r = run_process(argv, env=env)
        text = r.text("out") + r.text("err")
    else:
        p = subprocess.run(argv, env={**os.environ, **env}, capture_output=True, text=True)
        text = p.stdout + p.stderr
    wall = time.monotonic() - t
    try:
        ppl.parse_kld(text)
        return True, wall
    except EngineError:
        return False, wall


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--cmake", action="append", default=[], help="CMake flag of the engine build (repeatable)")
    ap.add_argument("--model", help="GGUF file (default: the tiny llama model)")
    ap.add_argument("--flags", default="", help="more llama-perplexity flags, e.g. '-ngl 99'")
    ap.add_argument("--quiet-only", action="store_true", help="only the cost on a quiet machine")
    a = ap.parse_args()
    engine = BuildCache().get(DEFAULT_ENGINE, a.cmake, targets=CHECK_TARGETS)
    model = a.model or str(tiny_model(engine, "llama"))
    drain = exitdrain.env()
    if not drain:
        sys.exit("the exit drain library could not be built (no C compiler?)")
    settings = ppl.KldSettings(threads=2)
    binary = engine.binary(ppl.BINARY)
    with tempfile.TemporaryDirectory() as d:
        wd = Path(d)
        corpus = write_corpus(wd)
        base = wd / "base.kld"
        flags = a.flags.split()
        subprocess.run(ppl.base_argv(binary, model, corpus, base, settings, flags), capture_output=True, check=True)
        argv = ppl.kld_argv(binary, model, corpus, base, settings, flags)

        print(f"llama-perplexity --kl-divergence, {model.rsplit('/', 1)[-1]}, 4 chunks, -t 2 {a.flags}; "
              f"{a.runs} runs each")
        print("quiet machine, own session: median wall per run")
        for name, env in (("without the drain", {}), ("with the drain", drain)):
            walls = [run_once(argv, env, True)[1] for _ in range(a.runs)]
            print(f"  {name:18} {statistics.median(walls) * 1000:7.1f} ms")
        if a.quiet_only:
            return

        cpu = max(os.sched_getaffinity(0))
        mine = os.sched_getaffinity(0)
        spinner = subprocess.Popen([sys.executable, "-c", "while 1: pass"],
                                   preexec_fn=lambda: os.sched_setaffinity(0, {cpu}))
        try:
            os.sched_setaffinity(0, {cpu})
            print(f"on core {cpu} beside a busy process: runs whose statistics were lost")
            for session, own in (("this session", False), ("own session", True)):
                for name, env in (("without the drain", {}), ("with the drain", drain)):
                    lost = sum(not run_once(argv, env, own)[0] for _ in range(a.runs))
                    print(f"  {session:12} {name:18} {lost:3d} of {a.runs}")
        finally:
            os.sched_setaffinity(0, mine)
            spinner.kill()
            spinner.wait()


if __name__ == "__main__":
    main()
