"""Hugging Face -> GGUF naming and row order, as llama.cpp's converter does it.

Tensor names are mapped with gguf-py's TensorNameMap.  For the `llama`
architecture llama.cpp stores the Q and K projection rows permuted so that its
rotary embedding pairs adjacent elements; Hugging Face uses the half-split
rotation.  Qwen2/Qwen3 are stored unpermuted.
"""

from __future__ import annotations

import numpy as np
import gguf

from ..errors import PtiError

# Hugging Face `model_type` -> GGUF architecture name.
HF_ARCH = {"llama": "llama", "mistral": "llama", "qwen2": "qwen2", "qwen3": "qwen3"}


def gguf_arch(name: str) -> gguf.MODEL_ARCH:
    for arch, arch_name in gguf.MODEL_ARCH_NAMES.items():
        if arch_name == name:
            return arch
    raise PtiError(f"unsupported architecture: {name}")


def hf_to_gguf_name(hf_name: str, arch: str, n_layers: int) -> str:
    """GGUF tensor name for a Hugging Face tensor name, or PtiError."""
    name_map = gguf.get_tensor_name_map(gguf_arch(arch), n_layers)
    name = name_map.get_name(hf_name, try_suffixes=(".weight", ".bias"))
    if name is None:
        raise PtiError(f"tensor {hf_name!r} has no GGUF name for architecture {arch}")
    return name


def permute_qk(w: np.ndarray, n_head: int) -> np.ndarray:
    """Half-split rotation rows -> llama.cpp's interleaved order.

    Within each head the rows [r0..r(d/2-1), r(d/2)..r(d-1)] become
    [r0, r(d/2), r1, r(d/2+1), ...].  n_head is the number of heads of this
    projection (query heads for Q, KV heads for K).  Works for weights (2-D)
    and biases (1-D).
    """
    rows = w.shape[0]
    if rows % (2 * n_head):
        raise PtiError(f"cannot permute {rows} rows into {n_head} heads")
    return (w.reshape(n_head, 2, rows // n_head // 2, *w.shape[1:])
            .swapaxes(1, 2)
            .reshape(w.shape))


def unpermute_qk(w: np.ndarray, n_head: int) -> np.ndarray:
    """Inverse of permute_qk: llama.cpp's order -> Hugging Face's half-split."""
    rows = w.shape[0]
    if rows % (2 * n_head):
        raise PtiError(f"cannot unpermute {rows} rows into {n_head} heads")
    return (w.reshape(n_head, rows // n_head // 2, 2, *w.shape[1:])
            .swapaxes(1, 2)
            .reshape(w.shape))
