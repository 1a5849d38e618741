#!/usr/bin/env python3
"""A/B of kernels/pti_ops.hip versions in one process, on one synthetic 8b model:
the pass and the attention (fused RoPE) at 1 and 16 sequences, CUDA-graph replays.

    python3 scripts/ops_ab.py kernels/pti_ops.hip /tmp/old_ops.hip kernels/pti_ops.hip@fused_rope=0 ...

A source may end in @attribute=integer, set on its CudaOps (e.g. fused_rope=0).
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from pti_cli.bench import build_model  # noqa: E402
from pti_cli.bench_kernels import time_graph  # noqa: E402
from pti_cli.gpu_ops import CudaOps, kernel_backend  # noqa: E402


def main() -> None:
    dev = torch.device("cuda")
    sources, opss = [], []
    for arg in sys.argv[1:]:
        path, _, setting = arg.partition("@")
        ops = CudaOps(dev, str(Path(path).resolve()))
        if setting:
            name, _, value = setting.partition("=")
            setattr(ops, name, int(value))
        sources.append(Path(path).name + (f"@{setting}" if setting else ""))
        opss.append(ops)
    m = build_model("8b", dev, "a", 16, 640, opss[0], kernel_backend(dev))
    sh, L = m.shape, m.shape.n_layers
    rows = []
    for S in (1, 16):
        tok = torch.full((S,), 5, dtype=torch.int32, device=dev)
        pos = torch.full((S,), 512, dtype=torch.int32, device=dev)
        slot = torch.arange(S, dtype=torch.int32, device=dev)
        qkv = torch.randn(S, (sh.n_heads + 2 * sh.n_kv_heads) * sh.head_dim, device=dev).bfloat16()
        for rep in range(2):   # twice, interleaved: the spread between repeats is the noise
            for src, ops in zip(sources, opss):
                m.ops = ops
                p = time_graph(lambda: m.forward(tok, pos, slot, S, 1, S), 30) * 1e3
                a = time_graph(lambda: [ops.attention(m, qkv, pos, slot, i, S, 1) for i in range(L)], 30) * 1e3
                rows.append((S, rep, src, p, a))
    print(f"{'seqs':>4} {'rep':>3} {'source':<24} {'pass ms':>8} {'attention ms':>12}")
    for S, rep, src, p, a in rows:
        print(f"{S:>4} {rep:>3} {src:<24} {p:>8.3f} {a:>12.3f}")


if __name__ == "__main__":
    main()
