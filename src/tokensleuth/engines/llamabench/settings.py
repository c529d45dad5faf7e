"""What the memory guard reads from llama-bench's flags: where a load's memory goes.

The guard (tokensleuth.trials.memory) sizes a load from :class:`LoadSettings`; this module is
llama-bench's reading of its own flags into them (``ENGINE.guard``): ``-ngl``, ``-ncmoe``,
``-ot``, the load mode, the KV cache's place and types, the batch sizes, repacking, and the
tests the flags name themselves beside the workloads'.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from tokensleuth.core.cliargs import flag_values, int_list
from tokensleuth.core.errors import UserError
from tokensleuth.engines.llamabench.argv import flag_tests
from tokensleuth.engines.placement import LoadSettings, override_regex, shown_regex

# llama-bench's flags the guard reads (each: its short and long spelling)
GPU_LAYERS = ("-ngl", "--n-gpu-layers")
CPU_MOE = ("-ncmoe", "--n-cpu-moe")
OVERRIDE_TENSOR = ("-ot", "--override-tensor")
MMAP = ("-mmp", "--mmap")
LOAD_MODE = ("-lm", "--load-mode")
NO_KV_OFFLOAD = ("-nkvo", "--no-kv-offload")
CACHE_TYPE_K = ("-ctk", "--cache-type-k")
CACHE_TYPE_V = ("-ctv", "--cache-type-v")
REPACK = ("--repack",)
BATCH = ("-b", "--batch-size")
UBATCH = ("-ub", "--ubatch-size")
# llama-bench's own tests when none is named (-p 512 -n 128)
DEFAULT_TESTS: tuple[tuple[int, int, int], ...] = ((512, 0, 0), (0, 128, 0))


def overrides_of(value: str) -> list[tuple[str, str]]:
    """The (regex, buffer type) pairs of an ``-ot`` value, as llama-bench reads it: pairs
    ``<regex>=<buffer type>`` joined by ``;``, a ``,`` between the values of separate runs (an
    empty one: a run without overrides). A pair without ``=<buffer type>`` (llama-bench
    refuses it) or with a regex that does not compile (llama.cpp's std::regex throws when it
    loads the model) is refused here (UserError), before anything runs."""
    form = ("-ot takes <regex>=<buffer type> pairs (exps=CPU), ';' between pairs and ',' between runs "
            "— so a ',' or ';' cannot be part of a regex")
    out = []
    for part in re.split(r"[,;]", value):
        if not part:
            continue
        pat, eq, buft = part.partition("=")
        if not eq or not buft:
            raise UserError(f"-ot {shown_regex(value)}: {shown_regex(part)} has no buffer type after '=' — {form}")
        override_regex(pat, value)
        out.append((pat, buft))
    return out


def settings_from_flags(flags: Sequence[str], tests: Sequence[tuple[int, int, int]] = DEFAULT_TESTS) -> LoadSettings:
    """Settings from llama-bench flags and the tests to run ((prompt, generated, depth) each).
    Where a flag lists several values (``-ngl 0,99``) the one that needs most counts."""
    def last_int(*names: str, default: int) -> int:
        vals = [v for x in flag_values(flags, *names) for v in int_list(x)]
        return max(vals, key=lambda v: v if v >= 0 else 10 ** 9) if vals else default

    ngl = last_int(*GPU_LAYERS, default=-1)
    ncmoe = min((v for x in flag_values(flags, *CPU_MOE) for v in int_list(x)), default=0)
    ot = [pair for x in flag_values(flags, *OVERRIDE_TENSOR) for pair in overrides_of(x)]
    no_mmap = any(v.strip() in ("0", "false") for x in flag_values(flags, *MMAP) for v in x.split(","))
    no_mmap |= any(v.strip() in ("none", "dio", "mlock") for x in flag_values(flags, *LOAD_MODE)
                   for v in x.split(","))
    nkvo = any(v.strip() == "1" for x in flag_values(flags, *NO_KV_OFFLOAD) for v in x.split(","))
    tk = (flag_values(flags, *CACHE_TYPE_K) or ["f16"])[-1].split(",")[0]
    tv = (flag_values(flags, *CACHE_TYPE_V) or ["f16"])[-1].split(",")[0]
    # the tests the flags name themselves (llama-bench's -p/-n/-d/-pg), beside the workloads'
    sizes = [p + n + d for p, n, d in (*tests, *flag_tests(flags))]
    tokens = max(sizes or [512])
    ctx = -(-max(tokens, 1) // 256) * 256
    # (several values: the one that needs most, repacking on)
    repack = not all(v.strip() == "0" for x in flag_values(flags, *REPACK) for v in x.split(",")) \
        or not flag_values(flags, *REPACK)
    return LoadSettings(ngl, ncmoe, tuple(ot), not no_mmap, nkvo, tk, tv,
                        last_int(*BATCH, default=2048), last_int(*UBATCH, default=512), ctx, max(tokens, 1), repack)
