"""Which X got slower: the op or the kernel whose time grew between two builds (or two runs of one).

- ``loop.py``: the one study loop both ask their question with (``run_study``), and one
  llama-bench process as measured (``bench_process``);
- ``ops.py``: the op profile, through the profiler built with a CPU build;
- ``kernels.py``: the kernel trace of a GPU build (CUPTI, rocprofv3, Vulkan);
- ``profile.py``: the profile command's request run to its study (the entry).

:func:`slower_for` is the one place that picks between them.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from tokensleuth.drivers.slower.kernels import traced
from tokensleuth.kernels import tracer_for

BY = ("auto", "kernels", "ops")


def slower_for(backends: Iterable[Sequence[str]], by: str = "auto") -> str:
    """Which study says what got slower for builds of these backends: ``"kernels"`` (traced)
    where each has a GPU backend with a tracer, else ``"ops"`` (the op profile). ``by`` forces
    one: ``kernels`` on a build without a GPU backend to trace is one line (UserError)."""
    if by == "ops":
        return "ops"
    if by == "kernels":
        for b in backends:
            tracer_for(b)
        return "kernels"
    return "kernels" if traced(backends) else "ops"
