#!/usr/bin/env python3
"""A/B of the _h1 matmul variants' policy (backend.h1: "0", "narrow", "all") in one process: the
8b decode pass as CUDA-graph replays, one twin at 1, 4 and 8 sequences and distinct twins at 2,
interleaved, two repeats; the minimum of each in ms.
    python3 scripts/h1_ab.py [8b]"""

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
    print(f"read bandwidth {bw / 1e9:.0f} GB/s")
    print(f"{'twins':>5} {'seqs':>4} {'floor':>6} | " + " | ".join(f"PTI_H1={p:<6}" for p in POLICIES))
    for twins, cases in (("a", (1, 4, 8)), ("ab", (2,))):
        m = build_model(size, dev, twins, 8, 640, ops, be)
        for S in cases:
            tok = torch.full((S,), 5, dtype=torch.int32, device=dev)
            pos = torch.full((S,), 512, dtype=torch.int32, device=dev)
            slot = torch.arange(S, dtype=torch.int32, device=dev)
            n_a = S // 2 if twins == "ab" else S
            t = {p: [] for p in POLICIES}
            for _ in range(2):
                for p in POLICIES:
                    be.h1 = p
                    t[p].append(time_graph(lambda: m.forward(tok, pos, slot, S, 1, n_a), 50) * 1e3)
            print(f"{twins:>5} {S:>4} {m.w.matrix_bytes() / bw * 1e3:6.3f} | "
                  + " | ".join(f"{min(t[p]):.3f} ms" for p in POLICIES))
        del m
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
