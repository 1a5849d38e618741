#!/usr/bin/env python3
"""Launch the Hopper form the backend picks for M rows (a twin) of one model or two twins of an N x K matrix,
on activations given in the tile layout (the form the model runs), three times (for ncu on the GPU machine):
python3 scripts/wg_probe.py N K M TWINS.  The form follows the backend's settings (PTI_WG_TWIN_FORMS, ...)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from pti_cli.backends.cuda import CudaBackend  # noqa: E402
from pti_cli.bench_kernels import random_packs, tiles_given  # noqa: E402

n, k, m, twins = (int(a) for a in sys.argv[1:5])
be = CudaBackend()
packs = [be.with_ring(p) for p in random_packs(be, n, k, twins)]
if not be.wg_ready(packs, m):
    sys.exit(f"wg_probe: {m} rows of {twins} twin(s) of {n}x{k} do not go to the Hopper kernels")
xs = [torch.randn(m, k, device="cuda").bfloat16() for _ in range(twins)]
ys = [torch.empty(m, n, device="cuda", dtype=torch.bfloat16) for _ in range(twins)]
given = tiles_given(be, packs, m)
for _ in range(3):
    name = be.launch_wg(packs, xs, ys, False, given)
torch.cuda.synchronize()
print(f"wg_probe: {name}, {be.wg_kernel(m, torch.bfloat16, rows=n, twins=twins)[1:]} (tile rows, CTAs a unit, fixup)")
