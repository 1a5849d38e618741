"""Load-time repack of Q8_0 rows and SSQ16 blocks into the kernels' layout.

The file keeps its format (34-byte Q8_0 blocks, 68-byte SSQ16 blocks, neither
16-byte aligned).  In memory each twin becomes two arrays (docs/ssq-format.md,
"In-memory layout for the kernels"):

  q  int8  [G, nb, 32, 16]  for the bf16 kernels sign-magnitude bytes (bit 7 sign,
                            bits 0-6 |w|), for the f16 kernels offset binary
                            (w + 128): what each turns into its MMA's type in
                            the fewest instructions (kernels/pti_kernel.hip);
                            G = row groups of 16 rows (rows padded to a multiple
                            of 32 with zeros); for group r, block b, lane 4g+t:
                            bytes 0-7 = row 16r+g, columns 32b+8t .. 32b+8t+7,
                            bytes 8-15 = row 16r+g+8, the same columns
  s  int32 [G, nb, 8]       f16 scale of row 16r+g (low half) and 16r+g+8 (high);
                            times 2^H16_SHIFT for the h16 kernels (f16 inputs
                            holding a bf16 model's activations times 2^-H16_SHIFT)

A warp's 16-byte loads of one (group, block) are 512 contiguous bytes and are
the MMA operands as they are.  All functions work on torch tensors, on the CPU
or on the device, with no Python loop over blocks.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from ..errors import PtiError

ROW_ALIGN = 32        # rows padded so that kernels may take 2 row groups per CTA
H16_SHIFT = 4         # = PTI_H16_SHIFT in kernels/pti_kernel.hip, H16_SHIFT in kernels/pti_ops.hip
CODES = ("bf16", "f16", "h16")   # which kernels read a Packed: the bytes' and the scales' encoding
SSQ16_BLOCK = 68
Q8_BLOCK = 34


@dataclass
class Packed:
    """One twin's matrix in the kernels' layout."""
    q: torch.Tensor   # int8 [G, nb, 32, 16]
    s: torch.Tensor   # int32 [G, nb, 8]
    rows: int         # N, logical
    cols: int         # K, logical
    code: str = "bf16"   # CODES: bf16 (sign-magnitude), f16 (offset binary), h16 (offset binary, scales x 2^H16_SHIFT)
    ring: "Packed | None" = None   # the same matrix in ring_pack's layout, for the Hopper kernels (or none)
    twins: int = 1   # its matrix's twins (with_ring): one model's short-K matrices take the Hopper kernels at few rows

    @property
    def nbytes(self) -> int:
        """Bytes a pass reads for this twin (padding rows included)."""
        return self.q.numel() + self.s.numel() * 4


def _padded_rows(n: int) -> int:
    return -(-n // ROW_ALIGN) * ROW_ALIGN


def to_sign_magnitude(q: torch.Tensor) -> torch.Tensor:
    """int8 two's complement -> int8 holding sign-magnitude bits; -128 has no such code."""
    if bool((q == -128).any()):
        raise PtiError("repack: a Q8_0 weight is -128, which Q8_0 quantisers never write and the "
                       "kernels' sign-magnitude layout cannot hold")
    q16 = q.to(torch.int16)
    return torch.where(q16 < 0, 128 - q16, q16).to(torch.uint8).view(torch.int8)


def from_sign_magnitude(e: torch.Tensor) -> torch.Tensor:
    e16 = e.view(torch.uint8).to(torch.int16)
    return torch.where(e16 >= 128, 128 - e16, e16).to(torch.int8)


def to_offset_binary(q: torch.Tensor) -> torch.Tensor:
    """int8 two's complement <-> int8 holding w + 128 (bit 7 flipped: its own inverse)."""
    return (q.view(torch.uint8) ^ 0x80).view(torch.int8)


