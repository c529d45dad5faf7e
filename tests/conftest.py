"""Shared fixtures: the real default engine (built once, cached) and tiny models."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from tokensleuth.paths import cache_dir
from tokensleuth.sources import DEFAULT_ENGINE
from tokensleuth.sources.build import BuildCache, EngineBuild

GOLDEN = Path(__file__).parent / "golden" / "llamacpp"


@pytest.fixture(scope="session")
def engine() -> EngineBuild:
    """The default engine, built from its PyPI sdist (a cache hit after the first run)."""
    return BuildCache().get(DEFAULT_ENGINE, log=lambda line: print(line, file=sys.stderr))


@pytest.fixture(scope="session")
def llama_tree(engine: EngineBuild) -> Path:
    return BuildCache().llama_tree(DEFAULT_ENGINE)


def _model(engine: EngineBuild, tree: Path, arch: str) -> Path:
    from tokensleuth.models.synth import synth

    d = cache_dir() / "test-models"
    p = d / f"{engine.key}-{arch}-tiny-Q8_0.gguf"
    if not p.exists():
        synth(arch, "tiny", p, "Q8_0", tree, Path(engine.bin_dir) / "llama-quantize")
    return p


@pytest.fixture(scope="session")
def dense_model(engine: EngineBuild, llama_tree: Path) -> Path:
    return _model(engine, llama_tree, "llama")


@pytest.fixture(scope="session")
def moe_model(engine: EngineBuild, llama_tree: Path) -> Path:
    return _model(engine, llama_tree, "qwen3moe")


@pytest.fixture()
def db(tmp_path: Path) -> Path:
    return tmp_path / "store.sqlite"


@pytest.fixture()
def cli_env(db: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["TOKENSLEUTH_DB"] = str(db)
    return env


def tokensleuth_bin() -> str:
    return str(Path(sys.executable).parent / "tokensleuth")


@pytest.fixture(scope="session")
def server_engine(engine: EngineBuild) -> EngineBuild:
    """The default engine with llama-server beside llama-bench (what a --kind llama-server arm builds)."""
    from tokensleuth.cli import targets_for

    return BuildCache().get(DEFAULT_ENGINE, targets=targets_for(["llama-server"]),
                            log=lambda line: print(line, file=sys.stderr))
