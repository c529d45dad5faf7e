"""Shared set-up for the benchmark scripts: the default engine and tiny models."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tokensleuth.core.paths import cache_dir  # noqa: E402
from tokensleuth.core.workloads import bench_test_name  # noqa: E402
from tokensleuth.engines.llamabench import parse_jsonl  # noqa: E402
from tokensleuth.models.synth import synth  # noqa: E402
from tokensleuth.sources import DEFAULT_ENGINE  # noqa: E402
from tokensleuth.sources.build import BuildCache, EngineBuild  # noqa: E402


def default_engine() -> EngineBuild:
    return BuildCache().get(DEFAULT_ENGINE)


def tiny_model(engine: EngineBuild, arch: str) -> Path:
    p = cache_dir() / "test-models" / f"{engine.key}-{arch}-tiny-Q8_0.gguf"
    if not p.exists():
        synth(arch, "tiny", p, "Q8_0", BuildCache().llama_tree(DEFAULT_ENGINE),
              Path(engine.bin_dir) / "llama-quantize")
    return p


def tokensleuth_cmd() -> list[str]:
    """The tokensleuth command as a user runs it: the installed script, else ``python -m``."""
    exe = Path(sys.executable).parent / "tokensleuth"
    if exe.exists():
        return [str(exe)]
    found = shutil.which("tokensleuth")
    return [found] if found else [sys.executable, "-m", "tokensleuth.cli"]


def tps_by_test(stdout: str) -> dict[str, float]:
    """llama-bench ``-o jsonl`` output -> {test name: avg t/s}."""
    return {bench_test_name(int(o["n_prompt"]), int(o["n_gen"]), int(o.get("n_depth") or 0)): float(o["avg_ts"])
            for o in parse_jsonl(stdout)}
