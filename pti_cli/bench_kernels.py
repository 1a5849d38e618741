"""`pti bench --kernels`: the matmul kernels against the card's read bandwidth.

denominator = the larger of the streaming-read kernel's and torch's sum's
bandwidth over 8 GiB, measured in the same run.  Per call we count only the
bytes it must move: the weights (int8 + f16 scales, each twin), the
activations read and the outputs written.  Each matrix exists in enough random
copies that the copies together exceed 256 MB (over twice the H200's 60 MB L2),
and the timed CUDA graph cycles through them, so the numbers are DRAM's, not
the cache's.  Times are per call: a graph of R launches, replayed, median of
replays, divided by R.  A replay has a fixed part no launch of a pass pays per matrix (the graph's start, its
first launch with none before it to overlap); R is large enough that a replay moves REPLAY_BYTES, so that part is
under 1% of a launch (docs/perf.md, session 44), and a sleep kernel keeps the card busy while the host submits
the replay, so the host's time is not counted.  Where the Hopper kernels take a shape (17-64 rows), a second row ("given") times the
form the model runs: the matmul on activations the launch before already wrote in its tile layout, without
the pti_wg_tiles launch that the plain call makes first.
"""

from __future__ import annotations

import json
import math
import statistics
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from .errors import PtiError

SHAPES = ((6144, 4096), (4096, 4096), (28672, 4096), (4096, 14336))
MS = (1, 2, 4, 8, 16, 32, 64)
WORKING_SET = 256 << 20
REPLAY_BYTES = 2 << 30      # weight bytes a timed replay reads at least (R launches of one matrix)
SLEEP_CYCLES = 400_000      # the sleep before a replay's start event: ~0.2 ms, longer than the host's submission


@dataclass
class Row:
    kind: str          # q8 | ssq16 (both twins, M rows each)
    n: int
    k: int
    m: int
    kernel: str
    us: float          # per call
    gbs: float         # counted bytes / time
    pct: float         # of the denominator
    vs_m1: float       # time / time at M = 1 (same shape, kind and variant policy)


def capture_graph(fn) -> "torch.cuda.CUDAGraph":
    """A graph capturing fn(), warmed up on a side stream first (as torch asks before a capture) and
    replayed three times."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        fn()
        fn()
    torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        fn()
    for _ in range(3):
        g.replay()
    return g


def replay_seconds(g) -> float:
    """Seconds of one replay of g, timed by events."""
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    if SLEEP_CYCLES:   # the card busy until the replay is queued behind the start event
        torch.cuda._sleep(SLEEP_CYCLES)
    a.record()
    g.replay()
    b.record()
    b.synchronize()
    return a.elapsed_time(b) / 1e3


def time_graph(fn, reps: int = 15) -> float:
    """Median seconds of one replay of a graph capturing fn()."""
    g = capture_graph(fn)
    return statistics.median(replay_seconds(g) for _ in range(reps))


def read_bandwidth(backend, nbytes: int = 8 << 30) -> dict:
    buf = torch.empty(nbytes // 2, dtype=torch.bfloat16, device=backend.device).uniform_(-1, 1)
    out = {"bytes": nbytes}
    out["torch_sum"] = nbytes / time_graph(lambda: buf.sum(dtype=torch.float32), 5)
    out["stream_kernel"] = nbytes / time_graph(lambda: backend.stream_read(buf, backend.sm_count * 8), 5)
    out["denominator"] = max(out["torch_sum"], out["stream_kernel"])
    del buf
    torch.cuda.empty_cache()
    return out


def random_packs(backend, n: int, k: int, copies: int, h16: bool = False):
    """`copies` random matrices directly in the kernels' layout (random bytes are valid Q8 data in
    either encoding)."""
    from .backends.repack import Packed, _padded_rows
    g, nb = _padded_rows(n) // 16, -(-k // 32)
    out = []
    for _ in range(copies):
        q = torch.randint(-127, 128, (g, nb, 32, 16), dtype=torch.int8, device=backend.device)
        d = (torch.rand(g, nb, 8, 2, device=backend.device) * 1e-3 + 1e-4).half()
        out.append(Packed(q, d.view(torch.int32).reshape(g, nb, 8), n, k, backend.code(h16)))
    return out


def tiles_given(backend, packs, m: int):
    """An epilogue handing the Hopper matmul its activations already in its tile layout (Epilogue.ti), as the
    model's launch before it writes them; random values (the time does not depend on them)."""
    from .backends.cuda import Epilogue
    ring = packs[0].ring
    nr = backend.wg_kernel(m, backend.act_dtype, code=ring.code, rows=ring.rows, twins=len(packs))[1]
    per = ring.q.shape[1] * nr * 32
    tile = torch.float16 if ring.code == "h16" else backend.act_dtype   # (as the launch before writes them)
    return Epilogue(0, ti=[torch.randn(per, device=backend.device).to(tile) for _ in packs])


