#!/usr/bin/env python3
"""How much of a kernel-table cell is the replay's own cost rather than the kernels'.

`pti bench --kernels` times a CUDA graph of R launches and divides a replay by R.  A replay also pays, once,
what no launch in a pass pays per matrix: the graph's start on the card and the first launch's start with no
launch before it to overlap (programmatic dependent launch); and unless the card is kept busy, the host's
submission of the graph after the start event.  Ways of timing the same cells:
    old       the table before session 44: R = max(20, 2 x copies), no sleep before the start event
    table     the table's own: R launches reading at least bench_kernels.REPLAY_BYTES, a sleep kernel before
              the start event (so the host's submission is hidden)
    marginal  (median replay of a 3R-launch graph - median replay of the R-launch graph) / 2R, after the sleep:
              the cost of one more launch in a chain, the replay's fixed part cancelled
    python3 scripts/table_overhead.py [OUT.json]"""

import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from pti_cli import bench_kernels as bk  # noqa: E402


def _graph(fn, times: int):
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        fn()
        fn()
    torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(times):
            fn()
    for _ in range(3):
        g.replay()
    return g


def _replay(g) -> float:
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda._sleep(bk.SLEEP_CYCLES)
    a.record()
    g.replay()
    b.record()
    b.synchronize()
    return a.elapsed_time(b) / 1e3


def marginal(fn, reps: int = 15) -> float:
    """A stand-in for bench_kernels.time_graph: seconds one more replay's worth of fn's launches adds to a chain."""
    g1, g3 = _graph(fn, 1), _graph(fn, 3)
    t1, t3 = [], []
    for _ in range(2 * reps):   # alternated, so drift falls on both
        t1.append(_replay(g1))
        t3.append(_replay(g3))
    return (statistics.median(t3) - statistics.median(t1)) / 2


def main() -> None:
    from pti_cli.backends.cuda import CudaBackend
    backend = CudaBackend(act_dtype=torch.bfloat16)
    bw = bk.read_bandwidth(backend)
    denom = bw["denominator"]
    print(f"{torch.cuda.get_device_name(backend.device)}: denominator {denom / 1e9:.0f} GB/s")
    table_graph, replay_bytes, sleep = bk.time_graph, bk.REPLAY_BYTES, bk.SLEEP_CYCLES
    modes = ("old", "table", "marginal", "table")   # the table's way twice: how far apart two of its runs fall
    res = {"device": torch.cuda.get_device_name(backend.device), "bandwidth": bw, "modes": {}}
    for i, mode in enumerate(modes):
        bk.time_graph = marginal if mode == "marginal" else table_graph
        bk.REPLAY_BYTES, bk.SLEEP_CYCLES = (0, 0) if mode == "old" else (replay_bytes, sleep)
        rows = []
        for n, k in bk.SHAPES:
            for kind in ("q8", "ssq16"):
                rows += bk.bench_shape(backend, kind, n, k, bk.MS, denom)
        rows = [bk.asdict(r) for r in rows]
        res["modes"][f"{mode}{i}"] = {"rows": rows, "targets": bk.target_cells({"rows": rows})}
    names = list(res["modes"])
    print(f"{'kind':5} {'N x K':11} {'M':>2} {'kernel':22} " + " ".join(f"{n:>14}" for n in names))
    first = res["modes"][names[0]]["rows"]
    for j, r in enumerate(first):
        cells = [res["modes"][n]["rows"][j] for n in names]
        print(f"{r['kind']:5} {r['n']}x{r['k']:<6} {r['m']:>2} {r['kernel']:22} "
              + " ".join(f"{c['us']:6.2f} {c['pct']:5.1f}%" for c in cells))
    for n in names:
        t = res["modes"][n]["targets"]
        unmet = [f"{c['kind']} {c['n']}x{c['k']} {c['target']} {c['value']:.2f}" for c in t if not c["met"]]
        print(f"{n}: met {sum(c['met'] for c in t)} of {len(t)}; unmet: {'; '.join(unmet)}")
    if len(sys.argv) > 1:
        Path(sys.argv[1]).write_text(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
