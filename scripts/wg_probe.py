#!/usr/bin/env python3
"""Launch the Hopper form the backend picks for M rows (a twin) of one model or two twins of an N x K matrix,
three times each on rows it lays out (pti_wg_tiles) and on random tiles given (the form the model runs; ncu's
--launch-skip 1 --launch-count 1 takes the first of these), then check its bits against the policy kernels':
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
given, scratch = tiles_given(be, packs, m), [torch.empty_like(y) for y in ys]
for _ in range(3):
    name = be.launch_wg(packs, xs, ys)   # (the tiles laid out from xs: the bit check below needs them to be xs)
    be.launch_wg(packs, xs, scratch, False, given)
# the bits against the policy kernels' (one launch a twin) on the same packs and rows
policy = be.kernel_name(1, m, torch.bfloat16, torch.bfloat16, rows=n)
zs = [torch.full_like(y, float("nan")) for y in ys]
for t in range(twins):
    be.launch([packs[t]], [xs[t]], [zs[t]], policy)
torch.cuda.synchronize()
same = all(torch.equal(y.view(torch.int16), z.view(torch.int16)) for y, z in zip(ys, zs))
print(f"wg_probe: {name}, {be.wg_kernel(m, torch.bfloat16, rows=n, twins=twins)[1:]} (tile rows, CTAs a unit, fixup); "
      f"bits {'equal to' if same else 'DIFFERENT from'} {policy}'s")
sys.exit(0 if same else 1)
