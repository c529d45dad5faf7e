"""GGUF inspection: parameters, active parameters, expert counts, bytes per token."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gguf

from tokensleuth.errors import UserError


@dataclass(frozen=True, slots=True)
class ModelInfo:
    path: str
    arch: str
    name: str
    n_params: int
    n_active_params: int
    n_expert: int
    n_expert_used: int
    n_layer: int
    n_embd: int
    n_vocab: int
    file_bytes: int
    quant_mix: dict[str, int]  # ggml type -> bytes
    bytes_per_token: int  # weight bytes read to generate one token

    def to_json(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.__slots__}


def check_gguf(path: Path) -> None:
    """One clear error when ``path`` is not a readable GGUF file."""
    if not path.exists():
        raise UserError(f"model file {path} does not exist — check the path or make one with `tokensleuth model synth`")
    if not path.is_file():
        raise UserError(f"{path} is not a file — give the path of a .gguf model")
    with open(path, "rb") as fh:
        if fh.read(4) != b"GGUF":
            raise UserError(f"{path} is not a GGUF model (no GGUF magic) — give a .gguf file")


def _field(r: gguf.GGUFReader, key: str, default: Any = 0) -> Any:
    f = r.fields.get(key)
    return default if f is None else f.contents()


def model_info(path: Path) -> ModelInfo:
    check_gguf(path)
    try:
        r = gguf.GGUFReader(path)
    except Exception as exc:  # gguf raises bare ValueError/struct errors on damage
        raise UserError(f"{path} is not a valid GGUF file ({exc}) — re-download or re-create it") from exc
    arch = str(_field(r, "general.architecture", "unknown"))
    n_expert = int(_field(r, f"{arch}.expert_count", 0))
    n_used = int(_field(r, f"{arch}.expert_used_count", 0))
    tokens = r.fields.get("tokenizer.ggml.tokens")
    n_vocab = len(tokens.data) if tokens is not None else 0
    n_params = active = per_token = 0
    mix: Counter[str] = Counter()
    for t in r.tensors:
        n = int(t.n_elements)
        nbytes = int(t.n_bytes)
        n_params += n
        mix[t.tensor_type.name] += nbytes
        if "_exps" in t.name and n_expert:
            # Only n_used of n_expert experts are read for each token.
            active += n * n_used // n_expert
            per_token += nbytes * n_used // n_expert
        elif t.name == "token_embd.weight":
            # The embedding is a row lookup: one row per token, though every row is a parameter.
            active += n
            rows = int(t.shape[-1]) if len(t.shape) > 1 else 1
            per_token += nbytes // max(rows, 1)
        else:
            active += n
            per_token += nbytes
    return ModelInfo(
        path=str(path),
        arch=arch,
        name=str(_field(r, "general.name", path.stem)),
        n_params=n_params,
        n_active_params=active,
        n_expert=n_expert,
        n_expert_used=n_used,
        n_layer=int(_field(r, f"{arch}.block_count", 0)),
        n_embd=int(_field(r, f"{arch}.embedding_length", 0)),
        n_vocab=n_vocab,
        file_bytes=path.stat().st_size,
        quant_mix=dict(mix.most_common()),
        bytes_per_token=per_token,
    )
