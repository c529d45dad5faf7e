"""Shared fixtures: the real default engine (built once, cached) and tiny models."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tokensleuth.core.paths import cache_dir
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


TEST_VOCAB = "llama-spm"


def _model(engine: EngineBuild, tree: Path, arch: str) -> Path:
    from tests import workers
    from tokensleuth.models.synth import synth

    d = cache_dir() / "test-models"
    # Both tiny models carry llama-spm's 32,000 tokens: the tiny MoE's own qwen2 tokenizer (151,936)
    # was most of its load (0.5 s of a 0.5 s llama-bench run) and of its token time. (The vocab is
    # in the name: a model of another tokenizer is never reused.)
    p = d / f"{engine.key}.{TEST_VOCAB.replace('-', '')}-{arch}-tiny-Q8_0.gguf"
    with workers.cache_lock("test-models"):
        if not p.exists():
            synth(arch, "tiny", p, "Q8_0", tree, Path(engine.bin_dir) / "llama-quantize", vocab=TEST_VOCAB)
    return workers.own_name(p)


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
    from tokensleuth.commands.common import targets_for

    return BuildCache().get(DEFAULT_ENGINE, targets=targets_for(["llama-server"]),
                            log=lambda line: print(line, file=sys.stderr))


# -- real parts the suite needs: under CI=true a missing one fails and names what to install;
# elsewhere it skips before the test starts, with the reason (`pytest -rs` lists them) --------

def _can_mount_tmpfs() -> bool:
    import subprocess
    import tempfile

    if os.geteuid() != 0:
        return False
    with tempfile.TemporaryDirectory() as d:
        ok = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", d], capture_output=True).returncode == 0
        if ok:
            subprocess.run(["umount", d], check=False)
    return ok


def _can_chattr() -> bool:
    import shutil
    import subprocess
    import tempfile

    if shutil.which("chattr") is None:
        return False
    with tempfile.NamedTemporaryFile() as f:  # where the tests' tmp_path lives
        ok = subprocess.run(["chattr", "+i", f.name], capture_output=True).returncode == 0
        if ok:
            subprocess.run(["chattr", "-i", f.name], check=False)
    return ok


def _which(*names: str) -> bool:
    import shutil

    return all(shutil.which(n) for n in names)


NEEDS: dict[str, tuple[Callable[[], bool], str]] = {  # part -> (is it here?, how to get it)
    "browser": (lambda: _which("chromium", "chromedriver"),
                "install Debian's chromium and chromium-driver (scripts/setup.sh does, as root)"),
    "podman": (lambda: _which("podman", "runc"), "install Debian's podman and runc (scripts/setup.sh does, as root)"),
    "tmpfs": (_can_mount_tmpfs, "run the suite as root: a full-disk fault needs a small tmpfs mounted"),
    "ccache": (lambda: _which("ccache"), "install Debian's ccache (scripts/setup.sh does, as root)"),
    "chattr": (_can_chattr, "install e2fsprogs' chattr and run as root on a file system with the immutable flag"),
    "peers": (lambda: _peer_ready() is None,
              "install AIPerf and llama-benchy as bench/requirements-peer.txt pins them (scripts/setup.sh does)"),
}


def _peer_ready() -> str | None:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
    from _peers import peer_ready

    return peer_ready()
_seen: dict[str, bool] = {}


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "needs(*parts): real parts the test uses: " + ", ".join(NEEDS))


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Files with the most slow tests first (stable otherwise): the suite's test processes take
    a file each at a time (scripts/test.sh), and the longest ones started first end together."""
    from collections import Counter

    slow = Counter(item.path for item in items if item.get_closest_marker("slow"))
    items.sort(key=lambda item: -slow[item.path])


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    """With TOKENSLEUTH_TEST_TIMELINE=FILE, each test's start and end (wall clock, setup to
    teardown) and its test process (worker:pid), a line each: what ran alone at a run's end
    (bench/suite_breakdown.py --timeline), and which test each process of the run served
    (bench/suite_cpu_by_test.py)."""
    path = os.environ.get("TOKENSLEUTH_TEST_TIMELINE")
    t0 = time.time()
    yield
    if path:
        with open(path, "a") as f:
            f.write(f"{t0:.3f} {time.time():.3f} {os.environ.get('PYTEST_XDIST_WORKER', 'main')}:{os.getpid()} "
                    f"{item.nodeid}\n")


def pytest_runtest_setup(item: pytest.Item) -> None:
    for mark in item.iter_markers("needs"):
        for part in mark.args:
            have, how = NEEDS[part]
            if part not in _seen:
                _seen[part] = bool(have())
            if not _seen[part]:
                if os.environ.get("CI") == "true":
                    pytest.fail(f"{part} is missing on this CI machine — {how}", pytrace=False)
                pytest.skip(f"{part} is missing — {how}")
