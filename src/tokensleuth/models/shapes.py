"""Real-size synthetic models: the exact shapes of the models the field runs, written straight
as quantized blocks, tensor by tensor.

:mod:`tokensleuth.models.synth` writes F16 and lets llama-quantize quantize it, which needs the
whole F16 model on disk (twice the Q8_0 size) and its time. A 30B-class model is written here
directly: each tensor's blocks are random bytes with fixed or narrow scales
(:mod:`tokensleuth.models.blocks`: Q8_0, Q4_0, the K-quants, IQ4_XS, MXFP4; or F16 values), cut
at random offsets from 64 MiB of them and written 16 MiB at a time, so the memory used does not
grow with the model (the largest tensor, Qwen3-30B-A3B's 128-expert FFN, is
213 MB and is never whole in memory). The tokenizer is the real one,
copied from the vocab files llama.cpp ships (qwen2's 151,936 tokens, Llama 3's 128,256).
The weights are noise: speed figures are real, outputs are not meaningful. The K- and i-quant
file types (Q6_K, Q4_K_M, IQ4_XS) get the per-tensor type mix llama-quantize would choose
(:mod:`tokensleuth.models.quant_mix`).

gpt-oss (llama.cpp's ``gpt-oss`` architecture) is written as it is: attention with biases and a
sink per head, a post-attention norm, sliding-window attention (128 tokens) on every other
layer, experts with biases, and its experts in MXFP4 (``--quant MXFP4``: an E8M0 scale and 16
bytes of FP4 nibbles per 32 weights; every other weight Q8_0 — the published GGUF keeps those
in higher precision, so its file is a few GB larger). Its tokenizer, o200k_harmony (201,088
tokens), is not among the vocab files llama.cpp ships: qwen2's is copied and padded with
unused tokens to 201,088, so the embedding and output layers have their real size (and the
output matmul its real cost); text tokenizes as qwen2's would.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import gguf
import numpy as np

from tokensleuth.core.errors import UserError
from tokensleuth.models import blocks
from tokensleuth.models.quant_mix import FILE_TYPES, tensor_types

DIRECT_QUANTS = tuple(FILE_TYPES)


@dataclass(frozen=True, slots=True)
class RealShape:
    """A model's hyperparameters as its GGUF states them."""

    arch: str  # gguf architecture: llama | qwen3moe
    vocab: str  # llama.cpp's models/ggml-vocab-<vocab>.gguf
    n_embd: int
    n_layer: int
    n_head: int
    n_head_kv: int
    head_dim: int
    n_ff: int  # dense FFN width (0 for an MoE model's layers)
    n_expert: int = 0
    n_expert_used: int = 0
    n_ff_exp: int = 0
    n_ctx_train: int = 32768
    rope_base: float = 1e6
    about: str = ""
    sliding_window: int = 0  # tokens a sliding-window layer attends to (gpt-oss: every other layer)
    n_vocab: int = 0  # the real vocabulary's size, when the copied tokenizer is padded up to it
    rope_yarn: tuple[float, int] | None = None  # YaRN (factor, original context)


REAL_SHAPES: dict[str, RealShape] = {
    "qwen3-30b-a3b": RealShape("qwen3moe", "qwen2", 2048, 48, 32, 4, 128, 0, 128, 8, 768, 40960, 1e6,
                               "Qwen3-30B-A3B: 30.5 B parameters, 3.3 B active, 128 experts of which 8 per token"),
    "llama-3.1-8b": RealShape("llama", "llama-bpe", 4096, 32, 32, 8, 128, 14336, n_ctx_train=131072,
                              rope_base=5e5, about="Llama 3.1 8B: a dense control, 8.0 B parameters"),
    "qwen3-moe-mini": RealShape("qwen3moe", "qwen2", 512, 8, 8, 4, 64, 0, 128, 8, 256, 40960, 1e6,
                                "Qwen3-30B-A3B's proportions (128 experts, 8 used) at a test's size"),
    "gpt-oss-120b": RealShape("gpt-oss", "qwen2", 2880, 36, 64, 8, 64, 0, 128, 4, 2880, 131072, 150000,
                              "gpt-oss-120b: 116.8 B parameters, 5.1 B active, 128 experts of which 4 per "
                              "token, sliding window 128 on every other layer", sliding_window=128,
                              n_vocab=201088, rope_yarn=(32.0, 4096)),
    "gpt-oss-mini": RealShape("gpt-oss", "qwen2", 256, 4, 8, 2, 32, 0, 16, 4, 256, 131072, 150000,
                              "gpt-oss's architecture (sinks, sliding window, expert biases, MXFP4) at a "
                              "test's size", sliding_window=128, rope_yarn=(32.0, 4096)),
}


