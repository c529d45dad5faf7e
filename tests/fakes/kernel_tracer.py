"""A kernel tracer for a machine without a GPU (the CUDA, ROCm and Vulkan tracers need one): the
real engine runs under its wrapper and with its environment, and it makes records from what that
run left behind, so the kernel driver's own path is the real one end to end.

The wrapper (``prefix``) is a shell that notes it ran, and the FAKE_EXTRA and FAKE_REGS the
engine was given, in the trace folder, then execs the engine. ``read`` turns every repetition's
window (its stamped progress lines) into kernels: ``k_main`` over the first 60% of the time
between two progress lines (from 5% in), ``k_tail`` over 10% after it (FAKE_REGS registers), and, where
FAKE_EXTRA was set, ``k_extra`` over 5% more: a planted kernel that appears in one build only.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

from tokensleuth.core.errors import EngineError
from tokensleuth.kernels import Trace, trace_of

_PROGRESS = re.compile(r"(prompt|generation) run \d+/\d+")
SCRIPT = 'printf "%s %s" "${FAKE_EXTRA:-0}" "${FAKE_REGS:-32}" > "$0/wrapped"; exec "$@"'


class FakeTracer:
    name = "fake"
    changes: str | None = None

    def ready(self) -> None:
        return None

    def env(self, out_dir: Path, mode: str = "kernels") -> dict[str, str]:
        return {}

    def prefix(self, out_dir: Path) -> list[str]:
        return ["sh", "-c", SCRIPT, str(out_dir)]

    def read(self, out_dir: Path, stderr: Sequence[tuple[int, str]]) -> list[Trace]:
        mark = out_dir / "wrapped"
        if not mark.exists():
            raise EngineError("the fake tracer's wrapper did not run")
        extra, regs = (int(x) for x in mark.read_text().split())
        stamps = [t for t, line in stderr if _PROGRESS.search(line)]
        names = ["k_main", "k_tail", "k_extra"]
        rows: dict[str, list[object]] = {"name": [], "start": [], "end": [], "registers": [], "grid": [], "block": []}
        # a set of records after every progress line, the last one's as long as the one before: every
        # repetition holds one, so records per token are alike in every process (the 1% rule withholds
        # a table otherwise, and one kept repetition without records broke it). They start 5% into
        # the gap, not at the stamp: on a loaded machine a repetition's window (llama-bench's own
        # duration) can begin a little after its progress line, and a record on the edge fell out
        gaps = [b - a for a, b in zip(stamps, stamps[1:], strict=False)]
        for a, gap in zip(stamps, [*gaps, gaps[-1]] if gaps else [], strict=False):
            spans = [(0, a + int(0.05 * gap), a + int(0.6 * gap)), (1, a + int(0.6 * gap), a + int(0.7 * gap))]
            if extra:
                spans.append((2, a + int(0.7 * gap), a + int(0.75 * gap)))
            for n, s, e in spans:
                rows["name"].append(n)
                rows["start"].append(s)
                rows["end"].append(e)
                rows["registers"].append(regs if n == 1 else 32)
                rows["grid"].append((64, 1, 1))
                rows["block"].append((256, 1, 1))
        return [trace_of(names, rows)]


TRACER = FakeTracer()
