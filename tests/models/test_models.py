"""Synthetic models: valid GGUF, real tokenizer, realistic MoE metadata; model info."""

from __future__ import annotations

from pathlib import Path

import pytest

from tokensleuth.errors import UserError
from tokensleuth.models.info import model_info
from tokensleuth.models.synth import SHAPES, synth


def test_moe_info(moe_model: Path) -> None:
    i = model_info(moe_model)
    assert i.arch == "qwen3moe"
    assert (i.n_expert, i.n_expert_used) == (16, 4)
    assert i.n_vocab == 151936  # the qwen2 tokenizer copied from llama.cpp's models/
    assert i.n_active_params < i.n_params
    assert set(i.quant_mix) >= {"Q8_0"}
    assert i.bytes_per_token < i.file_bytes


def test_dense_info(dense_model: Path) -> None:
    i = model_info(dense_model)
    assert i.arch == "llama" and i.n_expert == 0
    assert i.n_active_params == i.n_params


def test_small_moe_shape_is_realistic() -> None:
    s = SHAPES[("qwen3moe", "small")]
    assert (s.n_expert, s.n_expert_used) == (128, 8)


def test_f16_synth_needs_no_quantize(llama_tree: Path, tmp_path: Path) -> None:
    p = synth("llama", "tiny", tmp_path / "m.gguf", "F16", llama_tree, None)
    assert model_info(p).quant_mix.get("F16", 0) > 0


def test_bad_inputs(tmp_path: Path, llama_tree: Path) -> None:
    with pytest.raises(UserError, match="no synthetic shape"):
        synth("gpt2", "tiny", tmp_path / "x.gguf", "Q8_0", llama_tree, None)
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"NOPE" * 10)
    with pytest.raises(UserError, match="not a GGUF"):
        model_info(bad)