def tensor_plan(s: RealShape, n_vocab: int) -> list[tuple[str, tuple[int, ...], bool]]:
    """(name, numpy-order shape, quantized) of every tensor llama.cpp loads for the shape."""
    E, hd = s.n_embd, s.head_dim
    out: list[tuple[str, tuple[int, ...], bool]] = [("token_embd.weight", (n_vocab, E), True),
                                                    ("output_norm.weight", (E,), False),
                                                    ("output.weight", (n_vocab, E), True)]
    if s.arch == "gpt-oss":
        return out + [t for i in range(s.n_layer) for t in _gpt_oss_layer(s, f"blk.{i}.")]
    for i in range(s.n_layer):
        p = f"blk.{i}."
        out += [(p + "attn_norm.weight", (E,), False), (p + "attn_q.weight", (s.n_head * hd, E), True),
                (p + "attn_k.weight", (s.n_head_kv * hd, E), True), (p + "attn_v.weight", (s.n_head_kv * hd, E), True),
                (p + "attn_output.weight", (E, s.n_head * hd), True), (p + "ffn_norm.weight", (E,), False)]
        if s.n_expert:
            out += [(p + "attn_q_norm.weight", (hd,), False), (p + "attn_k_norm.weight", (hd,), False),
                    (p + "ffn_gate_inp.weight", (s.n_expert, E), False),
                    (p + "ffn_gate_exps.weight", (s.n_expert, s.n_ff_exp, E), True),
                    (p + "ffn_up_exps.weight", (s.n_expert, s.n_ff_exp, E), True),
                    (p + "ffn_down_exps.weight", (s.n_expert, E, s.n_ff_exp), True)]
        else:
            out += [(p + "ffn_gate.weight", (s.n_ff, E), True), (p + "ffn_up.weight", (s.n_ff, E), True),
                    (p + "ffn_down.weight", (E, s.n_ff), True)]
    return out


def _gpt_oss_layer(s: RealShape, p: str) -> list[tuple[str, tuple[int, ...], bool]]:
    """One gpt-oss layer (llama.cpp's src/models/openai-moe.cpp): biases everywhere, a sink per
    head, a norm after attention instead of one before the FFN."""
    E, hd, X, F = s.n_embd, s.head_dim, s.n_expert, s.n_ff_exp
    q, kv = s.n_head * hd, s.n_head_kv * hd
    return [(p + "attn_norm.weight", (E,), False), (p + "post_attention_norm.weight", (E,), False),
            (p + "attn_q.weight", (q, E), True), (p + "attn_q.bias", (q,), False),
            (p + "attn_k.weight", (kv, E), True), (p + "attn_k.bias", (kv,), False),
            (p + "attn_v.weight", (kv, E), True), (p + "attn_v.bias", (kv,), False),
            (p + "attn_output.weight", (E, q), True), (p + "attn_output.bias", (E,), False),
            (p + "attn_sinks.weight", (s.n_head,), False),
            (p + "ffn_gate_inp.weight", (X, E), False), (p + "ffn_gate_inp.bias", (X,), False),
            (p + "ffn_gate_exps.weight", (X, F, E), True), (p + "ffn_gate_exps.bias", (X, F), False),
            (p + "ffn_up_exps.weight", (X, F, E), True), (p + "ffn_up_exps.bias", (X, F), False),
            (p + "ffn_down_exps.weight", (X, E, F), True), (p + "ffn_down_exps.bias", (X, E), False)]


