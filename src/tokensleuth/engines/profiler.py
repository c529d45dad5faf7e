"""tokensleuth's per-op profiler (``tokensleuth-profile``, built from tokensleuth.sources.profiler):
the flags it takes, the argv of one profile process, and the JSON lines it prints. It spells a
workload, its repetitions and the engine flags as llama-bench does."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from tokensleuth.core.errors import UserError
from tokensleuth.core.workloads import parse

# the engine flags a profile takes (after `--`), as the profiler and llama-bench both spell them
FLAGS = ("-t", "-ngl", "-b", "-ub")


def check_flags(flags: Sequence[str]) -> list[str]:
    """The flags after `--`, as pairs the profiler takes (UserError, one line, otherwise)."""
    out = list(flags)
    if len(out) % 2:
        raise UserError(f"profile takes flag-value pairs after `--` ({' '.join(FLAGS)}), got {' '.join(out)}")
    for f, v in zip(out[::2], out[1::2], strict=True):
        if f not in FLAGS:
            raise UserError(f"profile does not take {f} — it takes {', '.join(FLAGS)} after `--`")
        if not v.lstrip("-").isdigit():
            raise UserError(f"{f} {v}: give a whole number")
    return out


def flags_from(flags: Sequence[str]) -> list[str]:
    """The profile flags among a measurement's llama-bench flags (-t 4 -r 3 -ngl 99 -> -t 4 -ngl 99)."""
    out = []
    for i, f in enumerate(flags[:-1]):
        if f in FLAGS and flags[i + 1].lstrip("-").isdigit():
            out += [f, flags[i + 1]]
    return out


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


def parse_rows(text: str) -> list[dict[str, Any]]:
    """The profiler's JSON lines (ValueError on anything else)."""
    rows = []
    for line in text.splitlines():
        if not line.strip():
            continue
        r = json.loads(line)
        if not isinstance(r, dict) or not {"test", "tokens", "wall_ns", "graph_ns", "ops"} <= r.keys():
            raise ValueError(f"not a profile line: {line[:120]}")
        if int(r["tokens"]) <= 0:
            raise ValueError("a profile line with no tokens")
        for op in r["ops"]:
            if not (isinstance(op, list) and len(op) == 4 and int(op[2]) > 0 and int(op[3]) >= 0):
                raise ValueError(f"not an op entry: {op!r}"[:160])
        rows.append(r)
    return rows
