"""The Vulkan "tracer": the engine's own perf logger (``GGML_VK_PERF_LOGGER``), parsed.

ggml's Vulkan backend, with the variable set, prints to stderr after every graph it computes a
block of per-op totals — ``NAME: COUNT x AVG us = TOTAL us`` (older builds: without ``= TOTAL
us``), an optional ``(X GFLOPS/s)``, names in sorted order, then ``Total time: T us.`` — where NAME
is the op with its fusion prefix, type and sizes (``MUL_MAT_VEC q4_K m=4096 n=1 k=4096``). It is
not a kernel timeline: there are no start times, no shader names, no registers. A block is
placed in time by the moment its last line arrived (the runner stamps every line), which is how
its ops are assigned to llama-bench's repetitions.

What it changes, said beside every figure: to time ops the backend waits on a fence after every
graph and, in its default mode, writes a timestamp behind a full barrier after every node, so the
traced run is serialised and slower than the benchmarked one; its times are the ops' shares of
that run. With ``GGML_VK_PERF_LOGGER_CONCURRENT`` (``concurrent=True``) it times only between the
barriers the graph needs anyway, and NAME lists the ops that ran together.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from tokensleuth.kernels import OP, Trace, trace_of

_LINE = re.compile(r"^(?P<name>.*): (?P<count>\d+) x (?P<avg>[-+0-9.eE]+) us"
                   r"(?: = (?P<total>[-+0-9.eE]+) us)?(?: \((?P<gflops>[-+0-9.eE]+) GFLOPS/s\))?\s*$")
HEADER = "Vulkan Timings:"


def parse(stderr: Sequence[tuple[int, str]], start_ns: int = 0) -> Trace:
    """Blocks of the perf logger in stamped stderr lines: one OP record per name and block,
    spanning from the previous block's end (or ``start_ns``) to its ``Total time`` line (older
    builds, which print none: to its last op line)."""
    names: dict[str, int] = {}
    rows: dict[str, list[int]] = {"name": [], "start": [], "end": [], "calls": [], "busy_ns": []}
    block: list[tuple[str, int, int]] = []
    prev, last = start_ns, start_ns

    def flush(t: int) -> None:
        nonlocal prev, block
        for name, count, busy in block:
            rows["name"].append(names.setdefault(name, len(names)))
            rows["start"].append(prev)
            rows["end"].append(t)
            rows["calls"].append(count)
            rows["busy_ns"].append(busy)
        if block:
            prev = t
        block = []

    inside = False
    for t, line in stderr:
        text = line.strip()
        if text == HEADER:
            flush(last)
            inside = True
        elif inside and text.startswith("Total time:"):
            flush(t)
            inside = False
        elif inside and text.startswith("--------"):
            flush(last)
            inside = False
        elif inside and (m := _LINE.match(text)) is not None:
            count = int(m["count"])
            total_us = float(m["total"]) if m["total"] is not None else count * float(m["avg"])
            block.append((m["name"].strip(), count, round(total_us * 1000)))
            last = t
    flush(last)
    arrays = {k: np.asarray(v, dtype=np.int64) for k, v in rows.items()}
    arrays["kind"] = np.full(len(rows["name"]), OP, dtype=np.int64)
    return trace_of(list(names), arrays, timeline=False, notes=[VulkanTracer.changes])


class VulkanTracer:
    name = "vulkan"
    changes = ("the Vulkan perf logger waits on a fence after every graph and times every node behind a barrier: "
               "the traced run is serialised, so its op times are shares of that run, not the benchmarked one's")

    def __init__(self, concurrent: bool = False) -> None:
        self.concurrent = concurrent

    def ready(self) -> None:
        return None

    def env(self, out_dir: Path, mode: str = "kernels") -> dict[str, str]:
        env = {"GGML_VK_PERF_LOGGER": "1"}
        if self.concurrent:
            env["GGML_VK_PERF_LOGGER_CONCURRENT"] = "1"
        return env

    def prefix(self, out_dir: Path) -> list[str]:
        return []

    def read(self, out_dir: Path, stderr: Sequence[tuple[int, str]]) -> list[Trace]:
        trace = parse(stderr)
        return [trace] if len(trace) else []


TRACER = VulkanTracer()
