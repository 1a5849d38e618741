#!/usr/bin/env python3
"""Where the time between decode passes goes on the GPU: per pass, (1) graph replays back to
back, (2) replay + the device-to-host copy + a synchronize each, (3) `GpuModel.run_pass` in a loop
(each pass fed from the host, waited for), (4) the bench's plain decoding loop (`decode_greedy`:
each pass fed on the device and queued before the previous one's picks are read); synthetic
model, one row per sequence from position 512.  Every measurement starts from run_pass's inputs:
a one-row bucket's graph advances its own positions, so replays must stay within the context.
    python3 scripts/host_gap.py [8b]"""

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from pti_cli.bench import _decode_plain, build_model  # noqa: E402
from pti_cli.gpu_model import SeqRows  # noqa: E402
from pti_cli.gpu_ops import CudaOps, kernel_backend  # noqa: E402


def per_pass(fn, reset, n: int = 50) -> float:
    reset()
    fn()
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(n):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - t) / n * 1e3


def main() -> None:
    size = sys.argv[1] if len(sys.argv) > 1 else "8b"
    dev = torch.device("cuda")
    ops, be = CudaOps(dev), kernel_backend(dev)
    print(f"{'twins':>5} {'seqs':>4} | ms per pass: replays, +copy+sync, run_pass, bench loop")
    for twins, cases in (("a", (1, 16)), ("ab", (2,))):
        m = build_model(size, dev, twins, 16, 640, ops, be)
        for S in cases:
            tw = [i % 2 if twins == "ab" else 0 for i in range(S)]
            seqs = [SeqRows(i, [5], 512, tw[i]) for i in range(S)]
            m.run_pass(seqs)   # capture
            b = m._get_bucket(m._bucket_key(seqs))
            def reset():
                m.run_pass(seqs)
            replay = per_pass(b.graph.replay, reset)

            def copy_sync():
                b.graph.replay()
                b.host_out[0].copy_(b.next_ids, non_blocking=True)
                torch.cuda.current_stream().synchronize()
            cs = per_pass(copy_sync, reset)
            rp = per_pass(lambda: m.run_pass(seqs), reset)
            n = 64
            torch.cuda.synchronize()
            t = time.perf_counter()
            _decode_plain(m, [5] * S, [512] * S, n, twins)
            torch.cuda.synchronize()
            loop = (time.perf_counter() - t) / n * 1e3
            print(f"{twins:>5} {S:>4} | {replay:.3f} {cs:.3f} {rp:.3f} {loop:.3f}")
        del m
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
