"""Placement from llama.cpp's load log: golden logs captured on the H200 (CUDA default,
token_embd moved to the GPU with -ot, a partial -ngl, and the Vulkan build), the sentence
that compares two arms, and the refusal of a GPU build that finds no GPU."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from tokensleuth.core.errors import UserError
from tokensleuth.engines.placement import (
    Placement,
    check_devices,
    difference,
    listed_devices,
    parse_load_log,
)

GOLDEN = Path(__file__).resolve().parent.parent / "golden" / "llamacpp" / "load"


def load(name: str) -> Placement:
    return parse_load_log((GOLDEN / f"h200-{name}.log").read_text())


def test_default_cuda_keeps_the_input_embedding_in_host_memory() -> None:
    p = load("dense-default")
    assert p.model_mib == {"CPU_Mapped": 33.2, "CUDA0": 170.37}
    assert p.kv_mib == {"CUDA0": 3.0}
    assert p.compute_mib == {"CUDA0": 8.85, "CUDA_Host": 1.03}  # the first context only
    assert p.layers == (13, 13)
    assert p.tensors == {"token_embd.weight": "CPU"}
    assert p.devices() == ["CUDA0"]


def test_override_moves_the_embedding_and_the_sentence_says_so() -> None:
    base, cand = load("moe-default"), load("moe-embd-gpu")
    assert cand.tensors == {"token_embd.weight": "CUDA0"} and cand.model_mib == {"CUDA0": 1993.93}
    s = difference("default", base, "embd", cand)
    assert s.startswith("embd keeps token_embd.weight on CUDA0; default on CPU")
    assert "CPU_Mapped 158 MiB + CUDA0 1836 MiB" in s


def test_partial_offload_is_named_with_its_layers_and_kv_split() -> None:
    p = load("dense-ngl4")
    assert p.layers == (4, 13) and p.kv_mib == {"CPU": 2.25, "CUDA0": 0.75}
    assert p.others == {"token_embd.weight": 81}  # "(and 81 others)": the layers left on the CPU
    s = difference("full", load("dense-default"), "ngl4", p)
    assert "full offloads 13/13 layers, ngl4 4/13" in s and "KV cache: full CUDA0 3 MiB, ngl4 CPU 2 MiB" in s


def test_same_placement_is_said_plainly() -> None:
    p = load("dense-default")
    assert difference("a", p, "b", p) == "b and a place the model alike (CPU_Mapped 33 MiB + CUDA0 170 MiB)."


def test_vulkan_build_places_on_its_own_device() -> None:
    p = load("moe-vulkan")
    assert p.devices() == ["Vulkan0"] and p.model_mib["Vulkan0"] == 1836.29
    assert "vulkan CPU_Mapped 158 MiB + Vulkan0 1836 MiB" in difference("cuda", load("moe-default"), "vulkan", p)


def test_json_round_trip() -> None:
    p = load("moe-ngl4")
    assert Placement.from_json(p.to_json()) == p


def fake_bench(tmp_path: Path, listing: str) -> Path:
    """A llama-bench for hardware this machine lacks: it only answers --list-devices."""
    b = tmp_path / "llama-bench"
    b.write_text(f"#!/bin/sh\ncat <<'EOF'\n{listing}\nEOF\n")
    b.chmod(b.stat().st_mode | stat.S_IEXEC)
    return b


def test_a_gpu_build_that_finds_no_gpu_is_refused(tmp_path: Path) -> None:
    # what the Vulkan build printed on the H200 before the NVIDIA ICD could load
    b = fake_bench(tmp_path, "Available devices:\n  (none)")
    assert listed_devices(b) == []
    with pytest.raises(UserError, match=r"arm vulkan: the build has the Vulkan backend but .* finds no such device"):
        check_devices("vulkan", b, ("CPU", "Vulkan"), ["-ngl", "99"])
    check_devices("vulkan", b, ("CPU", "Vulkan"), ["-ngl", "0"])  # the CPU on purpose
    check_devices("cpu", b, ("CPU", "BLAS"), [])  # no GPU backend: nothing to find


def test_a_gpu_build_with_its_device_passes(tmp_path: Path) -> None:
    b = fake_bench(tmp_path, (GOLDEN / "h200-vulkan-list-devices.txt").read_text())
    assert listed_devices(b) == ["Vulkan0: NVIDIA H200 (143771 MiB, 143139 MiB free)"]
    check_devices("vulkan", b, ("CPU", "Vulkan"), ["-ngl", "99"])
