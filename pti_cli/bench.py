"""Model-level `pti bench`: decode tokens/s against the memory-bandwidth ceiling.

ceiling (tok/s) = read bandwidth / bytes a pass must read x tokens per pass.

* read bandwidth: measured in the same run, the larger of torch's sum over a
  large buffer (8 GiB on a GPU) and a streaming-read kernel (GPU only).
* bytes a pass must read: every weight matrix of the twins in use (the
  embedding table excluded: a pass reads a few of its rows, counted as
  activations), the norm vectors, the KV cache the rows attend to (each
  sequence's positions once), the KV rows written, and the activations each
  matmul reads and writes (`activation_bytes`).
* tokens per pass: sequences x emitted tokens per sequence per pass (tau).

Every setting decodes `gen` tokens per sequence after a `prompt_len`-token
prompt (prefill timed apart); the prefill and the decode are each repeated and
the median kept after one warm-up.  Speculative settings on a synthetic model
replay an accept trace recorded on a real model (random weights repeat
themselves and inflate tau), and are labelled `replay`.
"""

from __future__ import annotations

import json
import statistics
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from .errors import PtiError
from .gpu_model import GpuModel, GpuShape, SeqRows, TorchOps, rows_per_seq_cap

SEQS_DEFAULT = (1, 2, 4, 8, 16, 32)


# ---------------------------------------------------------------- bandwidth

def _time_device(fn, device: torch.device, repeats: int) -> float:
    """Median seconds of fn() after one warm-up, timed with events on a GPU."""
    fn()
    times = []
    for _ in range(repeats):
        if device.type == "cuda":
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            fn()
            b.record()
            b.synchronize()
            times.append(a.elapsed_time(b) / 1e3)
        else:
            t = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t)
    return statistics.median(times)


