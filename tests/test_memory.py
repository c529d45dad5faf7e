"""The memory guard: predictions against the real engine's load log, placement rules, what is
free (fixture trees for hardware this machine lacks), and the refusal before a run."""

from __future__ import annotations

import dataclasses
import re
import subprocess
from pathlib import Path

import pytest

from tests.conftest import tokensleuth_bin
from tests.monitor.fakes import FakeNVML
from tokensleuth.core.errors import UserError
from tokensleuth.engines.llamabench.settings import settings_from_flags
from tokensleuth.engines.placement import parse_load_log
from tokensleuth.models.shapes import REAL_SHAPES, write_shape
from tokensleuth.sources.build import EngineBuild
from tokensleuth.trials.memory import (
    MIB,
    Settings,
    guard,
    predict,
)
from tokensleuth.trials.memory_free import Free, gpu_free, host_free


@pytest.fixture(scope="module")
def mini(llama_tree: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_shape("qwen3-moe-mini", tmp_path_factory.mktemp("mini") / "mini.gguf", "Q8_0", llama_tree)


@pytest.fixture(scope="module")
def oss(llama_tree: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_shape("gpt-oss-mini", tmp_path_factory.mktemp("oss") / "oss.gguf", "MXFP4", llama_tree)


@pytest.mark.parametrize("which,flags", [("dense", ["-p", "512", "-n", "0"]), ("mini", ["-p", "256", "-n", "0"]),
                                         ("mini", ["-p", "0", "-n", "16", "-ub", "128", "-ctk", "q8_0"]),
                                         # sliding-window layers: 768 cells of the 1024 context
                                         ("oss", ["-p", "512", "-n", "0", "-d", "512"]),
                                         ("oss", ["-p", "0", "-n", "16", "-ub", "128"]),
                                         ("oss", ["-p", "0", "-n", "16", "--repack", "0"])])
def test_the_prediction_is_the_engines_own_figures(engine: EngineBuild, dense_model: Path, mini: Path, oss: Path,
                                                   which: str, flags: list[str]) -> None:
    model = {"dense": dense_model, "mini": mini, "oss": oss}[which]
    p = subprocess.run([str(Path(engine.bin_dir) / "llama-bench"), "-m", str(model), *flags, "-r", "1", "-t", "1",
                        "-v", "-o", "jsonl"], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-1500:]
    got = parse_load_log(p.stderr)
    need = predict(model, settings_from_flags(flags, []), gpu=False)
    assert abs(need.weights_mapped / MIB - got.model_mib["CPU_Mapped"]) < 0.01  # tensor sizes: exact
    # what the CPU backend repacks (gpt-oss's MXFP4 experts with AVX2) is a copy of the process's own
    assert abs(need.weights.get("host", 0.0) / MIB - got.model_mib.get("CPU_REPACK", 0.0)) < 0.01
    if which == "oss" and "avx2" in Path("/proc/cpuinfo").read_text() and "--repack" not in flags:
        assert got.model_mib["CPU_REPACK"] > 6
    # the KV formula: exact (gpt-oss's two caches, full and sliding, are printed rounded each)
    assert abs(need.kv["host"] / MIB - got.kv_mib["CPU"]) < (0.0101 if which == "oss" else 0.01)
    assert abs(need.compute["host"] / MIB - got.compute_mib["CPU"]) <= 0.05 * got.compute_mib["CPU"]
    total = sum(got.model_mib.values()) + sum(got.kv_mib.values()) + sum(got.compute_mib.values())
    assert abs((need.weights_mapped + need.total("host")) / MIB - total) <= 0.02 * total


def test_the_repacked_types_follow_the_cpu(tmp_path: Path) -> None:
    from tokensleuth.trials.memory import repack_types

    x86 = tmp_path / "x86"
    x86.write_text("processor\t: 0\nflags\t\t: fpu sse2 avx avx2 fma\n")
    arm = tmp_path / "arm"
    arm.write_text("processor\t: 0\nFeatures\t: fp asimd asimddp\n")
    old = tmp_path / "old"
    old.write_text("flags\t\t: fpu sse2\n")
    assert repack_types(x86) == {"Q4_0", "Q4_K", "IQ4_NL", "MXFP4"}
    assert "Q8_0" in repack_types(arm) and repack_types(old) == frozenset()
    assert repack_types(tmp_path / "missing") == frozenset()


def test_flags_that_move_memory() -> None:
    s = settings_from_flags(["-ngl", "0,99", "-ncmoe", "4", "-ot", "exps=CPU;attn=CUDA0", "-lm", "none", "-nkvo", "1",
                             "-ctk", "q8_0", "-ub", "2048", "-b", "1024", "-p", "512", "-n", "128", "-d", "4096"], [])
    assert (s.ngl, s.ncmoe, s.mmap, s.nkvo, s.type_k, s.type_v) == (99, 4, False, True, "q8_0", "f16")
    assert s.overrides == (("exps", "CPU"), ("attn", "CUDA0"))
    assert (s.n_ubatch, s.n_batch) == (2048, 1024)
    assert s.n_ctx == 4608  # the largest test (pp512 at depth 4096), padded to 256 cells
    assert settings_from_flags(["-mmp", "0"], []).mmap is False and settings_from_flags([], []).mmap is True
    assert settings_from_flags(["-pg", "2048,256"], []).n_ctx == 2304
    assert settings_from_flags([], [(0, 32, 0)]).n_ctx == 256


def test_layers_experts_and_overrides_are_placed_as_llama_cpp_does(mini: Path) -> None:
    every = predict(mini, settings_from_flags(["-ngl", "99"], []), gpu=True)
    embd = 151936 * 512 * 34 // 32  # token_embd, Q8_0: on the host whatever -ngl says
    assert abs(every.weights_mapped - embd) < 1 and every.weights["host"] == 0
    assert every.kv.get("host", 0) == 0 and every.kv["gpu"] > 0 and every.compute["gpu"] > every.compute["host"]
    output = 151936 * 512 * 34 // 32 + 512 * 4  # output.weight and output_norm
    none = predict(mini, settings_from_flags(["-ngl", "0"], []), gpu=True)
    assert none.weights.get("gpu", 0) == 0 and none.kv.get("gpu", 0) == 0
    # at -ngl 0 a GPU build still offloads the output matmul, copying its weights in: the buffer holds them
    assert abs(none.compute["gpu"] - every.compute["gpu"] - 151936 * 512 * 34 // 32) < 1
    # -ngl 4 of 8 layers: llama.cpp counts the output as the top layer, so the output and 3 layers
    half = predict(mini, settings_from_flags(["-ngl", "4"], []), gpu=True)
    layer = (every.weights["gpu"] - output) / 8
    assert abs(half.weights["gpu"] - (output + 3 * layer)) < 1e3 and abs(half.kv["gpu"] - every.kv["gpu"] * 3 / 8) < 1
    moe = predict(mini, settings_from_flags(["-ngl", "99", "-ncmoe", "8"], []), gpu=True)
    ot = predict(mini, settings_from_flags(["-ngl", "99", "-ot", r"ffn_.*_exps=CPU"], []), gpu=True)
    experts = 8 * 3 * 128 * 256 * 512 * 34 // 32
    assert abs(moe.weights_mapped - every.weights_mapped - experts) < 1
    assert abs(ot.weights_mapped - moe.weights_mapped) < 1
    cpu = predict(mini, settings_from_flags(["-ngl", "99"], []), gpu=False)  # a CPU build: all on the host
    assert "gpu" not in cpu.places() and cpu.compute["host"] == every.compute["gpu"]


def test_what_is_free_from_fixture_trees(tmp_path: Path) -> None:
    proc, cg = tmp_path / "proc", tmp_path / "cg"
    proc.mkdir()
    cg.mkdir()
    (proc / "meminfo").write_text("MemTotal: 100000000 kB\nMemAvailable: 50000000 kB\n")
    assert host_free(proc, cg) == (50000000 * 1024, "MemAvailable")
    (cg / "memory.max").write_text("8589934592\n")
    (cg / "memory.current").write_text("1073741824\n")
    # no /proc/self/cgroup here: the mount's root (a container's own cgroup, in a cgroup namespace)
    assert host_free(proc, cg) == (7 * 1073741824, "memory.max of cgroup /")
    assert gpu_free(FakeNVML(), tmp_path) == (75 << 30, "NVML")
    # an APU (Strix Halo): 512 MiB of VRAM carved out, the rest of its GPU's memory is GTT
    dev = tmp_path / "sys" / "class" / "drm" / "card0" / "device"
    dev.mkdir(parents=True)
    for k, v in {"vram_total": 512 << 20, "vram_used": 100 << 20, "gtt_total": 96 << 30, "gtt_used": 6 << 30}.items():
        (dev / f"mem_info_{k}").write_text(f"{v}\n")
    assert gpu_free(_NoNVML(), tmp_path / "sys") == ((90 << 30) + (412 << 20), "amdgpu GTT + VRAM")
    (dev / "mem_info_vram_total").write_text(f"{32 << 30}\n")  # a discrete card: its VRAM only
    assert gpu_free(_NoNVML(), tmp_path / "sys") == ((32 << 30) - (100 << 20), "amdgpu VRAM")


def _files(d: Path, **files: int | str) -> None:
    d.mkdir(parents=True, exist_ok=True)
    for name, v in files.items():
        (d / name.replace("_", ".", 1)).write_text(f"{v}\n")


def test_the_cgroup_limit_is_this_processs_own_cgroup_and_the_tightest_above_it(tmp_path: Path) -> None:
    """/proc/self/cgroup names the cgroup (the engine inherits it); a limit on it or on any cgroup
    above it binds, so the smallest limit less usage counts — not the mount root's file."""
    gib = 1 << 30
    proc, cg = tmp_path / "proc", tmp_path / "cg"
    (proc / "self").mkdir(parents=True)
    (proc / "meminfo").write_text("MemTotal: 100000000 kB\nMemAvailable: 50000000 kB\n")
    (proc / "self" / "cgroup").write_text("0::/user.slice/run-1.scope\n")
    _files(cg, memory_max="max")  # (v2's root has no limit; what the guard read before: none here)
    _files(cg / "user.slice", memory_max=8 * gib, memory_current=gib)
    _files(cg / "user.slice" / "run-1.scope", memory_max=16 * gib, memory_current=gib // 2)
    assert host_free(proc, cg) == (7 * gib, "memory.max of cgroup /user.slice")  # the parent's is tighter
    _files(cg / "user.slice" / "run-1.scope", memory_max=4 * gib, memory_current=3 * gib)
    assert host_free(proc, cg) == (gib, "memory.max of cgroup /user.slice/run-1.scope")
    _files(cg / "user.slice" / "run-1.scope", memory_max="max")  # no limit of its own: the parent's binds
    assert host_free(proc, cg) == (7 * gib, "memory.max of cgroup /user.slice")
    (cg / "user.slice" / "memory.current").unlink()  # a usage that cannot be read: the limit alone
    left, src = host_free(proc, cg)
    assert left == 8 * gib and src.startswith("memory.max of cgroup /user.slice, its usage unreadable")
    # a limit the root's file would have shown, but this process's cgroup has none: MemAvailable
    (proc / "self" / "cgroup").write_text("0::/system.slice\n")
    _files(cg / "system.slice", memory_max="max", memory_current=gib)
    assert host_free(proc, cg) == (50000000 * 1024, "MemAvailable")


def test_the_cgroup_limit_on_v1_and_a_hybrid_host(tmp_path: Path) -> None:
    """cgroup v1's memory controller (a hybrid host: v2 mounted beside it has no memory
    controller): the path on the memory line, under <root>/memory, limit_in_bytes less usage."""
    gib = 1 << 30
    proc, cg = tmp_path / "proc", tmp_path / "cg"
    (proc / "self").mkdir(parents=True)
    (proc / "meminfo").write_text("MemAvailable: 50000000 kB\n")
    (proc / "self" / "cgroup").write_text("5:devices:/\n4:memory:/process_api/abc\n1:cpu:/\n0::/\n")
    unlimited = 9223372036854771712  # v1's "no limit"
    _files(cg / "memory", memory_limit_in_bytes=unlimited, memory_usage_in_bytes=40 * gib)
    _files(cg / "memory" / "process_api", memory_limit_in_bytes=unlimited, memory_usage_in_bytes=gib)
    _files(cg / "memory" / "process_api" / "abc", memory_limit_in_bytes=2 * gib, memory_usage_in_bytes=gib // 2)
    _files(cg / "unified")  # v2's mount on a hybrid host: no memory files
    assert host_free(proc, cg) == (1.5 * gib, "memory.limit_in_bytes of cgroup /process_api/abc")
    _files(cg / "memory" / "process_api" / "abc", memory_limit_in_bytes=unlimited)
    assert host_free(proc, cg) == (50000000 * 1024, "MemAvailable")


def test_a_bad_override_regex_is_refused_before_anything_runs(tmp_path: Path) -> None:
    """-ot as llama-bench reads it: <regex>=<buffer type> pairs, ';' between pairs, ',' between runs
    (an empty run: none). A regex that does not compile (llama.cpp's std::regex throws at load)
    or a pair without a buffer type (llama-bench refuses it) is one line, before anything runs."""
    s = settings_from_flags(["-ot", r"blk\.[0-9]+\.ffn_.*_exps=CPU;attn=CUDA0,,exps=CPU"], [])
    assert s.overrides == ((r"blk\.[0-9]+\.ffn_.*_exps", "CPU"), ("attn", "CUDA0"), ("exps", "CPU"))
    with pytest.raises(UserError, match=r"^-ot 'ffn_\(up=CPU': 'ffn_\(up' is not a regular expression "
                                        r"\(missing \), unterminated subpattern at position 4\) — fix the pattern"):
        settings_from_flags(["-ot", "ffn_(up=CPU"], [])
    for bad in ("exps", "exps=", "exps=CPU;attn"):
        with pytest.raises(UserError, match="has no buffer type after '=' — -ot takes <regex>=<buffer type> pairs"):
            settings_from_flags(["--override-tensor", bad], [])
    # a ',' inside a regex splits it, as llama-bench splits it: its first half has no '='
    # (the regex shown as typed, one '\' each)
    with pytest.raises(UserError, match="^" + re.escape(r"-ot 'blk\.\d{1,2}\.=CPU': 'blk\.\d{1' has no buffer type")):
        settings_from_flags(["-ot", r"blk\.\d{1,2}\.=CPU"], [])
    # Settings made another way: refused before the model is read (there is none here)
    with pytest.raises(UserError, match="'\\[' is not a regular expression"):
        predict(tmp_path / "absent.gguf", Settings(overrides=(("[", "CPU"),)), gpu=True)


class _NoNVML:
    def nvmlInit(self) -> None:
        raise RuntimeError("NVML Shared Library Not Found")


def test_a_run_that_cannot_fit_is_refused_and_one_close_to_full_is_warned(mini: Path) -> None:
    need = predict(mini, settings_from_flags(["-ngl", "99"], []), gpu=True).total("gpu")
    with pytest.raises(UserError, match=r"needs .* of gpu memory .* but 0\.1 GB is free — it would not fit.*-ngl"):
        guard([str(mini)], ["-ngl", "99"], ["pp512"], ["CPU", "CUDA"], free=Free(64e9, 0.1e9))
    warned: list[str] = []
    guard([str(mini)], ["-ngl", "99"], ["pp512"], ["CPU", "CUDA"], warn=warned.append, free=Free(64e9, need / 0.95))
    assert len(warned) == 1 and "within 10% of full" in warned[0]
    warned.clear()
    guard([str(mini)], ["-ngl", "99"], ["pp512"], ["CPU", "CUDA"], warn=warned.append, free=Free(64e9, 2 * need))
    assert warned == []
    # a CPU build never asks the GPU
    guard([str(mini)], ["-ngl", "99"], ["pp512"], ["CPU"], warn=warned.append, free=Free(64e9, 0.0))
    assert warned == []


def test_the_cli_refuses_before_anything_runs(engine: EngineBuild, llama_tree: Path, cli_env: dict[str, str],
                                              tmp_path: Path) -> None:
    """A model larger than any machine's memory (a sparse file: its header is real, its data a
    hole), loaded without mmap: refused in one line, exit 2, nothing stored."""
    big = dataclasses.replace(REAL_SHAPES["qwen3-30b-a3b"], n_expert=4096, n_layer=96)
    model = write_shape(big, tmp_path / "huge.gguf", "Q8_0", llama_tree, sparse=True)
    assert model.stat().st_size > 1e12 and model.stat().st_blocks * 512 < 100e6
    for argv in (["bench", "--model", str(model), "--", "-lm", "none", "-p", "16", "-n", "0"],
                 ["compare", "--arm", f"a={engine.source}", "--arm", f"b={engine.source}", "-m", str(model),
                  "-w", "pp16", "--", "-lm", "none"],
                 ["model", "fit", str(model), "--cpu", "--", "-lm", "none"]):
        p = subprocess.run([tokensleuth_bin(), *argv], env=cli_env, capture_output=True, text=True, timeout=300)
        assert p.returncode == 2, (argv, p.stderr[-1500:])
        line = p.stderr.strip().splitlines()[-1]
        assert line.startswith("error: huge.gguf needs ") and "of host memory" in line and "would not fit" in line
        assert "Traceback" not in p.stderr
    assert not Path(cli_env["TOKENSLEUTH_DB"]).exists()  # refused before a study was opened
    # bisect (and decompose: both judge through tokensleuth.drivers.verdicts.judge) refuse before the first trial
    dirs = []
    for name in ("good", "bad"):
        (tmp_path / name).symlink_to(engine.bin_dir, target_is_directory=True)
        dirs += ["--bin", str(tmp_path / name)]
    p = subprocess.run([tokensleuth_bin(), "bisect", *dirs, "-m", str(model), "-w", "pp16", "--", "-lm", "none"],
                       env=cli_env, capture_output=True, text=True, timeout=300)
    assert p.returncode == 2, p.stderr[-1500:]
    line = p.stderr.strip().splitlines()[-1]
    assert line.startswith("error: huge.gguf needs ") and "would not fit" in line and "Traceback" not in p.stderr
    import sqlite3

    con = sqlite3.connect(cli_env["TOKENSLEUTH_DB"])
    assert con.execute("SELECT COUNT(*) FROM trials").fetchone()[0] == 0


def test_the_judge_refuses_a_load_that_cannot_fit_before_its_first_trial(engine: EngineBuild, llama_tree: Path,
                                                                         tmp_path: Path) -> None:
    """What bisect and decompose compare through: a source whose load would not fit is refused
    (UserError) before either arm runs, on the prediction for its own flags."""
    import sqlite3

    from tokensleuth.drivers.verdicts.judge import Judge
    from tokensleuth.store import Store

    huge = dataclasses.replace(REAL_SHAPES["qwen3-30b-a3b"], n_expert=4096, n_layer=96)
    model = write_shape(huge, tmp_path / "huge.gguf", "Q8_0", llama_tree, sparse=True)
    src = f"bin:{engine.bin_dir}"
    with Store(tmp_path / "s.db") as store:
        judge = Judge(store, workloads=["pp16"], flags=["-lm", "none"], cmake=[], timeout_s=60)
        with pytest.raises(UserError, match="huge.gguf needs .* would not fit"):
            judge.compare(src, src, [str(model)], 0.02, 4)
    assert sqlite3.connect(tmp_path / "s.db").execute("SELECT COUNT(*) FROM trials").fetchone()[0] == 0


def test_the_host_side_errs_on_the_safe_side() -> None:
    """A load whose buffers alone would fit the host's free memory, but not with the runtime's
    share and 5% beside them, is refused: a missed refusal is a frozen machine."""
    from tokensleuth.trials.memory import HOST_MARGIN, HOST_RUNTIME_GPU, Need, judge
    from tokensleuth.trials.memory_free import Free

    need = Need(weights={"host": 10e9, "gpu": 20e9}, kv={"gpu": 1e9}, compute={"host": 0.1e9, "gpu": 1e9})
    assert need.guarded("host", True) == pytest.approx(10.1e9 * (1 + HOST_MARGIN) + HOST_RUNTIME_GPU)
    assert need.guarded("gpu", True) == need.total("gpu")  # the GPU's prediction is within 0.2%: no margin
    s = settings_from_flags(["-ngl", "99"], [])
    tight = judge(Path("m.gguf"), need, Free(10.2e9, 40e9), s)
    assert not tight.ok and "10.1 GB compute" not in tight.line and "margin for the runtime" in tight.line
    assert tight.line.startswith("m.gguf needs 11.1 GB of host memory")
    assert judge(Path("m.gguf"), need, Free(20e9, 40e9), s).ok
