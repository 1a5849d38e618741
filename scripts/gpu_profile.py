#!/usr/bin/env python3
"""Run one 8b-shaped decode pass (eager, so ncu sees each kernel) for --seqs S after a
512-token prefill: `ncu --kernel-name regex:attn_rope ... python3 scripts/gpu_profile.py S`."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from pti_cli.bench import build_model  # noqa: E402
from pti_cli.gpu_model import SeqRows  # noqa: E402
from pti_cli.gpu_ops import CudaOps, kernel_backend  # noqa: E402

S = int(sys.argv[1]) if len(sys.argv) > 1 else 1
dev = torch.device("cuda")
ops, be = CudaOps(dev), kernel_backend(dev)
m = build_model("8b", dev, "a", S, 640, ops, be)
m.graphs = False
for s in range(S):
    m.prefill([SeqRows(s, list(range(1, 513)), 0)])
tok = torch.full((S,), 5, dtype=torch.int32, device=dev)
pos = torch.full((S,), 512, dtype=torch.int32, device=dev)
slot = torch.arange(S, dtype=torch.int32, device=dev)
torch.cuda.synchronize()
torch.cuda.cudart().cudaProfilerStart()
m.forward(tok, pos, slot, S, 1, S)
torch.cuda.synchronize()
torch.cuda.cudart().cudaProfilerStop()
print("profile pass done")