def measure_read_bandwidth(device: torch.device, nbytes: int | None = None, ops: Any = None) -> dict:
    """Read bandwidth in bytes/s: torch sum, and the ops' streaming-read kernel when it has one."""
    if nbytes is None:
        if device.type == "cuda":
            nbytes = 8 << 30
        else:
            import psutil
            nbytes = min(1 << 30, psutil.virtual_memory().available // 8)
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    buf = torch.ones(nbytes // torch.tensor([], dtype=dtype).element_size(), dtype=dtype, device=device)
    out = {"bytes": buf.numel() * buf.element_size()}
    t = _time_device(lambda: buf.sum(dtype=torch.float32), device, 5)
    out["torch_sum"] = out["bytes"] / t
    stream = getattr(ops, "stream_read", None)
    if stream is not None:
        t = _time_device(lambda: stream(buf), device, 5)
        out["stream_kernel"] = out["bytes"] / t
    out["best"] = max(v for k, v in out.items() if k in ("torch_sum", "stream_kernel"))
    del buf
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return out


# ---------------------------------------------------------------- bytes per pass

def activation_bytes(shape: GpuShape, rows: int, act_size: int) -> int:
    """Activation bytes a pass moves: what each matmul reads and writes, the embedding
    rows read and the float32 logits written (norm/rope/attention intermediates are
    the same vectors, re-read from cache, and not counted again)."""
    sh, hd = shape, shape.head_dim
    qkv = (sh.n_heads + 2 * sh.n_kv_heads) * hd
    per_layer = (sh.dim + qkv) + (sh.n_heads * hd + sh.dim) + (sh.dim + 2 * sh.ffn) + (sh.ffn + sh.dim)
    per_row = act_size * (sh.n_layers * per_layer + sh.dim + sh.dim) + 4 * sh.vocab  # + embed row, logits
    return rows * per_row


def kv_bytes(shape: GpuShape, positions: int, kv_size: int) -> int:
    return positions * shape.n_layers * 2 * shape.n_kv_heads * shape.head_dim * kv_size


def bytes_per_pass(model: GpuModel, seqs: int, rows_per_seq: float, context: float) -> float:
    """Bytes a pass must read for `seqs` sequences of `rows_per_seq` rows whose KV
    cache holds `context` positions on average during the pass.  Distinct twins:
    both twins' matrices when both have rows (sequence i is on twin i % 2), else one."""
    act = torch.tensor([], dtype=model.act_dtype).element_size()
    kvs = torch.tensor([], dtype=model.kv_dtype).element_size()
    rows = seqs * rows_per_seq
    mats = model.w.matrix_bytes()
    if model.twins == "ab" and seqs == 1:
        mats = mats / 2
    return (mats + model.w.norm_bytes()
            + kv_bytes(model.shape, seqs * context, kvs)      # read, once per sequence
            + kv_bytes(model.shape, rows, kvs)                # written
            + activation_bytes(model.shape, rows, act))


# ---------------------------------------------------------------- one setting

@dataclass
class Setting:
    seqs: int
    spec: str = "none"
    twins: str = "a"


@dataclass
class Row:
    seqs: int
    spec: str
    twins: str
    label: str                 # "measured" or "replay"
    bytes_per_pass: float
    ceiling_tok_s: float
    tok_s: float
    pct_ceiling: float
    tau: float
    speedup: float = 0.0       # over plain single-sequence decoding in the same run
    prefill_tok_s: float = 0.0
    passes: int = 0
    tokens: int = 0
    seconds: float = 0.0
    rows_per_seq: float = 1.0  # rows verified per sequence per pass (1 + draft)
    host_pct: float = 0.0      # share of decode wall time the host spent outside the GPU wait
    repeats_identical: bool = True
    seq0_ids: list[int] = field(default_factory=list, repr=False)


def _prompts(n: int, length: int, vocab: int, twins: str) -> list[list[int]]:
    """Prompt of sequence i depends on i alone, so sequence 0 is the same in every setting."""
    out = []
    for i in range(n):
        g = np.random.default_rng(1000 + i)
        out.append(g.integers(0, vocab, length).tolist())
    return out


def _twin_of(i: int, twins: str) -> int:
    return {"a": 0, "b": 1}.get(twins, i % 2)


def _decode_plain(model: GpuModel, firsts: list[int], starts: list[int], gen: int, twins: str):
    """gen passes of one row per sequence, each fed on the device by the one before
    (`GpuModel.decode_greedy`, as `pti run` decodes); returns (tokens, passes, every sequence's tokens)."""
    picks = model.decode_greedy([SeqRows(i, [f], p, _twin_of(i, twins))
                                 for i, (f, p) in enumerate(zip(firsts, starts))], gen)
    return len(firsts) * gen, gen, [[f] + p for f, p in zip(firsts, picks)]


def _decode_replay(model: GpuModel, truth: list[list[int]], starts: list[int], gen: int, twins: str,
                   trace: list[list[list[int]]]):
    """Replay an accept trace: each pass, sequence i verifies the rows its trace says (cut,
    as the engine cuts drafts, to rows_per_seq_cap: the pass stays within the rows that cost
    about one), its drafts being its true greedy continuation (`truth`, from plain decoding),
    and keeps the trace's accepted count (at most the rows it verifies).  The output is then
    the plain greedy output."""
    n = len(truth)
    cap = rows_per_seq_cap(n)
    # every trace sequence is used whatever n: sequence i replays the passes of trace sequences
    # i, i + n, ... interleaved (pass 0 of each, then pass 1 of each, ...), so no one prompt dominates
    def merged(ks: list[int]) -> list[list[int]]:
        return [trace[k][j] for j in range(max(len(trace[k]) for k in ks)) for k in ks if j < len(trace[k])]
    mine = [merged(list(range(i, len(trace), n))) if n < len(trace) else trace[i % len(trace)] for i in range(n)]
    pos, emitted, step = list(starts), [0] * n, [0] * n
    passes = 0
    out = [[t[0]] for t in truth]
    while min(emitted) < gen:
        batch, live = [], []
        for i in range(n):
            if emitted[i] >= gen:
                continue
            t = mine[i]
            rows, keep = t[step[i] % len(t)]
            rows = max(1, min(rows, cap, gen - emitted[i], model.max_ctx - pos[i]))
            keep = max(1, min(keep, rows))
            e = emitted[i]
            batch.append(SeqRows(i, truth[i][e:e + rows], pos[i], _twin_of(i, twins)))
            live.append((i, keep))
        ids = model.run_pass(batch)
        passes += 1
        for (i, keep), r in zip(live, ids):
            pos[i] += keep
            emitted[i] += keep
            step[i] += 1
            out[i].extend(int(x) for x in r[:keep])
    return sum(emitted), passes, out


def run_setting(model: GpuModel, s: Setting, prompt_len: int, gen: int, repeats: int,
                bandwidth: float, trace: list | None = None) -> Row:
    if s.seqs > model.max_seqs:
        raise PtiError(f"--seqs {s.seqs} is more than the model's {model.max_seqs} KV slots")
    sync = (lambda: torch.cuda.synchronize(model.device)) if model.device.type == "cuda" else (lambda: None)
    prompts = _prompts(s.seqs, prompt_len, model.shape.vocab, s.twins)
    seqs = [SeqRows(i, p, 0, _twin_of(i, s.twins)) for i, p in enumerate(prompts)]
    # the prefill, like the decode, repeated and the median kept after one warm-up (each repeat
    # writes the same KV rows); its first picks must not change
    prefills = []
    for _ in range(repeats + 1):
        sync()
        t = time.perf_counter()
        firsts = model.prefill(seqs)
        sync()
        prefills.append((time.perf_counter() - t, firsts))
    prefill_s = statistics.median(t for t, _ in (prefills[1:] if repeats else prefills))
    starts = [prompt_len] * s.seqs
    truth = None if s.spec == "none" else _decode_plain(model, firsts, starts, gen, s.twins)[2]
    runs = []
    for _ in range(repeats + 1):  # the first is the warm-up (graph capture happens there)
        model.host_s, model.rows = 0.0, 0
        sync()
        t = time.perf_counter()
        if s.spec == "none":
            res = _decode_plain(model, firsts, starts, gen, s.twins)
        else:
            res = _decode_replay(model, truth, starts, gen, s.twins, trace)
        sync()
        runs.append((time.perf_counter() - t, model.host_s, *res, model.rows))
    timed = runs[1:] if repeats else runs
    secs, host_s, tokens, passes, outs, rows = sorted(timed, key=lambda r: r[0])[len(timed) // 2]
    tau = tokens / passes / s.seqs
    rows_per_seq = rows / passes / s.seqs
    bpp = bytes_per_pass(model, s.seqs, rows_per_seq, prompt_len + gen / 2)
    ceiling = bandwidth / bpp * (tokens / passes)
    tok_s = tokens / secs
    return Row(s.seqs, s.spec, s.twins, "measured" if s.spec == "none" else "replay",
               bpp, ceiling, tok_s, 100.0 * tok_s / ceiling, tau,
               prefill_tok_s=s.seqs * prompt_len / prefill_s, passes=passes, tokens=tokens,
               seconds=secs, rows_per_seq=rows_per_seq, host_pct=100.0 * host_s / secs,
               repeats_identical=all(r[4] == runs[0][4] for r in runs)
               and (truth is None or outs == truth) and all(f == firsts for _, f in prefills), seq0_ids=outs[0])


# ---------------------------------------------------------------- traces

def load_trace(path: Path) -> list[list[list[int]]]:
    """An accept trace: {"source": ..., "sequences": [[[rows, emitted], ...], ...]}."""
    try:
        data = json.loads(Path(path).read_text())
        seqs = data["sequences"]
        ok = seqs and all(t and all(len(p) == 2 and 1 <= p[1] <= p[0] for p in t) for t in seqs)
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise PtiError(f"cannot read accept trace {path}: {e}") from None
    if not ok:
        raise PtiError(f"accept trace {path} has no valid [rows, emitted] passes")
    return [[[int(r), int(e)] for r, e in t] for t in seqs]


# ---------------------------------------------------------------- the matrix

@dataclass
class BenchResult:
    device: str
    model: dict
    bandwidth: dict
    rows: list[Row]
    command: str = ""
    date: str = ""
    notes: list[str] = field(default_factory=list)

    def to_json(self) -> dict:
        d = asdict(self)
        for r in d["rows"]:
            r.pop("seq0_ids", None)
        return d


def pick_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise PtiError("--device cuda: no CUDA GPU is visible to torch")
    if name not in ("cpu", "cuda"):
        raise PtiError(f"--device must be auto, cpu or cuda, not {name!r}")
    return torch.device(name)


def build_model(size: str, device: torch.device, twins: str, max_seqs: int, max_ctx: int,
                ops: Any = None, backend: Any = None, seed: int = 0) -> GpuModel:
    from .synthetic import build_weights, check_fits, shape_for
    shape = shape_for(size)
    kv = kv_bytes(shape, max_seqs * (max_ctx + 1), 4 if device.type == "cpu" else 2)
    check_fits(shape, size, device, twins, kv)
    w = build_weights(shape, device, twins, seed, backend)
    return GpuModel(shape, w, max_seqs=max_seqs, max_ctx=max_ctx, device=device, twins=twins, ops=ops)


def bench_synthetic(size: str, seqs: list[int], specs: list[str], twins_list: list[str], *,
                    device: torch.device, prompt_len: int = 512, gen: int = 128, repeats: int = 3,
                    trace: list | None = None, ops: Any = None, backend: Any = None,
                    bw_bytes: int | None = None, log=None) -> BenchResult:
    """The whole matrix on one synthetic model per twins setting, in one run."""
    for sp in specs:
        if sp not in ("none", "lookup"):
            raise PtiError(f"--spec must be none or lookup, not {sp!r}")
        if sp != "none" and trace is None:
            raise PtiError("--spec lookup on a synthetic model needs --accept-trace FILE recorded on a real "
                           "model (random weights inflate tau)")
    if any(n < 1 for n in seqs):
        raise PtiError("--seqs values must be >= 1")
    log = log or (lambda msg: None)
    from .synthetic import check_fits, shape_for
    max_seqs, max_ctx = max(seqs), prompt_len + gen + 1
    shape = shape_for(size)
    for tw in twins_list:   # refuse before measuring anything
        check_fits(shape, size, device, tw, 2 * kv_bytes(shape, max_seqs * (max_ctx + 1), 4 if device.type == "cpu" else 2))
    bw = measure_read_bandwidth(device, bw_bytes, ops)
    log(f"read bandwidth {bw['best'] / 1e9:.0f} GB/s")
    rows, notes, model_info = [], [], {}
    for tw in twins_list:
        model = build_model(size, device, tw, max_seqs, max_ctx, ops, backend)
        model_info[tw] = {"size": size, "matrix_bytes": model.w.matrix_bytes(), "ring_bytes": model.w.ring_bytes(),
                          "ops": model.ops.name, "matmul": "kernels" if backend is not None else "torch",
                          "shape": asdict(model.shape)}
        if model_info[tw]["ring_bytes"]:
            log(f"twins {tw}: the Hopper kernels' ring copies hold {model_info[tw]['ring_bytes'] / 1e9:.2f} GB more")
        base_ids = None
        plan = [Setting(n, sp, tw) for sp in specs for n in seqs]
        if tw == "a" and not any(p.seqs == 1 and p.spec == "none" for p in plan):
            plan.insert(0, Setting(1, "none", "a"))  # the baseline every speedup is over
        for st in plan:
            r = run_setting(model, st, prompt_len, gen, repeats, bw["best"], trace)
            if st.spec == "none" and st.seqs == 1 and tw == "a":
                base_ids = r.seq0_ids
            if base_ids is not None and tw == "a" and r.seq0_ids[:len(base_ids)] != base_ids[:len(r.seq0_ids)]:
                notes.append(f"sequence 0 differs from --seqs 1 --spec none at seqs={st.seqs} spec={st.spec}")
            rows.append(r)
            log(f"seqs {st.seqs:>2} spec {st.spec} twins {tw}: {r.tok_s:.1f} tok/s, {r.pct_ceiling:.0f}% of ceiling")
        del model
        if device.type == "cuda":
            torch.cuda.empty_cache()
    base = next((r.tok_s for r in rows if r.seqs == 1 and r.spec == "none" and r.twins == "a"), None)
    for r in rows:
        r.speedup = r.tok_s / base if base else 0.0
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    return BenchResult(name, model_info, bw, rows, notes=notes)


# ---------------------------------------------------------------- output

def print_table(res: BenchResult) -> None:
    from rich.console import Console
    from rich.table import Table
    t = Table(title=f"pti bench on {res.device}: read bandwidth {res.bandwidth['best'] / 1e9:.0f} GB/s")
    for col in ("seqs", "spec", "twins", "GB/pass", "ceiling tok/s", "tok/s", "% ceiling", "tau",
                "speedup", "prefill tok/s", "host %"):
        t.add_column(col, justify="right")
    for r in res.rows:
        spec = r.spec + (" (replay)" if r.label == "replay" else "")
        t.add_row(str(r.seqs), spec, r.twins, f"{r.bytes_per_pass / 1e9:.2f}", f"{r.ceiling_tok_s:.1f}",
                  f"{r.tok_s:.1f}", f"{r.pct_ceiling:.0f}%", f"{r.tau:.2f}", f"{r.speedup:.2f}x",
                  f"{r.prefill_tok_s:.0f}", f"{r.host_pct:.1f}")
    con = Console(width=max(Console().width, 130))
    con.print(t)
    for n in res.notes:
        con.print(f"[yellow]note:[/] {n}")


def write_plot(res: BenchResult, path: Path) -> bool:
    """tok/s against sequences with the ceiling lines; False when matplotlib is missing."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    fig, ax = plt.subplots(figsize=(7, 4.5))
    groups: dict[tuple[str, str], list[Row]] = {}
    for r in res.rows:
        groups.setdefault((r.spec, r.twins), []).append(r)
    for (spec, tw), rs in groups.items():
        rs = sorted(rs, key=lambda r: r.seqs)
        lab = f"spec {spec}{' (replay)' if spec != 'none' else ''}, twins {tw}"
        line, = ax.plot([r.seqs for r in rs], [r.tok_s for r in rs], "o-", label=lab)
        ax.plot([r.seqs for r in rs], [r.ceiling_tok_s for r in rs], "--", color=line.get_color(),
                label=f"ceiling ({lab})")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("sequences per pass")
    ax.set_ylabel("tokens/s (aggregate)")
    ax.set_title(f"pti bench, {res.device}, {res.bandwidth['best'] / 1e9:.0f} GB/s read")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return True


def _int_list(text: str, what: str) -> list[int]:
    try:
        vals = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise PtiError(f"{what} must be a comma-separated list of integers, not {text!r}") from None
    if not vals or any(v < 1 for v in vals):
        raise PtiError(f"{what} needs integers >= 1, got {text!r}")
    return vals


def _str_list(text: str, allowed: tuple[str, ...], what: str) -> list[str]:
    vals = [v.strip() for v in text.split(",") if v.strip()]
    bad = [v for v in vals if v not in allowed]
    if not vals or bad:
        raise PtiError(f"{what} takes {', '.join(allowed)} (comma-separated), not {text!r}")
    return vals


def bench_cli(synthetic: str | None, *, seqs: str, spec: str, twins: str, prompt_len: int, gen: int,
              repeats: int, device: str, json_out: Path | None, plot: Path | None,
              accept_trace: Path | None, ops: str, backend: str = "auto",
              argv: list[str] | None = None) -> BenchResult:
    """`pti bench --synthetic SIZE ...`: build, measure, print the table, write JSON and plot."""
    import sys
    from datetime import datetime, timezone
    if synthetic is None:
        raise PtiError("pti bench needs --synthetic 1b|8b|32b (or --kernels for the matmul kernels alone)")
    if prompt_len < 1 or gen < 1 or repeats < 0:
        raise PtiError("--prompt-len and --gen must be >= 1 and --repeats >= 0")
    seq_list = _int_list(seqs, "--seqs")
    spec_list = _str_list(spec, ("none", "lookup"), "--spec")
    twin_list = _str_list(twins, ("a", "b", "ab"), "--twins")
    from .synthetic import shape_for
    shape_for(synthetic)
    dev = pick_device(device)
    trace = load_trace(accept_trace) if accept_trace else None
    op_impl, mm_backend = make_ops(ops, dev, backend)
    err = sys.stderr
    res = bench_synthetic(synthetic, seq_list, spec_list, twin_list, device=dev, prompt_len=prompt_len,
                          gen=gen, repeats=repeats, trace=trace, ops=op_impl, backend=mm_backend,
                          log=lambda m: print(m, file=err, flush=True))
    res.command = "pti " + " ".join(argv if argv is not None else sys.argv[1:])
    res.date = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    if trace is not None:
        res.notes.append(f"speculative rows replay the accept trace {accept_trace} on random weights")
    print_table(res)
    if json_out is not None:
        tmp = Path(str(json_out) + ".tmp")
        tmp.write_text(json.dumps(res.to_json(), indent=1) + "\n")
        tmp.replace(json_out)
    if plot is not None and not write_plot(res, plot):
        print("pti: --plot needs matplotlib (pip install 'pti-cli[plot]'); no plot written", file=err)
    return res


def make_ops(ops: str, device: torch.device, backend: str = "auto"):
    """(non-matmul ops, matmul backend).  ops: torch (anywhere) or cuda (kernels/pti_ops.hip);
    backend: cuda (the kernels backend) or torch (dequantised torch matmuls, no kernels)."""
    if ops == "auto":
        ops = "cuda" if device.type == "cuda" else "torch"
    if backend == "auto":
        backend = "cuda" if device.type == "cuda" else "torch"
    if ops not in ("torch", "cuda") or backend not in ("torch", "cuda"):
        raise PtiError(f"--ops and --backend take auto, torch or cuda, not {ops!r} / {backend!r}")
    if device.type != "cuda" and "cuda" in (ops, backend):
        raise PtiError("--ops cuda and --backend cuda need an NVIDIA GPU (use --device cuda)")
    op_impl = TorchOps()
    if ops == "cuda":
        from .gpu_ops import CudaOps
        op_impl = CudaOps(device)
    be = None
    if backend == "cuda":
        from .gpu_ops import kernel_backend
        be = kernel_backend(device)
    return op_impl, be


def record_trace(out: Path, prompts_file: Path, model: Path | None = None, max_tokens: int = 128,
                 draft: int = 8) -> dict:
    """Decode the prompts with `--spec lookup` on a real model (default: the embedded one)
    and write, per sequence, [rows verified, tokens emitted] of every decode pass (the
    prefill pass left out): the accept trace `--spec lookup` replays on synthetic models."""
    from .api import Pti
    from .prompts import read_file
    pti = Pti(model)
    prompts = read_file(prompts_file)
    last: dict[int, tuple[int, int]] = {}
    trace: dict[int, list[list[int]]] = {}

    def on_pass(seqs):
        for s in seqs:
            k = s.req.s
            if k in last:
                drafted, emitted = s.drafted - last[k][0], len(s.out_ids) - last[k][1]
                trace.setdefault(k, []).append([drafted + 1, emitted])
            last[k] = (s.drafted, len(s.out_ids))

    res = pti.generate(prompts, spec="lookup", draft=draft, max_tokens=max_tokens, on_pass=on_pass)
    data = {"source": f"{pti.path.name}, --spec lookup --draft {draft}, {len(prompts)} prompts of {prompts_file}",
            "tau": [r.tau for r in res],
            "sequences": [trace[k] for k in sorted(trace) if trace[k]]}
    tmp = Path(str(out) + ".tmp")
    tmp.write_text(json.dumps(data) + "\n")
    tmp.replace(out)
    return data


def markdown_table(data: dict) -> str:
    """The rows of a bench JSON as a markdown table (docs quote it; a test keeps them equal)."""
    lines = ["| seqs | spec | twins | GB/pass | ceiling tok/s | tok/s | % of ceiling | tau | speedup | prefill tok/s |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in data["rows"]:
        spec = r["spec"] + (" (replay)" if r["label"] == "replay" else "")
        lines.append(f"| {r['seqs']} | {spec} | {r['twins']} | {r['bytes_per_pass'] / 1e9:.2f} | "
                     f"{r['ceiling_tok_s']:.0f} | {r['tok_s']:.0f} | {r['pct_ceiling']:.1f}% | {r['tau']:.2f} | "
                     f"{r['speedup']:.2f}x | {r['prefill_tok_s']:.0f} |")
    return "\n".join(lines)
