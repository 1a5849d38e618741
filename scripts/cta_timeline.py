#!/usr/bin/env python3
"""Where a chained matmul launch's time goes, CTA by CTA (GPU machine; session 55).  Runs the kernel table's
timed graph (rotating copies, R launches, behind a sleep) of each cell on the `trace` probe of the kernels
(scripts/probe_source.py trace: the global timer at each CTA's entry, wait return, main-loop end and finish),
replays it once more with the trace counter at zero, and prints per cell the medians over the replay's launches:
  period    the time from one launch's first wait return to the next one's (the table's time a launch)
  lag       the next launch's first wait return after this launch's last CTA is done: the dependency's own time
  spread    last minus first wait return of a launch
  pre       a CTA's time from entry to its wait return (its first step of weights travels then, with PF = 1)
  work      a CTA's time from its wait return to its finish (p10 / p50 / p90 over all CTAs)
  loop, fin its main loop (warp 0) and the rest (tail, pti_finish)
  tail      last minus first finish of a launch
  enter     the next launch's first entry after this launch's first finish
and the bytes' time at the call's read bandwidth.
    PTI_KERNEL_SOURCE=/tmp/trace.hip python3 scripts/cta_timeline.py [CELL ...] [--npz OUT.npz]
CELL: kind:NxK:M[:variant] (kind q8 or ssq16; h16 inputs, the model's form), by default O, QKV, down and gate/up
at one row, O at eight, and the twins' O at one."""

from __future__ import annotations

import math
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402
import torch  # noqa: E402

from pti_cli.backends.cuda import CudaBackend, _cu  # noqa: E402
from pti_cli.bench_kernels import (WORKING_SET, capture_graph, random_packs, read_bandwidth,  # noqa: E402
                                   replay_launches, replay_seconds)

CELLS = ("q8:4096x4096:1", "q8:6144x4096:1", "q8:4096x14336:1", "q8:28672x4096:1", "q8:4096x4096:8",
         "ssq16:4096x4096:1")
TRACE_MAX = 1 << 17
FIELDS = 6


def trace_cell(be, drv, kind: str, n: int, k: int, m: int, variant: str | None) -> dict:
    twins = 2 if kind == "ssq16" else 1
    one = random_packs(be, n, k, 1, True)[0]
    copies = max(2, math.ceil(WORKING_SET / (one.nbytes * twins)))
    packs = [one] + random_packs(be, n, k, copies * twins - 1, True)
    sets = [packs[i * twins:(i + 1) * twins] for i in range(copies)]
    reps = replay_launches(one.nbytes * twins, copies)
    xs = [torch.randn(m, k, device=be.device).half() for _ in range(twins)]
    ys = [torch.empty(m, n, device=be.device, dtype=be.act_dtype) for _ in range(twins)]
    name = be.kernel_name(twins, m, torch.float16, be.act_dtype, variant, rows=n, cols=k)
    grid = be.launch_args(name, sets[0], xs, ys)[0]

    def calls():
        for i in range(reps):
            be.launch(sets[i % copies], xs, ys, name)

    g = capture_graph(calls)
    torch.cuda.synchronize()
    n_ptr, _ = _cu(drv.cuModuleGetGlobal(be.module, b"pti_trace_n"), "pti_trace_n")
    buf_ptr, _ = _cu(drv.cuModuleGetGlobal(be.module, b"pti_trace_buf"), "pti_trace_buf")
    _cu(drv.cuMemsetD32(n_ptr, 0, 1), "reset")
    torch.cuda.synchronize()
    replay_us = replay_seconds(g) * 1e6 / reps
    count = torch.zeros(1, dtype=torch.int32, device=be.device)
    _cu(drv.cuMemcpyDtoD(count.data_ptr(), int(n_ptr), 4), "n")
    used = min(int(count.item()), TRACE_MAX)
    raw = torch.empty(used * FIELDS, dtype=torch.int64, device=be.device)
    _cu(drv.cuMemcpyDtoD(raw.data_ptr(), int(buf_ptr), used * FIELDS * 8), "buf")
    torch.cuda.synchronize()
    t = raw.cpu().numpy().reshape(used, FIELDS)
    nbytes = twins * (one.nbytes + 2 * m * k + 2 * m * n)
    del sets, packs
    torch.cuda.empty_cache()
    return {"name": name, "grid": grid, "reps": reps, "count": int(count.item()), "t": t, "nbytes": nbytes,
            "replay_us": replay_us}


