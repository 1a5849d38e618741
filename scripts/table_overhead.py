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
    python3 scripts/table_overhead.py [OUT.json]
Session 44 ran it with the two graphs' replays alternated; since session 45 each graph is timed by
bench_kernels.time_graph, one after the other."""

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from pti_cli import bench_kernels as bk  # noqa: E402


def marginal(fn, reps: int = 15, time_graph=bk.time_graph) -> float:
    """A stand-in for bench_kernels.time_graph: seconds one more replay's worth of fn's launches adds to a chain
    (a graph of fn three times against one of fn once, each timed as the table times its graphs)."""
    def thrice():
        fn()
        fn()
        fn()
    return (time_graph(thrice, reps) - time_graph(fn, reps)) / 2


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
