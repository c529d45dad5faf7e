"""The memory guard's prediction against what llama.cpp reports it allocated, per place.

For each model and -ngl: one short llama-bench run with -v (its load log: model, KV and
compute buffers per device), parsed by engines/placement.py, against memory.predict for the
same flags. Host = CPU, CPU_Mapped and CUDA_Host buffers; gpu = the device's.

    .venv/bin/python bench/memory_fit.py --bench BIN/llama-bench --model M [--model M2] \\
        [--ngl 99 --ngl 24 --ngl 0] [--gpu] [-- extra llama-bench flags]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

from tokensleuth.engines.llamabench.settings import settings_from_flags
from tokensleuth.engines.placement import parse_load_log
from tokensleuth.trials.memory import MIB, predict


def place(buffer: str) -> str:
    return "host" if buffer.startswith("CPU") or buffer.endswith("_Host") else "gpu"


def main() -> None:
    argv = sys.argv[1:]
    extra = argv[argv.index("--") + 1:] if "--" in argv else []
    ap = argparse.ArgumentParser()
    ap.add_argument("--bench", required=True)
    ap.add_argument("--model", action="append", required=True)
    ap.add_argument("--ngl", action="append", default=[])
    ap.add_argument("--gpu", action="store_true")
    args = ap.parse_args(argv[:argv.index("--")] if "--" in argv else argv)
    tests = ["-p", "512", "-n", "0"]
    print(f"{'model':18s} {'ngl':>4s} {'place':5s} {'pred MiB':>10s} {'got MiB':>10s} {'error':>7s}   "
          "(weights / KV / compute, got)")
    for m in args.model:
        for ngl in args.ngl or [None]:
            flags = [*tests, *extra, *(["-ngl", ngl] if ngl is not None else [])]
            p = subprocess.run([args.bench, "-m", m, *flags, "-r", "1", "-v", "-o", "jsonl"], capture_output=True,
                               text=True, timeout=900)
            if p.returncode != 0:
                print(f"{Path(m).name}: llama-bench exited {p.returncode}: {p.stderr[-300:]}")
                continue
            got = parse_load_log(p.stderr)
            need = predict(Path(m), settings_from_flags(flags, []), gpu=args.gpu)
            parts: dict[str, list[float]] = {}
            for i, d in enumerate((got.model_mib, got.kv_mib, got.compute_mib)):
                for buf, mib in d.items():
                    parts.setdefault(place(buf), [0.0, 0.0, 0.0])[i] += mib
            for where in sorted(set(parts) | set(need.places())):
                pred = (need.total(where) + (need.weights_mapped if where == "host" else 0)) / MIB
                g = sum(parts.get(where, [0.0]))
                err = (pred - g) / g if g else float("nan")
                guard = pred + need.margin(where, args.gpu) / MIB  # what the guard holds against free memory
                gerr = (guard - g) / g if g else float("nan")
                w, k, c = parts.get(where, [0.0, 0.0, 0.0])
                print(f"{Path(m).name[:18]:18s} {ngl or '-':>4s} {where:5s} {pred:10.1f} {g:10.1f} {err:+7.1%} "
                      f"guard {gerr:+7.1%}   ({w:.1f} / {k:.1f} / {c:.1f})", flush=True)


if __name__ == "__main__":
    main()
