"""Before any trial: can this arm's engine run its flags and workloads here? (one line if not)

Run where the engine runs: by the CLI on this machine, by a fleet's worker on its own.
"""

from __future__ import annotations

import re
from pathlib import Path

from tokensleuth.sources.build import EngineBuild


def check_bench_flags(build: EngineBuild, flags: list[str], help_cache: dict[str, str] | None = None) -> None:
    """Refuse flags the build's llama-bench does not know. ``help_cache`` keeps each build's
    --help text (not its verdict), so every arm's flags are checked against it."""
    from tokensleuth.engines.llamabench import check_flags
    from tokensleuth.sources.build import bench_help

    cache = {} if help_cache is None else help_cache
    if build.bin_dir not in cache:
        cache[build.bin_dir] = bench_help(build.binary("llama-bench"))
    check_flags(flags, cache[build.bin_dir])


def check_flags_in_source(source: str, flags: list[str]) -> None:
    """Refuse, before a build, flags that the source's llama-bench does not know: the options its
    own source parses (``arg == "-x"``) stand in for the --help that only a build can print.
    Nothing is refused where the source cannot be read (a bin: folder, another layout)."""
    from tokensleuth.engines.llamabench import check_flags
    from tokensleuth.sources.build import bench_source

    text = bench_source(source)
    if text is None or not flags:
        return
    known = sorted(set(re.findall(r'arg\s*==\s*"(-{1,2}[A-Za-z][\w-]*)"', text)))
    if len(known) >= 10:  # (a file that parses its options some other way says too little)
        check_flags(flags, "\n".join(known))


def check_arm(build: EngineBuild | None, name: str, kind: str, flags: list[str], env: dict[str, str],
              workloads: list[str], help_cache: dict[str, str] | None = None, api_key_env: str | None = None,
              source: str = "") -> None:
    """The arm's engine can run its flags and workloads (one line if not): once before the
    build (``build`` None: what the flags and workloads alone show) and once after it."""
    from tokensleuth.engines import engine_for
    from tokensleuth.engines.base import ArmRuntime

    engine = engine_for(kind)
    if engine.bench_flags and build is not None:  # its flags are llama-bench's: its --help knows them
        check_bench_flags(build, flags, help_cache)
    if build is not None and build.bin_dir and (Path(build.bin_dir) / "llama-bench").exists():
        from tokensleuth.engines.placement import check_devices

        check_devices(name, Path(build.bin_dir) / "llama-bench", build.backends, flags)
    served = source.startswith(("url:", "cmd:"))
    engine.check(ArmRuntime(name, Path(build.bin_dir) if build and build.bin_dir else None, tuple(flags),
                            env, kind=kind, api_key_env=api_key_env, endpoint=source if served else None),
                 workloads)
