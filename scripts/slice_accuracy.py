#!/usr/bin/env python3
"""How exact would int8 tensor-core matmuls be on activations split into int8 slices?

Runs the default model (SmolLM2-135M, torch reference backend) over a prompt, records every
matmul's activations (rounded to bf16, as the GPU pass feeds them) and dense weights, and for
k = 1, 2, 3 slices per block of 32 columns (a power-of-two scale per row and block, then k
truncated base-128 digits in [-127, 127]: what m16n8k32 s8 MMAs would consume) reports the worst
|W (x - x_k)| over the output row's norm |W x|, against issue 4's bound of 1e-5, and how many
activations the slices do not hold exactly.
    python3 scripts/slice_accuracy.py"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402
import torch  # noqa: E402

from pti_cli.api import Pti  # noqa: E402


def slices(x: np.ndarray, k: int) -> np.ndarray:
    """x [M, K] (K a multiple of 32) -> the value the k slices represent."""
    m, kk = x.shape
    xb = x.reshape(m, kk // 32, 32)
    _, e = np.frexp(np.abs(xb).max(axis=2, keepdims=True))   # |x| < 2^e in each block
    s = np.ldexp(1.0, e - 7)                                   # |x| / s < 128
    r, out = xb / s, np.zeros_like(xb)
    for i in range(k):
        q = np.trunc(r)                                        # |q| <= 127
        out += q * 128.0 ** -i
        r = (r - q) * 128.0
    return (out * s).reshape(m, kk)


def main() -> None:
    pti = Pti(None, backend="torch")
    seen = []
    real = pti.model.backend.matmul

    def record(x, w, twin):
        seen.append((x.detach().to(torch.bfloat16).double().numpy(), w))
        return real(x, w, twin)
    pti.model.backend.matmul = record
    ids = pti.encode("The quick brown fox jumps over the lazy dog. " * 4 + "Explain why the sky is blue.")
    pti.model.forward([(pti.model.new_kv(), 0, ids)])
    pti.model.backend.matmul = real
    worst = {k: 0.0 for k in (1, 2, 3)}
    inexact = {k: 0 for k in (1, 2, 3)}
    total = 0
    names = {id(w): key for key, w in pti.model.mats.items()}

    def dense(key: str) -> np.ndarray:   # "blk.0.attn_q|attn_k|attn_v": .weight matrices stacked by rows
        if "|" not in key:
            return pti.ssq.dense(key, 0).astype(np.float64)
        head, *rest = key.split("|")
        prefix = head.rsplit(".", 1)[0] + "."
        parts = [head] + [prefix + r for r in rest]
        return np.concatenate([pti.ssq.dense(n + ".weight", 0) for n in parts]).astype(np.float64)
    used = [(x, w) for x, w in seen if x.shape[1] % 32 == 0]   # whole blocks of 32 columns
    for x, w in used:
        wd = dense(names[id(w)])
        ref = x @ wd.T
        norm = np.linalg.norm(ref, axis=1, keepdims=True)
        total += x.size
        for k in worst:
            xk = slices(x, k)
            inexact[k] += int((xk != x).sum())
            worst[k] = max(worst[k], float((np.abs((x - xk) @ wd.T) / norm).max()))
    print(f"{len(used)} of {len(seen)} matmuls (K a multiple of 32), {total} activations (bf16)")
    for k in worst:
        print(f"{k} slice(s): worst |W (x - x_k)| / |W x| = {worst[k]:.2e} (bound 1e-5); "
              f"activations not held exactly: {inexact[k]} ({100 * inexact[k] / max(total, 1):.3f}%)")


if __name__ == "__main__":
    main()
