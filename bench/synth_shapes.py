"""Synthesis time and peak memory of every real-size shape and quant, here.

Each model is written by `tokensleuth model synth --shape NAME --quant Q` in a process of its
own (wall time, and its peak RSS from wait4), into OUT_DIR, then deleted. Its size is known
first from a sparse write (the header and a hole: tokensleuth.models.shapes.write_shape's
``sparse``); a model that would not fit on OUT_DIR's disk with 2 GB to spare is skipped, and
the line says so.

    .venv/bin/python bench/synth_shapes.py [OUT_DIR] [--shape NAME ...]
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

from tokensleuth.models.shapes import DIRECT_QUANTS, REAL_SHAPES, write_shape
from tokensleuth.sources import DEFAULT_ENGINE
from tokensleuth.sources.build import BuildCache

SPARE = 2 << 30


def quants(shape: str) -> list[str]:
    return [q for q in DIRECT_QUANTS if q != "MXFP4" or REAL_SHAPES[shape].n_expert]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("out_dir", nargs="?", default=tempfile.gettempdir())
    ap.add_argument("--shape", action="append", default=[])
    a = ap.parse_args()
    out_dir = Path(a.out_dir)
    tree = BuildCache().llama_tree(DEFAULT_ENGINE)
    tool = str(Path(sys.executable).with_name("tokensleuth"))
    print(f"{'shape':15} {'quant':6} {'GB':>7} {'wall s':>7} {'GB/s':>6} {'peak RSS MiB':>12}")
    for shape in a.shape or list(REAL_SHAPES):
        for q in quants(shape):
            out = out_dir / f"synth-{shape}-{q}.gguf"
            write_shape(shape, out, q, tree, sparse=True)
            size = out.stat().st_size
            out.unlink()
            free = shutil.disk_usage(out_dir).free
            if size + SPARE > free:
                print(f"{shape:15} {q:6} {size / 1e9:7.2f}  skipped: needs {size / 1e9:.1f} GB, "
                      f"{free / 1e9:.1f} GB free on {out_dir}")
                continue
            t0 = time.monotonic()
            p = subprocess.Popen([tool, "model", "synth", "--shape", shape, "--quant", q, "--out", str(out)],
                                 stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
            _, status, usage = os.wait4(p.pid, 0)
            wall = time.monotonic() - t0
            err = p.stderr.read().decode() if p.stderr else ""
            ok = os.waitstatus_to_exitcode(status) == 0 and out.exists() and out.stat().st_size == size
            out.unlink(missing_ok=True)
            if not ok:
                print(f"{shape:15} {q:6} {size / 1e9:7.2f}  FAILED: {err.strip().splitlines()[-1:]}")
                continue
            print(f"{shape:15} {q:6} {size / 1e9:7.2f} {wall:7.1f} {size / 1e9 / wall:6.2f} "
                  f"{usage.ru_maxrss / 1024:12.0f}", flush=True)


if __name__ == "__main__":
    main()
