"""The kernel tracers' readers on files in each vendor's documented format, the CUDA tracer's
library compiled against this machine's CUPTI, and the refusals (one line, what to install)."""

from __future__ import annotations

import shutil
import struct
import subprocess
from pathlib import Path

import numpy as np
import pytest

from tokensleuth.core.errors import EngineError, UserError
from tokensleuth.kernels import MEMCPY, OP, cupti, rocprof, short_name, tracer_for, vulkan

DATA = Path(__file__).parent / "data"


def test_names_keep_template_arguments_and_lose_parameters() -> None:
    assert short_name("void mul_mat_vec_q<(ggml_type)8, 1>(void const*, void const*, float*, int)") == \
        "mul_mat_vec_q<(ggml_type)8, 1>"
    assert short_name("divide_kernel(float*, float const*, int)") == "divide_kernel"
    assert short_name("k_bin_bcast<&(op_add(float, float)), float, float, float>(float const*)") == \
        "k_bin_bcast<&(op_add(float, float)), float, float, float>"
    assert short_name("_Z15addition_kernelIfEvPT_PKfS3_ii.kd") == "_Z15addition_kernelIfEvPT_PKfS3_ii"
    assert short_name("[memcpy HtoD]") == "[memcpy HtoD]"


def test_rocprofv3s_documented_csv() -> None:
    """rocprofiler-sdk's own example: rows out of order, grid sizes in work-items, BOOTTIME stamps."""
    t = rocprof.read_csv(DATA / "rocprofv3_kernel_trace.csv", boottime_minus_monotonic=1_550_000_000_000_000)
    assert [t.names[i] for i in t.name] == ["addition_kernel<float>", "multiply_kernel", "divide_kernel"]
    assert t.start.tolist() == [151853029637, 151853052877, 151853064037]  # sorted, on the monotonic clock
    assert t.busy_ns.tolist() == [12800, 11160, 11200]
    assert t.grid[0].tolist() == [16, 1024, 1] and t.block[0].tolist() == [64, 1, 1]  # 1024 items / 64 = 16 blocks
    assert t.registers.tolist() == [8, 8, 12] and t.shared.tolist() == [0, 0, 0] and t.timeline


def test_rocprofv3s_rocm6_header_is_read_by_name() -> None:
    t = rocprof.read_csv(DATA / "rocprofv3_kernel_trace_rocm6.csv", boottime_minus_monotonic=0)
    assert [t.names[i] for i in t.name] == ["mul_mat_q<(ggml_type)8, 64, false>", "rms_norm_f32<1024>"]
    assert t.shared.tolist() == [16384, 0] and t.grid[0].tolist() == [16, 2, 1] and t.registers.tolist() == [-1, -1]


def test_a_csv_that_is_not_a_kernel_trace_is_refused(tmp_path: Path) -> None:
    bad = tmp_path / "x_kernel_trace.csv"
    bad.write_text('"Kind","Agent_Id"\n"KERNEL_DISPATCH",1\n')
    with pytest.raises(UserError, match="not a rocprofv3 kernel trace"):
        rocprof.read_csv(bad)


def _stamped(path: Path, t0: int = 1000, step: int = 10) -> list[tuple[int, str]]:
    return [(t0 + i * step, line) for i, line in enumerate(path.read_text().splitlines())]


def test_the_vulkan_perf_loggers_blocks() -> None:
    lines = _stamped(DATA / "vulkan_perf_logger.txt")
    t = vulkan.parse(lines, start_ns=500)
    assert not t.timeline and set(t.kind.tolist()) == {OP}
    rows = [(t.names[n], int(s), int(e), int(c), int(b)) for n, s, e, c, b in
            zip(t.name, t.start, t.end, t.calls, t.busy_ns, strict=True)]
    fa = ("FLASH_ATTN_EXT dst(128,32,1,1),  q(128,1,32,1),  k(128,256,8,1),  v(128,256,8,1),  m(256,1,1,1)")
    # block 1 spans from the start to its Total line (line 7), block 2 from there to its own (line 12)
    assert rows[:4] == [("ADD", 500, 1060, 48, 150_000), (fa, 500, 1060, 24, 252_000),
                        ("MUL_MAT_VEC q8_0 m=4096 n=1 k=4096", 500, 1060, 96, 1_920_000),
                        ("RMS_NORM_MUL RMS_NORM(4096,1,1,1)", 500, 1060, 49, 98_000)]
    assert rows[4:] == [("ADD", 1060, 1110, 48, 144_000), ("MUL_MAT_VEC q8_0 m=4096 n=1 k=4096", 1060, 1110, 96,
                                                          1_008_000)]
    assert t.notes == [vulkan.VulkanTracer.changes]