def repack_q8(qs: torch.Tensor, d: torch.Tensor, cols: int, code: str = "bf16") -> Packed:
    """int8 [N, nb*32] and float16 [N, nb] (Q8_0 rows, as `SSQFile.q8`) -> Packed for the kernels
    that `code` names (CODES)."""
    if code not in CODES:
        raise PtiError(f"repack: no encoding {code!r} (one of {', '.join(CODES)})")
    if qs.dtype != torch.int8 or d.dtype != torch.float16 or qs.dim() != 2 or d.dim() != 2:
        raise PtiError("repack: expected int8 [rows, nb*32] weights and float16 [rows, nb] scales")
    n, kp = qs.shape
    nb = kp // 32
    if kp != nb * 32 or d.shape != (n, nb) or not (nb - 1) * 32 < cols <= nb * 32:
        raise PtiError(f"repack: shapes {tuple(qs.shape)} / {tuple(d.shape)} do not fit {cols} columns")
    npad = _padded_rows(n)
    if npad != n:
        qs = torch.cat([qs, qs.new_zeros(npad - n, kp)])
        d = torch.cat([d, d.new_zeros(npad - n, nb)])
    g = npad // 16
    # [G, h, g, nb, t, kk] -> [G, nb, g, t, h, kk]: lane = 4g + t, byte = 8h + kk
    if code == "h16":
        d = d * (1 << H16_SHIFT)   # exact (a power of two) unless it leaves f16's range
        if not bool(torch.isfinite(d).all()):
            raise PtiError(f"repack: a Q8_0 scale times {1 << H16_SHIFT} is past float16's range")
    qs = to_sign_magnitude(qs) if code == "bf16" else to_offset_binary(qs)
    q = qs.reshape(g, 2, 8, nb, 4, 8).permute(0, 3, 2, 4, 1, 5).reshape(g, nb, 32, 16).contiguous()
    # [G, h, g, nb] -> [G, nb, g, h]: one int32 word per g, row g in the low half
    s = d.reshape(g, 2, 8, nb).permute(0, 3, 2, 1).contiguous().view(torch.int16).view(torch.int32)
    return Packed(q, s.reshape(g, nb, 8), n, cols, code)


def unpack_q8(p: Packed) -> tuple[torch.Tensor, torch.Tensor]:
    """Packed -> (int8 [N, nb*32], float16 [N, nb]): the inverse of repack_q8."""
    g, nb = p.q.shape[:2]
    qs = from_sign_magnitude(p.q) if p.code == "bf16" else to_offset_binary(p.q)
    qs = qs.reshape(g, nb, 8, 4, 2, 8).permute(0, 4, 2, 1, 3, 5).reshape(g * 16, nb * 32)
    d = p.s.contiguous().view(torch.int16).view(torch.float16).reshape(g, nb, 8, 2).permute(0, 3, 2, 1)
    if p.code == "h16":
        d = d / (1 << H16_SHIFT)
    return qs[: p.rows].contiguous(), d.reshape(g * 16, nb)[: p.rows].contiguous()


RING_GROUPS = 8   # row groups of 16 in a unit of the Hopper kernels (pti_wg_mm: two warpgroups of 64 rows)


