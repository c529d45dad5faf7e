"""GGUF inspection: parameters, active parameters, expert counts, bytes per token."""

from __future__ import annotations

import math
import mmap
import os
import struct
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tokensleuth.core.errors import UserError, show


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


# the facts that tell whether a file elsewhere is the same model (a bundle records them; a re-run
# checks the model it is given against them): the path and the bytes per token aside
SAME_MODEL = ("arch", "name", "n_params", "n_layer", "n_embd", "n_vocab", "file_bytes", "quant_mix")


# GGUF layout (ggml/docs/gguf.md): magic "GGUF", u32 version, u64 tensor count, u64 KV
# count, the KVs, the tensor infos (name, n_dims, dims, type, offset), then the tensor
# data, starting at the next multiple of general.alignment (default 32). All sizes
# are read from the header alone, through a read-only mmap, so even a 100 GB model is
# checked in a fraction of a second: only the header's pages are touched.
_SCALAR_BYTES = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
_SCALAR_FORMAT = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}
_STRING, _ARRAY = 8, 9
GGML_MAX_DIMS = 4


class _Damaged(Exception):
    """The header is inconsistent (sizes past the end of the file, unknown types)."""


class HeaderReader:
    """Reads a GGUF header's values in order from ``pos`` (``endian``: "<" or ">")."""

    def __init__(self, buf: mmap.mmap | bytes, endian: str) -> None:
        self.buf, self.pos, self.e = buf, 0, endian

    def take(self, n: int, copy: bool = True) -> bytes:
        if n < 0 or self.pos + n > len(self.buf):
            raise _Damaged("the header runs past the end of the file")
        out = self.buf[self.pos:self.pos + n] if copy else b""
        self.pos += n
        return out

    def u32(self) -> int:
        return int(struct.unpack(self.e + "I", self.take(4))[0])

    def u64(self) -> int:
        return int(struct.unpack(self.e + "Q", self.take(8))[0])

    def skip_string(self) -> None:
        self.take(self.u64())

    def skip_strings(self, count: int) -> None:
        # The hot loop of a real model (150k tokenizer strings): unpack in place.
        buf, pos, end, fmt = self.buf, self.pos, len(self.buf), self.e + "Q"
        if pos + 8 * count > end:
            raise _Damaged("the header runs past the end of the file")
        for _ in range(count):
            if pos + 8 > end:
                raise _Damaged("the header runs past the end of the file")
            pos += 8 + struct.unpack_from(fmt, buf, pos)[0]
        if pos > end:
            raise _Damaged("the header runs past the end of the file")
        self.pos = pos

    def string(self) -> str:
        return self.take(self.u64()).decode("utf-8", "replace")

    def value(self, vtype: int) -> Any:
        """A KV value: scalars and strings as Python values, an array as ``GgufArray`` (its
        element type and length; its elements skipped without being read)."""
        if vtype == _STRING:
            return self.string()
        if vtype == _ARRAY:
            etype, count = self.u32(), self.u64()
            if etype == _STRING:
                self.skip_strings(count)
            elif etype in _SCALAR_BYTES:
                self.take(count * _SCALAR_BYTES[etype], copy=False)
            else:
                raise _Damaged(f"an array of unknown value type {etype}")
            return GgufArray(etype, count)
        if vtype in _SCALAR_BYTES:
            return struct.unpack(self.e + _SCALAR_FORMAT[vtype], self.take(_SCALAR_BYTES[vtype]))[0]
        raise _Damaged(f"a value of unknown type {vtype}")


@dataclass(frozen=True, slots=True)
class GgufArray:
    """An array KV, by its element type and length only (its values are skipped)."""

    etype: int
    count: int


@dataclass(frozen=True, slots=True)
class GgufTensor:
    """One tensor's info in a GGUF header."""

    name: str
    dims: tuple[int, ...]  # GGUF order: dims[0] is the row length (ne0)
    ttype: int
    n_elements: int
    n_bytes: int


