#!/usr/bin/env python3
"""CPU milliseconds of one llama-bench process on the tiny models at three vocabulary sizes
(llama-spm's 32,000 tokens, its first 4,096 and its first 1,024: `model synth --vocab-size`), for
the workloads the suite runs: the load alone (one token, no warm-up), pp64+tg8 and tg32 -r 5.
The mean of ``--runs`` processes each (the children's user+system time), the default engine, -t 1.

    .venv/bin/python bench/vocab_size_cost.py [--runs 8]
"""

from __future__ import annotations

import argparse
import resource
import subprocess
import sys
import tempfile
from pathlib import Path

from tokensleuth.sources import DEFAULT_ENGINE
from tokensleuth.sources.build import BuildCache

WORKLOADS = {"load only (-n 1, no warm-up)": ["-p", "0", "-n", "1", "-r", "1", "--no-warmup"],
             "pp64+tg8 -r 2": ["-p", "64", "-n", "8", "-r", "2"],
             "tg32 -r 5": ["-p", "0", "-n", "32", "-r", "5"]}


def cpu_ms(argv: list[str], runs: int) -> float:
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    for _ in range(runs):
        subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (r1.ru_utime + r1.ru_stime - r0.ru_utime - r0.ru_stime) / runs * 1e3


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=8)
    args = ap.parse_args()
    bench = str(Path(BuildCache().get(DEFAULT_ENGINE).bin_dir) / "llama-bench")
    tool = str(Path(sys.executable).parent / "tokensleuth")
    print("| model | tokens | " + " | ".join(WORKLOADS) + " |")
    print("| --- | ---: | " + " | ".join("---:" for _ in WORKLOADS) + " |")
    with tempfile.TemporaryDirectory() as tmp:
        for arch in ("llama", "qwen3moe"):
            for size in (None, 4096, 1024):
                m = Path(tmp) / f"{arch}-{size}.gguf"
                subprocess.run([tool, "model", "synth", "--arch", arch, "--vocab", "llama-spm", "--out", str(m),
                                *(["--vocab-size", str(size)] if size else [])], check=True, capture_output=True)
                cells = [cpu_ms([bench, "-m", str(m), *w, "-t", "1", "-o", "json"], args.runs) for w in WORKLOADS.values()]
                print(f"| {arch} tiny Q8_0 | {size or 32000:,} | " + " | ".join(f"{c:.1f} ms" for c in cells) + " |")


if __name__ == "__main__":
    main()
