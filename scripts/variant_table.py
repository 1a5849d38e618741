#!/usr/bin/env python3
"""Kernel table of chosen variants on chosen matrices (GPU machine): us and % of the read
bandwidth per (matrix, rows, variant), rotating copies past the L2 as `pti bench --kernels` does.
    python3 scripts/variant_table.py NxK[,NxK...] M[,M...] VARIANT|default [VARIANT ...]"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pti_cli.backends.cuda import CudaBackend  # noqa: E402
from pti_cli.bench_kernels import bench_shape, read_bandwidth  # noqa: E402

shapes = [tuple(int(v) for v in s.split("x")) for s in sys.argv[1].split(",")]
ms = [int(m) for m in sys.argv[2].split(",")]
be = CudaBackend()
denom = read_bandwidth(be)["denominator"]
print(f"read bandwidth {denom / 1e9:.0f} GB/s")
for n, k in shapes:
    for v in sys.argv[3:]:
        kind = "ssq16" if v.startswith("t2") else "q8"
        for r in bench_shape(be, kind, n, k, ms, denom, None if v == "default" else v):
            print(f"{kind:5} {n}x{k} M={r.m:<2} {r.kernel:<24} x{r.vs_m1:5.2f} {r.us:7.2f} us {r.pct:5.1f}%", flush=True)
