"""K- and i-quant shapes written straight as blocks: valid blocks, llama-quantize's own type mix,
and the real engine runs them."""

from __future__ import annotations

import collections
import json
import subprocess
import tracemalloc
from pathlib import Path

import gguf
import gguf.quants
import numpy as np
import pytest

from tokensleuth.models.blocks import pool
from tokensleuth.models.info import model_info
from tokensleuth.models.shapes import REAL_SHAPES, RealShape, write_shape
from tokensleuth.sources.build import EngineBuild

T = gguf.GGMLQuantizationType
KQUANTS = ("Q6_K", "Q4_K_M", "IQ4_XS")
# what llama-bench calls each file type (llama_model_ftype_name)
FTYPE_NAMES = {"Q6_K": "Q6_K", "Q4_K_M": "Q4_K - Medium", "IQ4_XS": "IQ4_XS - 4.25 bpw"}

# Small shapes whose type mixes take each of llama-quantize's paths for these file types:
SMALL = {
    # dense, n_head / n_head_kv = 4 (IQ4_XS: attn_v Q5_K), 16 layers (use_more_bits picks 0, 1, 4, 7, 10, 13, 14, 15)
    "llama": RealShape("llama", "llama-spm", 256, 16, 4, 1, 64, 768),
    # Qwen3-30B-A3B's rules (more than 8 experts, n_head / n_head_kv = 8) at a test's size
    "qwen3moe": RealShape("qwen3moe", "llama-spm", 256, 8, 8, 1, 32, 0, 16, 4, 256),
    # 8 experts: attn_k and attn_v Q8_0, attn_output Q5_K
    "qwen3moe-8x": RealShape("qwen3moe", "llama-spm", 256, 8, 4, 2, 64, 0, 8, 2, 256),
    # rows of 320 (not a multiple of 256): the fallbacks Q6_K -> Q8_0, Q4_K -> Q5_0, Q5_K -> Q5_1, IQ4_XS -> IQ4_NL
    "llama-320": RealShape("llama", "llama-spm", 320, 8, 5, 5, 64, 640),
}

# the formats in each (besides F32)
MIXES = {"llama": {"Q6_K": "Q6_K", "Q4_K_M": "Q4_K Q6_K", "IQ4_XS": "IQ4_XS Q5_K Q6_K"},
         "qwen3moe": {"Q6_K": "Q6_K", "Q4_K_M": "Q4_K Q6_K", "IQ4_XS": "IQ4_XS Q5_K Q6_K"},
         "qwen3moe-8x": {"Q6_K": "Q6_K Q8_0", "Q4_K_M": "Q4_K Q5_K Q6_K Q8_0", "IQ4_XS": "IQ4_XS Q5_K Q6_K Q8_0"},
         "llama-320": {"Q6_K": "Q8_0", "Q4_K_M": "Q5_0 Q8_0", "IQ4_XS": "IQ4_NL Q5_1 Q8_0"}}


@pytest.mark.parametrize("qtype", [T.Q8_0, T.Q4_0, T.Q5_0, T.Q5_1, T.IQ4_NL, T.MXFP4, T.Q4_K, T.Q5_K, T.Q6_K,
                                   T.IQ4_XS])
