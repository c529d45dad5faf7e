"""tokensleuth's per-op profiler (``tokensleuth-profile``, built from tokensleuth.sources.profiler):
the argv of one profile process. It spells a workload and its repetitions as llama-bench does."""

from __future__ import annotations

from collections.abc import Sequence

from tokensleuth.core.errors import UserError
from tokensleuth.core.workloads import parse


def workload_args(workload: str) -> list[str]:
    """The profiler's flags for a ppN or tgN workload (UserError for any other)."""
    w = parse(workload)
    if w.concurrency > 1 or w.n_depth or (w.n_prompt and w.n_gen) or not (w.n_prompt or w.n_gen):
        raise UserError(f"profile runs ppN or tgN at depth 0, one sequence — not {workload}")
    return ["-p", str(w.n_prompt)] if w.n_prompt else ["-n", str(w.n_gen)]


def argv(binary: str, model: str, workload: str, reps: int, flags: Sequence[str], groups: bool) -> list[str]:
    """One profile process: ``reps`` repetitions of ``workload``; ``groups`` times chains of
    dependent ops as one node (-g 1)."""
    return [binary, "-m", model, *workload_args(workload), "-r", str(reps), *flags, *(["-g", "1"] if groups else [])]
