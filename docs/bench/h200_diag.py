"""Where a decode pass's time goes on the GPU (synthetic model, one row per sequence).

Times CUDA-graph replays of: the whole pass (fused ops), the whole pass with
plain torch ops, the matmuls alone (same weights, same shapes), and each
non-matmul op alone x the count per pass; one sequence, then (keys ending in
_s16) the same for 16 sequences at the same context.  Prints one JSON line and
a table.

    python3 docs/bench/h200_diag.py 8b [out.json]
"""

from __future__ import annotations

import json
import sys

import torch

from pti_cli.bench import build_model, measure_read_bandwidth
from pti_cli.bench_kernels import time_graph
from pti_cli.gpu_model import SeqRows, TorchOps, to_h16
from pti_cli.gpu_ops import CudaOps, kernel_backend


def graph_time(fn, reps: int = 50) -> float:
    """Median ms of a CUDA-graph replay of fn (the kernel table's timing)."""
    return time_graph(fn, reps) * 1e3


def main() -> None:
    size = sys.argv[1] if len(sys.argv) > 1 else "8b"
    dev = torch.device("cuda")
    ops, be = CudaOps(dev), kernel_backend(dev)
    bw = measure_read_bandwidth(dev, 4 << 30, ops)
    m = build_model(size, dev, "a", 16, 640, ops, be)
    sh = m.shape
    m.prefill([SeqRows(0, list(range(1, 513)), 0)])
    tok = torch.tensor([5], dtype=torch.int32, device=dev)
    pos = torch.tensor([512], dtype=torch.int32, device=dev)
    slot = torch.tensor([0], dtype=torch.int32, device=dev)
    out = {"size": size, "bandwidth_GBs": bw["best"] / 1e9, "matrix_bytes": m.w.matrix_bytes()}
    out["pass_fused_ms"] = graph_time(lambda: m.forward(tok, pos, slot, 1, 1, 1))
    m.ops = TorchOps()
    out["pass_torch_ops_ms"] = graph_time(lambda: m.forward(tok, pos, slot, 1, 1, 1))
    m.ops = ops
    h = torch.randn(1, sh.dim, device=dev).bfloat16()
    a = torch.randn(1, sh.ffn, device=dev).bfloat16()
    hh, ah = to_h16(h), to_h16(a)   # what an h16 matrix takes (converted once, outside the timing)

    def matmuls():
        for lw in m.w.layers:
            lw.wqkv(pick(lw.wqkv, h, hh), 1)
            lw.wo(pick(lw.wo, h, hh), 1)
            lw.wgu(pick(lw.wgu, h, hh), 1)
            lw.wdown(pick(lw.wdown, a, ah), 1)
        m.w.output(pick(m.w.output, h, hh), 1)
    out["matmuls_ms"] = graph_time(matmuls)
    out["matmul_floor_ms"] = m.w.matrix_bytes() / bw["best"] * 1e3
    x = torch.randn(1, sh.dim, device=dev)
    lw = m.w.layers[0]
    qkv = torch.randn(1, (sh.n_heads + 2 * sh.n_kv_heads) * sh.head_dim, device=dev).bfloat16()
    q = torch.randn(1, sh.n_heads * sh.head_dim, device=dev).bfloat16()
    gu = torch.randn(1, 2 * sh.ffn, device=dev).bfloat16()
    L = sh.n_layers
    out["attention_rope_ms"] = graph_time(lambda: [ops.attention(m, qkv, pos, slot, i, 1, 1) for i in range(L)])
    ops.fused_rope = False
    out["norms_ms"] = graph_time(lambda: [ops.add_norm(x, h, lw.attn_norm, sh.eps, torch.bfloat16) for _ in range(2 * L)])
    out["rope_kv_ms"] = graph_time(lambda: [ops.rope_kv(m, qkv, pos, slot, i) for i in range(L)])
    out["attention_ms"] = graph_time(lambda: [ops.attention(m, q, pos, slot, i, 1, 1) for i in range(L)])
    ops.fused_attention = False
    out["attention_2kernels_ms"] = graph_time(lambda: [ops.attention(m, q, pos, slot, i, 1, 1) for i in range(L)])
    out["pass_2kernel_attention_ms"] = graph_time(lambda: m.forward(tok, pos, slot, 1, 1, 1))
    ops.fused_attention = True
    out["pass_unfused_rope_ms"] = graph_time(lambda: m.forward(tok, pos, slot, 1, 1, 1))
    ops.fused_attention = True
    ops.fused_rope = True
    empty = torch.empty(1, device=dev)
    out["empty_kernels_ms"] = graph_time(lambda: [empty.add_(0) for _ in range(L * 10)])
    out["silu_ms"] = graph_time(lambda: [ops.silu_mul(gu, sh.ffn) for _ in range(L)])
    # m.forward at one row: embedding, the first norm's parts, per layer QKV, attention, O, gate/up (and
    # SiLU unless fused), down, then the output head (a bucket's graph adds argmax_feed)
    out["launches_per_pass"] = L * (5 if m.w.layers[0].wgu.glu else 6) + 3
    out.update(breakdown16(m, ops, 16))
    print(json.dumps(out))
    for k, v in out.items():
        print(f"{k:>20}: {v:.4g}" if isinstance(v, float) else f"{k:>20}: {v}")
    if len(sys.argv) > 2:
        with open(sys.argv[2], "w") as f:
            json.dump(out, f, indent=1)


