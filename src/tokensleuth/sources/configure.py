"""What a build is configured with: the CMake options, targets and backends, this host's own
flags, the compiler, the build tools, the compiler cache (ccache, sccache) and its environment,
and the keys a build is found by (the cache's content key, a build directory's family).

Functions of the flags, the environment and the machine: nothing here runs a build
(:mod:`tokensleuth.sources.compile` does, with what is settled here).
"""

from __future__ import annotations

import hashlib
import json
import mmap
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

DEFAULT_TARGETS = ("llama-bench", "llama-quantize")
ALL_TARGETS = ("llama-bench", "llama-quantize", "llama-server", "llama-perplexity")
# A target is any llama.cpp tool: an engine kind names the ones it runs (engines.<kind>.targets),
# and a version without one is told by its build (one line), not by a list kept here.
TARGET = re.compile(r"llama-[a-z][a-z0-9-]{0,40}|tokensleuth-profile")
BASE_FLAGS = (
    "-DCMAKE_BUILD_TYPE=Release",
    "-DBUILD_SHARED_LIBS=OFF",  # self-contained binaries that can be copied into the cache
    "-DLLAMA_BUILD_TESTS=OFF",
    "-DLLAMA_BUILD_EXAMPLES=OFF",
    "-DLLAMA_OPENSSL=OFF",
    # llama's sources are built as unity files (src/CMakeLists.txt); by default those #include each
    # source by its absolute path, so a tree in another folder (a worktree, a packed history's clone,
    # a decompose clone) misses the compiler cache for all of libllama. Relative includes (CMake 4.0
    # and later; older ones ignore it) hit it there too.
    "-DCMAKE_UNITY_BUILD_RELOCATABLE=ON",
)


def host_flags(user_flags: Sequence[str], cpuinfo: Path = Path("/proc/cpuinfo")) -> tuple[str, ...]:
    """CMake flags this host needs for a working native CPU build.

    ggml's AMX kernels (compiled in whenever ``-march=native`` sees AMX) segfault
    in the first prompt batch on AMX-capable virtual machines such as this
    project's reference machine, on every quant that has AMX kernels (Q8_0, Q4_K).
    So on AMX hosts the default build turns AMX code generation off; GCC lets an
    explicit ``-mno-*`` win over ``-march=native``. A user who sets their own
    CMAKE_C_FLAGS/CMAKE_CXX_FLAGS, or TOKENSLEUTH_ALLOW_AMX=1, gets no change.
    """
    if os.environ.get("TOKENSLEUTH_ALLOW_AMX") == "1":
        return ()
    if any(f.startswith(("-DCMAKE_C_FLAGS", "-DCMAKE_CXX_FLAGS")) for f in user_flags):
        return ()
    try:
        has_amx = "amx_tile" in cpuinfo.read_text()
    except OSError:
        has_amx = False
    if not has_amx:
        return ()
    no_amx = "-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"
    return (f"-DCMAKE_C_FLAGS={no_amx}", f"-DCMAKE_CXX_FLAGS={no_amx}")


def backends_from_flags(flags: Sequence[str]) -> tuple[str, ...]:
    names = {"GGML_CUDA": "CUDA", "GGML_HIP": "ROCm", "GGML_VULKAN": "Vulkan", "GGML_METAL": "Metal",
             "GGML_SYCL": "SYCL", "GGML_BLAS": "BLAS", "GGML_OPENCL": "OpenCL"}
    found = ["CPU"]
    for f in flags:
        m = re.fullmatch(r"-D(GGML_[A-Z]+)=(ON|1|TRUE|YES)", f, re.IGNORECASE)
        if m and m.group(1).upper() in names:
            found.append(names[m.group(1).upper()])
    return tuple(dict.fromkeys(found))


# a release folder's backend libraries (libggml-cuda.so, ggml-vulkan.dll, …): what it was built with
_BACKEND_LIBS = {"cuda": "CUDA", "hip": "ROCm", "vulkan": "Vulkan", "metal": "Metal", "sycl": "SYCL",
                 "opencl": "OpenCL", "blas": "BLAS"}