def summary(res: dict, denom: float) -> dict:
    t, grid = res["t"], res["grid"]
    launches = len(t) // grid
    t = t[:launches * grid].reshape(launches, grid, FIELDS)
    mixed = int(sum(len(set(t[L, :, 5].tolist())) != 1 for L in range(launches)))   # a launch's CTAs share q[0]
    t = t[2:-1]   # drop the replay's edges
    ent, wt, lp, fin = (t[:, :, i].astype(np.float64) / 1e3 for i in range(4))   # us
    w0, w1, f0, f1, e0 = wt.min(1), wt.max(1), fin.min(1), fin.max(1), ent.min(1)
    work = (fin - wt).ravel()
    stamps = np.unique(np.concatenate([ent.ravel(), wt.ravel()]))
    step = np.diff(stamps).min() * 1e3 if len(stamps) > 1 else float("nan")
    return {"kernel": res["name"].split("_", 4)[4], "grid": grid, "launches": launches, "mixed": mixed,
            "us": res["replay_us"], "ideal": res["nbytes"] / denom * 1e6,
            "period": float(np.median(np.diff(w0))), "lag": float(np.median(w0[1:] - f1[:-1])),
            "spread": float(np.median(w1 - w0)), "pre": float(np.median(wt - ent)),
            "work": tuple(float(np.percentile(work, q)) for q in (10, 50, 90)),
            "loop": float(np.median(lp - wt)), "fin": float(np.median(fin - lp)),
            "tail": float(np.median(f1 - f0)), "enter": float(np.median(e0[1:] - f0[:-1])), "tick_ns": step}


def main() -> int:
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    npz = sys.argv[sys.argv.index("--npz") + 1] if "--npz" in sys.argv else None
    if npz in args:
        args.remove(npz)
    if "trace" not in os.environ.get("PTI_KERNEL_SOURCE", ""):
        print("cta_timeline: run with PTI_KERNEL_SOURCE set to the trace probe (scripts/probe_source.py trace)",
              file=sys.stderr)
        return 2
    be = CudaBackend()
    drv = be._drv
    denom = read_bandwidth(be)["denominator"]
    print(f"{torch.cuda.get_device_name()}, read bandwidth {denom / 1e9:.0f} GB/s; us, medians over launches")
    print(f"{'cell':<20} {'kernel':<14} {'us':>6} {'ideal':>6} {'period':>6} {'lag':>5} {'spread':>6} {'pre':>5} "
          f"{'work p10/50/90':>17} {'loop':>5} {'fin':>5} {'tail':>5} {'enter':>6}  grid launches tick")
    saved = {}
    for cell in args or CELLS:
        kind, shape, m, *v = cell.split(":")
        n, k = (int(d) for d in shape.split("x"))
        res = trace_cell(be, drv, kind, n, k, int(m), v[0] if v else None)
        s = summary(res, denom)
        saved[cell.replace(":", "_")] = res["t"]
        w = "/".join(f"{x:.2f}" for x in s["work"])
        print(f"{cell:<20} {s['kernel']:<14} {s['us']:6.2f} {s['ideal']:6.2f} {s['period']:6.2f} {s['lag']:5.2f} "
              f"{s['spread']:6.2f} {s['pre']:5.2f} {w:>17} {s['loop']:5.2f} {s['fin']:5.2f} {s['tail']:5.2f} "
              f"{s['enter']:6.2f}  {s['grid']} {s['launches']} {s['tick_ns']:.0f}ns"
              + (f"  ({s['mixed']} launches of mixed CTAs)" if s["mixed"] else ""), flush=True)
    if npz:
        np.savez_compressed(npz, **saved)
    return 0


if __name__ == "__main__":
    sys.exit(main())
