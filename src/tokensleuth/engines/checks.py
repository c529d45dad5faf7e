"""Before any trial: can this arm's engine run its flags and workloads here? (one line if not)

Run where the engine runs: by the CLI on this machine, by a fleet's worker on its own.
"""

from __future__ import annotations

from pathlib import Path

from tokensleuth.sources.build import EngineBuild


def check_arm(build: EngineBuild | None, name: str, kind: str, flags: list[str], env: dict[str, str],
              workloads: list[str], help_cache: dict[str, str] | None = None, api_key_env: str | None = None,
              source: str = "") -> None:
    """The arm's engine can run its flags and workloads (one line if not): once before the
    build (``build`` None: what the flags and workloads alone show) and once after it."""
    from tokensleuth.engines import engine_for
    from tokensleuth.engines.base import ArmRuntime

    engine = engine_for(kind)
    if build is not None:  # the engine's own binary knows its flags (its --help)
        engine.check_build_flags(build, flags, {} if help_cache is None else help_cache)
    if build is not None and build.bin_dir and (Path(build.bin_dir) / "llama-bench").exists():
        from tokensleuth.engines.placement import check_devices

        check_devices(name, Path(build.bin_dir) / "llama-bench", build.backends, flags)
    served = source.startswith(("url:", "cmd:"))
    engine.check(ArmRuntime(name, Path(build.bin_dir) if build and build.bin_dir else None, tuple(flags),
                            env, kind=kind, api_key_env=api_key_env, endpoint=source if served else None),
                 workloads)
