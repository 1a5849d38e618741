"""Q8_0 quantisation, bit-identical to gguf.quants.quantize(x, Q8_0), vectorised.

gguf-py (matching ggml-quants.c) computes per block of 32, all in float32:
    d  = max|x| / 127
    id = 0 if d == 0 else 1 / d
    q  = roundf(x * id)          # round half away from zero
and stores d cast to float16.  Note q uses the float32 1/d, not 1/f16(d).
We repeat exactly those float32 operations, but return the ints and the
scales apart (int8 [rows, nb*32], float16 [rows, nb]) instead of 34-byte blocks.
A row whose length is not a multiple of 32 is zero-padded first (zeros never
change a block's max, so a full block quantises as before).
"""

from __future__ import annotations

import numpy as np

from .format import QK, n_blocks


# The float32 just below 0.5.  trunc(y + copysign(HALF_DOWN, y)) is C's roundf
# (half away from zero) for every float32 y: a plain +0.5 would round
# 0.49999997 + 0.5 up to 1.0.  The int8 cast truncates.  Three passes instead of
# np_roundf's six; tests check it against gguf's own quantize on ties and their
# neighbours.
HALF_DOWN = np.nextafter(np.float32(0.5), np.float32(0))


def _round_to_int8(y: np.ndarray) -> np.ndarray:
    """roundf(y) as int8, for |y| <= 127 (y is overwritten)."""
    t = np.copysign(HALF_DOWN, y)
    y += t
    return y.astype(np.int8)


def quantize_q8_0(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """float rows [rows, K] -> (int8 [rows, nb*32], float16 [rows, nb])."""
    x = np.asarray(x, dtype=np.float32)
    if x.ndim == 1:
        x = x[None, :]
    rows, k = x.shape
    nb = n_blocks(k)
    if k != nb * QK:
        padded = np.zeros((rows, nb * QK), dtype=np.float32)
        padded[:, :k] = x
        x = padded
    blocks = x.reshape(rows, nb, QK)
    d = np.abs(blocks).max(axis=2, keepdims=True) / np.float32(127)
    with np.errstate(divide="ignore"):
        inv = np.where(d == 0, np.float32(0), np.float32(1) / d)
    q = _round_to_int8(blocks * inv)
    return q.reshape(rows, nb * QK), d.reshape(rows, nb).astype(np.float16)