def _pad_tokenizer(raw: bytes, n: int, n_to: int) -> bytes:
    """The tokenizer KVs ``raw`` (``n`` of them) with the vocabulary padded to ``n_to`` tokens:
    unused tokens ``<|tokensleuth_pad_i|>`` appended to ``tokenizer.ggml.tokens`` and their type
    (5, unused: as control tokens, llama.cpp logged each one at load) to
    ``tokenizer.ggml.token_type`` (and a score of 0 where there are scores)."""
    import struct

    from tokensleuth.models.info import HeaderReader

    r = HeaderReader(raw, "<")
    out = b""
    for _ in range(n):
        start = r.pos
        key = r.string()
        vtype = r.u32()
        at = r.pos
        r.value(vtype)
        body = raw[start:r.pos]
        if key in ("tokenizer.ggml.tokens", "tokenizer.ggml.token_type", "tokenizer.ggml.scores"):
            etype, count = struct.unpack("<IQ", raw[at:at + 12])
            extra = n_to - count
            if extra > 0:
                if key == "tokenizer.ggml.tokens":
                    names = (f"<|tokensleuth_pad_{i}|>".encode() for i in range(extra))
                    tail = b"".join(struct.pack("<Q", len(b)) + b for b in names)
                elif key == "tokenizer.ggml.token_type":
                    tail = struct.pack("<i", 5) * extra
                else:
                    tail = struct.pack("<f", 0.0) * extra
                head = raw[start:at] + struct.pack("<IQ", etype, count + extra)
                body = head + raw[at + 12:r.pos] + tail
        out += body
    return out


def _kv_spans(buf: bytes) -> tuple[list[tuple[str, int, int]], int]:
    """Each KV of a GGUF header as (key, start, end) byte offsets, and where the KVs end."""
    from tokensleuth.models.info import HeaderReader

    r = HeaderReader(buf, "<")
    r.pos = 16
    n_kv = r.u64()
    spans = []
    for _ in range(n_kv):
        start = r.pos
        key = r.string()
        r.value(r.u32())
        spans.append((key, start, r.pos))
    return spans, r.pos


def tokenizer_kvs(vocab: Path) -> tuple[bytes, int, int]:
    """The raw bytes of a vocab file's ``tokenizer.*`` KVs (copied as they are: decoding 150k
    strings with gguf's reader took 15 s), their count and the vocabulary's size."""
    from tokensleuth.models.info import read_header

    head = read_header(vocab)
    n_vocab = head.kv["tokenizer.ggml.tokens"].count
    with open(vocab, "rb") as fh:
        buf = fh.read()
    spans, _ = _kv_spans(buf)
    mine = [(a, b) for key, a, b in spans if key.startswith("tokenizer.")]
    return b"".join(buf[a:b] for a, b in mine), len(mine), int(n_vocab)


def _splice(path: Path, raw: bytes, n: int) -> None:
    """Insert ``n`` raw KVs after the KVs of the GGUF header written at ``path`` (no data yet)."""
    buf = path.read_bytes()
    _, kv_end = _kv_spans(buf)
    n_kv = int.from_bytes(buf[16:24], "little")
    path.write_bytes(buf[:16] + (n_kv + n).to_bytes(8, "little") + buf[24:kv_end] + raw + buf[kv_end:])


def check_shape(name: str | RealShape, quant: str) -> None:
    """Refuse a shape or quant that --shape cannot write (before the engine's tree is fetched)."""
    if isinstance(name, str) and name not in REAL_SHAPES:
        raise UserError(f"no shape {name!r} — choose from {', '.join(REAL_SHAPES)}")
    if quant not in DIRECT_QUANTS:
        raise UserError(f"--shape writes {', '.join(DIRECT_QUANTS)} directly, not {quant!r}")
    s = REAL_SHAPES[name] if isinstance(name, str) else name
    if quant == "MXFP4" and not s.n_expert:
        raise UserError(f"{quant} is an expert format and the shape has no experts — give --quant Q8_0, Q4_0 or F16")