@dataclass(frozen=True, slots=True)
class GgufHeader:
    """A GGUF file's header: its KVs and tensor infos."""

    kv: dict[str, Any]
    tensors: list[GgufTensor]
    data_end: int  # the bytes the header says the file holds


def parse_header(buf: mmap.mmap | bytes) -> GgufHeader:
    """A GGUF file's header in one pass: its KVs (arrays by length only: a tokenizer's
    150k strings are skipped, never decoded) and its tensor infos."""
    import gguf  # (here, not at the top: a command that reads no model starts without it)

    endian = "<"
    version = struct.unpack("<I", buf[4:8])[0]
    if version & 0xFFFF == 0:  # a big-endian file reads as a huge little-endian version
        endian, version = ">", struct.unpack(">I", buf[4:8])[0]
    if version not in (2, 3):
        raise _Damaged(f"GGUF version {version} (llama.cpp reads versions 2 and 3)")
    r = HeaderReader(buf, endian)
    r.pos = 8
    n_tensors, n_kv = r.u64(), r.u64()
    # each KV takes at least 12 bytes, each tensor info at least 24: refuse counts the
    # file cannot hold before looping over them
    if 12 * n_kv + 24 * n_tensors > len(buf) - r.pos:
        raise _Damaged(f"{n_kv} metadata entries and {n_tensors} tensors do not fit in the file")
    kv: dict[str, Any] = {}
    for _ in range(n_kv):
        key = r.string()
        kv[key] = r.value(r.u32())
    alignment = kv.get("general.alignment", 32)
    if isinstance(alignment, bool) or not isinstance(alignment, int) or alignment <= 0 or alignment & (alignment - 1):
        raise _Damaged("general.alignment is not a power of two")
    tensors, extents = [], []
    for _ in range(n_tensors):
        name = r.string()
        n_dims = r.u32()
        if not 0 < n_dims <= GGML_MAX_DIMS:
            raise _Damaged(f"a tensor with {n_dims} dimensions")
        dims = tuple(r.u64() for _ in range(n_dims))
        n_elements = math.prod(dims)
        ttype, offset = r.u32(), r.u64()
        try:
            block, type_bytes = gguf.GGML_QUANT_SIZES[gguf.GGMLQuantizationType(ttype)]
        except (ValueError, KeyError):
            # a type newer than this gguf library: its offset is still checked
            block, type_bytes = 1, 0
        if n_elements % block:
            raise _Damaged(f"a tensor of {n_elements} elements in blocks of {block}")
        if offset % alignment:
            raise _Damaged(f"a tensor offset {offset} not aligned to {alignment} bytes")
        n_bytes = n_elements // block * type_bytes
        tensors.append(GgufTensor(name, dims, ttype, n_elements, n_bytes))
        extents.append(offset + n_bytes)
    data_start = -(-r.pos // alignment) * alignment
    # no tensors (a vocab-only file, as llama.cpp ships them): no data section, so no padding to it
    return GgufHeader(kv, tensors, data_start + max(extents) if extents else r.pos)


def read_header(path: Path) -> GgufHeader:
    """The header of ``path``, checked against the file's size (one UserError if it is not
    a complete GGUF file). Only the header's pages of the file are read."""
    if not path.exists():
        raise UserError(f"model file {path} does not exist — check the path or make one with `tokensleuth model synth`")
    if not path.is_file():
        raise UserError(f"{path} is not a file — give the path of a .gguf model")
    try:
        with open(path, "rb") as fh:
            if fh.read(4) != b"GGUF":
                raise UserError(f"{path} is not a GGUF model (no GGUF magic) — give a .gguf file")
            size = os.fstat(fh.fileno()).st_size
            if size < 24:
                raise UserError(f"{path} is truncated: {size} bytes, shorter than a GGUF header — "
                                "re-download or re-create it")
            with mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as buf:
                head = parse_header(buf)
    except OSError as exc:
        raise UserError(f"cannot read {path} ({exc.strerror or exc}) — check its permissions") from None
    except _Damaged as exc:
        raise UserError(f"{path} is truncated or not a valid GGUF model ({exc}) — re-download or re-create it") from None
    if head.data_end > size:
        raise UserError(f"{path} is truncated: its {len(head.tensors)} tensors end at byte {head.data_end:,} but the "
                        f"file has {size:,} bytes — re-download or re-create it")
    return head


def check_gguf(path: Path) -> None:
    """One clear error when ``path`` is not a readable, complete GGUF file.

    Besides the magic, the header's tensor extents (data start + each tensor's offset
    and size) must fit in the file: a truncated download passes a magic check and
    then fails inside the engine, trial after trial.
    """
    model_info(path)


def _count(kv: dict[str, Any], key: str) -> int:
    value = kv.get(key, 0)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise _Damaged(f"{key} is {show(repr(value), 30)}, not a count")
    return value


class ModelFacts:
    """Facts about model files, read once per file and kept while the file is the same
    (path, size, mtime): a study asks for the same model's facts trial after trial."""

    def __init__(self) -> None:
        self._known: dict[tuple[str, int, int], ModelInfo] = {}
        self.reads = 0  # files actually parsed (a test counts them)

    def info(self, path: Path) -> ModelInfo:
        try:
            st = path.stat()
        except OSError:
            st = None
        key = (str(path), st.st_size, st.st_mtime_ns) if st is not None else None
        if key is not None and key in self._known:
            return self._known[key]
        self.reads += 1
        got = _model_info(path, read_header(path))
        if key is not None:
            self._known[key] = got
        return got


FACTS = ModelFacts()  # this process's: model files do not change under a running study


def model_info(path: Path) -> ModelInfo:
    """What a GGUF model holds (parameters, experts, bytes per token); one UserError if damaged.
    From the header alone, once per file (see :class:`ModelFacts`)."""
    return FACTS.info(path)


def _model_info(path: Path, head: GgufHeader) -> ModelInfo:
    import gguf

    kv = head.kv
    try:
        arch = str(kv.get("general.architecture", "unknown"))
        n_expert = _count(kv, f"{arch}.expert_count")
        n_used = _count(kv, f"{arch}.expert_used_count")
        n_layer = _count(kv, f"{arch}.block_count")
        n_embd = _count(kv, f"{arch}.embedding_length")
    except _Damaged as exc:
        raise UserError(f"{path} is not a valid GGUF model ({exc}) — re-download or re-create it") from None
    tokens = kv.get("tokenizer.ggml.tokens")
    n_vocab = tokens.count if isinstance(tokens, GgufArray) else 0
    n_params = active = per_token = 0
    mix: Counter[str] = Counter()
    for t in head.tensors:
        n, nbytes = t.n_elements, t.n_bytes
        n_params += n
        try:
            tname = gguf.GGMLQuantizationType(t.ttype).name
        except ValueError:
            tname = f"type{t.ttype}"
        mix[tname] += nbytes
        if "_exps" in t.name and n_expert:
            # Only n_used of n_expert experts are read for each token.
            active += n * n_used // n_expert
            per_token += nbytes * n_used // n_expert
        elif t.name == "token_embd.weight":
            # The embedding is a row lookup: one row per token, though every row is a parameter.
            active += n
            rows = t.dims[-1] if len(t.dims) > 1 else 1
            per_token += nbytes // max(rows, 1)
        else:
            active += n
            per_token += nbytes
    name = kv.get("general.name", path.stem)
    return ModelInfo(
        path=str(path),
        arch=arch,
        name=str(name) if not isinstance(name, GgufArray) else path.stem,
        n_params=n_params,
        n_active_params=active,
        n_expert=n_expert,
        n_expert_used=n_used,
        n_layer=n_layer,
        n_embd=n_embd,
        n_vocab=n_vocab,
        file_bytes=path.stat().st_size,
        quant_mix=dict(mix.most_common()),
        bytes_per_token=per_token,
    )
