"""GPU kernel timelines: which kernels ran, how long each took on the GPU, and the idle time
between them, read by one tracer per vendor behind one protocol (:class:`Tracer`), without a
change to the engine: CUDA through CUPTI injected into the engine's process (cupti), ROCm/HIP
through ``rocprofv3 --kernel-trace`` run around it (rocprof), Vulkan from the engine's own perf
logger (vulkan). A tracer is chosen from the engine build's backends (:func:`tracer_for`); a new
vendor is one module here plus its line in ``TRACERS``. What a trace means for a measurement
(kernels per repetition and token, the diff of two builds) is analysis/kernels.py's.

Floor 1: imports core only.
"""

from __future__ import annotations

import importlib
import re
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from tokensleuth.core.errors import UserError

FLOOR = 1  # the layers: a module imports its own folder and lower floors (tests/test_seams.py)

# an engine backend (EngineBuild.backends) -> the module of this package that traces it
TRACERS = {"CUDA": "cupti", "ROCm": "rocprof", "Vulkan": "vulkan"}

# what a record is: OP an op's time the engine measured itself (Vulkan); GRAPH one CUDA graph's
# execution (graph-level tracing); LAUNCH a graph launch's marker (sampled tracing: ``flags`` 1
# where its kernels were traced). Only KERNEL, MEMCPY, MEMSET and OP rows are kernel figures.
KERNEL, MEMCPY, MEMSET, OP, GRAPH, LAUNCH = 0, 1, 2, 3, 4, 5
WORK = (KERNEL, MEMCPY, MEMSET, OP)


@dataclass(slots=True)
class Trace:
    """One engine process's GPU records, oldest first, on the host's monotonic clock (ns).

    Columns of equal length: ``name`` indexes ``names``; ``grid``/``block`` are (n, 3) launch
    shapes in blocks and threads; ``registers`` per thread and ``shared`` bytes (static +
    dynamic) per block, -1 where the vendor does not say. ``timeline`` is False where the records
    are totals per interval rather than single executions (the Vulkan logger): then ``start``
    and ``end`` bound the interval the totals were printed for and ``calls`` counts them.
    ``device`` is the GPU a record ran on; ``mode`` how the tracer recorded (kernels: every
    kernel; graphs: a record per graph execution; sample:N: one graph launch in N), ``lost``
    how many records it knows it missed."""

    names: list[str]
    name: np.ndarray
    start: np.ndarray
    end: np.ndarray
    stream: np.ndarray
    kind: np.ndarray
    grid: np.ndarray
    block: np.ndarray
    registers: np.ndarray
    shared: np.ndarray
    calls: np.ndarray
    busy_ns: np.ndarray  # GPU time of the record (end - start on a timeline; the total otherwise)
    device: np.ndarray
    flags: np.ndarray
    timeline: bool = True
    notes: list[str] = field(default_factory=list)
    mode: str = "kernels"
    lost: int = 0

    def __len__(self) -> int:
        return len(self.name)


def trace_of(names: Sequence[str], rows: Mapping[str, Any], *, timeline: bool = True,
             notes: Sequence[str] = ()) -> Trace:
    """A Trace from columns (missing ones filled: shapes and registers unknown, one call each)."""
    n = len(rows["name"])

    def col(key: str, fill: int, shape: tuple[int, ...] = ()) -> np.ndarray:
        if key in rows:
            return np.asarray(rows[key], dtype=np.int64).reshape((n, *shape))
        return np.full((n, *shape), fill, dtype=np.int64)

    start, end = col("start", 0), col("end", 0)
    order = np.argsort(start, kind="stable")
    t = Trace(list(names), col("name", 0), start, end, col("stream", 0), col("kind", KERNEL), col("grid", -1, (3,)),
              col("block", -1, (3,)), col("registers", -1), col("shared", -1), col("calls", 1),
              col("busy_ns", 0) if "busy_ns" in rows else end - start, col("device", 0), col("flags", 0), timeline,
              list(notes))
    for f in ("name", "start", "end", "stream", "kind", "grid", "block", "registers", "shared", "calls", "busy_ns",
              "device", "flags"):
        setattr(t, f, getattr(t, f)[order])
    return t


