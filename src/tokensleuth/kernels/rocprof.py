"""The ROCm/HIP kernel tracer: ``rocprofv3 --kernel-trace`` (rocprofiler-sdk) run around the engine.

rocprofv3 starts the engine with its tracing library loaded and writes one CSV of kernel
dispatches per process (``<pid>_kernel_trace.csv``; CSV is asked for explicitly, since newer
versions write a SQLite file by default). Its columns are read by name: rocprofiler-sdk's header
("Kind", "Agent_Id", "Queue_Id", "Stream_Id", "Thread_Id", "Dispatch_Id", "Kernel_Id",
"Kernel_Name", "Correlation_Id", "Start_Timestamp", "End_Timestamp", "LDS_Block_Size",
"Scratch_Size", "VGPR_Count", "Accum_VGPR_Count", "SGPR_Count", "Workgroup_Size_X/Y/Z",
"Grid_Size_X/Y/Z"), or the older one of ROCm 6.x (no Stream_Id; "Group_Segment_Size" for the
LDS). Grid sizes are in work-items (threads): the grid in blocks is their quotient by the
workgroup size. Names come demangled (rocprofv3's default). Timestamps are on CLOCK_BOOTTIME
(the HSA runtime's system clock); they are put on the monotonic clock by the offset between the
two read when the trace is read (equal unless the machine was suspended meanwhile).

No AMD GPU is on the machines this was written on: the parser is tested on files in the
documented format (tests/kernels/data), the command line has not been run.
"""

from __future__ import annotations

import csv
import shutil
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from tokensleuth.core.errors import UserError
from tokensleuth.kernels import KERNEL, Trace, short_name, trace_of


def _int(row: dict[str, str], *keys: str, default: int = -1) -> int:
    for k in keys:
        v = row.get(k)
        if v not in (None, ""):
            try:
                return int(v)  # a timestamp in ns is past float's exact integers
            except ValueError:
                try:
                    return int(float(v))
                except ValueError:
                    continue
    return default


def read_csv(path: Path, boottime_minus_monotonic: int | None = None) -> Trace:
    """One process's kernel dispatches from rocprofv3's kernel-trace CSV."""
    if boottime_minus_monotonic is None:
        boottime_minus_monotonic = time.clock_gettime_ns(time.CLOCK_BOOTTIME) - time.monotonic_ns()
    with path.open(newline="") as f:
        reader = csv.DictReader(f)
        need = {"Kernel_Name", "Start_Timestamp", "End_Timestamp"}
        if not need <= set(reader.fieldnames or ()):
            raise UserError(f"{path} is not a rocprofv3 kernel trace (no {', '.join(sorted(need))} columns)")
        rows = [r for r in reader if r.get("Kind", "KERNEL_DISPATCH") == "KERNEL_DISPATCH"]
    names: dict[str, int] = {}
    cols: dict[str, list[object]] = {k: [] for k in ("name", "start", "end", "stream", "grid", "block", "registers",
                                                     "shared")}
    for r in rows:
        block = [max(1, _int(r, f"Workgroup_Size_{a}", default=1)) for a in "XYZ"]
        items = [_int(r, f"Grid_Size_{a}", default=1) for a in "XYZ"]
        cols["name"].append(names.setdefault(short_name(r["Kernel_Name"]), len(names)))
        cols["start"].append(_int(r, "Start_Timestamp", default=0) - boottime_minus_monotonic)
        cols["end"].append(_int(r, "End_Timestamp", default=0) - boottime_minus_monotonic)
        cols["stream"].append(_int(r, "Stream_Id", "Queue_Id", default=0))
        cols["grid"].append([-(-g // b) for g, b in zip(items, block, strict=True)])
        cols["block"].append(block)
        cols["registers"].append(_int(r, "VGPR_Count", "Arch_VGPR_Count"))
        cols["shared"].append(_int(r, "LDS_Block_Size", "Group_Segment_Size", "LDS_Size"))
    arrays = {k: np.asarray(v, dtype=np.int64).reshape((len(rows), 3) if k in ("grid", "block") else (len(rows),))
              for k, v in cols.items()}
    arrays["kind"] = np.full(len(rows), KERNEL, dtype=np.int64)
    return trace_of(list(names), arrays)


class RocprofTracer:
    name = "rocm"
    changes: str | None = None

    def ready(self) -> None:
        if shutil.which("rocprofv3") is None:
            raise UserError("the ROCm kernel tracer runs rocprofv3, which is not on PATH: install rocprofiler-sdk "
                            "(ROCm 6.2 or later) and put /opt/rocm/bin on PATH")

    def env(self, out_dir: Path, mode: str = "kernels") -> dict[str, str]:
        return {}

    def prefix(self, out_dir: Path) -> list[str]:
        return ["rocprofv3", "--kernel-trace", "--output-format", "csv", "-d", str(out_dir), "-o", "%pid%", "--"]

    def read(self, out_dir: Path, stderr: Sequence[tuple[int, str]]) -> list[Trace]:
        return [read_csv(p) for p in sorted(out_dir.rglob("*_kernel_trace.csv"))]


TRACER = RocprofTracer()
