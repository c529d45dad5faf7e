"""Synthesis time and peak memory of Qwen3-30B-A3B's shape in the K- and i-quant mixes, here.

Each model is written by `tokensleuth model synth --shape SHAPE --quant Q` in a process of its
own (wall time, and its peak RSS from wait4) into a temporary folder under OUT_DIR, its quant
mix read from its header, then deleted. Its size is known first from a sparse write (the header
and a hole); a model that would not fit on OUT_DIR's disk with 2 GB to spare is skipped, and
the line says so. Q8_0 is written too, as the reference the direct writer had before.

    .venv/bin/python bench/kquant_synth.py [OUT_DIR] [--shape qwen3-30b-a3b] [--quant Q ...]
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tokensleuth.models.info import model_info
from tokensleuth.models.shapes import write_shape
from tokensleuth.sources import DEFAULT_ENGINE
from tokensleuth.sources.build import BuildCache

SPARE = 2 << 30


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("out_dir", nargs="?", default=tempfile.gettempdir())
    ap.add_argument("--shape", default="qwen3-30b-a3b")
    ap.add_argument("--quant", action="append", default=[])
    a = ap.parse_args()
    tree = BuildCache().llama_tree(DEFAULT_ENGINE)
    tool = str(Path(sys.executable).with_name("tokensleuth"))
    print(f"{a.shape}, {os.cpu_count()} cores, {a.out_dir}")
    print(f"{'quant':7} {'GB':>6} {'wall s':>7} {'GB/s':>5} {'peak RSS MiB':>12}  mix (GiB)")
    with tempfile.TemporaryDirectory(dir=a.out_dir) as td:
        for q in a.quant or ["Q6_K", "Q4_K_M", "IQ4_XS", "Q8_0"]:
            out = Path(td) / f"{a.shape}-{q}.gguf"
            write_shape(a.shape, out, q, tree, sparse=True)
            size = out.stat().st_size
            out.unlink()
            free = shutil.disk_usage(td).free
            if size + SPARE > free:
                print(f"{q:7} {size / 1e9:6.2f}  skipped: needs {size / 1e9:.1f} GB, {free / 1e9:.1f} GB free")
                continue
            t0 = time.monotonic()
            p = subprocess.Popen([tool, "model", "synth", "--shape", a.shape, "--quant", q, "--out", str(out)],
                                 stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
            _, status, usage = os.wait4(p.pid, 0)
            wall = time.monotonic() - t0
            err = p.stderr.read().decode() if p.stderr else ""
            ok = os.waitstatus_to_exitcode(status) == 0 and out.exists() and out.stat().st_size == size
            mix = model_info(out).quant_mix if ok else {}
            out.unlink(missing_ok=True)
            if not ok:
                print(f"{q:7} {size / 1e9:6.2f}  FAILED: {err.strip().splitlines()[-1:]}")
                continue
            shares = ", ".join(f"{k} {v / 2**30:.2f}" for k, v in sorted(mix.items(), key=lambda kv: -kv[1]))
            # ru_maxrss is in KiB on Linux
            print(f"{q:7} {size / 1e9:6.2f} {wall:7.1f} {size / 1e9 / wall:5.2f} {usage.ru_maxrss / 1024:12.0f}  {shares}",
                  flush=True)


if __name__ == "__main__":
    main()
