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


def _roundf(x: np.ndarray) -> np.ndarray:
    # C roundf: half away from zero.  Same steps as gguf.quants.np_roundf, in place.
    a = np.abs(x)
    fl = np.floor(a)
    a -= fl
    a *= 2
    np.floor(a, out=a)
    a += fl
    return np.copysign(a, x, out=a)


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
    q = _roundf(blocks * inv).astype(np.int8)
    return q.reshape(rows, nb * QK), d.reshape(rows, nb).astype(np.float16)
