#!/usr/bin/env python3
"""Where a decode pass's time goes on the GPU, kernel by kernel: the bench's plain decoding loop
(`decode_greedy`, CUDA graphs, each pass fed on the device) on the synthetic model, traced with
torch.profiler (CUPTI records the kernels inside graph replays).  Per kernel kind: count a pass,
summed duration, and the summed gap from the previous GPU activity's end to its start (negative:
PDL's early starts), the pass's first kernel (the embedding) included, so the boundary between
passes shows (with PTI_HOST_RING=0 also the picks' device-to-host copy).  "added": how far each kernel
moves the GPU's busy end (its end minus the latest end before it, at least 0): under PDL a kernel's
duration includes its wait for the one before, so this, not the duration, is what it costs the pass;
the column sums to the pass.  Kinds are function names (a Hopper form's suffix kept: m2_c4, m4_c8, ...);
the policy kernels are one kind, pti_mm; a second table splits the added time by each kernel's place after
the layer's attention, which tells the matrices apart.  TWINS: a (one model) or ab (two twins, sequences
alternating).  Below the tables: each matrix's weights' time at the read bandwidth measured first, the floor of its
place's "added" divided by the layers (session 40).
    python3 scripts/pass_timeline.py [8b] [seqs,...] [TWINS]"""

import json
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402
from torch.profiler import ProfilerActivity, profile  # noqa: E402

from pti_cli.bench import _decode_plain, _twin_of, build_model  # noqa: E402
from pti_cli.bench_kernels import read_bandwidth  # noqa: E402
from pti_cli.gpu_model import SeqRows  # noqa: E402
from pti_cli.gpu_ops import CudaOps, kernel_backend  # noqa: E402


def kind(name: str) -> str:
    """A short kind for a kernel's name: its function name without the variant suffix."""
    n = name.split("(")[0].removeprefix("void ")
    for k in ("pti_mm", "attn_rope", "argmax_feed", "embed", "Memcpy", "memcpy"):
        if k in n:
            return k
    return n[:40]


def trace(m, S: int, passes: int, twins: str) -> list[dict]:
    _decode_plain(m, [5] * S, [512] * S, 16, twins)   # capture, warm up
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        _decode_plain(m, [5] * S, [512] * S, passes, twins)
        torch.cuda.synchronize()
    with tempfile.NamedTemporaryFile(suffix=".json") as f:
        prof.export_chrome_trace(f.name)
        ev = json.load(open(f.name))["traceEvents"]
    gpu = [e for e in ev if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset") and "dur" in e]
    return sorted(gpu, key=lambda e: e["ts"])


def layer_floors(m, bandwidth: float) -> dict[str, float]:
    """Each matrix of the model's first layer: the microseconds its weights take at `bandwidth` (bytes/s),
    every twin's planes counted (what a pass must read for it)."""
    lw = m.w.layers[0]
    return {name: sum(p.nbytes for p in lin.w.packs) / bandwidth * 1e6
            for name, lin in (("qkv", lw.wqkv), ("o", lw.wo), ("gate/up", lw.wgu), ("down", lw.wdown))}


def report(ev: list[dict], S: int, passes: int, twins: str, floors: dict[str, float] | None = None) -> None:
    # passes are delimited by the embedding kernel (the first of each pass)
    starts = [i for i, e in enumerate(ev) if kind(e["name"]) == "embed"]
    if len(starts) < 3:
        print(f"seqs {S}: {len(ev)} GPU events, {len(starts)} passes found; kinds:",
              sorted({kind(e['name']) for e in ev})[:20])
        return
    a, b = starts[1], starts[-1]          # whole passes only, the first dropped
    n = len(starts) - 2
    dur, gap, add, cnt = defaultdict(float), defaultdict(float), defaultdict(float), defaultdict(int)
    placed, place = defaultdict(float), None   # added time by place in the layer (the attention is place 0)
    prev_end = ev[a - 1]["ts"] + ev[a - 1]["dur"]
    for e in ev[a:b]:
        k = kind(e["name"])
        place = 0 if k == "attn_rope" else None if k == "embed" or place is None else place + 1
        dur[k] += e["dur"]
        gap[k] += e["ts"] - prev_end
        added = max(0.0, e["ts"] + e["dur"] - prev_end)
        add[k] += added
        placed[("-" if place is None else place, k)] += added
        cnt[k] += 1
        prev_end = max(prev_end, e["ts"] + e["dur"])
    wall = (ev[b]["ts"] - ev[a]["ts"]) / n
    print(f"seqs {S} twins {twins}: {n} passes, {wall:.1f} us a pass (embed to embed)")
    print(f"  {'kind':<28} {'n/pass':>6} {'us/pass':>9} {'gap before':>10} {'added':>9} {'added/n':>8}")
    for k in sorted(dur, key=lambda k: -add[k]):
        print(f"  {k:<28} {cnt[k] / n:6.1f} {dur[k] / n:9.2f} {gap[k] / n:10.2f} {add[k] / n:9.2f}"
              f" {add[k] / cnt[k]:8.2f}")
    print(f"  {'total':<28} {sum(cnt.values()) / n:6.1f} {sum(dur.values()) / n:9.2f} {sum(gap.values()) / n:10.2f}"
          f" {sum(add.values()) / n:9.2f}")
    # which matrix a kernel serves: its place after the layer's attention (an 8B layer: the attention's output
    # matrix, gate/up, down, the next layer's QKV, each with a pti_wg_tiles launch before it where one is made;
    # "-": before the first attention: the embedding and layer 0's QKV)
    print(f"  {'place after the attention':<32} {'added a pass':>12}")
    for (pl, k), v in sorted(placed.items(), key=lambda kv: (str(kv[0][0]).zfill(3), -kv[1])):
        print(f"  {str(pl):>3} {k:<28} {v / n:12.2f}")
    if floors:   # what each matrix's "added a layer" compares with (place's added / layers)
        print("  a layer's weights at the read bandwidth, us: " + ", ".join(f"{k} {v:.2f}" for k, v in floors.items()))


def main() -> None:
    size = sys.argv[1] if len(sys.argv) > 1 else "8b"
    cases = [int(x) for x in (sys.argv[2] if len(sys.argv) > 2 else "1,16").split(",")]
    twins = sys.argv[3] if len(sys.argv) > 3 else "a"
    dev = torch.device("cuda")
    ops, be = CudaOps(dev), kernel_backend(dev)
    bw = read_bandwidth(be, 2 << 30)["denominator"]   # (2 GiB: past the 60 MB L2, beside an 8B model)
    m = build_model(size, dev, twins, max(cases), 640, ops, be)
    print(f"read bandwidth {bw / 1e9:.0f} GB/s")
    for S in cases:
        m.prefill([SeqRows(i, list(range(1, 513)), 0, _twin_of(i, twins)) for i in range(S)])
        report(trace(m, S, 24, twins), S, 24, twins, layer_floors(m, bw))


if __name__ == "__main__":
    main()