def test_the_vulkan_loggers_older_format_without_totals() -> None:
    t = vulkan.parse(_stamped(DATA / "vulkan_perf_logger_old.txt"), start_ns=0)
    assert [(t.names[n], int(b), int(e)) for n, b, e in zip(t.name, t.busy_ns, t.end, strict=True)] == [
        ("ADD", 150_000, 1030), ("MUL_MAT_VEC q8_0 m=4096 n=1 k=4096", 1_920_000, 1030), ("ADD", 144_000, 1060)]


def _cupti_file(path: Path, names: list[str], rows: list[tuple[int, ...]], offset: int = 0, dropped: int = 0,
                mode: int = 0, every: int = 1, offset_end: int | None = None, devices: list[int] | None = None,
                flags: list[int] | None = None) -> None:
    """A trace in the documented format (kernels/cupti.py): rows of (start, end, name, kind, regs, smem)."""
    out = bytearray(b"TSKTRC2\0")
    out += struct.pack("<4I", 2, mode, 130001, 130001)
    out += struct.pack("<2q", offset, offset if offset_end is None else offset_end) + struct.pack("<2Q", dropped, 0)
    out += struct.pack("<4I", every, cupti.RECORD.itemsize, len(names), len(rows))
    for n in names:
        out += struct.pack("<I", len(n.encode())) + n.encode()
    rec = np.zeros(len(rows), dtype=cupti.RECORD)
    for i, (start, end, name, kind, regs, smem) in enumerate(rows):
        rec[i]["start"], rec[i]["end"], rec[i]["name"], rec[i]["kind"] = start, end, name, kind
        rec[i]["registers"], rec[i]["static_smem"], rec[i]["dynamic_smem"] = regs, smem, 16
        rec[i]["grid"], rec[i]["block"] = (128, 1, 1), (256, 1, 1)
        rec[i]["device"] = (devices or [0] * len(rows))[i]
        rec[i]["flags"] = (flags or [0] * len(rows))[i]
    path.write_bytes(bytes(out) + rec.tobytes())


def test_the_cuda_tracers_file_is_read_demangled_and_on_the_monotonic_clock(tmp_path: Path) -> None:
    names = ["_Z13mul_mat_vec_qIL9ggml_type8ELi1EEvPKvS2_Pfi", "[memcpy HtoD]"]
    _cupti_file(tmp_path / "kernels-7.bin", names, [(5000, 7000, 0, 0, 64, 1024), (2000, 3000, 1, MEMCPY, 0, 0)],
                offset=1000, dropped=3, devices=[1, 0])
    (t,) = cupti.TRACER.read(tmp_path, [])
    assert [t.names[i] for i in t.name] == ["[memcpy HtoD]", "mul_mat_vec_q<(ggml_type)8, 1>"]
    assert t.start.tolist() == [1000, 4000] and t.busy_ns.tolist() == [1000, 2000]  # CUPTI's clock - 1000
    assert t.registers.tolist() == [-1, 64] and t.shared.tolist() == [-1, 1040] and t.grid[1].tolist() == [128, 1, 1]
    assert t.device.tolist() == [0, 1] and t.mode == "kernels" and t.lost == 3
    assert t.notes == ["3 records were lost (CUPTI's buffers were full): the kernel figures miss them"]
    # a wall-clock step while the engine ran is said; a sampled trace says its mode
    _cupti_file(tmp_path / "kernels-7.bin", names, [(5000, 7000, 0, 0, 64, 1024)], offset=1000,
                offset_end=1000 + 5_000_000, mode=2, every=16)
    (t,) = cupti.TRACER.read(tmp_path, [])
    assert t.mode == "sample:16" and "moved +5.0 ms against the monotonic clock" in t.notes[0]
    whole = (tmp_path / "kernels-7.bin").read_bytes()
    (tmp_path / "kernels-7.bin").write_bytes(whole.replace(b"TSKTRC2", b"TSKTRC1"))
    with pytest.raises(UserError, match="another version of tokensleuth's CUDA tracer"):
        cupti.TRACER.read(tmp_path, [])
    _cupti_file(tmp_path / "kernels-7.bin", names, [(5000, 7000, 0, 0, 64, 1024), (2000, 3000, 1, MEMCPY, 0, 0)])
    whole = (tmp_path / "kernels-7.bin").read_bytes()
    (tmp_path / "kernels-7.bin").write_bytes(whole[:-10])  # killed while writing
    with pytest.raises(UserError, match="is cut short"):
        cupti.TRACER.read(tmp_path, [])
    (tmp_path / "kernels-7.bin").write_bytes(b"nothing of ours")
    with pytest.raises(UserError, match="not a kernel trace of tokensleuth's CUDA tracer"):
        cupti.TRACER.read(tmp_path, [])
    (tmp_path / "kernels-7.bin").unlink()
    (tmp_path / "kernels-8.err").write_text("cuptiActivityEnable(CONCURRENT_KERNEL): CUPTI_ERROR_NOT_INITIALIZED\n")
    with pytest.raises(EngineError, match="could not start: cuptiActivityEnable.*NOT_INITIALIZED"):
        cupti.TRACER.read(tmp_path, [])


