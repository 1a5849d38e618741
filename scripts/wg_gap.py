#!/usr/bin/env python3
"""Where the Hopper cluster forms' time goes in the backend (docs/perf.md, session 28, item 2: they took
15-37% longer than scripts/wgmma_probe.py's same forms).  For the narrower matrices, one model, at 32 and 64
rows, in one run, rotating copies past the L2 as `pti bench --kernels` does:
  call     the backend's call, as `pti bench --kernels` times it: pti_wg_tiles, then the matmul
  matmul   the matmul alone, on the tiles an earlier call laid out (the probe's measurement)
  tiles    pti_wg_tiles alone
  policy   the policy kernel the backend would take otherwise
  sum_inv  a scaled call as the model made it before session 30: pti_wg_tiles summing the rows' inv, the matmul
  given    the scaled matmul on tiles given (a residual launch before wrote them), its first CTAs summing the
           inv (session 30: what the model makes now)
and the clusters that can be resident at once (cuOccupancyMaxActiveClusters) against those a launch has:
fewer means a second wave.  H200 (sm_90) only; loads the cluster forms of every class.
    PTI_WG_NARROW=1 python3 scripts/wg_gap.py [--shapes NxK,...]
    PTI_WG_NARROW=1 python3 scripts/wg_gap.py --clusters   (the clusters of 2, 4 and 8 the card holds, by form)"""

import argparse
import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from pti_cli.backends import cuda  # noqa: E402
from pti_cli.bench_kernels import WORKING_SET, random_packs, time_graph  # noqa: E402
from pti_cli.errors import PtiError  # noqa: E402


def only(keep):
    """cuda.launch_kernel, launching only the kernels whose `what` keep() accepts."""
    real = cuda.launch_kernel

    def launch(driver, f, grid, block, smem, stream, args, pdl, what, cluster=0):
        if keep(what):
            real(driver, f, grid, block, smem, stream, args, pdl, what, cluster)
    return launch


def max_clusters(be, name: str, grid: int, c: int) -> int:
    """cuOccupancyMaxActiveClusters of a pti_wg_mm launch of `grid` CTAs in clusters of c."""
    cfg = cuda.launch_config(be._drv, (grid,), (cuda.THREADS,), be.smem[name], 0, False, c)
    return cuda._cu(be._drv.cuOccupancyMaxActiveClusters(be.wg_funcs[name], cfg), f"max active clusters {name}")


def resident_by_cluster_size(be) -> None:
    """How many clusters of 2, 4 and 8 of each Hopper form's resources the card holds at once (session 31: 30
    of 8 for m8_c8, so a 64-row launch of 32 units ran in two waves), next to the CTAs they make."""
    print(f"{'kernel':>18} " + " ".join(f"{'c' + str(c):>10}" for c in (2, 4, 8)) + "   (clusters / their CTAs)")
    for suffix in ("m4_c4", "m4_c8", "m8_c8", "m2_c4"):
        name = cuda.wg_name("bf16", "out", suffix)
        cells = []
        for c in (2, 4, 8):
            n = max_clusters(be, name, 64 * c, c)
            cells.append(f"{n}/{n * c}")
        print(f"{suffix:>18} " + " ".join(f"{v:>10}" for v in cells))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shapes", default="6144x4096,4096x4096,4096x14336,28672x4096")
    ap.add_argument("--clusters", action="store_true",
                    help="only the clusters of 2, 4 and 8 each form's resources let the card hold at once")
    args = ap.parse_args()
    try:
        be = cuda.CudaBackend()
    except PtiError as e:
        print(f"wg_gap: {e}", file=sys.stderr)
        return 2
    if not be.wgmma or "n" not in be.wg_classes:
        print("wg_gap: needs an sm_90 card and PTI_WG_NARROW=1 (the cluster forms of every class)", file=sys.stderr)
        return 2
    print(f"{torch.cuda.get_device_name()}, {be.sm_count} SMs")
    if args.clusters:
        resident_by_cluster_size(be)
        return 0
    print(f"{'N x K':>11} {'M':>3} {'kernel':>18} {'call':>7} {'matmul':>7} {'tiles':>6} {'policy':>7} "
          f"{'sum_inv':>7} {'given':>7} {'clusters':>8} {'resident':>8}")
    for shape in args.shapes.split(","):
        n, k = (int(v) for v in shape.split("x"))
        one = random_packs(be, n, k, 1)[0]
        copies = max(2, math.ceil(WORKING_SET / one.nbytes))
        packs = [be.with_ring(p) for p in [one] + random_packs(be, n, k, copies - 1)]   # (q: the policy's layout)
        assert all(p.ring is not None for p in packs), shape
        reps = max(20, 2 * copies)
        for m in (32, 64):
            x = [torch.randn(m, k, device=be.device).to(be.act_dtype)]
            y = [torch.empty(m, n, device=be.device, dtype=be.act_dtype)]
            name, nr, c, fix = be.wg_kernel(m, y[0].dtype, code=one.ring.code, rows=n)
            wg = lambda: [be.launch_wg([packs[i % copies]], x, y) for i in range(reps)]  # noqa: E731
            t = {"call": time_graph(wg) / reps}
            real = cuda.launch_kernel
            try:
                cuda.launch_kernel = only(lambda what: what != "launch pti_wg_tiles")
                t["matmul"] = time_graph(wg) / reps
                cuda.launch_kernel = only(lambda what: what == "launch pti_wg_tiles")
                t["tiles"] = time_graph(wg) / reps
            finally:
                cuda.launch_kernel = real
            policy = be.kernel_name(1, m, be.act_dtype, be.act_dtype, rows=n)
            t["policy"] = time_graph(lambda: [be.launch([packs[i % copies]], x, y, policy)
                                              for i in range(reps)]) / reps
            pin, slots = [torch.rand(m, k // 16, device=be.device)], [torch.empty(m, device=be.device)]
            summed = cuda.Epilogue(k // 16, 1e-5, pin=pin, inv=slots, sum_inv=True)
            t["sum_inv"] = time_graph(lambda: [be.launch_wg([packs[i % copies]], x, y, False, summed)
                                               for i in range(reps)]) / reps
            given = cuda.Epilogue(k // 16, 1e-5, pin=pin, inv=slots, ti=[torch.zeros(k * nr, device=be.device,
                                                                                       dtype=be.act_dtype)])
            t["given"] = time_graph(lambda: [be.launch_wg([packs[i % copies]], x, y, False, given)
                                             for i in range(reps)]) / reps
            grid = one.ring.q.shape[0] // cuda.RING_GROUPS * c
            print(f"{shape:>11} {m:>3} {name.removeprefix('pti_wg_'):>18} "
                  + " ".join(f"{t[key] * 1e6:{w}.1f}" for key, w in (("call", 7), ("matmul", 7), ("tiles", 6),
                                                                     ("policy", 7), ("sum_inv", 7), ("given", 7)))
                  + f" {grid // c:>8} {max_clusters(be, name, grid, c) if c > 1 and not fix else '-':>8}")
        del packs
        torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    sys.exit(main())
