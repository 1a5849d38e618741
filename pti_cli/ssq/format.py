"""SSQ constants and the 68-byte mode-16 block (see docs/ssq-format.md).

A mode-16 block holds 32 weights of both twins:
    bytes 0-1   scale_A   float16, little-endian
    bytes 2-3   scale_B   float16, little-endian
    bytes 4..67 32 little-endian uint16 words; word i = (A_i << 8) | (B_i & 0xff),
                so byte 4+2i is twin B's int8 and byte 5+2i is twin A's int8.
A row of K weights is ceil(K/32) blocks; the tail block is zero-padded.
Everything here is vectorised over whole row chunks: no Python loop per block.
"""

from __future__ import annotations

import numpy as np

FORMAT_VERSION = 1
QK = 32                      # weights per block (as Q8_0)
Q8_BLOCK_BYTES = 34          # GGUF Q8_0: f16 scale + 32 int8
SSQ16_BLOCK_BYTES = 68       # f16 scale_A + f16 scale_B + 32 uint16 words
MODE_IDENTICAL = 8           # twins identical: plain Q8_0 tensors, stored once
MODE_TWIN = 16               # two twins interleaved in 68-byte blocks
TWIN_B_SUFFIX = ".twin_b"    # twin B's copy of a 1-D tensor: "<name>.twin_b"

# GGUF keys written under ssq.* (values documented in docs/ssq-format.md)
KEY_VERSION = "ssq.format_version"
KEY_MODE = "ssq.mode"
KEY_IDENTICAL = "ssq.identical"
KEY_TWIN_NAMES = "ssq.twin_names"
KEY_SHA256 = "ssq.source_sha256"
KEY_SOURCE_KINDS = "ssq.source_kinds"
KEY_TENSOR_NAMES = "ssq.tensor_names"
KEY_TENSOR_SHAPES = "ssq.tensor_shapes"
KEY_TIED = "ssq.tied_embeddings"


def n_blocks(k: int) -> int:
    return (k + QK - 1) // QK


def ssq16_row_bytes(k: int) -> int:
    return n_blocks(k) * SSQ16_BLOCK_BYTES


def q8_row_bytes(k: int) -> int:
    return n_blocks(k) * Q8_BLOCK_BYTES


def shape_to_str(shape: tuple[int, ...]) -> str:
    return ",".join(str(int(d)) for d in shape)


def shape_from_str(text: str) -> tuple[int, ...]:
    return tuple(int(d) for d in text.split(","))


def pack_ssq16(qa: np.ndarray, da: np.ndarray, qb: np.ndarray, db: np.ndarray) -> np.ndarray:
    """Interleave two twins' Q8_0 rows into mode-16 bytes.

    qa, qb: int8 [rows, nb*32]; da, db: float16 [rows, nb].  Returns uint8 [rows, nb*68].
    """
    rows, nb = da.shape
    out = np.empty((rows, nb, SSQ16_BLOCK_BYTES), dtype=np.uint8)
    words = out.view("<u2")                                      # scales as 2-byte words: one long copy each
    words[:, :, 0] = da.astype("<f2", copy=False).view("<u2")
    words[:, :, 1] = db.astype("<f2", copy=False).view("<u2")
    out[:, :, 4::2] = qb.view(np.uint8).reshape(rows, nb, QK)   # low byte: twin B
    out[:, :, 5::2] = qa.view(np.uint8).reshape(rows, nb, QK)   # high byte: twin A
    return out.reshape(rows, nb * SSQ16_BLOCK_BYTES)