def test_the_cuda_tracers_library_builds_against_this_machines_cupti_or_is_refused(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Where CUPTI is installed the injection library is compiled (and exports the entry point
    the CUDA driver calls); where it is not, tracing is refused in one line that says what to install."""
    monkeypatch.setenv("TOKENSLEUTH_CACHE", str(tmp_path / "cache"))  # compiled here, not taken from the cache
    monkeypatch.setattr(cupti, "_built", {})
    found = cupti.find_cupti()
    if found is None:
        with pytest.raises(UserError, match="needs CUPTI, and none was found: install the CUDA toolkit"):
            cupti.TRACER.ready()
    else:
        lib = cupti.library(found)
        symbols = subprocess.run(["nm", "-D", "--defined-only", str(lib)], capture_output=True, text=True).stdout
        assert lib.is_relative_to(tmp_path / "cache")
        assert " T InitializeInjection" in symbols and "at_exit" not in symbols  # only the entry point is exported
        env = cupti.TRACER.env(tmp_path)
        assert env == {"CUDA_INJECTION64_PATH": str(lib), "TOKENSLEUTH_KERNELS_DIR": str(tmp_path),
                       "TOKENSLEUTH_CUPTI_MODE": "kernels"}
    assert cupti.find_cupti([tmp_path]) is None  # a folder without CUPTI is not taken for one
    monkeypatch.setattr(cupti, "find_cupti", lambda roots=None: None)  # a machine without CUPTI
    with pytest.raises(UserError, match="needs CUPTI, and none was found: install the CUDA toolkit"):
        cupti.TRACER.ready()


def test_a_tracer_is_chosen_from_the_backends_and_a_cpu_build_is_refused() -> None:
    assert tracer_for(("CPU", "CUDA")).name == "cuda"
    assert tracer_for(("CPU", "ROCm")).name == "rocm"
    assert tracer_for(("Vulkan",)).name == "vulkan"
    with pytest.raises(UserError, match="no kernel tracer for a build with backends CPU: kernels are traced on CUDA"):
        tracer_for(("CPU",))


def test_rocprofv3_missing_is_refused_in_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(UserError, match="runs rocprofv3, which is not on PATH: install rocprofiler-sdk"):
        rocprof.TRACER.ready()
    assert rocprof.TRACER.prefix(Path("/o")) == ["rocprofv3", "--kernel-trace", "--output-format", "csv", "-d", "/o",
                                                  "-o", "%pid%", "--"]


# the H100 trace's own names (bench/results/gpu/raw_traces_h100): nvcc tags a file's internal
# names with _INTERNAL_<hash>_<length><file>_<hash>, and the hashes change with the build's path
H100_NAMES = [
    "_Z11k_bin_bcastIXadL_ZN42_INTERNAL_ee5aa2f1_11_binbcast_cu_6840010b6op_addEffEEfffJPKfEEvPKT0_PKT1_PT2_"
    "jjj5uint3SB_SB_SB_SB_jjjjjjjjjjjDpT3_",
    "_Z11k_bin_bcastIXadL_ZN42_INTERNAL_ee5aa2f1_11_binbcast_cu_6840010b6op_mulEffEEfffJPKfEEvPKT0_PKT1_PT2_"
    "jjj5uint3SB_SB_SB_SB_jjjjjjjjjjjDpT3_",
    "_Z11k_bin_bcastIXadL_ZN42_INTERNAL_ee5aa2f1_11_binbcast_cu_6840010b6op_divEffEEfffJPKfEEvPKT0_PKT1_PT2_"
    "jjj5uint3SB_SB_SB_SB_jjjjjjjjjjjDpT3_",
    "_Z21unary_gated_op_kernelIXadL_ZN38_INTERNAL_3a57546a_8_unary_cu_eb6d53667op_siluEfEEfEvPKT0_S3_PS1_llll",
    "_ZN12_GLOBAL__N_14topkILi4EEEvPf",  # void (anonymous namespace)::topk<4>(float*)
]


@pytest.mark.skipif(shutil.which("c++filt") is None, reason="no c++filt: the names stay mangled")
def test_one_kernel_built_in_two_folders_has_one_name_and_two_kernels_keep_two(tmp_path: Path) -> None:
    """The same kernels built in another folder (every hash of their tags another): read from each
    build's CUDA trace, the names are the same; the tags are all that is left out, so op_add,
    op_mul and op_div stay three kernels."""
    elsewhere = [n.replace("ee5aa2f1", "c669ff45").replace("6840010b", "1f2e3d4c").replace("3a57546a", "90ab12cd")
                 .replace("eb6d5366", "5566aabb") for n in H100_NAMES]
    assert len(set(elsewhere) & set(H100_NAMES)) == 1  # only the anonymous namespace's mangles alike
    read = []
    for build, names in (("h100", H100_NAMES), ("elsewhere", elsewhere)):
        (tmp_path / build).mkdir()
        _cupti_file(tmp_path / build / "kernels-7.bin", names,
                    [(1000 * i, 1000 * i + 500, i, 0, 32, 0) for i in range(len(names))])
        (t,) = cupti.TRACER.read(tmp_path / build, [])
        read.append([t.names[i] for i in t.name])
    assert read[0] == read[1] == [
        "k_bin_bcast<&op_add, float, float, float, float const*>",
        "k_bin_bcast<&op_mul, float, float, float, float const*>",
        "k_bin_bcast<&op_div, float, float, float, float const*>",
        "unary_gated_op_kernel<&op_silu, float>",
        "topk<4>"]


@pytest.mark.parametrize("release, kernel, memcpy, graph", [
    ("12.1", "CUpti_ActivityKernel9", "CUpti_ActivityMemcpy5", "CUpti_ActivityGraphTrace"),
    ("12.9", "CUpti_ActivityKernel9", "CUpti_ActivityMemcpy6", "CUpti_ActivityGraphTrace2"),
    ("13.0", "CUpti_ActivityKernel10", "CUpti_ActivityMemcpy6", "CUpti_ActivityGraphTrace2")])
def test_the_cuda_tracer_compiles_against_each_cupti_with_its_own_record_structs(
        release: str, kernel: str, memcpy: str, graph: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """CUpti_ActivityMemcpy6 came with CUDA 12.8 and Kernel10 with 13.0: the newest struct each
    CUPTI's headers define is compiled in (the headers come from NVIDIA's wheels: scripts/cuda_headers.py)."""
    import os
    import shutil

    from tokensleuth.core.paths import cache_dir

    here = cache_dir() / "cuda-headers" / release
    if not (here / ".done").exists():
        if os.environ.get("CI") == "true":
            pytest.fail(f"CUPTI headers of CUDA {release} missing: run scripts/setup.sh (scripts/cuda_headers.py)")
        pytest.skip(f"CUPTI headers of CUDA {release} not unpacked (scripts/cuda_headers.py)")
    found = cupti.find_cupti([here / "nvidia" / "cu13", here / "nvidia" / "cuda_cupti"])
    assert found is not None
    cc = shutil.which("cc") or shutil.which("gcc")
    assert cc is not None
    types = cupti.record_types(cc, found)
    assert types == {"TS_KERNEL": kernel, "TS_MEMCPY": memcpy, "TS_MEMSET": "CUpti_ActivityMemset4", "TS_GRAPH": graph}
    monkeypatch.setenv("TOKENSLEUTH_CACHE", str(tmp_path / "cache"))
    lib = cupti.library(found)
    symbols = subprocess.run(["nm", "-D", "--defined-only", str(lib)], capture_output=True, text=True).stdout
    assert " T InitializeInjection" in symbols
    for bad in ("sample:0", "sample:x", "nodes", ""):
        with pytest.raises(UserError, match="give kernels, graphs or sample:N"):
            cupti.check_mode(bad)
    cupti.check_mode("sample:16")
