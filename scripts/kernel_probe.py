#!/usr/bin/env python3
"""Launch chosen kernel variants once each on one matrix (for ncu on the GPU machine):
python3 scripts/kernel_probe.py N K M VARIANT [VARIANT ...]"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from pti_cli.backends.cuda import CudaBackend, split_variant  # noqa: E402
from pti_cli.bench_kernels import random_packs  # noqa: E402

n, k, m = (int(a) for a in sys.argv[1:4])
be = CudaBackend()
for v in sys.argv[4:]:
    t = split_variant(v)["t"]
    packs = random_packs(be, n, k, t)
    xs = [torch.randn(m, k, device="cuda").bfloat16() for _ in range(t)]
    ys = [torch.empty(m, n, device="cuda", dtype=torch.bfloat16) for _ in range(t)]
    for _ in range(2):
        be.launch(packs, xs, ys, f"pti_mm_bf16_out_{v}")
torch.cuda.synchronize()
print("probe done")