def ring_order(nb: int) -> torch.Tensor:
    """Slice-major block order: position s nb / 8 + t holds file block s + 8 t (slice s = blocks s mod 8:
    the policy kernels' per-slice sums, taken one slice after another)."""
    return torch.arange(nb).reshape(nb // 8, 8).T.reshape(-1)


def ring_pack(p: Packed) -> Packed:
    """p in the layout of the Hopper kernels (kernels/pti_kernel.hip, pti_wg_mm): per unit of RING_GROUPS
    row groups, its blocks in ring_order, each block [RING_GROUPS row groups][512 bytes as in p] and its
    scales [RING_GROUPS][8 words], so that one bulk copy brings a phase's consecutive blocks of a unit
    (docs/ssq-format.md).  A second copy of the matrix: the other kernels read p."""
    g, nb = p.q.shape[:2]
    if g % RING_GROUPS or nb % 8:
        raise PtiError(f"repack: the ring layout needs row groups in units of {RING_GROUPS} and blocks in "
                       f"eights, not {g} x {nb}")
    order = ring_order(nb).to(p.q.device)

    def perm(t):   # [unit, row group, block, ...] -> [unit, position, row group, ...]
        return t.reshape(g // RING_GROUPS, RING_GROUPS, nb, -1)[:, :, order].permute(0, 2, 1, 3).contiguous()
    return Packed(perm(p.q).reshape(p.q.shape), perm(p.s).reshape(p.s.shape), p.rows, p.cols, p.code)


def interleave_glu_rows(t: torch.Tensor) -> torch.Tensor:
    """Rows [gate F | up F] -> per 16-row group, 8 gate rows then the same 8 up rows, so that
    a kernel lane holding row g of a group (the MMA's c0, c1) also holds row g + 8 (c2, c3):
    the gate and up values of one output column, for a fused silu(gate) * up epilogue."""
    n = t.shape[0]
    if n % 16:
        raise PtiError(f"repack: a fused gate/up matrix needs a multiple of 16 rows, not {n}")
    return t.reshape(2, n // 16, 8, *t.shape[1:]).transpose(0, 1).reshape(t.shape).contiguous()


def split_ssq16(raw: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """uint8 [N, nb*68] SSQ16 blocks -> (qa int8, da f16, qb int8, db f16), Q8_0 rows per twin.

    Block: bytes 0-1 scale A, 2-3 scale B, then 32 uint16 words, little-endian,
    high byte twin A, low byte twin B (byte 4+2i = B's int8, 5+2i = A's)."""
    if raw.dtype != torch.uint8 or raw.dim() != 2 or raw.shape[1] % SSQ16_BLOCK:
        raise PtiError(f"repack: SSQ16 rows must be uint8 [rows, nb*68], got {raw.dtype} {tuple(raw.shape)}")
    n = raw.shape[0]
    nb = raw.shape[1] // SSQ16_BLOCK
    blocks = raw.reshape(n, nb, SSQ16_BLOCK)
    scales = blocks[:, :, :4].contiguous().view(torch.float16)          # [N, nb, 2]: A, B
    words = blocks[:, :, 4:].reshape(n, nb, 32, 2)                       # [.., i, (B, A)]
    qa = words[..., 1].reshape(n, nb * 32).contiguous().view(torch.int8)
    qb = words[..., 0].reshape(n, nb * 32).contiguous().view(torch.int8)
    return qa, scales[..., 0].contiguous(), qb, scales[..., 1].contiguous()


def join_ssq16(qa: torch.Tensor, da: torch.Tensor, qb: torch.Tensor, db: torch.Tensor) -> torch.Tensor:
    """The inverse of split_ssq16 (tests and tools)."""
    n, kp = qa.shape
    nb = kp // 32
    words = torch.stack([qb.view(torch.uint8), qa.view(torch.uint8)], dim=-1).reshape(n, nb, 64)
    scales = torch.stack([da, db], dim=-1).contiguous().view(torch.uint8).reshape(n, nb, 4)
    return torch.cat([scales, words], dim=2).reshape(n, nb * SSQ16_BLOCK)


def repack_ssq16(raw: torch.Tensor, cols: int, twins: str = "ab", code: str = "bf16") -> list[Packed]:
    """SSQ16 rows -> one Packed per requested twin ('a', 'b' or 'ab')."""
    qa, da, qb, db = split_ssq16(raw)
    out = []
    if "a" in twins:
        out.append(repack_q8(qa, da, cols, code))
    if "b" in twins:
        out.append(repack_q8(qb, db, cols, code))
    return out


def from_numpy(a: np.ndarray) -> torch.Tensor:
    """A read-only memmap slice to a tensor without a warning (copies once)."""
    return torch.from_numpy(np.ascontiguousarray(a).copy())
