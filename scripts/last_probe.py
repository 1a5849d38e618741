#!/usr/bin/env python3
"""The last-row-groups launch (pti_cli/backends/cuda.py LAST_VARIANTS) on its own (GPU machine):
us per matmul, one launch against the split with each form of LAST_FORMS, rotating copies past
the L2 as `pti bench --kernels` does.  Gate/up-shaped matrices (the SiLU epilogue) and the output
head (float32 outputs), no norm epilogue.
    python3 scripts/last_probe.py [NxK:glu|f32 ...]"""

import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from pti_cli.backends.cuda import LAST_FORMS, CudaBackend, last_groups  # noqa: E402
from pti_cli.bench_kernels import WORKING_SET, random_packs, read_bandwidth, time_graph  # noqa: E402

specs = sys.argv[1:] or ["28672x4096:glu", "49152x4096:f32"]
be = CudaBackend()
denom = read_bandwidth(be)["denominator"]
print(f"read bandwidth {denom / 1e9:.0f} GB/s")
for spec in specs:
    shape, kind = spec.split(":")
    n, k = (int(v) for v in shape.split("x"))
    one = random_packs(be, n, k, 1)[0]
    copies = max(2, math.ceil(WORKING_SET / one.nbytes))
    packs = [one] + random_packs(be, n, k, copies - 1)
    reps = max(20, 2 * copies)
    for m in (1, 16):
        x = torch.randn(m, k, device=be.device).to(torch.bfloat16)
        y = torch.empty(m, n // 2 if kind == "glu" else n, device=be.device,
                        dtype=torch.bfloat16 if kind == "glu" else torch.float32)
        name = be.kernel_name(1, m, torch.bfloat16, y.dtype, rows=n, glu=kind == "glu")
        tiles = 1 if m <= 8 else 2
        cases = [("one launch", None)] + [(f"last {v}", v) for v in LAST_FORMS[tiles]]
        for _ in range(2):
            for label, v in cases:
                be.last_split = v is not None
                if v:
                    be.last_variants[tiles] = v
                t = time_graph(lambda: [be.launch([packs[i % copies]], [x], [y], name) for i in range(reps)]) / reps
                print(f"{kind} {n}x{k} M={m:<2} {name.split('_', 4)[4]:<16} {label:<22} {t * 1e6:7.2f} us "
                      f"{100 * one.nbytes / t / denom:5.1f}%  (last {last_groups(n // 16, be.occupancy(name) * be.sm_count)} "
                      f"row groups)", flush=True)
    del packs
    torch.cuda.empty_cache()
