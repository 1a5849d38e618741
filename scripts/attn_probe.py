#!/usr/bin/env python3
"""The fused attention of the synthetic 8b model alone: S sequences at position POS (default 512,
where the bench's decode starts; it ends at 639), five eager launches (layer 0), then a CUDA graph of one launch per layer.  Under ncu, for
example (the fourth eager launch):
    ncu --clock-control none -k regex:attn_rope --launch-skip 3 --launch-count 1 \\
        --section SpeedOfLight --section WarpStateStats --section Occupancy python3 scripts/attn_probe.py 16
It prints us per launch: 20 replays of that graph, whose launches run as in a pass (early KV loads)."""

import sys
import time

import torch

from pti_cli.bench import build_model
from pti_cli.gpu_model import ATTN_CHUNK
from pti_cli.gpu_ops import GROUPS, CudaOps, kernel_backend


def main() -> None:
    S = int(sys.argv[1]) if len(sys.argv) > 1 else 16
    P0 = int(sys.argv[2]) if len(sys.argv) > 2 else 512
    dev = torch.device("cuda")
    ops, be = CudaOps(dev), kernel_backend(dev)
    m = build_model("8b", dev, "a", S, 640, ops, be)
    sh = m.shape
    qkv = torch.randn(S, (sh.n_heads + 2 * sh.n_kv_heads) * sh.head_dim, device=dev).bfloat16()
    pos = torch.full((S,), P0, dtype=torch.int32, device=dev)
    slot = torch.arange(S, dtype=torch.int32, device=dev)
    for cache in m.kcache + m.vcache:
        cache.normal_()
    for _ in range(5):
        ops.attention(m, qkv, pos, slot, 0, S, 1)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for i in range(sh.n_layers):
            ops.attention(m, qkv, pos, slot, i, S, 1)
    g.replay()
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(20):
        g.replay()
    torch.cuda.synchronize()
    name = f"attn_rope_{sh.head_dim}_g{next(g for g in GROUPS if g >= sh.n_heads // sh.n_kv_heads)}_bf16"
    _, cl, on_wide = ops.attention_form(name, -(-(m.max_ctx + 1) // ATTN_CHUNK), sh.n_kv_heads * S)
    form = f"clusters of {cl} ({'driver' if on_wide else 'pinned'} carveout)" if cl else "counter form"
    print(f"attention, {S} sequences at {P0}, {form}: "
          f"{(time.perf_counter() - t) / 20 / sh.n_layers * 1e6:.2f} us per launch")


if __name__ == "__main__":
    main()