def test_random_blocks_are_valid_and_of_a_weights_size(qtype: T) -> None:
    """ggml's block size, and every block dequantizes (by the gguf library's reference
    dequantizers) to finite values of a trained weight's size."""
    b = pool(qtype, 1 << 20, np.random.default_rng(1))
    block, size = gguf.GGML_QUANT_SIZES[qtype]
    assert b.shape == ((1 << 20) // size, size) and b.dtype == np.uint8
    w = gguf.quants.dequantize(b, qtype)
    assert w.shape == (len(b), block)
    assert np.isfinite(w).all()
    assert np.abs(w).max() < 0.06 and 0.005 < w.std() < 0.03, (np.abs(w).max(), w.std())
    assert abs(w.mean()) < 0.005
    if qtype not in (T.MXFP4,):  # every f16 scale is a normal number: no subnormal d in any kernel
        d = np.frombuffer(b[:, 208:210].tobytes() if qtype == T.Q6_K else b[:, 0:2].tobytes(), np.float16)
        assert (np.abs(d.astype(np.float32)) >= np.finfo(np.float16).tiny).all()


def _types(gguf_file: Path | gguf.GGUFReader) -> dict[str, str]:
    reader = gguf_file if isinstance(gguf_file, gguf.GGUFReader) else gguf.GGUFReader(gguf_file)
    return {t.name: t.tensor_type.name for t in reader.tensors}


def _bench(engine: EngineBuild, model: Path) -> list[dict[str, object]]:
    p = subprocess.run([str(Path(engine.bin_dir) / "llama-bench"), "-m", str(model), "-p", "16", "-n", "2", "-r", "1",
                        "-t", "1", "-o", "jsonl"], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    return [json.loads(line) for line in p.stdout.splitlines() if line.startswith("{")]


@pytest.fixture(scope="module")
def f16_models(llama_tree: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("f16")
    return {name: write_shape(s, d / f"{name}.gguf", "F16", llama_tree) for name, s in SMALL.items()}


@pytest.mark.parametrize("quant", KQUANTS)
@pytest.mark.parametrize("shape", list(SMALL))
def test_the_type_mix_is_llama_quantizes(engine: EngineBuild, llama_tree: Path, f16_models: dict[str, Path],
                                         tmp_path: Path, shape: str, quant: str) -> None:
    """Every tensor's type in our file is the one the engine's own llama-quantize gives it when it
    quantizes the same shape from F16, and so is every tensor's byte count and the file type."""
    ours = write_shape(SMALL[shape], tmp_path / "ours.gguf", quant, llama_tree)
    ref = tmp_path / "ref.gguf"
    p = subprocess.run([str(Path(engine.bin_dir) / "llama-quantize"), str(f16_models[shape]), str(ref), quant, "2"],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    r_ours, r_ref = gguf.GGUFReader(ours), gguf.GGUFReader(ref)  # (each read once: a reader takes ~1 s)
    mine, theirs = _types(r_ours), _types(r_ref)
    assert mine == theirs, {k: (mine.get(k), theirs.get(k)) for k in mine.keys() | theirs.keys()
                            if mine.get(k) != theirs.get(k)}
    # (llama-quantize writes the tensors in its loader's order, by layer then by name)
    assert {t.name: int(t.n_bytes) for t in r_ours.tensors} == {t.name: int(t.n_bytes) for t in r_ref.tensors}
    for key in ("general.file_type", "general.quantization_version"):
        assert r_ours.fields[key].contents() == r_ref.fields[key].contents()
    # the formats the rules should bring in: the comparison was not vacuously equal
    assert set(theirs.values()) == {"F32", *MIXES[shape][quant].split()}
    rows = _bench(engine, ours)
    assert len(rows) == 2 and all(float(str(r["avg_ts"])) > 0 for r in rows)
    assert FTYPE_NAMES[quant] in str(rows[0]["model_type"])


def test_the_mixes_take_the_rules_they_should(llama_tree: Path, tmp_path: Path) -> None:
    """The mixes by tensor class, as llama-quantize's rules state them (checked against
    llama-quantize itself above): this says what the comparison covers."""
    from tokensleuth.models.quant_mix import tensor_types
    from tokensleuth.models.shapes import tensor_plan

    def by_class(shape: str, quant: str) -> dict[str, set[str]]:
        s = SMALL[shape]
        types = tensor_types(s, tensor_plan(s, 32000), quant)
        out: dict[str, set[str]] = collections.defaultdict(set)
        for name, t in types.items():
            if t != T.F32:
                out[name.split(".")[2] if name.startswith("blk.") else name.split(".")[0]].add(t.name)
        return dict(out)

    assert by_class("llama", "Q4_K_M") == {"token_embd": {"Q4_K"}, "output": {"Q6_K"}, "attn_q": {"Q4_K"},
                                           "attn_k": {"Q4_K"}, "attn_v": {"Q4_K", "Q6_K"},
                                           "attn_output": {"Q4_K"}, "ffn_gate": {"Q4_K"}, "ffn_up": {"Q4_K"},
                                           "ffn_down": {"Q4_K", "Q6_K"}}
    q = by_class("qwen3moe", "IQ4_XS")
    assert q["attn_v"] == {"Q5_K"} and q["ffn_down_exps"] == {"Q5_K", "IQ4_XS"} and q["output"] == {"Q6_K"}
    e = by_class("qwen3moe-8x", "Q6_K")
    assert e["attn_k"] == e["attn_v"] == {"Q8_0"} and e["ffn_up_exps"] == {"Q6_K"}
    f = by_class("llama-320", "Q4_K_M")
    assert f["attn_q"] == {"Q5_0"} and f["ffn_down"] == {"Q5_0", "Q8_0"} and f["output"] == {"Q8_0"}


@pytest.mark.parametrize("quant", KQUANTS)
def test_the_engine_runs_a_kquant_shape(engine: EngineBuild, llama_tree: Path, tmp_path: Path, quant: str) -> None:
    """Qwen3-30B-A3B's proportions (128 experts, 8 used, its qwen2 tokenizer) in each K/i-quant:
    the engine loads and runs it, and counts its parameters and bytes as model info does."""
    out = write_shape("qwen3-moe-mini", tmp_path / "m.gguf", quant, llama_tree)
    rows = _bench(engine, out)
    assert len(rows) == 2 and all(float(str(r["avg_ts"])) > 0 for r in rows)
    i = model_info(out)
    assert rows[0]["model_n_params"] == i.n_params and rows[0]["model_size"] == sum(i.quant_mix.values())
    assert FTYPE_NAMES[quant] in str(rows[0]["model_type"])
    assert i.n_params == model_info(write_shape("qwen3-moe-mini", tmp_path / "q8.gguf", "Q8_0", llama_tree)).n_params


def test_memory_does_not_grow_with_a_mixed_model(llama_tree: Path, tmp_path: Path) -> None:
    """A mix of three formats shares the one 64 MiB pool: the peak is the Q8_0 writer's."""
    tracemalloc.start()
    try:
        out = write_shape("qwen3-moe-mini", tmp_path / "m.gguf", "IQ4_XS", llama_tree)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert len(set(_types(out).values()) - {"F32"}) == 3
    assert out.stat().st_size > 300e6
    assert peak < 120e6, peak


def test_the_30b_shape_in_kquants_has_the_expected_size(llama_tree: Path, tmp_path: Path) -> None:
    """Header only (the data a hole): the 30B's Q4_K_M and Q6_K mixes and their sizes."""
    s = REAL_SHAPES["qwen3-30b-a3b"]
    sizes = {}
    for quant in ("Q4_K_M", "Q6_K"):
        out = write_shape("qwen3-30b-a3b", tmp_path / f"{quant}.gguf", quant, llama_tree, sparse=True)
        i = model_info(out)
        assert i.n_params == 30_532_122_624 and i.n_layer == s.n_layer
        sizes[quant] = sum(i.quant_mix.values())
    # Q6_K is 6.5625 bits a weight (and the F32 router, 12.6 M weights); Q4_K_M a mix of 4.5 and 6.5625
    # (Q6_K on ffn_down in 24 of 48 layers, on attn_v in 24, on output): 18.55 GB, as published Q4_K_M files
    assert abs(sizes["Q6_K"] / 30_532_122_624 * 8 - 6.573) < 0.001, sizes
    assert abs(sizes["Q4_K_M"] / 30_532_122_624 * 8 - 4.861) < 0.001, sizes