def write_shape(name: str | RealShape, out: Path, quant: str, llama_tree: Path, seed: int = 0,
                sparse: bool = False) -> Path:
    """Write the real-size shape ``name`` (or a shape of one's own) at ``quant`` to ``out``
    (atomically: a half-written model never appears there). ``sparse``: the data section is a
    hole of the right size (its header is complete; nothing can run it, everything can read it)."""
    from tokensleuth.models.synth import find_vocab, out_file

    check_shape(name, quant)
    out_file(out)
    s = REAL_SHAPES[name] if isinstance(name, str) else name
    label = name if isinstance(name, str) else "custom"
    rng = np.random.default_rng(seed)
    tmp = out.with_name(f".{out.name}.{os.getpid()}.part")
    try:
        w = gguf.GGUFWriter(str(tmp), s.arch)
        w.add_name(f"tokensleuth-shape-{label}")
        w.add_context_length(s.n_ctx_train)
        w.add_embedding_length(s.n_embd)
        w.add_block_count(s.n_layer)
        w.add_feed_forward_length(s.n_ff or s.n_ff_exp)
        w.add_head_count(s.n_head)
        w.add_head_count_kv(s.n_head_kv)
        w.add_rope_freq_base(s.rope_base)
        w.add_layer_norm_rms_eps(1e-6)
        w.add_file_type(FILE_TYPES[quant])
        if quant != "F16":
            w.add_quantization_version(gguf.GGML_QUANT_VERSION)  # as llama-quantize writes it
        w.add_key_length(s.head_dim)
        w.add_value_length(s.head_dim)
        if s.n_expert:
            w.add_expert_count(s.n_expert)
            w.add_expert_used_count(s.n_expert_used)
            w.add_expert_feed_forward_length(s.n_ff_exp)
        else:
            w.add_rope_dimension_count(s.head_dim)
        if s.sliding_window:
            w.add_sliding_window(s.sliding_window)
        if s.rope_yarn:
            w.add_rope_scaling_type(gguf.RopeScalingType.YARN)
            w.add_rope_scaling_factor(s.rope_yarn[0])
            w.add_rope_scaling_orig_ctx_len(s.rope_yarn[1])
        tok, n_tok, n_vocab = tokenizer_kvs(find_vocab(llama_tree, s.vocab))
        if s.n_vocab > n_vocab:
            tok, n_vocab = _pad_tokenizer(tok, n_tok, s.n_vocab), s.n_vocab
        plan = tensor_plan(s, n_vocab)
        kinds = tensor_types(s, plan, quant)
        for tname, shape, _ in plan:
            n = int(np.prod(shape))
            t = kinds[tname]
            block, size = gguf.GGML_QUANT_SIZES[t]
            w.add_tensor_info(tname, shape, np.dtype(np.float32), n // block * size, raw_dtype=t)
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_ti_data_to_file()
        w.close()
        _splice(tmp, tok, n_tok)
        # the data section, tensor by tensor, each at the writer's alignment (32 bytes)
        align = 32
        pools = blocks.pools({kinds[t] for t, _, quantized in plan if quantized}, rng)
        with open(tmp, "r+b") as fh:
            fh.seek(0, os.SEEK_END)
            if sparse:
                end = fh.tell()
                for tname, shape, _ in plan:
                    end += -end % align
                    n = int(np.prod(shape))
                    block, size = gguf.GGML_QUANT_SIZES[kinds[tname]]
                    end += n // block * size
                fh.truncate(end)
                plan = []
            for tname, shape, quantized in plan:
                fh.write(b"\0" * (-fh.tell() % align))
                n = int(np.prod(shape))
                if quantized:
                    t = kinds[tname]
                    for chunk in blocks.blocks(pools[t], n // gguf.GGML_QUANT_SIZES[t][0], rng):
                        chunk.tofile(fh)
                else:
                    # norms at 1, the router small: finite activations through every layer
                    v = np.ones(n, np.float32) if "norm" in tname else rng.standard_normal(n, np.float32) * 0.02
                    v.tofile(fh)
        tmp.replace(out)
    finally:
        tmp.unlink(missing_ok=True)
    return out
