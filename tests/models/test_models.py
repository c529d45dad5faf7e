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


def test_truncated_gguf_is_refused_before_the_engine(tmp_path: Path, dense_model: Path) -> None:
    """Right magic, truncated body: the header's tensor extents do not fit in the file."""
    from tokensleuth.models.info import check_gguf

    check_gguf(dense_model)
    data = dense_model.read_bytes()
    for keep in (len(data) - 1, len(data) // 2, 4096, 23):
        cut = tmp_path / f"cut{keep}.gguf"
        cut.write_bytes(data[:keep])
        with pytest.raises(UserError, match="truncated") as e:
            check_gguf(cut)
        assert "\n" not in str(e.value) and "re-download" in str(e.value)


def test_tensor_extent_is_read_from_the_header(tmp_path: Path) -> None:
    from tests.faults.gguf_tiny import write_tiny_gguf
    from tokensleuth.models.info import check_gguf

    for big_endian in (False, True):
        p = write_tiny_gguf(tmp_path / f"t{big_endian}.gguf", big_endian=big_endian)
        check_gguf(p)
        size = p.stat().st_size
        # the last tensor (8 f32) ends exactly at the end of the file: one byte less is refused
        p.write_bytes(p.read_bytes()[:-1])
        with pytest.raises(UserError, match=f"end at byte {size:,} but the file has {size - 1:,} bytes"):
            check_gguf(p)


def test_gguf_check_is_fast_on_a_real_tokenizer(moe_model: Path) -> None:
    import time

    from tokensleuth.models.info import check_gguf

    t = time.perf_counter()
    check_gguf(moe_model)  # 151,936 tokenizer strings and the merges in the header
    assert time.perf_counter() - t < 2.0