def pick(lin, t: torch.Tensor, t16: torch.Tensor) -> torch.Tensor:
    """The inputs the matrix takes: bf16 t, or t16 = gpu_model.to_h16(t) for an h16 matrix."""
    return t16 if getattr(lin.w, "h16", False) else t


def breakdown16(m, ops, S: int) -> dict:
    """The pass and its parts for S sequences of one row each, all at position 512 (the KV
    contents do not change the time)."""
    sh, dev, L = m.shape, m.device, m.shape.n_layers
    tok = torch.full((S,), 5, dtype=torch.int32, device=dev)
    pos = torch.full((S,), 512, dtype=torch.int32, device=dev)
    slot = torch.arange(S, dtype=torch.int32, device=dev)
    h = torch.randn(S, sh.dim, device=dev).bfloat16()
    a = torch.randn(S, sh.ffn, device=dev).bfloat16()
    x = torch.randn(S, sh.dim, device=dev)
    qkv = torch.randn(S, (sh.n_heads + 2 * sh.n_kv_heads) * sh.head_dim, device=dev).bfloat16()
    gu = torch.randn(S, 2 * sh.ffn, device=dev).bfloat16()
    lw = m.w.layers[0]
    out = {"pass_fused_ms_s16": graph_time(lambda: m.forward(tok, pos, slot, S, 1, S))}

    hh, ah = to_h16(h), to_h16(a)

    def matmuls():
        for w in m.w.layers:
            w.wqkv(pick(w.wqkv, h, hh), S)
            w.wo(pick(w.wo, h, hh), S)
            w.wgu(pick(w.wgu, h, hh), S)
            w.wdown(pick(w.wdown, a, ah), S)
        m.w.output(pick(m.w.output, h, hh), S)
    out["matmuls_ms_s16"] = graph_time(matmuls)
    for name, fn in (("qkv", lambda: lw.wqkv(pick(lw.wqkv, h, hh), S)), ("o", lambda: lw.wo(pick(lw.wo, h, hh), S)),
                     ("gate_up", lambda: lw.wgu(pick(lw.wgu, h, hh), S)),
                     ("down", lambda: lw.wdown(pick(lw.wdown, a, ah), S))):
        out[f"matmul_{name}_us_s16"] = graph_time(lambda: [fn() for _ in range(L)]) * 1e3 / L
    out["attention_rope_ms_s16"] = graph_time(lambda: [ops.attention(m, qkv, pos, slot, i, S, 1) for i in range(L)])
    out["norms_ms_s16"] = graph_time(lambda: [ops.add_norm(x, h, lw.attn_norm, sh.eps, torch.bfloat16)
                                              for _ in range(2 * L)])
    out["silu_ms_s16"] = graph_time(lambda: [ops.silu_mul(gu, sh.ffn) for _ in range(L)])
    return out


if __name__ == "__main__":
    main()
