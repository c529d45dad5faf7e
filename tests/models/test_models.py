"""Synthetic models: valid GGUF, real tokenizer, realistic MoE metadata; model info."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tokensleuth.core.errors import UserError
from tokensleuth.models.info import model_info
from tokensleuth.models.synth import SHAPES, synth
from tokensleuth.sources.build import EngineBuild


def test_moe_info(moe_model: Path) -> None:
    i = model_info(moe_model)
    assert i.arch == "qwen3moe"
    assert (i.n_expert, i.n_expert_used) == (16, 4)
    assert i.n_vocab == 32000  # llama-spm's tokenizer (tests.conftest.TEST_VOCAB), copied from llama.cpp's models/
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


def test_a_synthetic_model_has_its_shapes_tokenizer_unless_another_is_asked_for(llama_tree: Path, tmp_path: Path) -> None:
    # (the tiny MoE's own is qwen2's, 151,936 tokens: 78 M random weights to write, where this
    # test writes the tiny dense model's llama-spm (32,000) and bert-bge's (30,522))
    assert SHAPES[("qwen3moe", "tiny")].vocab == "qwen2"
    assert model_info(synth("llama", "tiny", tmp_path / "l.gguf", "F16", llama_tree, None)).n_vocab == 32000
    assert model_info(synth("llama", "tiny", tmp_path / "b.gguf", "F16", llama_tree, None, vocab="bert-bge")).n_vocab == 30522


def test_a_tokenizer_cut_to_its_first_tokens_makes_a_model_the_engine_runs(
        engine: EngineBuild, llama_tree: Path, tmp_path: Path) -> None:
    """--vocab-size keeps a SentencePiece tokenizer's first N tokens (specials, the 256 bytes, then
    the pieces, so byte fallback still spells any text): the model's vocabulary and its embedding
    and output rows are N, and the engine runs it."""
    import gguf

    p = synth("llama", "tiny", tmp_path / "cut.gguf", "F16", llama_tree, None, vocab="llama-spm", vocab_size=300)
    r = gguf.GGUFReader(p)
    assert len(r.fields["tokenizer.ggml.tokens"].contents()) == len(r.fields["tokenizer.ggml.scores"].contents()) == 300
    assert {t.name: [int(x) for x in t.shape] for t in r.tensors if t.name in ("token_embd.weight", "output.weight")} == {
        "token_embd.weight": [256, 300], "output.weight": [256, 300]}
    run = subprocess.run([str(Path(engine.bin_dir) / "llama-bench"), "-m", str(p), "-p", "16", "-n", "4", "-r", "1",
                          "-t", "1", "-o", "json"], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0 and json.loads(run.stdout)[0]["n_prompt"] == 16, run.stderr[-2000:]


def test_bad_inputs(tmp_path: Path, llama_tree: Path) -> None:
    with pytest.raises(UserError, match="no synthetic shape"):
        synth("gpt2", "tiny", tmp_path / "x.gguf", "Q8_0", llama_tree, None)
    with pytest.raises(UserError, match="no tokenizer 'qwen9' in this engine's models/ — --vocab one of: .*llama-spm"):
        synth("llama", "tiny", tmp_path / "x.gguf", "F16", llama_tree, None, vocab="qwen9")
    assert not (tmp_path / "x.gguf").exists()
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


def test_gguf_check_reads_the_header_alone(moe_model: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """151,936 tokenizer strings and the merges are skipped, never parsed: gguf's own reader
    (a whole-file parse, 7 s on this model) is never called, by the check or by model info."""
    import gguf

    from tokensleuth.models.info import ModelFacts, check_gguf

    def refuse(*a: object, **k: object) -> None:
        raise AssertionError("gguf.GGUFReader parsed the whole file")

    monkeypatch.setattr(gguf, "GGUFReader", refuse)
    check_gguf(moe_model)
    assert ModelFacts().info(moe_model).n_vocab == 32000


def test_the_header_reader_agrees_with_gguf_reader(moe_model: Path, dense_model: Path) -> None:
    """model info reads the header alone (tokenizer arrays skipped); what it reports is what
    gguf.GGUFReader's whole parse gives for the same file."""
    import gguf

    from tokensleuth.models.info import ModelFacts

    for p in (moe_model, dense_model):
        i = ModelFacts().info(p)
        r = gguf.GGUFReader(p)
        assert i.n_params == sum(int(t.n_elements) for t in r.tensors)
        assert sum(i.quant_mix.values()) == sum(int(t.n_bytes) for t in r.tensors)
        assert i.n_vocab == len(r.fields["tokenizer.ggml.tokens"].data)
        assert i.name == r.fields["general.name"].contents()
        assert i.n_layer == r.fields[f"{i.arch}.block_count"].contents()


def test_a_model_file_is_read_once_until_it_changes(tmp_path: Path, dense_model: Path) -> None:
    import os
    import shutil

    from tokensleuth.models.info import ModelFacts

    p = tmp_path / "m.gguf"
    shutil.copy(dense_model, p)
    facts = ModelFacts()
    first = facts.info(p)
    assert facts.info(p) is first and facts.reads == 1
    st = p.stat()
    os.utime(p, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))  # the file was replaced
    assert facts.info(p) == first and facts.reads == 2
    p.write_bytes(b"NOPE")  # and a damaged one is never answered from the cache
    with pytest.raises(UserError, match="not a GGUF"):
        facts.info(p)