def replay_launches(nbytes: int, copies: int) -> int:
    """R, the launches a timed replay holds: each copy at least twice, and at least REPLAY_BYTES of weights read."""
    return max(20, 2 * copies, math.ceil(REPLAY_BYTES / nbytes))


def bench_shape(backend, kind: str, n: int, k: int, ms, denom: float, variant: str | None = None,
                h16: bool = False) -> list[Row]:
    """h16: the matrices take h16 inputs (float16) and write the backend's bf16, as every matrix of a bf16 model
    does on the tensor-core kernels (CudaBackend.weight_from_q8's h16)."""
    twins = 2 if kind == "ssq16" else 1
    from .backends.cuda import TWIN_KERNEL_MAX_ROWS
    x_dtype = torch.float16 if h16 else backend.act_dtype
    one = random_packs(backend, n, k, 1, h16)[0]
    copies = max(2, math.ceil(WORKING_SET / (one.nbytes * twins)))
    packs = [one] + random_packs(backend, n, k, copies * twins - 1, h16)
    sets = [packs[i * twins:(i + 1) * twins] for i in range(copies)]
    if variant is None:   # the Hopper kernels' copies (unless PTI_WGMMA=0), where they take the shape (17-64 rows)
        packs = [backend.with_ring(p, twins) for p in packs]
    reps = replay_launches(one.nbytes * twins, copies)
    rows, t1 = [], None
    if variant is not None:   # an explicit variant serves at most 8 rows per tile it has
        from .backends.cuda import split_variant
        ms = [m for m in ms if m <= 8 * split_variant(variant)["m"] and m in (1, 8, 16, 32, 64)]
    for m in ms:
        xs = [torch.randn(m, k, device=backend.device).to(x_dtype) for _ in range(twins)]
        ys = [torch.empty(m, n, device=backend.device, dtype=backend.act_dtype) for _ in range(twins)]
        wg = variant is None and backend.wg_ready(sets[0], m)   # as KernelBackend._run
        # as matmul_twins: two one-twin launches past its row limit (unless a twin variant is asked for)
        split = twins == 2 and m > TWIN_KERNEL_MAX_ROWS and variant is None and not wg
        name = backend.wg_kernel(m, backend.act_dtype, code=one.code, rows=n, twins=twins)[0] if wg else \
            backend.kernel_name(1 if split else twins, m, x_dtype, backend.act_dtype, variant, rows=n, cols=k)
        if not wg:
            backend.kernel(name)   # a one-line error where the card's module lacks it

        def calls():
            for i in range(reps):
                if wg:
                    backend.launch_wg(sets[i % copies], xs, ys)
                elif split:
                    for tw in range(2):
                        backend.launch([sets[i % copies][tw]], [xs[tw]], [ys[tw]], name)
                else:
                    backend.launch(sets[i % copies], xs, ys, name)

        t = time_graph(calls) / reps
        nbytes = twins * (one.nbytes + 2 * m * k + 2 * m * n)
        t1 = t if m == ms[0] else t1
        label = ("wg_" if wg else "") + name.split("_", 4)[4] + (" x2" if split else "")   # wg_m4: pti_wg_bf16_out_m4
        if wg and backend.wg_rest_units(name, n // 128, twins, 0, k):   # split: the units past the resident clusters
            label += "+rest"
        elif wg and backend.wg_twins_apart(name, n // 128, twins, 0, k):   # one split launch a twin
            label += "+rest x2"
        rows.append(Row(kind, n, k, m, label, t * 1e6, nbytes / t / 1e9, 100 * nbytes / t / denom, t / t1))
        if wg:   # the form the model runs: the launch before wrote the tiles (Epilogue.to), so no pti_wg_tiles
            given = tiles_given(backend, sets[0], m)

            def given_calls():
                for i in range(reps):
                    backend.launch_wg(sets[i % copies], xs, ys, False, given)

            t = time_graph(given_calls) / reps
            rows.append(Row(kind, n, k, m, label + " given", t * 1e6, nbytes / t / 1e9, 100 * nbytes / t / denom,
                            t / t1))
    del sets, packs
    torch.cuda.empty_cache()
    return rows


# --kernel-act: the backend's activations; h16: a bf16 backend's matrices on h16 inputs (what the model runs)
ACTS = {"bf16": torch.bfloat16, "f16": torch.float16, "h16": torch.bfloat16}


def bench_kernels(shapes=SHAPES, ms=MS, kinds=("q8", "ssq16"), variants=(None,), act: str = "bf16") -> dict:
    """act: the activations, bf16 or f16 (a backend of that type), or h16: a bf16 backend's matrices on h16 inputs
    (f16 values, bf16 outputs), the form in which a bf16 model's five matrices a layer and its head run on the
    tensor-core kernels, the Hopper ones included."""
    from .backends.cuda import CudaBackend
    backend = CudaBackend(act_dtype=ACTS[act])
    bw = read_bandwidth(backend)
    rows = []
    for n, k in shapes:
        for kind in kinds:
            for v in variants:
                if v is not None and not v.startswith("t2" if kind == "ssq16" else "t1"):
                    continue
                rows += bench_shape(backend, kind, n, k, ms, bw["denominator"], v, h16=act == "h16")
    return {"device": torch.cuda.get_device_name(backend.device), "arch": backend.arch, "act": act,
            "compiler": backend.compiled.compiler, "bandwidth": bw, "rows": [asdict(r) for r in rows]}


def print_table(res: dict) -> None:
    from rich.console import Console
    from rich.table import Table
    bw = res["bandwidth"]
    con = Console()
    con.print(f"{res['device']} ({res['arch']}, {res['compiler']}, {res.get('act', 'bf16')} activations): read bandwidth torch sum "
              f"{bw['torch_sum'] / 1e9:.0f} GB/s, stream kernel {bw['stream_kernel'] / 1e9:.0f} GB/s; "
              f"denominator {bw['denominator'] / 1e9:.0f} GB/s")
    t = Table("kind", "N x K", "M", "kernel", "us", "GB/s", "% of bw", "t/t(M=1)")
    for r in res["rows"]:
        t.add_row(r["kind"], f"{r['n']}x{r['k']}", str(r["m"]), r["kernel"], f"{r['us']:.1f}",
                  f"{r['gbs']:.0f}", f"{r['pct']:.1f}", f"{r['vs_m1']:.2f}")
    con.print(t)


# Issue 4's targets, by rows: the least % of the read bandwidth over 1, 2, 4 and 8 rows (90), % at 16 rows (80),
# then time / time at one row at 32 and 64 rows (1.5, 2).
TARGETS = (("1-8 rows", (1, 2, 4, 8), "pct", 90.0), ("16 rows", (16,), "pct", 80.0),
           ("32 rows", (32,), "vs_m1", 1.5), ("64 rows", (64,), "vs_m1", 2.0))


def target_cells(res: dict) -> list[dict]:
    """Issue 4's table: per kind and matrix, each target's value and whether it is met.  Where a shape has a "given"
    row (the Hopper kernels on tiles the launch before wrote) that row counts, since it is the form the model runs.
    A target whose rows the run did not time is left out."""
    rows: dict = {}
    for r in res["rows"]:
        key = (r["kind"], r["n"], r["k"], r["m"])
        if r["kernel"].endswith(" given") or key not in rows:
            rows[key] = r
    cells = []
    for kind, n, k in dict.fromkeys((kind, n, k) for kind, n, k, _ in rows):
        for name, ms, field, goal in TARGETS:
            vals = [rows[(kind, n, k, m)][field] for m in ms if (kind, n, k, m) in rows]
            if len(vals) < len(ms):
                continue
            value = min(vals) if field == "pct" else max(vals)
            met = value >= goal if field == "pct" else value <= goal
            cells.append({"kind": kind, "n": n, "k": k, "target": name, "value": value, "goal": goal, "met": met})
    return cells


def _cell_text(cell: dict) -> str:
    field = next(f for name, _, f, _ in TARGETS if name == cell["target"])
    return f"{cell['value']:.2f}%" if field == "pct" else f"x{cell['value']:.2f}"


def _target_rows(cells: list[dict], mark) -> list[list[str]]:
    """One row a kind and matrix: kind, N x K, then each target's text as mark(text, met) ("" where left out)."""
    out = []
    for kind, n, k in dict.fromkeys((c["kind"], c["n"], c["k"]) for c in cells):
        got = {c["target"]: c for c in cells if (c["kind"], c["n"], c["k"]) == (kind, n, k)}
        out.append([kind, f"{n}x{k}"] + ["" if name not in got else mark(_cell_text(got[name]), got[name]["met"])
                                         for name, *_ in TARGETS])
    return out


def markdown_targets(cells: list[dict]) -> str:
    """The targets table as Markdown (the README's), met cells in bold, then the count."""
    lines = ["| kind | N x K | " + " | ".join(name for name, *_ in TARGETS) + " |",
             "| --- | --- |" + " --- |" * len(TARGETS)]
    lines += ["| " + " | ".join(r) + " |" for r in _target_rows(cells, lambda t, met: f"**{t}**" if met else t)]
    return "\n".join(lines) + f"\n\nMet (bold): {sum(c['met'] for c in cells)} of {len(cells)}."


def print_targets(cells: list[dict]) -> None:
    from rich.console import Console
    from rich.table import Table
    if not cells:
        return
    t = Table("kind", "N x K", *(name for name, *_ in TARGETS), title="issue 4's targets (met: *)")
    for r in _target_rows(cells, lambda text, met: text + (" *" if met else "")):
        t.add_row(*r)
    con = Console()
    con.print(t)
    con.print(f"met: {sum(c['met'] for c in cells)} of {len(cells)}")


def bench_kernels_cli(json_out: Path | None = None, variants: str | None = None, act: str = "bf16") -> None:
    if act not in ACTS:
        raise PtiError(f"--kernel-act takes {' or '.join(ACTS)}, not {act!r}")
    if not torch.cuda.is_available():
        raise PtiError("pti bench --kernels needs an NVIDIA GPU and none is visible to torch")
    res = bench_kernels(variants=tuple(None if v == "default" else v for v in variants.split(",")) if variants else (None,),
                        act=act)
    print_table(res)
    if not variants:   # the policy's table (a variant sweep has several rows a cell)
        res["targets"] = target_cells(res)
        print_targets(res["targets"])
    if json_out is not None:
        json_out.write_text(json.dumps(res, indent=1))
