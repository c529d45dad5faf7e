"""Synthetic GGUF models: real shapes and a real tokenizer, random weights.

Weights are written as F16 with the ``gguf`` package, then quantized by the same
engine build's llama-quantize, so the quant mix is exactly what llama.cpp makes.
The tokenizer is copied from the vocab files llama.cpp ships in ``models/``.
"""

from __future__ import annotations

import glob
import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path

import gguf
import numpy as np

from tokensleuth.core.errors import EngineError, UserError

QUANTS = ("F16", "Q8_0", "Q4_K_M")


@dataclass(frozen=True, slots=True)
class Shape:
    n_embd: int
    n_layer: int
    n_head: int
    n_head_kv: int
    n_ff: int  # dense FFN width (llama)
    n_expert: int = 0
    n_expert_used: int = 0
    n_ff_exp: int = 0
    vocab: str = "llama-spm"
    head_dim: int = 64


# Sizes are picked for this project's 2-core reference machine: tiny runs
# llama-bench -p 128 -n 32 in seconds; small/medium keep the real model's
# proportions (qwen3moe small: 128 experts, 8 used, like Qwen3-30B-A3B).
SHAPES: dict[tuple[str, str], Shape] = {
    ("llama", "tiny"): Shape(256, 4, 4, 2, 768),
    ("llama", "small"): Shape(1024, 12, 16, 4, 2816),
    ("llama", "medium"): Shape(2048, 16, 32, 8, 5632),
    ("qwen3moe", "tiny"): Shape(256, 4, 4, 2, 768, 16, 4, 256, "qwen2"),
    ("qwen3moe", "small"): Shape(512, 8, 8, 4, 1536, 128, 8, 256, "qwen2"),
    ("qwen3moe", "medium"): Shape(1024, 16, 16, 4, 3072, 64, 8, 512, "qwen2"),
}


def out_file(out: Path) -> None:
    """Refuse a directory as the model's path; make the folder it goes in, and remove what a
    killed writer of this same path left there (its ``.NAME.PID.part`` file or folder, the PID
    no longer running)."""
    if out.exists() and out.is_dir():
        raise UserError(f"{out} is a directory — give a file path for --out")
    out.parent.mkdir(parents=True, exist_ok=True)
    own = re.compile(rf"\.{re.escape(out.name)}\.(\d+)(\.[A-Za-z0-9_]+)?\.part")  # .NAME.PID[.RANDOM].part
    for left in out.parent.glob(f".{glob.escape(out.name)}.*.part"):
        m = own.fullmatch(left.name)
        pid = m.group(1) if m else ""
        if pid and int(pid) != os.getpid() and not Path(f"/proc/{pid}").exists():
            if left.is_dir():
                shutil.rmtree(left, ignore_errors=True)
            else:
                left.unlink(missing_ok=True)


def find_vocab(llama_tree: Path, name: str) -> Path:
    p = llama_tree / "models" / f"ggml-vocab-{name}.gguf"
    if not p.exists():
        raise EngineError(f"the engine source has no {p.name} to copy a tokenizer from")
    return p


def check_vocab(llama_tree: Path, name: str) -> None:
    """Refuse a tokenizer name llama.cpp's ``models/`` does not ship (``--vocab``), naming those it does."""
    have = sorted(f.name[len("ggml-vocab-"):-len(".gguf")] for f in (llama_tree / "models").glob("ggml-vocab-*.gguf"))
    if name not in have:
        raise UserError(f"no tokenizer {name!r} in this engine's models/ — --vocab one of: {', '.join(have)}")


def check_vocab_size(llama_tree: Path, name: str, size: int) -> None:
    """Refuse a ``--vocab-size`` the tokenizer cannot be cut to: only a SentencePiece vocabulary
    (llama-spm's kind: whole pieces with scores, byte fallback) still tokenizes any text with its
    first N tokens; a BPE one's merges name tokens past the cut. N must keep the special tokens and
    the 256 byte tokens, and be below the tokenizer's own size."""
    r = gguf.GGUFReader(find_vocab(llama_tree, name))
    model = str(r.fields["tokenizer.ggml.model"].contents())
    total = len(r.fields["tokenizer.ggml.tokens"].contents())
    if model != "llama":
        raise UserError(f"--vocab-size cuts SentencePiece tokenizers only (llama-spm's kind); {name} is "
                        f"{model!r} — leave --vocab-size out or use --vocab llama-spm")
    ids = [int(f.contents()) for k, f in r.fields.items() if k.startswith("tokenizer.ggml.") and k.endswith("_token_id")]
    types = r.fields["tokenizer.ggml.token_type"].contents()
    least = max([*ids, *(i for i, t in enumerate(types) if t == gguf.TokenType.BYTE)]) + 1
    if not least <= size <= total:
        raise UserError(f"--vocab-size {size} is out of range for {name} — give {least} (its special and byte "
                        f"tokens) to {total}")


def _copy_tokenizer(w: gguf.GGUFWriter, vocab: Path, size: int | None = None) -> int:
    """The tokenizer's keys, its arrays cut to their first ``size`` tokens (check_vocab_size)."""
    r = gguf.GGUFReader(vocab)
    n_vocab = 0
    for key, field in r.fields.items():
        if not key.startswith("tokenizer."):
            continue
        types = field.types
        val = field.contents()
        if types[0] == gguf.GGUFValueType.ARRAY:
            if size is not None and key in ("tokenizer.ggml.tokens", "tokenizer.ggml.scores",
                                            "tokenizer.ggml.token_type"):
                val = val[:size]
            w.add_key_value(key, val, types[0], sub_type=types[1])
            if key == "tokenizer.ggml.tokens":
                n_vocab = len(val)
        else:
            w.add_key_value(key, val, types[0])
    return n_vocab


