"""The GPU forward: static device buffers, fused ops, one CUDA graph per bucket.

A pass serves S sequences with P rows each (1 + draft, padded to the bucket):
rows are ordered by sequence, twin-A sequences first.  Three int32 device
vectors describe it: `tokens`, `pos` (absolute position of the row; -1 = a
padding row, which writes nothing) and `slot` (the sequence's KV-cache slot).
The KV write happens before attention, so the rows of one sequence see each
other causally through the cache, and a rejected draft needs no truncation:
its positions are overwritten by the next pass.

The same code runs two ways: `TorchOps` (any torch device; the CPU test path
and the reference) and `CudaOps` (kernels/pti_ops.hip, batch-invariant, a
fixed KV chunk order).  Matrices go through a `Linear`: dequantised torch
weights, or the kernels backend's twin matmul.
"""

from __future__ import annotations

import gc
import math
import os
import time
from dataclasses import dataclass, field, replace
from typing import Any, Sequence

import numpy as np
import torch

from .errors import PtiError

QBLOCK = 32
SEQ_BUCKETS = (1, 2, 4, 8, 16, 32, 64)
ROW_BUCKETS = (1, 2, 4, 8, 16)   # rows per sequence captured in graphs; more runs eagerly
ATTN_CHUNK = 64                  # KV positions per attention block: fixed, so rows never change order
# Rows a pass may hold for about the price of one: the kernels' first activation tile.  Measured
# (docs/bench/kernels_h200_*.json): time(M) / time(1) is 1.00-1.10 up to 8 rows, 1.17-1.58 at 16,
# 1.65-2.31 at 32.  Drafts are cut so that a pass, padded to its graph bucket, stays within it.
FREE_ROWS = 8
# A scaled matmul of more rows reads each row's inv, one float, instead of summing the row's
# partial sums in every CTA: past a few rows that costs more (perf.md, sessions 6 and 9).  Its own
# first CTAs compute them where the residual launch before it set their slots pending
# (KernelLinear.residual: no launch between the two); else one small launch does (the first layer).
INV_IN_EPILOGUE_ROWS = 8
RING = 3   # passes of one bucket whose picks may be in flight (launched, not yet read) at once


def seq_bucket(n: int) -> int:
    """The sequences a pass of n sequences is padded to (its graph bucket)."""
    return next((b for b in SEQ_BUCKETS if b >= n), n)


