"""Random but valid blocks of ggml's quantized formats, for models written straight as blocks.

Each format's bytes are random, except its scales: those are fixed (or drawn from a narrow
range) so that every block is finite and dequantizes to values of about the size a trained
model's weights have (|w| below 0.05, standard deviation 0.01 to 0.02), and every f16 scale is a
normal number. The byte layouts are ggml's (``ggml/src/ggml-common.h``)::

    Q8_0    d f16 | qs[32] int8                                     34 B / 32 values
    Q4_0    d f16 | qs[16] nibbles                                  18 B / 32
    Q5_0    d f16 | qh[4] | qs[16]                                  22 B / 32
    Q5_1    d f16, m f16 | qh[4] | qs[16]                           24 B / 32
    IQ4_NL  d f16 | qs[16] (indices into kvalues_iq4nl)             18 B / 32
    MXFP4   e8m0 scale | qs[16] (E2M1 nibbles)                      17 B / 32
    Q4_K    d f16, dmin f16 | scales[12] (6-bit sc, m) | qs[128]    144 B / 256
    Q5_K    d f16, dmin f16 | scales[12] | qh[32] | qs[128]         176 B / 256
    Q6_K    ql[128] | qh[64] | scales[16] int8 | d f16              210 B / 256
    IQ4_XS  d f16 | scales_h u16 | scales_l[4] | qs[128]            136 B / 256
"""

from __future__ import annotations

from collections.abc import Iterator

import gguf
import numpy as np

T = gguf.GGMLQuantizationType
CHUNK = 1 << 24  # a tensor's data is written this many bytes at a time (16 MiB), whatever its size
POOL = 1 << 26  # 64 MiB of random blocks, shared by the formats a model uses, that tensors are cut from

# (byte offset, f16 value) of each format's fixed scales. Q4_K/Q5_K: y = d·sc·q − dmin·m with
# m = sc in 0..15 (see pool), so dmin = d·(q's midpoint) centres y.
_F16_SCALES: dict[T, tuple[tuple[int, float], ...]] = {
    T.Q8_0: ((0, 0.02 / 127),),  # d·q, q in −128..127
    T.Q4_0: ((0, 0.02 / 8),),  # d·(q − 8), q in 0..15
    T.Q5_0: ((0, 0.02 / 16),),  # d·(q − 16), q in 0..31
    T.Q5_1: ((0, 0.02 / 16), (2, -0.02)),  # d·q + m, q in 0..31
    T.IQ4_NL: ((0, 0.02 / 127),),  # d·kvalues[q], kvalues in −127..113
    T.Q4_K: ((0, 3e-4), (2, 3e-4 * 7.5)),
    T.Q5_K: ((0, 1.5e-4), (2, 1.5e-4 * 15.5)),
    T.Q6_K: ((208, 1e-4),),  # d·scales[j]·(q − 32), q in 0..63, scales drawn in 1..15
    T.IQ4_XS: ((0, 1e-4),),  # d·(ls − 32)·kvalues[q], ls − 32 in 0..3 (see below)
}


def pool(qtype: T, n_bytes: int, rng: np.random.Generator) -> np.ndarray:
    """About ``n_bytes`` of random valid blocks of ``qtype`` (f16 values for F16), one row per
    block: what a tensor's data is cut from, at random block offsets (random bytes cost 0.5 GB/s
    to make; a 32 GB model then took a minute of CPU before a byte reached the disk)."""
    if qtype == T.F16:
        return (rng.standard_normal(n_bytes // 2, dtype=np.float32) * 0.02).astype(np.float16).reshape(-1, 1)
    _, size = gguf.GGML_QUANT_SIZES[qtype]
    b = rng.integers(0, 256, size=(n_bytes // size, size), dtype=np.uint8)
    if qtype == T.MXFP4:
        b[:, 0] = 127 - 8  # an E8M0 scale of 2^-8: FP4 values up to 6 · 2^-8, about the Q8_0 blocks' range
        return b
    if qtype == T.IQ4_XS:
        # a sub-block's 6-bit scale ls = scales_l nibble | scales_h 2 bits << 4: high bits 0b10 (0xAAAA) and
        # nibbles 0..3 make ls − 32 in 0..3, so d stays a normal f16
        b[:, 2:4] = 0xAA
        b[:, 4:8] &= 0x33
    if qtype in (T.Q4_K, T.Q5_K):
        # scales[12] at byte 4 packs 8 sub-blocks' 6-bit (sc, m): bytes 0..3 sc and 4..7 m of sub-blocks
        # 0..3, bytes 8..11 sc | m << 4 of sub-blocks 4..7 (the top bits of 0..7 are their high bits:
        # clear here). sc = m in 0..15
        lo, hi = (rng.integers(0, 16, size=(len(b), 4), dtype=np.uint8) for _ in range(2))
        b[:, 4:8] = lo
        b[:, 8:12] = lo
        b[:, 12:16] = hi | (hi << 4)
    if qtype == T.Q6_K:
        b[:, 192:208] = rng.integers(1, 16, size=(len(b), 16), dtype=np.uint8)  # int8 sub-block scales, 1..15
    if qtype not in _F16_SCALES:
        raise ValueError(f"no random-block recipe for {qtype.name}")
    for at, value in _F16_SCALES[qtype]:
        b[:, at:at + 2] = np.frombuffer(np.float16(value).tobytes(), dtype=np.uint8)
    return b


def pools(qtypes: set[T], rng: np.random.Generator) -> dict[T, np.ndarray]:
    """One pool per format, POOL bytes in all, whatever the number of formats."""
    share = POOL // max(1, len(qtypes))
    return {q: pool(q, share, rng) for q in sorted(qtypes)}


def blocks(pool: np.ndarray, n_rows: int, rng: np.random.Generator) -> Iterator[np.ndarray]:
    """A tensor's ``n_rows`` blocks (values for F16), at most CHUNK bytes at a time, cut from ``pool``."""
    step = max(1, min(CHUNK, pool.nbytes // 2) // pool.strides[0])
    for at in range(0, n_rows, step):
        n = min(step, n_rows - at)
        start = int(rng.integers(0, len(pool) - n + 1))
        yield pool[start:start + n]
