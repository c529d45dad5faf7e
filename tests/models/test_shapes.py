"""Real-size shapes written straight as quantized blocks: the real engine loads and runs them,
and agrees with `model info` on their size."""

from __future__ import annotations

import json
import subprocess
import tracemalloc
from pathlib import Path

import pytest

from tests.conftest import tokensleuth_bin
from tokensleuth.models.info import model_info
from tokensleuth.models.shapes import REAL_SHAPES, tokenizer_kvs, write_shape
from tokensleuth.models.synth import find_vocab
from tokensleuth.sources.build import EngineBuild


@pytest.mark.parametrize("quant", ["Q8_0", "Q4_0", "F16"])
def test_the_engine_runs_a_directly_written_shape(engine: EngineBuild, llama_tree: Path, tmp_path: Path,
                                                  quant: str) -> None:
    out = write_shape("qwen3-moe-mini", tmp_path / "m.gguf", quant, llama_tree)
    p = subprocess.run([str(Path(engine.bin_dir) / "llama-bench"), "-m", str(out), "-p", "16", "-n", "2", "-r", "1",
                        "-t", "1", "-o", "jsonl"], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    rows = [json.loads(line) for line in p.stdout.splitlines() if line.startswith("{")]
    assert len(rows) == 2 and all(r["avg_ts"] > 0 for r in rows)
    i = model_info(out)
    # the engine's own count of parameters and bytes is model info's
    assert rows[0]["model_n_params"] == i.n_params and rows[0]["model_size"] == sum(i.quant_mix.values())
    assert quant in rows[0]["model_type"]
    s = REAL_SHAPES["qwen3-moe-mini"]
    assert (i.arch, i.n_layer, i.n_embd, i.n_expert, i.n_expert_used) == ("qwen3moe", s.n_layer, s.n_embd, 128, 8)
    assert i.n_vocab == 151936  # the real qwen2 tokenizer


def test_memory_does_not_grow_with_the_model(llama_tree: Path, tmp_path: Path) -> None:
    tracemalloc.start()
    try:
        out = write_shape("qwen3-moe-mini", tmp_path / "m.gguf", "Q8_0", llama_tree)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    size = out.stat().st_size
    assert size > 500e6
    assert peak < 120e6, peak  # the 64 MiB pool and one 16 MiB chunk, not the 0.6 GB model


def test_the_real_shapes_have_their_models_counts(llama_tree: Path) -> None:
    """Header-only check of the big shapes (the tensors as planned, no data written): the
    parameter counts of Qwen3-30B-A3B and Llama 3.1 8B."""
    import numpy as np

    from tokensleuth.models.shapes import tensor_plan

    want = {"qwen3-30b-a3b": (30_532_122_624, 151936), "llama-3.1-8b": (8_030_261_248, 128256)}
    for name, (params, vocab) in want.items():
        s = REAL_SHAPES[name]
        _, _, n_vocab = tokenizer_kvs(find_vocab(llama_tree, s.vocab))
        assert n_vocab == vocab
        assert sum(int(np.prod(shape)) for _, shape, _ in tensor_plan(s, n_vocab)) == params
        # a vocab-only file (no tensors, no data section) is a complete GGUF file, not a truncated one
        assert model_info(find_vocab(llama_tree, s.vocab)).n_params == 0


def test_synth_shape_cli_and_bad_input(tmp_path: Path, engine: EngineBuild, cli_env: dict[str, str]) -> None:
    out = tmp_path / "m.gguf"
    p = subprocess.run([tokensleuth_bin(), "model", "synth", "--shape", "qwen3-moe-mini", "--quant", "Q4_0", "--out",
                        str(out)], env=cli_env, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    assert "qwen3-moe-mini (qwen3moe), 0.565 B params" in p.stdout and out.exists()
    for args, what in ((["--shape", "gpt-9"], "no shape 'gpt-9'"), (["--shape", "qwen3-moe-mini", "--quant", "Q3_K_S"],
                                                                    "writes Q8_0, Q4_0, F16, MXFP4, Q6_K, Q4_K_M, IQ4_XS directly"),
                       (["--shape", "llama-3.1-8b", "--quant", "MXFP4"], "MXFP4 is an expert format"),
                       (["--shape", "llama-3.1-8b", "--vocab", "gpt-2"], "--vocab is for --arch/--size models"),
                       (["--arch", "qwen3moe", "--vocab", "qwen9"], "no tokenizer 'qwen9'")):
        p = subprocess.run([tokensleuth_bin(), "model", "synth", *args, "--out", str(tmp_path / "x.gguf")],
                           env=cli_env, capture_output=True, text=True, timeout=60)
        assert p.returncode == 2 and what in p.stderr and len(p.stderr.strip().splitlines()) == 1, p.stderr
        assert not (tmp_path / "x.gguf").exists()
    assert not list(tmp_path.glob(".*.part"))  # nothing half-written left behind


def test_gpt_oss_is_written_as_its_architecture_and_runs(engine: EngineBuild, llama_tree: Path, tmp_path: Path) -> None:
    """gpt-oss (sinks, biases, a sliding window on every other layer, MXFP4 experts), at a test's
    size: llama.cpp loads it as its own architecture and runs it."""
    out = write_shape("gpt-oss-mini", tmp_path / "oss.gguf", "MXFP4", llama_tree)
    p = subprocess.run([str(Path(engine.bin_dir) / "llama-bench"), "-m", str(out), "-p", "16", "-n", "2", "-r", "1",
                        "-t", "1", "-v", "-o", "jsonl"], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    rows = [json.loads(line) for line in p.stdout.splitlines() if line.startswith("{")]
    assert len(rows) == 2 and all(r["avg_ts"] > 0 for r in rows) and "MXFP4 MoE" in rows[0]["model_type"]
    assert "n_swa                 = 128" in p.stderr and "layer   0 assigned to device CPU, is_swa = 1" in p.stderr
    assert "layer   1 assigned to device CPU, is_swa = 0" in p.stderr
    i = model_info(out)
    assert rows[0]["model_n_params"] == i.n_params and rows[0]["model_size"] == sum(i.quant_mix.values())
    assert set(i.quant_mix) == {"MXFP4", "Q8_0", "F32"}  # experts MXFP4, the other matrices Q8_0
    # a vocabulary padded past the copied tokenizer's (gpt-oss-120b's 201,088) loads and runs
    import dataclasses

    padded = write_shape(dataclasses.replace(REAL_SHAPES["gpt-oss-mini"], n_vocab=160_000), tmp_path / "pad.gguf",
                         "MXFP4", llama_tree)
    p = subprocess.run([str(Path(engine.bin_dir) / "llama-bench"), "-m", str(padded), "-p", "16", "-n", "2", "-r", "1",
                        "-t", "1", "-v", "-o", "jsonl"], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    assert "n_vocab               = 160000" in p.stderr and model_info(padded).n_vocab == 160_000
    assert "tokensleuth_pad" not in p.stderr  # padding is not logged token by token at each load


def test_gpt_oss_120b_has_its_models_counts_and_vocabulary(llama_tree: Path, tmp_path: Path) -> None:
    """The full shape, header only (the data a hole of its size): 116.83 B parameters as
    OpenAI's model card counts them, 5.13 B active without the input embedding, the
    vocabulary padded to o200k_harmony's 201,088 tokens."""
    out = write_shape("gpt-oss-120b", tmp_path / "oss120.gguf", "MXFP4", llama_tree, sparse=True)
    i = model_info(out)
    assert i.n_vocab == 201088 and i.n_layer == 36 and (i.n_expert, i.n_expert_used) == (128, 4)
    assert i.n_params == 116_829_156_672
    embd = 201088 * 2880
    assert abs((i.n_active_params - embd) / 1e9 - 5.13) < 0.005
    assert abs(i.file_bytes / 2**30 - 59.0) < 0.1  # the field report's 59 GB (GiB) model
    # the padded tokens come after qwen2's own
    from tokensleuth.models.info import read_header

    kv = read_header(out).kv
    assert kv["tokenizer.ggml.tokens"].count == kv["tokenizer.ggml.token_type"].count == 201088
