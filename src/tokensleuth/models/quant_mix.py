"""The type each tensor of a directly written model gets: llama-quantize's choice for the file type.

``Q8_0``, ``Q4_0`` and ``F16`` write every quantizable weight in that format; ``MXFP4`` the experts
in MXFP4 and the rest in Q8_0 (llama.cpp's MOSTLY_MXFP4_MOE). The K- and i-quant file types
(``Q6_K``, ``Q4_K_M``, ``IQ4_XS``) are mixes: llama-quantize gives some tensors more bits by their
role, their layer and the model's hyperparameters. Those rules are reproduced here from
llama.cpp's ``src/llama-quant.cpp`` (``llama_tensor_get_type_impl`` and
``tensor_type_fallback``), for quantization without an importance matrix and for the tensors
the shapes here have (no fused QKV, no MLA, no Falcon)::

    output.weight          Q6_K (Q8_0 when its rows are not a multiple of the block)
    token_embd.weight      the file's type (the embedding is not tied: output.weight exists)
    attn_v                 Q4_K_M: Q6_K in the layers use_more_bits picks; IQ4_XS: Q5_K when
                           n_head / n_head_kv >= 4; a Llama 70B (80 layers, GQA): Q3_K/Q4_K -> Q5_K;
                           8 experts: Q8_0
    attn_k                 8 experts: Q8_0
    attn_output            8 experts, Q4_K_M or IQ4_XS: Q5_K
    ffn_down (and _exps)   Q4_K_M: Q6_K in the layers use_more_bits picks; IQ4_XS: Q5_K in the
                           first n_layer/8 layers
    then, a row not a multiple of the type's block: Q6_K -> Q8_0, Q5_K -> Q5_1, Q4_K -> Q5_0,
    IQ4_XS -> IQ4_NL (and F16 when that does not fit either)

``use_more_bits(i, n)`` is the first and last eighth of the layers and every third layer between.
The layer is the tensor's ordinal among its kind in the loader's order (by layer, then by name),
or, in a model with experts, the layer in its name: the same number in these shapes.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Protocol

import gguf


class Shape(Protocol):
    """What the rules read of a model's shape (models.shapes.RealShape has it)."""

    @property
    def arch(self) -> str: ...

    @property
    def n_layer(self) -> int: ...

    @property
    def n_head(self) -> int: ...

    @property
    def n_head_kv(self) -> int: ...

    @property
    def n_expert(self) -> int: ...


T = gguf.GGMLQuantizationType
F = gguf.LlamaFileType

FILE_TYPES: dict[str, F] = {"Q8_0": F.MOSTLY_Q8_0, "Q4_0": F.MOSTLY_Q4_0, "F16": F.MOSTLY_F16,
                            "MXFP4": F.MOSTLY_MXFP4_MOE, "Q6_K": F.MOSTLY_Q6_K, "Q4_K_M": F.MOSTLY_Q4_K_M,
                            "IQ4_XS": F.MOSTLY_IQ4_XS}
_UNIFORM = {"Q8_0": T.Q8_0, "Q4_0": T.Q4_0, "F16": T.F16}
# llama_ftype_get_default_type
_DEFAULT = {"Q6_K": T.Q6_K, "Q4_K_M": T.Q4_K, "IQ4_XS": T.IQ4_XS}
# tensor_type_fallback: a 256-value type whose block does not divide a row falls back to a 32-value one
_FALLBACK = {T.IQ4_XS: T.IQ4_NL, T.Q4_K: T.Q5_0, T.Q5_K: T.Q5_1, T.Q6_K: T.Q8_0}
_LAYER = re.compile(r"blk\.(\d+)\.")

Plan = Sequence[tuple[str, tuple[int, ...], bool]]  # (name, numpy-order shape, quantized) as shapes.tensor_plan gives


def _use_more_bits(i_layer: int, n_layer: int) -> bool:
    return i_layer < n_layer // 8 or i_layer >= 7 * n_layer // 8 or (i_layer - n_layer // 8) % 3 == 2


def _block(t: T) -> int:
    return gguf.GGML_QUANT_SIZES[t][0]


def _layer(name: str) -> int:
    m = _LAYER.match(name)
    return int(m.group(1)) if m else -1


def tensor_types(s: Shape, plan: Plan, quant: str) -> dict[str, T]:
    """The type of each tensor of ``plan`` in a ``quant`` file (F32 for those not quantized)."""
    out = {name: T.F32 for name, _, quantized in plan if not quantized}
    weights = [(name, shape) for name, shape, quantized in plan if quantized]
    if quant in _UNIFORM:
        return out | {name: _UNIFORM[quant] for name, _ in weights}
    if quant == "MXFP4":
        return out | {name: T.MXFP4 if "_exps." in name else T.Q8_0 for name, _ in weights}
    default = _DEFAULT[quant]
    gqa = s.n_head // s.n_head_kv
    # the loader's order (llama_model_loader's weight_name_comparer): by layer, then by name
    weights.sort(key=lambda w: (_layer(w[0]), w[0]))
    n_attention_wv = sum("attn_v.weight" in name for name, _ in weights)
    i_attention_wv = i_ffn_down = 0
    tied = not any(name == "output.weight" for name, _ in weights)
    for name, shape in weights:
        ne0 = shape[-1]  # ggml's row length is numpy's last axis
        t = default
        if name == "output.weight" or (tied and name == "token_embd.weight"):
            if ne0 % _block(t):
                t = T.Q8_0
            elif t != T.Q8_0:
                t = T.Q6_K
        elif name == "token_embd.weight":
            pass  # no rule for these file types
        elif "attn_v.weight" in name:
            if quant == "IQ4_XS" and gqa >= 4:
                t = T.Q5_K
            elif quant == "Q4_K_M" and _use_more_bits(i_attention_wv, n_attention_wv):
                t = T.Q6_K
            if s.arch == "llama" and s.n_layer == 80 and s.n_head != s.n_head_kv and t in (T.Q3_K, T.Q4_K):
                t = T.Q5_K  # LLM_TYPE_70B
            if s.n_expert == 8:
                t = T.Q8_0
            i_attention_wv += 1
        elif "attn_k.weight" in name:
            if s.n_expert == 8:
                t = T.Q8_0
        elif "ffn_down" in name:
            i_layer = _layer(name) if s.n_expert > 1 else i_ffn_down
            if quant == "Q4_K_M" and _use_more_bits(i_layer, s.n_layer):
                t = T.Q6_K
            elif quant == "IQ4_XS" and i_layer < s.n_layer // 8:
                t = T.Q5_K
            i_ffn_down += 1
        elif "attn_output.weight" in name:
            if s.n_expert == 8 and quant in ("Q4_K_M", "IQ4_XS"):
                t = T.Q5_K
        if ne0 % _block(t):
            t = _FALLBACK.get(t, t)
            if ne0 % _block(t):
                t = T.F16
        out[name] = t
    return out