def rows_per_seq_cap(n_seqs: int) -> int:
    """The most rows per sequence (last known token + draft) that keep a pass of n_seqs
    sequences, padded to its bucket, within FREE_ROWS: drafts shrink as sequences grow."""
    return max(1, FREE_ROWS // seq_bucket(n_seqs))


@dataclass
class GpuShape:
    n_layers: int
    dim: int
    ffn: int
    n_heads: int
    n_kv_heads: int
    vocab: int
    head_dim: int = 0
    eps: float = 1e-5
    rope_theta: float = 10000.0
    rope_neox: bool = False   # llama GGUF: adjacent pairs; qwen: half split

    def __post_init__(self) -> None:
        if self.head_dim == 0:
            self.head_dim = self.dim // self.n_heads


# ---------------------------------------------------------------- matrices

class DenseLinear:
    """Torch path: dequantised weights per twin; rows [:n_a] use twin A, the rest twin B."""

    glu = False   # outputs are the matrix's rows (gate and up apart)

    def __init__(self, mats: list[torch.Tensor], stored_bytes: int):
        self.mats, self.nbytes = mats, stored_bytes

    def __call__(self, x: torch.Tensor, n_a: int) -> torch.Tensor:
        if len(self.mats) == 1:
            return x @ self.mats[0].T
        wa, wb = self.mats
        return torch.cat([x[:n_a] @ wa.T, x[n_a:] @ wb.T])


class KernelLinear:
    """The kernels backend's matmul (batch-invariant); both twins from one read when ab.
    glu: a fused gate/up matrix whose kernel returns silu(gate) * up ([M, rows / 2])."""

    def __init__(self, backend: Any, w: Any, n_twins: int, stored_bytes: int, out_dtype=None, twin: int = 0,
                 h16: bool = False):
        self.backend, self.w, self.n_twins, self.twin = backend, w, n_twins, twin
        self.out_dtype = out_dtype
        # h16: its norm parts (a residual matrix) or silu(gate) * up (a gate/up) come out as h16 (to_h16)
        # for an h16 matrix after it; an h16 matrix's other outputs are bf16 either way
        self.h16 = h16
        self.glu = getattr(w, "glu", False)
        self.nbytes = getattr(w, "nbytes", stored_bytes)   # what the kernels read (padding rows included)

    def __call__(self, x: torch.Tensor, n_a: int) -> torch.Tensor:
        if self.n_twins == 1:
            return self.backend.matmul(x, self.w, self.twin, self.out_dtype)
        # both twins' outputs straight into one [M, N] tensor: no concatenation pass
        n_out = self.w.rows // 2 if self.glu else self.w.rows
        y = torch.empty((x.shape[0], n_out), dtype=self._y_dtype(x), device=x.device)
        self.backend.matmul_twins(x[:n_a], x[n_a:], self.w, self.out_dtype, outs=(y[:n_a], y[n_a:]))
        return y

    def _y_dtype(self, x: torch.Tensor) -> torch.dtype:
        """Outputs: float32 (out_dtype), h16 (float16) from a gate/up whose outputs go to an h16 matrix,
        else the model's activations (bf16)."""
        if self.out_dtype is not None:
            return self.out_dtype
        if self.glu and self.h16:
            return torch.float16
        return torch.bfloat16 if getattr(self.w, "h16", False) or self.glu else x.dtype

    def _parts(self, M: int, n_a: int) -> list[tuple[int, int, int]]:
        """(twin, first row, end row) of each twin with rows: the rows a launch takes per twin."""
        parts = [(self.twin, 0, M)] if self.n_twins == 1 else [(0, 0, n_a), (1, n_a, M)]
        return [p for p in parts if p[2] > p[1]]

    def _inv_ctas_ok(self, M: int, parts: list, out: torch.dtype) -> bool:
        """Whether this matrix's M rows go in one launch of a kernel with the inv CTAs' form (one twin)."""
        return len(parts) == 1 and self.backend.inv_form_ok(M, self.w, out, self.glu)

    def _wg_sums_inv(self, M: int, parts: list) -> bool:
        """Whether this matrix's M rows go to the Hopper kernels in one launch, whose activation-layout
        launch then sums the rows' inv (Epilogue.sum_inv; PTI_WG_SUM_INV=0: a row_inv launch, for A/B)."""
        if not getattr(self.backend, "wgmma", False) or os.environ.get("PTI_WG_SUM_INV", "1") == "0":
            return False
        return self._wg_ready(parts)

    def _wg_ready(self, parts: list) -> bool:
        """Whether these parts' rows go to the Hopper kernels in one launch (backend.wg_ready)."""
        packs = [self.w.packs[self.w.plane[t]] for t, _, _ in parts]
        return self.backend.wg_ready(packs, max(hi - lo for _, lo, hi in parts))

    def wg_tile_rows(self, M: int, n_a: int) -> int:
        """The rows of the Hopper kernels' tiles (32 or 64) when this matrix's scaled matmul of M rows
        goes to them in one launch, so the residual launch before may lay out u for it (Epilogue.to); else 0.
        PTI_WG_TILES=0: never (the pti_wg_tiles launch, for A/B runs)."""
        if not getattr(self.backend, "wgmma", False) or os.environ.get("PTI_WG_TILES", "1") == "0":
            return 0
        parts = self._parts(M, n_a)
        if not self._wg_ready(parts):
            return 0
        ring = self.w.packs[self.w.plane[parts[0][0]]].ring
        return self.backend.wg_kernel(max(hi - lo for _, lo, hi in parts), torch.float32, self.glu, ring.code, ring.rows,
                                      len(parts))[1]

    def input_tiles(self, M: int, n_a: int) -> list | None:
        """Room for this matrix's M input rows in the Hopper kernels' tile layout, one tensor a twin, which the
        launch before writes (Epilogue.to) where wg_tile_rows says they take the matrix; else None."""
        nr = self.wg_tile_rows(M, n_a)
        if not nr:
            return None
        dtype = self.backend.in_dtype(self.w)
        return [torch.empty(self.w.cols * nr, dtype=dtype, device=self.backend.device) for _ in self._parts(M, n_a)]

    def scaled(self, u: torch.Tensor, p: torch.Tensor, eps: float, n_a: int, inv: torch.Tensor | None = None,
               tiles: list | None = None, to: list | None = None) -> torch.Tensor | None:
        """inv(p) * (u @ W^T), the scale inside the kernel's epilogue (see `scaled` below); None where
        the backend has no epilogues.  inv: the rows' inv slots a residual launch set pending; tiles: u
        in the Hopper kernels' layout, one tensor a twin, from that launch (input_tiles); to: the next
        matrix's input_tiles, which a gate/up the Hopper kernels take fills with silu(gate) * up."""
        from .backends.cuda import Epilogue
        if not getattr(self.backend, "epilogue_ok", lambda: False)():
            return None
        M = u.shape[0]
        n_out = self.w.rows // 2 if self.glu else self.w.rows
        y = torch.empty((M, n_out), dtype=self._y_dtype(u), device=u.device)
        parts = self._parts(M, n_a)
        if M <= INV_IN_EPILOGUE_ROWS:   # each CTA sums its rows' partials itself: no launch
            epi = Epilogue(p.shape[1], eps, pin=[p[lo:hi] for _, lo, hi in parts], h16=self.h16)
        elif inv is not None and self._inv_ctas_ok(M, parts, y.dtype):
            # summed once by the launch's first CTAs, read by the others
            epi = Epilogue(p.shape[1], eps, pin=[p[lo:hi] for _, lo, hi in parts], inv=[inv[lo:hi] for _, lo, hi in parts],
                           h16=self.h16)
        elif tiles:   # the Hopper kernels on the tiles given: the inv summed by the matmul's own first CTAs
            epi = Epilogue(p.shape[1], eps, pin=[p[lo:hi] for _, lo, hi in parts], inv=[inv[lo:hi] for _, lo, hi in parts],
                           h16=self.h16, ti=tiles)
        elif self._wg_sums_inv(M, parts):
            # the Hopper kernels: summed by the launch that lays out their activations (no row_inv launch)
            inv = torch.empty(M, dtype=torch.float32, device=u.device)
            epi = Epilogue(p.shape[1], eps, pin=[p[lo:hi] for _, lo, hi in parts], inv=[inv[lo:hi] for _, lo, hi in parts],
                           h16=self.h16, sum_inv=True)
        else:   # summed once by a launch, so that the CTAs read one float per row instead of the partials
            inv = self.backend.row_inv(p, u.shape[1], eps)
            epi = Epilogue(p.shape[1], eps, inv=[inv[lo:hi] for _, lo, hi in parts], h16=self.h16)
        if to:
            epi = replace(epi, to=to, tnr=to[0].numel() // (self.w.rows // 2))
        self.backend.matmul_epi([t for t, _, _ in parts], [u[lo:hi] for _, lo, hi in parts], self.w,
                                [y[lo:hi] for _, lo, hi in parts], epi)
        return y

    def residual(self, a: torch.Tensor, x: torch.Tensor, g: torch.Tensor, n_a: int, tiles: list | None = None,
                 to: list | None = None):
        """x += bf16(a @ W^T) in place; returns the next norm's (u, p, inv) (see `residual` below),
        from the kernel's epilogue; None where the backend has no epilogues.  inv: past
        INV_IN_EPILOGUE_ROWS rows of one twin in one launch, or with `to`, the rows' inv slots, pending,
        for the next matmul to fill (else None; PTI_INV_CTAS=0: None, for A/B runs).  tiles: a in the
        Hopper kernels' layout (input_tiles), from the gate/up before; to: the next matrix's input_tiles,
        filled with u."""
        from .backends.cuda import Epilogue
        if not getattr(self.backend, "epilogue_ok", lambda: False)() or self.glu or self.out_dtype is not None:
            return None
        M, d = x.shape
        ng = -(-d // 16)
        u = torch.empty((M, d), dtype=torch.float16 if self.h16 else torch.bfloat16, device=a.device)   # as the kernels write it
        p = torch.empty((M, ng), dtype=torch.float32, device=a.device)
        parts = self._parts(M, n_a)
        inv = None
        if M > INV_IN_EPILOGUE_ROWS and os.environ.get("PTI_INV_CTAS", "1") != "0" and self._inv_ctas_ok(M, parts, torch.float32):
            inv = torch.empty(M, dtype=torch.float32, device=a.device)
        if to and inv is None:
            inv = torch.empty(M, dtype=torch.float32, device=a.device)
        cut = lambda t: [t[lo:hi] for _, lo, hi in parts] if t is not None else []   # noqa: E731
        self.backend.matmul_epi([t for t, _, _ in parts], cut(a), self.w, cut(x),
                                Epilogue(ng, 0.0, uo=cut(u), po=cut(p), g=[g if g.dim() == 1 else g[t] for t, _, _ in parts],
                                         invo=cut(inv), h16=self.h16, to=to or [], tnr=to[0].numel() // d if to else 0,
                                         ti=tiles or []))
        return u, p, inv


# ---------------------------------------------------------------- the RMSNorm, split around the matmuls
#
# h = bf16(x * rsqrt(mean(x^2) + eps) * g) @ W^T is computed as inv * (u @ W^T) with u = bf16(x * g)
# and inv from partial sums of x^2 over groups of 16 columns (p).  The matmul that writes the
# residual stream x produces u and p in its epilogue, the matmul that reads it applies inv in
# its own: no norm launch between them (kernels/pti_kernel.hip, PtiArgs).  The torch versions
# below give the same values in another rounding order (the CPU path and other backends).

def to_h16(t: torch.Tensor) -> torch.Tensor:
    """h16, how an h16 model hands its matmuls their inputs: bf16(t), as float16 times 2^-H16_SHIFT
    (exact for 2^-13 <= |v| < 2^20; kernels/pti_kernel.hip pti_bf16_to_h16, repack.py)."""
    from .backends.repack import H16_SHIFT
    return (t.to(torch.bfloat16).float() * 2.0 ** -H16_SHIFT).to(torch.float16)


def norm_parts(x: torch.Tensor, g: torch.Tensor, n_a: int, dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """(u, p): u = x * g in `dtype` (float16: h16, to_h16) (g [d], or [2, d] per twin: the first n_a
    rows are twin A's), p[m][j] = sum of x[m][16j:16j+16]^2."""
    if g.dim() == 2:
        g = torch.cat([g[0].expand(n_a, -1), g[1].expand(x.shape[0] - n_a, -1)])
    M, d = x.shape
    sq = torch.nn.functional.pad(x * x, (0, -d % 16))
    u = x * g
    return to_h16(u) if dtype == torch.float16 else u.to(dtype), sq.view(M, -1, 16).sum(-1)


def scaled(lin: Any, u: torch.Tensor, p: torch.Tensor, eps: float, n_a: int,
           inv: torch.Tensor | None = None, tiles: list | None = None, to: list | None = None) -> torch.Tensor:
    """lin(bf16(RMSNorm(x) * g)) from the norm's parts: inv * (u @ W^T), inv = rsqrt(sum(p) / d + eps)
    (inv: the slots the residual launch before set pending, or None; tiles: u in the Hopper kernels'
    layout from that launch, or None; to: the next matrix's, for a gate/up to fill, or None)."""
    y = lin.scaled(u, p, eps, n_a, inv, tiles, to) if hasattr(lin, "scaled") else None
    if y is None:
        if getattr(lin, "glu", False):   # silu(gate) * up comes out of the matmul: too late to scale
            raise PtiError("a fused gate/up matrix needs the kernels' norm epilogue")
        inv = torch.rsqrt(p.sum(-1, keepdim=True) / u.shape[1] + eps)
        y = lin(u, n_a)
        y = (y.float() * inv).to(y.dtype)
    return y


def residual(lin: Any, a: torch.Tensor, x: torch.Tensor, g: torch.Tensor, n_a: int, dtype,
             tiles: list | None = None, to: list | None = None):
    """x += lin(a) (rounded to the activations' dtype); returns the next norm's (u, p, inv) for
    weights g, u in `dtype` (float16: h16) (inv: the next matmul's pending inv slots, or None; tiles: a in
    the Hopper kernels' layout, or None; to: the next matrix's input_tiles, filled with u, or None)."""
    res = lin.residual(a, x, g, n_a, tiles, to) if hasattr(lin, "residual") else None
    if res is None:
        x += lin(a, n_a).to(torch.bfloat16 if dtype == torch.float16 else dtype).float()
        res = norm_parts(x, g, n_a, dtype) + (None,)
    return res


def input_tiles(lin: Any, M: int, n_a: int, writer: Any = None) -> list | None:
    """lin's input rows in the Hopper kernels' tile layout, for the launch before it to write, where they
    take lin, and the writer (a gate/up; None: a residual launch, which always can) too; else None."""
    if not hasattr(lin, "input_tiles") or (writer is not None and not writer.wg_tile_rows(M, n_a)):
        return None
    return lin.input_tiles(M, n_a)


# The matrices that take h16 inputs (to_h16) by default: all five (docs/perf.md, session 19: with
# the 16-row f16 kernels in pti_cvt4's LEAN form, QKV, gate/up, down and the head are as fast as the
# down projection alone at 16 sequences and faster at one; session 20: the attention's output
# matrix too, from the attention's h16 rows (AttnOut in kernels/pti_ops.hip), -0.9% at one sequence).
ALL_H16_ROLES = ("qkv", "wo", "gu", "down", "head")
H16_ROLES = ALL_H16_ROLES


def h16_roles(backend: Any, shape: GpuShape) -> frozenset:
    """The matrices of a model of `shape` ("qkv", "wo", "gu", "down", "head") that take h16 inputs on
    `backend`, which the launches before them write in their epilogues (kernels/pti_kernel.hip,
    PtiArgs.h16).  PTI_H16 (A/B runs): "0" none, "all", or a comma-separated list."""
    if not (getattr(backend, "h16_ok", lambda: False)() and backend.glu_ok(2 * shape.ffn)):
        return frozenset()
    v = os.environ.get("PTI_H16", "")
    roles = H16_ROLES if v == "" else () if v == "0" else ALL_H16_ROLES if v == "all" else tuple(v.split(","))
    if not set(roles) <= set(ALL_H16_ROLES):
        raise PtiError(f"PTI_H16: {v!r} is not 0, all, or a list of {', '.join(ALL_H16_ROLES)}")
    return frozenset(roles)


def h16_io(roles: frozenset, layer: int, n_layers: int) -> dict[str, tuple[bool, bool]]:
    """Per matrix of a layer (and "head"): (takes h16 inputs, writes h16 for the matrix after it).
    The attention writes the output matrix's inputs (GpuModel.forward)."""
    nxt = "qkv" if layer + 1 < n_layers else "head"
    return {"qkv": ("qkv" in roles, False),
            "wo": ("wo" in roles, "gu" in roles),
            "gu": ("gu" in roles, "down" in roles),
            "down": ("down" in roles, nxt in roles),
            "head": ("head" in roles, False)}


def make_linear(pairs: list[tuple[torch.Tensor, torch.Tensor]], device: torch.device, backend: Any = None,
                out_f32: bool = False, glu: bool = False, h16: tuple[bool, bool] = (False, False)):
    """A Linear from one or two (int8 [N, K], f16 scales [N, K/32]) Q8_0 matrices on `device`.
    out_f32: float32 outputs from the kernels (the logits).  glu: the rows are gate then up,
    and a kernels backend that can may return silu(gate) * up itself (the Linear's `glu`).
    h16: (the matmuls take h16 inputs, they write h16 for the matrix after them): h16_io."""
    n, k = pairs[0][0].shape
    q8_bytes = n * ((k + QBLOCK - 1) // QBLOCK) * 34 * len(pairs)
    if backend is not None:
        glu = glu and not out_f32 and getattr(backend, "glu_ok", lambda n: False)(n)
        return KernelLinear(backend, backend.weight_from_q8(pairs, glu=glu, h16=h16[0]), len(pairs),
                            q8_bytes, torch.float32 if out_f32 else None, h16=h16[1])
    act = torch.float32 if device.type == "cpu" else torch.bfloat16
    mats = []
    for qs, scales in pairs:
        w = qs.to(act) * scales.to(act).repeat_interleave(QBLOCK, dim=1)[:, :k]
        mats.append(w.contiguous())
    return DenseLinear(mats, sum(m.numel() * m.element_size() for m in mats))


@dataclass
class LayerWeights:
    attn_norm: torch.Tensor
    wqkv: Any     # fused q, k, v rows
    wo: Any
    ffn_norm: torch.Tensor
    wgu: Any      # fused gate rows then up rows (glu: returns silu(gate) * up)
    wdown: Any


@dataclass
class Weights:
    embed: torch.Tensor          # [vocab, dim] or [2, vocab, dim] per twin, activation dtype; a pass reads a few rows
    layers: list[LayerWeights]
    out_norm: torch.Tensor
    output: Any
    h16: frozenset = frozenset()   # the matrices that take h16 inputs (h16_roles)

    def matrices(self) -> list:
        return [self.output] + [m for lw in self.layers for m in (lw.wqkv, lw.wo, lw.wgu, lw.wdown)]

    def matrix_bytes(self) -> int:
        """Bytes of every matrix a pass reads (the embedding table excluded)."""
        return sum(m.nbytes for m in self.matrices())

    def ring_bytes(self) -> int:
        """Device bytes of the Hopper kernels' second copies (Packed.ring), held besides matrix_bytes (a
        pass reads a matrix's copy or its first layout, never both)."""
        packs = [p for m in self.matrices() for p in getattr(getattr(m, "w", None), "packs", ())]
        return sum(p.ring.nbytes for p in packs if p.ring is not None)

    def norm_bytes(self) -> int:
        vecs = [self.out_norm] + [v for lw in self.layers for v in (lw.attn_norm, lw.ffn_norm)]
        return sum(v.numel() * v.element_size() for v in vecs)


# ---------------------------------------------------------------- non-matmul ops

class TorchOps:
    """Plain torch ops: no host syncs and static shapes, so a CUDA graph can capture them."""

    name = "torch"
    writes_tiles = False   # (CudaOps.writes_tiles)

    def rope_kv(self, m: "GpuModel", qkv: torch.Tensor, pos, slot, layer: int) -> torch.Tensor:
        sh, M = m.shape, qkv.shape[0]
        hd, H, Hk = sh.head_dim, sh.n_heads, sh.n_kv_heads
        qkv = qkv.float().view(M, H + 2 * Hk, hd)
        p = torch.where(pos < 0, m.max_ctx, pos).long()  # padding rows write the scratch position
        qk = _rope(qkv[:, : H + Hk], m.cos[p], m.sin[p], sh.rope_neox)
        q, k, v = qk[:, :H], qk[:, H:], qkv[:, H + Hk:]
        s = slot.long()
        m.kcache[layer][s, :, p] = k.to(m.kv_dtype)
        m.vcache[layer][s, :, p] = v.to(m.kv_dtype)
        return q.to(m.act_dtype)

    def attention(self, m: "GpuModel", q: torch.Tensor, pos, slot, layer: int, S: int, P: int,
                  h16: bool = False, to: list | None = None, n_a: int = 0) -> torch.Tensor:
        """The rows' attention outputs [S * P, H * hd], in the activations' dtype, or h16 (to_h16); never
        in tiles (to: None)."""
        if to:
            raise PtiError("the torch attention writes no tiles (writes_tiles)")
        sh = m.shape
        H, Hk, hd = sh.n_heads, sh.n_kv_heads, sh.head_dim
        G = H // Hk
        seq_slot = slot.view(S, P)[:, 0].long()
        K = m.kcache[layer][seq_slot, :, : m.max_ctx].float()  # [S, Hk, T, hd]
        V = m.vcache[layer][seq_slot, :, : m.max_ctx].float()
        qh = q.float().view(S, P, Hk, G, hd).permute(0, 2, 3, 1, 4)  # [S, Hk, G, P, hd]
        scores = torch.einsum("shgpd,shtd->shgpt", qh, K) / math.sqrt(hd)
        t = torch.arange(m.max_ctx, device=q.device)
        visible = t.view(1, 1, 1, 1, -1) <= pos.clamp(min=0).view(S, 1, 1, P, 1)
        scores = scores.masked_fill(~visible, float("-inf"))
        o = torch.einsum("shgpt,shtd->shgpd", torch.softmax(scores, -1), V)
        o = o.permute(0, 3, 1, 2, 4).reshape(S * P, H * hd)
        return to_h16(o) if h16 else o.to(m.act_dtype)

    def silu_mul(self, gu: torch.Tensor, ffn: int) -> torch.Tensor:
        g, u = gu[:, :ffn].float(), gu[:, ffn:].float()
        return (torch.nn.functional.silu(g) * u).to(gu.dtype)

    def norm_parts(self, x: torch.Tensor, g: torch.Tensor, n_a: int, dtype):
        return norm_parts(x, g, n_a, dtype)

    def embed(self, E: torch.Tensor, tokens: torch.Tensor, n_a: int) -> torch.Tensor:
        """float32 rows of the embedding table E ([vocab, d], or [2, vocab, d] per twin)."""
        ids = tokens.long()
        x = E[ids] if E.dim() == 2 else torch.cat([E[0][ids[:n_a]], E[1][ids[n_a:]]])
        return x.float()

    def embed_norm(self, E: torch.Tensor, tokens: torch.Tensor, n_a: int, g: torch.Tensor, dtype):
        """(x, u, p): the residual stream's first rows (embed) and the first norm's parts (norm_parts)."""
        x = self.embed(E, tokens, n_a)
        return (x,) + self.norm_parts(x, g, n_a, dtype)

    def argmax_feed(self, logits: torch.Tensor, feed: torch.Tensor | None) -> torch.Tensor:
        """int32 argmax of each row (lowest id on ties).  feed (a pass's int32 [3, M] inputs, one
        row per sequence): becomes the next pass's, each row's pick at its position + 1."""
        ids = torch.argmax(logits, dim=-1).to(torch.int32)
        if feed is not None:
            feed[0].copy_(ids)
            feed[1].add_((feed[1] >= 0).to(torch.int32))   # padding rows (-1) stay padding
        return ids


def _rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, neox: bool) -> torch.Tensor:
    """Rotate [M, heads, hd] by per-row angles cos/sin [M, hd/2] (float32)."""
    cos, sin = cos[:, None, :], sin[:, None, :]
    if neox:
        half = x.shape[-1] // 2
        a, b = x[..., :half], x[..., half:]
        return torch.cat([a * cos - b * sin, a * sin + b * cos], -1)
    a, b = x[..., 0::2], x[..., 1::2]
    return torch.stack([a * cos - b * sin, a * sin + b * cos], -1).flatten(-2)


# ---------------------------------------------------------------- the model

@dataclass
class SeqRows:
    """One sequence's part of a pass: its new tokens start at position `start`."""
    slot: int
    tokens: Sequence[int]
    start: int
    twin: int = 0


@dataclass
class _Bucket:
    n_a: int          # twin-A sequences (first)
    n_seqs: int
    rows: int         # rows per sequence
    inp: torch.Tensor  # int32 [3, M]: tokens, pos, slot
    graph: Any = None
    logits: torch.Tensor | None = None
    next_ids: torch.Tensor | None = None
    host_in: Any = None
    host_out: Any = None   # pinned int32 [RING, M]: a ring of the picks of passes in flight
    events: list = field(default_factory=list)
    argmax_state: torch.Tensor | None = None   # the argmax kernel's (CudaOps.argmax_state), None on TorchOps
    ring_direct: bool = False   # the argmax kernel writes the picks to host_out itself (else: a copy)
    turn: int = 0
    last: Any = None   # the Pending of the last pass launched


@dataclass
class Pending:
    """A pass on its way: its picks land in a pinned buffer that `ids()` waits for."""
    model: "GpuModel"
    bucket: _Bucket
    seqs: list            # the SeqRows it evaluates
    first: list[int]      # each sequence's first row
    out: Any              # the pinned buffer of its picks
    event: Any            # recorded after their copy (None on the CPU)
    logits: Any
    turn: int             # the bucket's launches up to this one

    def ids(self) -> list[np.ndarray]:
        """Per sequence, the greedy pick of each of its rows (waits for the pass)."""
        if self.bucket.turn - self.turn >= RING:   # its buffer has been reused by a later pass
            raise PtiError(f"a pass's picks were read after {RING} later passes of its bucket")
        if self.event is not None:
            self.event.synchronize()
        t = time.perf_counter()
        ids = self.out.numpy()
        res = [ids[f:f + len(s.tokens)].copy() for f, s in zip(self.first, self.seqs)]
        self.model.host_s += time.perf_counter() - t
        return res


class GpuModel:
    """A Llama-family forward over a KV cache of `max_seqs` slots x `max_ctx` positions."""

    def __init__(self, shape: GpuShape, weights: Weights, *, max_seqs: int, max_ctx: int,
                 device: torch.device, twins: str = "a", ops: Any = None, graphs: bool | None = None,
                 rope_linear_factor: float = 1.0, rope_freq_factors: torch.Tensor | None = None):
        self.shape, self.w, self.device, self.twins = shape, weights, device, twins
        self.max_seqs, self.max_ctx = max_seqs, max_ctx
        self.act_dtype = torch.float32 if device.type == "cpu" else torch.bfloat16
        self.kv_dtype = self.act_dtype
        self.mm_dtype = torch.float16 if "qkv" in weights.h16 else self.act_dtype   # the first norm's u (float16: h16)
        self.ops = ops or TorchOps()
        self.graphs = (device.type == "cuda") if graphs is None else graphs
        hd = shape.head_dim
        # +1 position: the scratch row padding rows write to in the torch path
        kv_shape = (max_seqs, shape.n_kv_heads, max_ctx + 1, hd)
        self.kcache = [torch.zeros(kv_shape, dtype=self.kv_dtype, device=device) for _ in range(shape.n_layers)]
        self.vcache = [torch.zeros(kv_shape, dtype=self.kv_dtype, device=device) for _ in range(shape.n_layers)]
        inv = 1.0 / (shape.rope_theta ** (torch.arange(0, hd, 2, dtype=torch.float64) / hd))
        if rope_freq_factors is not None:   # llama3 scaling
            inv = inv / rope_freq_factors.double().cpu()
        ang = (torch.arange(max_ctx + 1, dtype=torch.float64) / rope_linear_factor)[:, None] * inv[None, :]
        self.cos = ang.cos().float().to(device)
        self.sin = ang.sin().float().to(device)
        self.buckets: dict[tuple[int, int, int], _Bucket] = {}
        self.passes = 0
        self.rows = 0       # real (unpadded) rows evaluated
        self.host_s = 0.0   # host time spent building passes and reading results (not the forward)
        # positions the rows of the eager pass being run reach (their last + 1), so that the attention
        # launches only the KV chunks they read; None (the whole context) in captured passes, whose
        # positions change between replays
        self.attn_bound: int | None = None

    # -- one forward over device vectors; S sequences x P rows, the first n_a_rows on twin A
    def forward(self, tokens: torch.Tensor, pos: torch.Tensor, slot: torch.Tensor, S: int, P: int, n_a_rows: int):
        sh, ops, n_a = self.shape, self.ops, n_a_rows
        L, ud, eps = self.w.layers, self.mm_dtype, sh.eps   # ud: the first norm's u (float16: h16)
        # the residual stream (float32) and the next norm's parts (see `scaled`)
        x, u, p = ops.embed_norm(self.w.embed, tokens, n_a, L[0].attn_norm, ud)
        # ti: the next matrix's input rows in the Hopper kernels' tile layout, written by the launch before it
        inv = ti = None
        M = x.shape[0]
        for i, lw in enumerate(L):
            q = ops.rope_kv(self, scaled(lw.wqkv, u, p, eps, n_a, inv, ti), pos, slot, i)
            # the attention lays out its rows for the output matrix too where it can (CudaOps.writes_tiles)
            t_o = input_tiles(lw.wo, M, n_a) if ops.writes_tiles else None
            a = ops.attention(self, q, pos, slot, i, S, P, h16="wo" in self.w.h16, to=t_o, n_a=n_a)
            ti = input_tiles(lw.wgu, M, n_a)
            u, p, inv = residual(lw.wo, a, x, lw.ffn_norm, n_a, ud, t_o, to=ti)
            ti, t_in = input_tiles(lw.wdown, M, n_a, writer=lw.wgu) if lw.wgu.glu else None, ti
            gu = scaled(lw.wgu, u, p, eps, n_a, inv, t_in, to=ti)
            g_next, nxt = (L[i + 1].attn_norm, L[i + 1].wqkv) if i + 1 < len(L) else (self.w.out_norm, self.w.output)
            ti, t_in = input_tiles(nxt, M, n_a), ti
            u, p, inv = residual(lw.wdown, gu if lw.wgu.glu else ops.silu_mul(gu, sh.ffn), x, g_next, n_a, ud, t_in, to=ti)
        return scaled(self.w.output, u, p, eps, n_a, inv, ti)

    # -- host side of one pass
    def _bucket_key(self, seqs: Sequence[SeqRows]) -> tuple[int, int, int]:
        rows = max(len(s.tokens) for s in seqs)
        n_a = sum(1 for s in seqs if s.twin == 0)
        n_b = len(seqs) - n_a
        if self.twins != "ab":
            n_a, n_b = len(seqs), 0
        key_a = seq_bucket(n_a) if n_a else 0
        key_b = seq_bucket(n_b) if n_b else 0
        return key_a, key_a + key_b, next((b for b in ROW_BUCKETS if b >= rows), rows)

    def _fill(self, b: _Bucket, seqs: Sequence[SeqRows], host: np.ndarray) -> list[int]:
        """Write tokens/pos/slot of `seqs` into host [3, M]; return each sequence's first row."""
        host[0].fill(0)
        host[1].fill(-1)
        host[2].fill(0)
        order = sorted(range(len(seqs)), key=lambda i: (seqs[i].twin if self.twins == "ab" else 0))
        first, next_a, next_b = [0] * len(seqs), 0, b.n_a
        for i in order:
            s = seqs[i]
            if s.start + len(s.tokens) > self.max_ctx:
                raise PtiError(f"sequence in slot {s.slot} would pass the context of {self.max_ctx} positions")
            if self.twins == "ab" and s.twin == 1:
                j, next_b = next_b, next_b + 1
            else:
                j, next_a = next_a, next_a + 1
            r0 = j * b.rows
            n = len(s.tokens)
            host[0, r0:r0 + n] = s.tokens
            host[1, r0:r0 + n] = np.arange(s.start, s.start + n)
            host[2, r0:r0 + b.rows] = s.slot
            first[i] = r0
        return first

    def _get_bucket(self, key: tuple[int, int, int]) -> _Bucket:
        b = self.buckets.get(key)
        if b is None:
            n_a, n_seqs, rows = key
            M = n_seqs * rows
            b = _Bucket(n_a, n_seqs, rows, torch.zeros((3, M), dtype=torch.int32, device=self.device))
            b.inp[1].fill_(-1)
            cuda = self.device.type == "cuda"
            b.host_in = torch.zeros((3, M), dtype=torch.int32, pin_memory=cuda)
            b.host_out = torch.zeros((RING, M), dtype=torch.int32, pin_memory=cuda)
            b.events = [torch.cuda.Event() for _ in range(RING)] if cuda else []
            if hasattr(self.ops, "argmax_state"):
                b.argmax_state = self.ops.argmax_state(M, self.shape.vocab)
                b.ring_direct = cuda and self.ops.writes_host_ring
            if self.graphs and rows <= ROW_BUCKETS[-1]:
                self._capture(b)
            self.buckets[key] = b
        return b

    def _run_bucket(self, b: _Bucket):
        """The pass of bucket b; with one row per sequence it also leaves, in b.inp, the inputs of
        the pass after it (each row's pick at its position + 1: `start_next`)."""
        logits = self.forward(b.inp[0], b.inp[1], b.inp[2], b.n_seqs, b.rows, b.n_a * b.rows)
        feed = b.inp if b.rows == 1 else None
        if b.argmax_state is None:
            return logits, self.ops.argmax_feed(logits, feed)
        return logits, self.ops.argmax_feed(logits, feed, b.argmax_state, b.host_out if b.ring_direct else None)

    def _capture(self, b: _Bucket) -> None:
        """Warm up (padding rows only: nothing is written to the cache), then capture."""
        side = torch.cuda.Stream(self.device)
        side.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(side):
            for _ in range(2):
                self._run_bucket(b)
            if b.argmax_state is not None:   # the warm-up passes advanced the ring: the host counts from 0
                b.argmax_state.zero_()
        torch.cuda.current_stream(self.device).wait_stream(side)
        # A garbage collection during the capture may free what an object out of use held (an
        # earlier model's graphs, pinned buffers): calls that invalidate a capture.  Seen as
        # CUDA_ERROR_STREAM_CAPTURE_INVALIDATED at a random launch after an earlier model was
        # dropped (docs/perf.md, session 7).  So collect now, and not during the capture.
        gc.collect()
        was_enabled = gc.isenabled()
        gc.disable()
        try:
            b.graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(b.graph):
                b.logits, b.next_ids = self._run_bucket(b)
        finally:
            if was_enabled:
                gc.enable()

    def start(self, seqs: Sequence[SeqRows]) -> Pending:
        """Launch one pass: its inputs copied in, its picks copied out, nothing waited for."""
        if not seqs:
            raise PtiError("a pass needs at least one sequence")
        t0 = time.perf_counter()
        b = self._get_bucket(self._bucket_key(seqs))
        first = self._fill(b, seqs, b.host_in.numpy())
        b.inp.copy_(b.host_in, non_blocking=True)
        self.host_s += time.perf_counter() - t0
        return self._launch(b, list(seqs), first)

    def start_next(self, prev: Pending) -> Pending | None:
        """Launch the pass that feeds each sequence of `prev` (one row each, the last pass of its
        bucket) its pick, at the next position, on the device: nothing goes through the host, so
        it can be queued before prev's picks are read.  None where that pass does not fit."""
        b = prev.bucket
        if b.rows != 1 or b.last is not prev or any(s.start + 2 > self.max_ctx for s in prev.seqs):
            return None
        # the tokens are the device's (only their count is used on the host)
        return self._launch(b, [SeqRows(s.slot, [-1], s.start + 1, s.twin) for s in prev.seqs], prev.first)

    def _launch(self, b: _Bucket, seqs: list[SeqRows], first: list[int]) -> Pending:
        if b.graph is not None:
            b.graph.replay()
            logits, next_ids = b.logits, b.next_ids
        else:
            self.attn_bound = max(s.start + len(s.tokens) for s in seqs)
            try:
                logits, next_ids = self._run_bucket(b)
            finally:
                self.attn_bound = None
        k = b.turn % RING   # = the ring row the argmax kernel wrote, where it writes it (ring_direct)
        b.turn += 1
        out = b.host_out[k]
        if not b.ring_direct:
            out.copy_(next_ids, non_blocking=True)
        event = None
        if b.events:
            event = b.events[k]
            event.record(torch.cuda.current_stream(self.device))
        self.passes += 1
        self.rows += sum(len(s.tokens) for s in seqs)
        p = Pending(self, b, seqs, first, out, event, logits, b.turn)
        if b.rows == 1:   # what start_next continues (only those; a prefill's logits are not kept)
            b.last = p
        return p

    def run_pass(self, seqs: Sequence[SeqRows], want_logits: bool = False, host: bool = True):
        """One pass; returns per sequence the greedy next token of each of its rows
        (and the float32 logits rows when asked: on the host, or on the device with
        host=False).  One host-to-device copy in, one small device-to-host copy out."""
        p = self.start(seqs)
        out = p.ids()
        if want_logits:
            lg = p.logits.float()
            if host:
                lg = lg.cpu()
            return out, [lg[f:f + len(s.tokens)].clone() for f, s in zip(p.first, seqs)]
        return out

    def decode_greedy(self, seqs: Sequence[SeqRows], steps: int) -> list[list[int]]:
        """`steps` passes of plain greedy decoding, one row per sequence (its last token at
        `start`); returns each sequence's `steps` picks.  Each pass after the first is fed on the
        device by the one before (`start_next`) and queued before that one's picks are read, so
        the host's work overlaps the GPU's instead of adding to it."""
        if any(len(s.tokens) != 1 for s in seqs):
            raise PtiError("plain decoding feeds one token per sequence")
        if any(s.start + steps > self.max_ctx for s in seqs):
            raise PtiError(f"{steps} steps would pass the context of {self.max_ctx} positions")
        out: list[list[int]] = [[] for _ in seqs]
        cur = self.start(seqs) if steps > 0 else None
        for i in range(steps):
            nxt = self.start_next(cur) if i + 1 < steps else None
            for o, r in zip(out, cur.ids()):
                o.append(int(r[0]))
            cur = nxt
        return out

    def prefill(self, seqs: Sequence[SeqRows], chunk_rows: int = 256) -> list[int]:
        """Chunked prompt evaluation (eager); returns each sequence's first generated token."""
        per_seq = max(1, chunk_rows // len(seqs))
        last = [0] * len(seqs)
        longest = max(len(s.tokens) for s in seqs)
        for c in range(0, longest, per_seq):
            part = [(i, SeqRows(s.slot, s.tokens[c:c + per_seq], s.start + c, s.twin))
                    for i, s in enumerate(seqs) if c < len(s.tokens)]
            ids = self.run_pass([p for _, p in part])
            for (i, p), row in zip(part, ids):
                if c + len(p.tokens) == len(seqs[i].tokens):
                    last[i] = int(row[-1])
        return last

    def kv_bytes_read(self, contexts: Sequence[int]) -> int:
        """Bytes of K and V a pass reads for sequences whose rows see `contexts` positions."""
        sh = self.shape
        per_pos = sh.n_layers * 2 * sh.n_kv_heads * sh.head_dim * torch.tensor([], dtype=self.kv_dtype).element_size()
        return per_pos * sum(contexts)


# ---------------------------------------------------------------- real models and the engine

def load_ssq(ssq: Any, backend: Any, device: torch.device, twins: str = "a", *, max_seqs: int = 64,
             max_ctx: int | None = None, ops: Any = None) -> GpuModel:
    """A GpuModel of a llama-architecture .ssq (q, k, v and gate, up fused at load time)."""
    from .config import ModelConfig
    cfg = ModelConfig.from_ssq(ssq)
    if cfg.arch != "llama" or cfg.qkv_bias or cfg.qk_norm:
        raise PtiError(f"the fused GPU path runs the llama architecture; {cfg.arch} runs on --backend torch")
    # the twins this model serves: both (distinct twins, rows of twin A first), or one
    ts = (0, 1) if twins == "ab" and not ssq.identical else ((1,) if twins == "b" else (0,))
    shape = GpuShape(cfg.n_layers, cfg.hidden, cfg.ffn, cfg.n_heads, cfg.n_kv_heads, cfg.vocab,
                     head_dim=cfg.head_dim, eps=cfg.rms_eps, rope_theta=cfg.rope_theta, rope_neox=cfg.rope_neox)

    roles = h16_roles(backend, shape) if backend is not None else frozenset()

    def q8(*names: str, out_f32: bool = False, glu: bool = False, h16: tuple[bool, bool] = (False, False)):
        pairs = []
        for t in ts:
            parts = [ssq.q8(n, t) for n in names]
            pairs.append((torch.from_numpy(np.concatenate([p[0] for p in parts])).to(device),
                          torch.from_numpy(np.concatenate([p[1] for p in parts])).to(device)))
        return make_linear(pairs, device, backend, out_f32, glu, h16)

    def vec(name: str) -> torch.Tensor:   # [n] for one twin, [2, n] for two
        v = [torch.from_numpy(np.ascontiguousarray(ssq.dense(name, t), dtype=np.float32)) for t in ts]
        return (v[0] if len(v) == 1 else torch.stack(v)).to(device)

    act = torch.float32 if device.type == "cpu" else torch.bfloat16
    io = [h16_io(roles, i, cfg.n_layers) for i in range(cfg.n_layers)]
    layers = [LayerWeights(vec(f"blk.{i}.attn_norm.weight"),
                           q8(f"blk.{i}.attn_q.weight", f"blk.{i}.attn_k.weight", f"blk.{i}.attn_v.weight",
                              h16=io[i]["qkv"]),
                           q8(f"blk.{i}.attn_output.weight", h16=io[i]["wo"]),
                           vec(f"blk.{i}.ffn_norm.weight"),
                           q8(f"blk.{i}.ffn_gate.weight", f"blk.{i}.ffn_up.weight", glu=True, h16=io[i]["gu"]),
                           q8(f"blk.{i}.ffn_down.weight", h16=io[i]["down"]))
              for i in range(cfg.n_layers)]
    embed = vec("token_embd.weight").to(act)
    output = q8("token_embd.weight" if cfg.tied_embeddings else "output.weight", out_f32=True,
                h16=h16_io(roles, 0, 1)["head"])
    w = Weights(embed, layers, vec("output_norm.weight"), output, roles)
    factors = vec("rope_freqs.weight") if cfg.rope_freq_factors else None
    if factors is not None and factors.dim() == 2:
        factors = factors[0]   # same architecture and hyper-parameters: twin A's (pack checks they agree)
    return GpuModel(shape, w, max_seqs=max_seqs, max_ctx=min(max_ctx or cfg.context_length, cfg.context_length),
                    device=device, twins=twins, ops=ops, rope_linear_factor=cfg.rope_linear_factor,
                    rope_freq_factors=factors)


class SlotKV:
    """A sequence's KV slot in a GpuModel's cache: the engine's KV interface."""

    def __init__(self, slot: int, max_length: int):
        self.slot, self.max_length, self.length = slot, max_length, 0

    def truncate(self, n: int) -> None:
        if not 0 <= n <= self.length:
            raise ValueError(f"cannot truncate a KV cache of length {self.length} to {n}")
        self.length = n


@dataclass
class _Ahead:
    """A pass queued before the engine asked for it: its sequences' next pass if the engine feeds
    each its pick (`EnginePort.forward_ids(run_ahead=True)`)."""
    pending: Pending
    kvs: list          # weak references to the sequences' SlotKVs, in batch order
    twins: list[int]
    lengths: list[int]  # each SlotKV's length when the engine asks for the pass
    picks: list[int]    # the tokens the device fed (the previous pass's picks)

    def matches(self, batch: list) -> bool:
        return (len(batch) == len(self.kvs)
                and all(r() is kv and kv.length == n and tw == t and list(toks) == [p]
                        for (kv, tw, toks), r, n, t, p in zip(batch, self.kvs, self.lengths, self.twins, self.picks)))


class EnginePort:
    """What the engine needs (`forward(batch)`, `new_kv()`, `context_length`) over a GpuModel.

    Prompts longer than the largest graph bucket go through chunked eager passes
    first; the pass that also holds the other sequences' rows then replays a graph.
    With `forward_ids(run_ahead=True)` (plain greedy decoding) the port queues each
    one-row-per-sequence pass's successor before reading its picks (`GpuModel.start_next`):
    the engine's host work then overlaps the GPU's.  A queued pass the engine does not
    ask for (a sequence ended or joined) is dropped: it only wrote KV positions past the
    sequences' lengths, which later passes overwrite."""

    def __init__(self, model: GpuModel):
        import weakref
        self.model, self.context_length = model, model.max_ctx
        self.free = list(range(model.max_seqs))
        self._finalize = weakref.finalize
        self._ahead: _Ahead | None = None
        self.dropped = 0   # queued passes the engine did not ask for
        self._base = model.passes

    @property
    def passes(self) -> int:
        """The passes this port ran whose results were used (queued ones not yet asked for and
        dropped ones left out)."""
        return self.model.passes - self._base - self.dropped - (self._ahead is not None)

    def draft_cap(self, n_seqs: int) -> int:
        """The longest draft worth verifying in a pass of n_seqs sequences (rows_per_seq_cap)."""
        return rows_per_seq_cap(n_seqs) - 1

    def new_kv(self) -> SlotKV:
        if not self.free:
            raise PtiError(f"all {self.model.max_seqs} KV slots of the GPU model are in use")
        kv = SlotKV(self.free.pop(0), self.model.max_ctx)
        self._finalize(kv, self.free.append, kv.slot)
        return kv

    def _drop_ahead(self) -> None:
        if self._ahead is not None:
            self._ahead, self.dropped = None, self.dropped + 1

    def _run(self, batch: list[tuple[SlotKV, int, list[int]]], want_logits: bool) -> list:
        """Per batch item, all its rows: float32 logits on the device, or (want_logits False) the
        pass's greedy picks on the host, from its one small device-to-host copy."""
        big = ROW_BUCKETS[-1]

        def run(seqs: list[SeqRows]) -> list:
            res = self.model.run_pass(seqs, want_logits=want_logits, host=False)
            return res[1] if want_logits else res
        head: dict[int, Any] = {}
        long = [(i, kv, tw, toks) for i, (kv, tw, toks) in enumerate(batch) if len(toks) > big]
        if long:   # all but the last `big` rows of long feeds, on their own
            head = {i: x for (i, *_), x in zip(long, run([SeqRows(kv.slot, toks[:-big], kv.length, tw)
                                                          for _, kv, tw, toks in long]))}
        seqs = []
        for i, (kv, tw, toks) in enumerate(batch):
            n0 = len(toks) - big if i in head else 0
            seqs.append(SeqRows(kv.slot, toks[n0:], kv.length + n0, tw))
        join = torch.cat if want_logits else np.concatenate
        out = [join([head[i], x]) if i in head else x for i, x in enumerate(run(seqs))]
        for kv, _, toks in batch:
            kv.length += len(toks)
        return out

    def forward(self, batch: list[tuple[SlotKV, int, list[int]]], logit_tail: list[int] | None = None) -> torch.Tensor:
        """float32 logits on the device, batch order: one row per token, or only the last
        logit_tail[i] rows of item i when given."""
        self._drop_ahead()
        rows = self._run(batch, True)
        return torch.cat([r if logit_tail is None else r[r.shape[0] - logit_tail[i]:] for i, r in enumerate(rows)])

    def forward_ids(self, batch: list[tuple[SlotKV, int, list[int]]],
                    logit_tail: list[int] | None = None, run_ahead: bool = False) -> np.ndarray:
        """The greedy token (argmax, lowest id on ties, as sampling.sample) of each row forward
        would return logits for, without moving the logits: the engine's greedy path, one small
        device-to-host copy per pass.  run_ahead: the engine feeds each sequence its pick
        next (plain decoding), so a one-row-per-sequence pass's successor is queued at once."""
        ahead, self._ahead = self._ahead, None
        if ahead is not None and ahead.matches(batch):
            pending = ahead.pending
        else:
            if ahead is not None:
                self.dropped += 1
            if not (run_ahead and all(len(t) == 1 for _, _, t in batch)):
                rows = self._run(batch, False)
                return np.concatenate([r if logit_tail is None else r[len(r) - logit_tail[i]:]
                                       for i, r in enumerate(rows)])
            pending = self.model.start([SeqRows(kv.slot, toks, kv.length, tw) for kv, tw, toks in batch])
        nxt = self.model.start_next(pending) if run_ahead else None
        picks = pending.ids()
        for kv, _, _ in batch:
            kv.length += 1
        if nxt is not None:
            import weakref
            self._ahead = _Ahead(nxt, [weakref.ref(kv) for kv, _, _ in batch], [tw for _, tw, _ in batch],
                                 [kv.length for kv, _, _ in batch], [int(p[0]) for p in picks])
        return np.concatenate(picks)
