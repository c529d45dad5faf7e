"""A kernel tracer for a machine without a GPU (the CUDA, ROCm and Vulkan tracers need one): the
real engine runs under its wrapper and with its environment, and it makes records from what that
run left behind, so the kernel driver's own path is the real one end to end.

The wrapper (``prefix``) is a shell that notes it ran, and the FAKE_EXTRA and FAKE_REGS the
engine was given, in the trace folder, then execs the engine. ``read`` turns every repetition's
window (its stamped progress lines) into kernels: ``k_tail`` over the first 10% of the time
between two progress lines (at most the median such time; FAKE_REGS registers), where FAKE_EXTRA
was set ``k_extra`` over 5% after it (a planted kernel that appears in one build only), and
``k_main`` over the next 55%.
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
        # A set of records from each progress line on: the tool's window of a repetition opens at
        # that line's stamp and closes at the next line or, the last, at the JSON line (stdout's
        # stamp, read by another thread: on a loaded machine the stamps come late by different
        # amounts, and a window read shorter than its repetition is left out of the kernel figures
        # by the driver). Every kept window holds exactly one set, all its records starting in the
        # first 15% of it, so records per token are alike in every process (the 1% rule withholds a
        # table otherwise: sets that started 5% and 30% into the gap fell past a short last window).
        # Each set is sized on the shorter of its gap and the median gap: a gap far longer than its
        # repetition sized a k_main longer than any repetition (counted as lost).
        gaps = [b - a for a, b in zip(stamps, stamps[1:], strict=False)]
        usual = sorted(gaps)[len(gaps) // 2] if gaps else 0
        for stamp, gap in zip(stamps, [min(g, usual) for g in gaps] + [usual] if gaps else [], strict=False):
            a = stamp + 1000  # 1 µs in
            spans = [(1, a, a + int(0.1 * gap)), (0, a + int(0.15 * gap), a + int(0.7 * gap))]
            if extra:
                spans.append((2, a + int(0.1 * gap), a + int(0.15 * gap)))
            for n, s, e in spans:
                rows["name"].append(n)
                rows["start"].append(s)
                rows["end"].append(e)
                rows["registers"].append(regs if n == 1 else 32)
                rows["grid"].append((64, 1, 1))
                rows["block"].append((256, 1, 1))
        return [trace_of(names, rows)]


TRACER = FakeTracer()