# a statically linked program's backends (BUILD_SHARED_LIBS=OFF, as the build cache builds): each
# backend's registration function is in its text (nvcc's HIP builds keep the CUDA names: ROCm first)
# (or, stripped, the vendor runtime's functions it imports)
_BACKEND_MARKS = (("ROCm", b"hipStreamSynchronize"), ("CUDA", b"ggml_backend_cuda_reg"),
                  ("CUDA", b"cudaStreamSynchronize"), ("Vulkan", b"ggml_backend_vk_reg"), ("Vulkan", b"vkCreateInstance"),
                  ("Metal", b"ggml_backend_metal_reg"), ("SYCL", b"ggml_backend_sycl_reg"),
                  ("OpenCL", b"ggml_backend_opencl_reg"), ("BLAS", b"ggml_backend_blas_reg"))


def backends_in(folder: Path, program: str = "llama-bench") -> tuple[str, ...]:
    """The backends a prebuilt folder holds (CPU always): what its build record says where the build
    cache made it (``../build.json``), else its ggml backend libraries, else the backends linked into
    ``program`` itself (a static build has no libraries to list)."""
    record = folder.parent / "build.json"
    try:
        got = json.loads(record.read_text()).get("backends") if record.is_file() else None
    except (OSError, ValueError):
        got = None
    if isinstance(got, list) and got and all(isinstance(b, str) for b in got):
        return tuple(dict.fromkeys(["CPU", *got]))
    found = ["CPU"]
    try:
        names = sorted(p.name.lower() for p in folder.iterdir())
    except OSError:
        names = []
    for n in names:
        m = re.match(r"(?:lib)?ggml-([a-z]+)\.(?:so|dll|dylib)", n)
        if m and m.group(1) in _BACKEND_LIBS:
            found.append(_BACKEND_LIBS[m.group(1)])
    if len(found) == 1:
        found += _linked_backends(folder / program)
    return tuple(dict.fromkeys(found))


