#!/usr/bin/env python3
"""A/B of whole trees (pti_cli + kernels) in one call: for each tree given, in a fresh process
with that tree first on the path, ms per pass of plain decoding on the synthetic 8b model
(`decode_greedy`, 64 passes from position 512, after a warm-up): one sequence, 16, 32, and two
distinct twins at two sequences; and ms of one sequence's 512-token prefill (the second one).  Trees: folders holding pti_cli/ and kernels/ (e.g. from
`git archive COMMIT pti_cli kernels`), each optionally followed by environment settings for its
process (`TREE,PTI_PDL=0`).  PTI_AB_START: the decode's first position instead of 512 (at most 576: the model
holds 640 positions).  PTI_AB_SEQS ("16" or "1,16"): one model's passes at those sequence counts only.
    python3 scripts/pass_ab.py TREE[,VAR=VALUE...] [TREE ...]"""

import os
import subprocess
import sys

SNIPPET = r"""
import os, time, torch
from pti_cli.bench import build_model
from pti_cli.gpu_model import SeqRows
from pti_cli.gpu_ops import CudaOps, kernel_backend
dev = torch.device("cuda")
ops, be = CudaOps(dev), kernel_backend(dev)
out = []
start = int(os.environ.get("PTI_AB_START", "512"))
only = os.environ.get("PTI_AB_SEQS")   # e.g. "16": one model's passes at these sequence counts only
settings = (("a", tuple(int(v) for v in only.split(","))),) if only else (("a", (1, 16, 32)), ("ab", (2,)))
for twins, cases in settings:
    m = build_model("8b", dev, twins, 32, 640, ops, be)
    for S in cases:
        tw = [i % 2 if twins == "ab" else 0 for i in range(S)]
        m.prefill([SeqRows(i, list(range(1, 513)), 0, tw[i]) for i in range(S)])
        if S == 1 and twins == "a":
            torch.cuda.synchronize(); t = time.perf_counter()
            m.prefill([SeqRows(0, list(range(1, 513)), 0, 0)])
            torch.cuda.synchronize(); out.append(f"prefill,1: {(time.perf_counter() - t) * 1e3:.1f}")
        seqs = [SeqRows(i, [5], start, tw[i]) for i in range(S)]
        m.decode_greedy(seqs, 8)   # capture, warm-up
        best = []
        for _ in range(3):
            torch.cuda.synchronize(); t = time.perf_counter()
            m.decode_greedy(seqs, 64)
            torch.cuda.synchronize(); best.append((time.perf_counter() - t) / 64 * 1e3)
        out.append(f"{twins},{S}: {min(best):.3f}")
    del m; torch.cuda.empty_cache()
print(" | ".join(out))
"""


def main() -> None:
    for arg in sys.argv[1:]:
        tree, *settings = arg.split(",")
        env = dict(os.environ, PYTHONPATH=os.path.abspath(tree) + os.pathsep + os.environ.get("PYTHONPATH", ""))
        env.update(kv.split("=", 1) for kv in settings)
        res = subprocess.run([sys.executable, "-c", SNIPPET], env=env, capture_output=True, text=True,
                             cwd=os.path.abspath(tree))   # the tree's pti_cli first, not the checkout's
        if res.returncode:
            print(f"{arg}: failed\n{res.stderr[-3000:]}", flush=True)
        else:
            print(f"{arg}: ms per pass (min of 3 x 64 passes): {res.stdout.strip().splitlines()[-1]}", flush=True)


if __name__ == "__main__":
    main()
