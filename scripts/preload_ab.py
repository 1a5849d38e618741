"""A/B of the preloading matmul variants (PTI_PRELOAD) in one process on the GPU: the 8b decode
pass as CUDA-graph replays at 1 and 16 sequences (twin A, Q8) and at 2 sequences of distinct
twins, with `backend.preload` on and off, interleaved, two repeats each.

    python3 scripts/preload_ab.py [8b] [out.json]
"""

from __future__ import annotations

import json
import sys

import torch

from pti_cli.bench import build_model, measure_read_bandwidth
from pti_cli.bench_kernels import time_graph
from pti_cli.gpu_ops import CudaOps, kernel_backend


def main() -> None:
    size = sys.argv[1] if len(sys.argv) > 1 else "8b"
    dev = torch.device("cuda")
    ops, be = CudaOps(dev), kernel_backend(dev)
    bw = measure_read_bandwidth(dev, 4 << 30, ops)["best"]
    rows = []
    for twins, cases in (("a", ((1, 1), (16, 16))), ("ab", ((2, 1),))):
        m = build_model(size, dev, twins, 16, 640, ops, be)
        for S, n_a in cases:
            tok = torch.full((S,), 5, dtype=torch.int32, device=dev)
            pos = torch.full((S,), 512, dtype=torch.int32, device=dev)
            slot = torch.arange(S, dtype=torch.int32, device=dev)
            times = {0: [], 1: []}
            for _ in range(2):
                for pre in (1, 0):
                    be.preload = bool(pre)
                    times[pre].append(time_graph(lambda: m.forward(tok, pos, slot, S, 1, n_a), 50) * 1e3)
            be.preload = True
            rows.append({"twins": twins, "seqs": S, "bytes": m.w.matrix_bytes(), "preload_ms": times[1],
                         "plain_ms": times[0]})
        del m
        torch.cuda.empty_cache()
    print(f"read bandwidth {bw / 1e9:.0f} GB/s")
    print(f"{'twins':>5} {'seqs':>4} {'floor ms':>8} {'preload ms':>16} {'plain ms':>16} {'ratio':>6}")
    for r in rows:
        p, q = min(r["preload_ms"]), min(r["plain_ms"])
        print(f"{r['twins']:>5} {r['seqs']:>4} {r['bytes'] / bw * 1e3:8.3f} "
              f"{' / '.join(f'{t:.3f}' for t in r['preload_ms']):>16} {' / '.join(f'{t:.3f}' for t in r['plain_ms']):>16} "
              f"{q / p:6.3f}")
    if len(sys.argv) > 2:
        with open(sys.argv[2], "w") as f:
            json.dump({"bandwidth_GBs": bw / 1e9, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