def _linked_backends(program: Path) -> list[str]:
    """The backends whose registration symbols (or runtime imports) a program holds."""
    found: list[str] = []
    try:
        with open(program, "rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as data:
            for name, mark in _BACKEND_MARKS:
                if name not in found and data.find(mark) >= 0:
                    found.append(name)
    except (OSError, ValueError):  # (missing, empty or unreadable: bench_help says which, in words)
        return []
    if "ROCm" in found and "CUDA" in found:
        found.remove("CUDA")  # a HIP build compiles ggml-cuda's sources under the CUDA names
    return found


def compiler_id() -> str:
    cc = os.environ.get("CXX") or shutil.which("c++") or shutil.which("g++") or "c++"
    try:
        out = subprocess.run([cc, "--version"], capture_output=True, text=True, timeout=30)
        first = out.stdout.splitlines()[0] if out.stdout else cc
    except OSError:
        first = cc
    return first.strip()


def reuse_build_dirs() -> bool:
    """Keep one build directory per family (default); TOKENSLEUTH_FRESH_BUILD_DIR=1 builds each
    revision in a directory of its own, removed after (bench/build_reuse.py compares the two)."""
    return os.environ.get("TOKENSLEUTH_FRESH_BUILD_DIR", "") != "1"


def build_tool(name: str) -> str | None:
    """cmake or ninja (or sccache): the wheel's beside this interpreter for cmake (the pinned one on
    every machine: a build's configuration does not depend on the machine's, and CMake 4's relative
    unity includes keep libllama in the compiler cache across roots, where Debian 12's 3.25 ignores
    them), the machine's for the others when installed; else the wheel's (tokensleuth depends on the
    cmake and ninja wheels, so a machine without root has both)."""
    local = Path(sys.executable).parent / name
    if name == "cmake" and local.exists():
        return str(local)
    found = shutil.which(name)
    if found:
        return found
    return str(local) if local.exists() else None


def compiler_launcher() -> str | None:
    """ccache when installed (its cache is warm on machines that have it), else sccache from
    its wheel (a compiler cache that needs no root; TOKENSLEUTH_LAUNCHER=none turns both off)."""
    choice = os.environ.get("TOKENSLEUTH_LAUNCHER", "")
    if choice == "none":
        return None
    if choice:
        return shutil.which(choice) or (str(Path(sys.executable).parent / choice)
                                        if (Path(sys.executable).parent / choice).exists() else None)
    return shutil.which("ccache") or build_tool("sccache")


BUILD_DIR = ".tokensleuth-build"  # a source tree's build directories: <tree>/.tokensleuth-build-<family>


def build_key(tree_id: str, flags: Sequence[str], targets: Sequence[str]) -> str:
    """The cache key of a build: its source tree, CMake flags, compiler and targets (and
    tokensleuth's own profiler source, where that is a target)."""
    from tokensleuth.sources import profiler

    parts: list[Any] = [tree_id, list(BASE_FLAGS), list(flags), compiler_id(), sorted(targets)]
    if profiler.TARGET in targets:  # tokensleuth's own source is part of that build too
        parts.append(profiler.source_id())
    blob = json.dumps(parts)
    return hashlib.sha256(blob.encode()).hexdigest()[:20]


def build_family(where: str, flags: Sequence[str]) -> str:
    """A build directory's family: builds of one source path (``where``), flags and compiler
    share one directory, kept between builds."""
    return hashlib.sha256(json.dumps([where, list(BASE_FLAGS), list(flags),
                                      compiler_id()]).encode()).hexdigest()[:16]


def cache_env(root: Path) -> dict[str, str]:
    """A build's environment: this process's, with the compiler caches' settings under the
    cache ``root`` (each that the user set is kept, but ``CCACHE_BASEDIR``)."""
    env = dict(os.environ)
    env.setdefault("CCACHE_DIR", str(root / "ccache"))
    env["CCACHE_BASEDIR"] = str(root)
    env.setdefault("CCACHE_NOHASHDIR", "1")
    env.setdefault("SCCACHE_DIR", str(root / "sccache"))
    # sccache's CCACHE_BASEDIR (0.15 and later): paths under the cache root hash relative to it,
    # so a tree in another folder (a git worktree after the sdist's) hits, nvcc's compiles too
    env.setdefault("SCCACHE_BASEDIRS", str(root))
    env.setdefault("SCCACHE_IDLE_TIMEOUT", "120")  # its server exits two minutes after the last build
    return env


def configure_argv(cmake: str, tree: Path, bdir: Path, commit: str | None, number: int | None,
                   flags: Sequence[str], targets: Sequence[str]) -> list[str]:
    """CMake's configure command for ``tree`` into ``bdir``: the base flags, ninja (for a new
    build directory) and the compiler launcher where they are installed, the build's number and
    commit, the caller's flags, and the profiler's arguments where it is a target."""
    cfg = [cmake, "-S", str(tree), "-B", str(bdir), *BASE_FLAGS]
    ninja = build_tool("ninja")
    if ninja and not (bdir / "CMakeCache.txt").exists():
        cfg += ["-G", "Ninja", f"-DCMAKE_MAKE_PROGRAM={ninja}"]
    launcher = compiler_launcher()
    if launcher:
        cfg += [f"-DCMAKE_C_COMPILER_LAUNCHER={launcher}", f"-DCMAKE_CXX_COMPILER_LAUNCHER={launcher}",
                f"-DCMAKE_CUDA_COMPILER_LAUNCHER={launcher}"]
    if number is not None:
        cfg.append(f"-DLLAMA_BUILD_NUMBER={number}")
    if commit:
        cfg.append(f"-DLLAMA_BUILD_COMMIT={commit[:9]}")
    # ggml's CMakeLists asks git for the checkout's commit and writes it into a header that ggml.c
    # includes: every commit of a bisect or scan recompiled ggml.c (2.5 of a rebuild's 3.8 CPU-s) for
    # a string (ggml_commit()) that no tool prints; llama-bench's build_commit is LLAMA_BUILD_COMMIT
    # above. Its git is `true` here: the string reads "unknown", as in a build from an sdist.
    true = shutil.which("true")
    if true:
        cfg.append(f"-DGIT_EXE={true}")
    cfg += list(flags)
    from tokensleuth.sources import profiler

    if profiler.TARGET in targets:  # the per-op profiler, an extra target of this same build
        cfg += profiler.cmake_args(tree)
    else:  # a build directory the profiler was configured in keeps its include in the cache, which
        # names that tokensleuth checkout's file: gone (a clone removed, a checkout moved), every
        # later configure there failed, and the commit was said not to build
        cfg.append("-UCMAKE_PROJECT_INCLUDE")
    return cfg
