#!/usr/bin/env python3
"""A/B of the _x1 matmul variant's policy (backend.x1: "0", "narrow", "all") in one process: the 8b
decode pass as CUDA-graph replays at 1, 4 and 8 sequences of one twin, interleaved, two repeats.
    python3 scripts/x1_ab.py [8b]"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from pti_cli.bench import build_model, measure_read_bandwidth  # noqa: E402
from pti_cli.bench_kernels import time_graph  # noqa: E402
from pti_cli.gpu_ops import CudaOps, kernel_backend  # noqa: E402

POLICIES = ("0", "narrow", "all")


def main() -> None:
    size = sys.argv[1] if len(sys.argv) > 1 else "8b"
    dev = torch.device("cuda")
    ops, be = CudaOps(dev), kernel_backend(dev)
    bw = measure_read_bandwidth(dev, 4 << 30, ops)["best"]
    m = build_model(size, dev, "a", 8, 640, ops, be)
    print(f"read bandwidth {bw / 1e9:.0f} GB/s; floor {m.w.matrix_bytes() / bw * 1e3:.3f} ms")
    print(f"{'seqs':>4} | " + " | ".join(f"PTI_X1={p:<6} ms" for p in POLICIES))
    for S in (1, 4, 8):
        tok = torch.full((S,), 5, dtype=torch.int32, device=dev)
        pos = torch.full((S,), 512, dtype=torch.int32, device=dev)
        slot = torch.arange(S, dtype=torch.int32, device=dev)
        t = {p: [] for p in POLICIES}
        for _ in range(2):
            for p in POLICIES:
                be.x1 = p
                t[p].append(time_graph(lambda: m.forward(tok, pos, slot, S, 1, S), 50) * 1e3)
        print(f"{S:>4} | " + " | ".join(f"{min(t[p]):.3f} / {max(t[p]):.3f}" for p in POLICIES))


if __name__ == "__main__":
    main()
