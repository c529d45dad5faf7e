"""A prebuilt folder's backends: what decides which tracer and which GPU checks a bin: arm gets.

The build cache builds static programs (BUILD_SHARED_LIBS=OFF): a CUDA build's bin folder has no
libggml-cuda.so to list, and was read as CPU only ("no kernel tracer for a build with backends
CPU"). The folder's build record answers first; a program from elsewhere answers by what it links.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from tokensleuth.sources.build import EngineBuild, backends_in


def _program(where: Path, name: str, symbols: list[str]) -> Path:
    """A real static ELF program whose text defines ``symbols`` (as a backend's registration
    function is linked into a static llama-bench)."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.fail("no C compiler: the backend probe's program test needs one")
    where.mkdir(parents=True, exist_ok=True)
    src = where / f"{name}.c"
    src.write_text("".join(f"void {s}(void) {{}}\n" for s in symbols)
                   + "int main(void) { return 0; }\n")
    out = where / name
    subprocess.run([cc, "-O0", "-o", str(out), str(src)], check=True)
    src.unlink()
    return out


def test_a_build_cache_folder_answers_from_its_build_record(engine: EngineBuild, tmp_path: Path) -> None:
    """A CUDA build as the build cache lays it out: bin/llama-bench (static) beside ../build.json."""
    root = tmp_path / "builds" / "key"
    shutil.copytree(Path(engine.bin_dir), root / "bin")
    record = json.loads((Path(engine.bin_dir).parent / "build.json").read_text())
    assert backends_in(Path(engine.bin_dir)) == ("CPU",)  # the real CPU build, its own record
    (root / "build.json").write_text(json.dumps(dict(record, backends=["CPU", "CUDA"])))
    assert backends_in(root / "bin") == ("CPU", "CUDA")
    (root / "build.json").write_text("{not json")  # a damaged record: the program answers
    assert backends_in(root / "bin") == ("CPU",)


def test_a_static_program_answers_by_what_it_links(engine: EngineBuild, tmp_path: Path) -> None:
    cuda = tmp_path / "cuda"
    _program(cuda, "llama-bench", ["ggml_backend_cuda_reg", "ggml_backend_cpu_reg"])
    assert backends_in(cuda) == ("CPU", "CUDA")
    hip = tmp_path / "hip"  # ggml-cuda's sources compiled for HIP keep the CUDA names
    _program(hip, "llama-bench", ["ggml_backend_cuda_reg", "hipStreamSynchronize"])
    assert backends_in(hip) == ("CPU", "ROCm")
    vk = tmp_path / "vk"
    _program(vk, "llama-server", ["ggml_backend_vk_reg"])
    assert backends_in(vk) == ("CPU",)  # (llama-bench is not there)
    assert backends_in(vk, "llama-server") == ("CPU", "Vulkan")
    real = tmp_path / "real"  # the real CPU llama-bench, without its build record
    real.mkdir()
    shutil.copy2(Path(engine.bin_dir) / "llama-bench", real / "llama-bench")
    assert backends_in(real) == ("CPU",)