def synth(
    arch: str,
    size: str,
    out: Path,
    quant: str,
    llama_tree: Path,
    quantize_bin: Path | None,
    seed: int = 0,
    vocab: str | None = None,
    vocab_size: int | None = None,
) -> Path:
    """Write a synthetic model of ``arch``/``size`` at ``quant`` to ``out``.

    ``vocab`` copies another of llama.cpp's tokenizers (``models/ggml-vocab-<vocab>.gguf``) than the
    shape's own: the tiny MoE's qwen2 (151,936 tokens) makes most of its load and token time, which
    llama-spm's 32,000 do not. ``vocab_size`` keeps its first N tokens (a SentencePiece tokenizer:
    byte fallback still spells any text): a tiny model's load and output layer are mostly its
    vocabulary (llama-spm's 32,000: 61 ms of a 101 ms llama-bench run of pp64 and tg8; 4,096: 15 of 43;
    bench/results/vocab_size_cost.txt)."""
    if (arch, size) not in SHAPES:
        archs = sorted({a for a, _ in SHAPES})
        raise UserError(f"no synthetic shape for {arch}/{size} — archs: {archs}, sizes: tiny|small|medium")
    if quant not in QUANTS:
        raise UserError(f"unsupported quant {quant!r} — choose from {', '.join(QUANTS)}")
    out_file(out)
    s = SHAPES[(arch, size)]
    if vocab is not None:
        check_vocab(llama_tree, vocab)  # refused before anything is written
        s = replace(s, vocab=vocab)
    if vocab_size is not None:
        check_vocab_size(llama_tree, s.vocab, vocab_size)
    rng = np.random.default_rng(seed)

    def rand(*shape: int) -> np.ndarray:
        # numpy shape is (rows, cols) = GGUF's (ne1, ne0) reversed
        return (rng.standard_normal(shape, dtype=np.float32) * 0.02).astype(np.float16)

    with tempfile.TemporaryDirectory(dir=out.parent, prefix=f".{out.name}.{os.getpid()}.",
                                     suffix=".part") as td:
        f16 = Path(td) / "model-f16.gguf"
        w = gguf.GGUFWriter(f16, arch)
        w.add_name(f"tokensleuth-synth-{arch}-{size}")
        w.add_context_length(32768)
        w.add_embedding_length(s.n_embd)
        w.add_block_count(s.n_layer)
        w.add_feed_forward_length(s.n_ff)
        w.add_head_count(s.n_head)
        w.add_head_count_kv(s.n_head_kv)
        w.add_rope_freq_base(1e6 if arch == "qwen3moe" else 1e4)
        w.add_layer_norm_rms_eps(1e-6)
        w.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
        hd = s.head_dim if arch == "qwen3moe" else s.n_embd // s.n_head
        if arch == "qwen3moe":
            w.add_key_length(hd)
            w.add_value_length(hd)
            w.add_expert_count(s.n_expert)
            w.add_expert_used_count(s.n_expert_used)
            w.add_expert_feed_forward_length(s.n_ff_exp)
        else:
            w.add_rope_dimension_count(hd)
        n_vocab = _copy_tokenizer(w, find_vocab(llama_tree, s.vocab), vocab_size)
        E = s.n_embd
        w.add_tensor("token_embd.weight", rand(n_vocab, E))
        w.add_tensor("output_norm.weight", np.ones(E, dtype=np.float32))
        w.add_tensor("output.weight", rand(n_vocab, E))
        for i in range(s.n_layer):
            p = f"blk.{i}."
            w.add_tensor(p + "attn_norm.weight", np.ones(E, dtype=np.float32))
            w.add_tensor(p + "attn_q.weight", rand(s.n_head * hd, E))
            w.add_tensor(p + "attn_k.weight", rand(s.n_head_kv * hd, E))
            w.add_tensor(p + "attn_v.weight", rand(s.n_head_kv * hd, E))
            w.add_tensor(p + "attn_output.weight", rand(E, s.n_head * hd))
            w.add_tensor(p + "ffn_norm.weight", np.ones(E, dtype=np.float32))
            if arch == "qwen3moe":
                w.add_tensor(p + "attn_q_norm.weight", np.ones(hd, dtype=np.float32))
                w.add_tensor(p + "attn_k_norm.weight", np.ones(hd, dtype=np.float32))
                w.add_tensor(p + "ffn_gate_inp.weight", rand(s.n_expert, E).astype(np.float32))
                w.add_tensor(p + "ffn_gate_exps.weight", rand(s.n_expert, s.n_ff_exp, E))
                w.add_tensor(p + "ffn_up_exps.weight", rand(s.n_expert, s.n_ff_exp, E))
                w.add_tensor(p + "ffn_down_exps.weight", rand(s.n_expert, E, s.n_ff_exp))
            else:
                w.add_tensor(p + "ffn_gate.weight", rand(s.n_ff, E))
                w.add_tensor(p + "ffn_up.weight", rand(s.n_ff, E))
                w.add_tensor(p + "ffn_down.weight", rand(E, s.n_ff))
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
        w.close()
        tmp_out = Path(td) / "model-out.gguf"
        if quant == "F16":
            shutil.move(str(f16), tmp_out)
        else:
            if quantize_bin is None:
                raise EngineError("llama-quantize is needed to quantize the synthetic model")
            proc = subprocess.run([str(quantize_bin), str(f16), str(tmp_out), quant],
                                  capture_output=True, text=True)
            if proc.returncode != 0 or not tmp_out.exists():
                tail = "\n".join((proc.stderr or proc.stdout).splitlines()[-8:])
                raise EngineError(f"llama-quantize failed (exit {proc.returncode}):\n{tail}")
        tmp_out.replace(out)  # atomic: a half-written model never appears at --out
    return out
