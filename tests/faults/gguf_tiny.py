"""A tiny GGUF file written with gguf.GGUFWriter: enough to pass the model checks, no engine needed."""

from __future__ import annotations

from pathlib import Path

import gguf
import numpy as np


def write_tiny_gguf(path: Path, *, big_endian: bool = False) -> Path:
    """Two F32 tensors, a few metadata keys (strings, an array of strings, a u32)."""
    endian = gguf.GGUFEndian.BIG if big_endian else gguf.GGUFEndian.LITTLE
    w = gguf.GGUFWriter(str(path), "llama", endianess=endian)
    w.add_name("tiny")
    w.add_block_count(1)
    w.add_token_list(["<s>", "</s>", "a", "b"])
    w.add_tensor("token_embd.weight", np.arange(4 * 8, dtype=np.float32).reshape(4, 8))
    w.add_tensor("output_norm.weight", np.ones(8, dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path