class Tracer(Protocol):
    """One vendor's kernel tracer. ``changes``: what tracing changes in the engine's run (None:
    nothing the engine does; a sentence shown beside every figure otherwise)."""

    name: str
    changes: str | None

    def ready(self) -> None:
        """Raise UserError, one line saying what is missing and how to get it, where it cannot trace."""

    def env(self, out_dir: Path, mode: str = "kernels") -> dict[str, str]:
        """Environment to add to the engine's (``mode``: how to record, where the tracer has modes)."""

    def prefix(self, out_dir: Path) -> list[str]:
        """The command the engine runs under (empty: none), ending where the engine's argv begins."""

    def read(self, out_dir: Path, stderr: Sequence[tuple[int, str]]) -> list[Trace]:
        """The traces of the processes that wrote into ``out_dir`` (stderr: stamped lines)."""


def tracer_for(backends: Sequence[str]) -> Tracer:
    """The tracer of a build's GPU backend; UserError (one line) for a build that has none."""
    for backend in backends:
        if backend in TRACERS:
            name = TRACERS[backend]  # a module of this package, or a dotted path (a test's tracer)
            module = importlib.import_module(name if "." in name else f"tokensleuth.kernels.{name}")
            tracer: Tracer = module.TRACER
            return tracer
    raise UserError(f"no kernel tracer for a build with backends {', '.join(backends) or 'none'}: kernels are traced "
                    f"on {', '.join(TRACERS)} builds (a CPU build's profile is the op profile: tokensleuth profile)")


# nvcc's name for a translation unit's internal linkage (a static function, an anonymous
# namespace): _INTERNAL_<hash of the build path>_<length><file>_<hash>::, e.g.
# _INTERNAL_c669ff45_11_binbcast_cu_6840010b:: — another build path, another tag, one kernel
_UNIT_TAG = re.compile(r"_INTERNAL_[0-9a-f]+_\d+_[A-Za-z0-9_]*?_[0-9a-f]{8}::")
_ANONYMOUS = re.compile(r"\(anonymous namespace\)::|`anonymous namespace'::")


def canonical(name: str) -> str:
    """One name for one kernel across builds: the per-translation-unit and anonymous-namespace
    tags (which change with the build's path) left out; the template arguments kept."""
    return _ANONYMOUS.sub("", _UNIT_TAG.sub("", name))


_ARGS = re.compile(r"\((?:[^()]|\([^()]*\))*\)(?:\s*const)?\s*$")


def short_name(demangled: str) -> str:
    """A kernel's row name: the demangled name without its return type and parameter list, its
    template arguments kept (``void k<(ggml_type)8, 1>(void const*, int)`` -> ``k<(ggml_type)8, 1>``)."""
    s = demangled.strip()
    if s.endswith(".kd"):
        s = s[:-3]
    depth, cut = 0, len(s)
    for i in range(len(s) - 1, -1, -1):  # the parameter list: the last balanced (...) at the end
        c = s[i]
        if c == ")":
            depth += 1
        elif c == "(":
            depth -= 1
            if depth == 0:
                cut = i
                break
    if cut < len(s) and s.endswith(")"):
        s = s[:cut]
    if s.startswith("void "):
        s = s[5:]
    return canonical(s.strip()) or demangled


def demangle(names: Sequence[str]) -> list[str]:
    """Itanium-mangled names demangled by the toolchain's c++filt, in one call; a name it cannot
    read (or where there is no c++filt) is kept as it is."""
    mangled = [n for n in names if n.startswith("_Z")]
    tool = shutil.which("c++filt")
    if not mangled or tool is None:
        return list(names)
    try:
        done = subprocess.run([tool], input="\n".join(n.removesuffix(".kd") for n in mangled) + "\n",
                              capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return list(names)  # kept as they are: still one row per kernel
    out = done.stdout.splitlines() if done.returncode == 0 else []
    table = dict(zip(mangled, out, strict=False)) if len(out) == len(mangled) else {}
    return [table.get(n, n) for n in names]