def interleave_q8_into(raw_a: np.ndarray, raw_b: np.ndarray, out: np.ndarray) -> None:
    """SSQ16 bytes of two twins' Q8_0 rows uint8 [rows, nb*34] (contiguous) into out
    uint8 [rows, nb*68] (contiguous).  A 68-byte block is 34 little-endian words and
    a Q8_0 block 34 bytes, so word j = (A byte j << 8) | B byte j is the output for
    j >= 2 (the quants); words 0 and 1 then get the two scales.  Two long SIMD
    passes and two short strided ones: 2.7x faster than one strided byte copy per
    twin (docs/perf.md, ssq/pack)."""
    words = out.view("<u2").reshape(raw_a.shape)
    np.left_shift(raw_a, 8, out=words, dtype=np.uint16)
    np.bitwise_or(words, raw_b, out=words)
    rows = raw_a.shape[0]
    blocks = words.reshape(rows, -1, Q8_BLOCK_BYTES)
    blocks[:, :, 0] = raw_a.reshape(rows, -1, Q8_BLOCK_BYTES).view("<u2")[:, :, 0]
    blocks[:, :, 1] = raw_b.reshape(rows, -1, Q8_BLOCK_BYTES).view("<u2")[:, :, 0]


def pack_ssq16_q8(raw_a: np.ndarray, raw_b: np.ndarray) -> np.ndarray:
    """The same interleave straight from two twins' Q8_0 bytes uint8 [rows, nb*34]
    (no split into ints and scales first)."""
    raw_a, raw_b = np.ascontiguousarray(raw_a, np.uint8), np.ascontiguousarray(raw_b, np.uint8)
    rows, nbytes = raw_a.shape
    out = np.empty((rows, 2 * nbytes), dtype=np.uint8)
    interleave_q8_into(raw_a, raw_b, out)
    return out


def unpack_ssq16(raw: np.ndarray, twin: int) -> tuple[np.ndarray, np.ndarray]:
    """One twin's Q8_0 rows back out of mode-16 bytes uint8 [rows, nb*68]:
    (int8 [rows, nb*32], float16 [rows, nb]).  twin 0 = A, 1 = B."""
    rows = raw.shape[0]
    blocks = raw.reshape(rows, -1, SSQ16_BLOCK_BYTES)
    nb = blocks.shape[1]
    s0 = 0 if twin == 0 else 2
    q0 = 5 if twin == 0 else 4
    d = np.ascontiguousarray(blocks[:, :, s0:s0 + 2]).view("<f2").reshape(rows, nb)
    q = np.ascontiguousarray(blocks[:, :, q0::2]).view(np.int8).reshape(rows, nb * QK)
    return q, d.astype(np.float16, copy=False)


def pack_q8(q: np.ndarray, d: np.ndarray) -> np.ndarray:
    """GGUF Q8_0 bytes uint8 [rows, nb*34] from int8 [rows, nb*32] and float16 [rows, nb]."""
    rows, nb = d.shape
    out = np.empty((rows, nb, Q8_BLOCK_BYTES), dtype=np.uint8)
    out[:, :, 0:2] = d.astype("<f2", copy=False).view(np.uint8).reshape(rows, nb, 2)
    out[:, :, 2:] = q.view(np.uint8).reshape(rows, nb, QK)
    return out.reshape(rows, nb * Q8_BLOCK_BYTES)


def unpack_q8(raw: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """int8 [rows, nb*32] and float16 [rows, nb] from Q8_0 bytes uint8 [rows, nb*34]."""
    rows = raw.shape[0]
    blocks = raw.reshape(rows, -1, Q8_BLOCK_BYTES)
    nb = blocks.shape[1]
    d = np.ascontiguousarray(blocks[:, :, 0:2]).view("<f2").reshape(rows, nb)
    q = np.ascontiguousarray(blocks[:, :, 2:]).view(np.int8).reshape(rows, nb * QK)
    return q, d.astype(np.float16, copy=False)


def dequantize_q8(q: np.ndarray, d: np.ndarray, k: int) -> np.ndarray:
    """float32 [rows, k]: int8 x scale, as ggml's Q8_0 dequantisation (tail padding dropped)."""
    rows, nb = d.shape
    x = q.reshape(rows, nb, QK).astype(np.float32) * d.astype(np.float32)[:, :, None]
    return x.reshape(rows, nb * QK)[:, :k]
