"""h16 on a GPU: a bf16 model whose matmuls take f16 inputs holding its activations times
2^-H16_SHIFT (gpu_model.to_h16), over offset-binary weights whose scales carry 2^H16_SHIFT
(repack.py), so that the f16 MMA's weights cost 2 instructions a pair instead of the bf16 MMA's 4.
For activations in h16's exact range the sums are the bf16 path's, bit for bit: the MMA's products
are exact either way and a power-of-two scale of all of them scales the fp32 sum exactly.  Fresh
random data; outputs poisoned first."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

from pti_cli.gpu_model import make_linear, norm_parts, to_h16

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_norm_gpu import DEV, GEN, ops, rand_q8  # noqa: E402,F401  (ops: the module's CudaOps fixture)

pytestmark = pytest.mark.gpu


def in_range(m: int, k: int, scale: float = 1.0) -> torch.Tensor:
    """float32 [m, k] whose products with norm weights in [0.5, 1.5) stay in h16's exact range."""
    mag = torch.exp2(torch.empty(m, k).uniform_(-10, 6, generator=GEN))
    sign = torch.where(torch.rand(m, k, generator=GEN) < 0.5, -1.0, 1.0)
    return (scale * mag * sign).to(DEV)


def bits(t: torch.Tensor) -> torch.Tensor:
    return t.view(torch.int32 if t.dtype == torch.float32 else torch.int16)


@pytest.mark.parametrize("n,k", [(512, 256), (1024, 1000), (6144, 4096)])
@pytest.mark.parametrize("twins", [1, 2])
@pytest.mark.parametrize("kind,io", [("out", (True, False)), ("f32", (True, False)), ("glu", (True, True)),
                                     ("glu", (True, False)), ("glu", (False, True))])
def test_h16_scaled_matmul_gives_the_bf16_bits(backend, ops, n, k, twins, kind, io):
    """The same matrix and rows through the bf16 kernels and through an h16 matrix's (io: h16 inputs,
    h16 outputs for the matrix after it, gpu_model.h16_io): u as h16 is bf16's u over 16, and every
    output the bf16 path's bits (a gate/up's as h16 where io says so), at row counts that take every
    one-twin policy variant (1 to 64 rows) and the twins' kernels."""
    pairs = [rand_q8(n, k) for _ in range(twins)]
    plain = make_linear(pairs, DEV, backend, out_f32=kind == "f32", glu=kind == "glu")
    h16 = make_linear(pairs, DEV, backend, out_f32=kind == "f32", glu=kind == "glu", h16=io)
    assert h16.w.h16 == io[0] and not plain.w.h16 and h16.w.packs[0].code == ("h16" if io[0] else "bf16")
    g = (torch.rand((twins, k) if twins == 2 else (k,), generator=GEN) + 0.5).to(DEV)
    for m in (1, 3, 8, 13, 16, 31, 64):
        n_a = (m + 1) // 2 if twins == 2 else m
        x = in_range(m, k)
        u, p = ops.norm_parts(x, g, n_a, torch.bfloat16)
        uh, ph = ops.norm_parts(x, g, n_a, torch.float16)
        assert uh.dtype == torch.float16 and torch.equal(uh.float() * 16, u.float()) and torch.equal(ph, p)
        assert torch.equal(bits(uh), bits(norm_parts(x, g, n_a, torch.float16)[0]))   # the torch form
        torch.empty(1 << 20, dtype=torch.float32, device=DEV).fill_(float("nan"))   # poison what empty reuses
        want = plain.scaled(u, p, 1e-5, n_a)
        got = h16.scaled(uh if io[0] else u, ph, 1e-5, n_a)
        assert not torch.isnan(got.float()).any(), m
        if kind == "glu" and io[1]:
            assert got.dtype == torch.float16 and torch.equal(bits(got), bits(to_h16(want.float()))), m
        else:
            assert got.dtype == want.dtype and torch.equal(bits(got), bits(want)), m


@pytest.mark.parametrize("h16_input", [False, True])
@pytest.mark.parametrize("twins", [1, 2])
def test_h16_residual_epilogue_writes_h16_norm_parts(backend, ops, h16_input, twins):
    """A residual matrix of an h16 model, taking bf16 (the attention's output) or h16 inputs: the
    residual rows as the bf16 path adds them, the next norm's u as h16 (the norm_parts kernel's
    h16 bits), its partial sums unchanged."""
    n, k = 1024, 1000
    pairs = [rand_q8(n, k) for _ in range(twins)]
    plain = make_linear(pairs, DEV, backend)
    h16 = make_linear(pairs, DEV, backend, h16=(h16_input, True))
    last = make_linear(pairs, DEV, backend, h16=(h16_input, False))   # before a bf16 matrix: bf16 norm parts
    assert h16.w.h16 == h16_input and h16.h16 and not last.h16
    g = (torch.rand((twins, n) if twins == 2 else (n,), generator=GEN) + 0.5).to(DEV)
    for m in (1, 5, 16, 40):
        n_a = (m + 1) // 2 if twins == 2 else m
        a = in_range(m, k, 0.5).bfloat16()
        x0 = (torch.randn(m, n, generator=GEN) * 3).to(DEV)
        x_b, x_h = x0.clone(), x0.clone()
        u_b, p_b, _ = plain.residual(a, x_b, g, n_a)
        torch.empty(1 << 20, dtype=torch.float32, device=DEV).fill_(float("nan"))
        u_h, p_h, _ = h16.residual(to_h16(a.float()) if h16_input else a, x_h, g, n_a)
        assert torch.equal(x_h, x_b), m
        assert u_h.dtype == torch.float16 and torch.equal(bits(u_h), bits(to_h16(u_b.float()))), m
        assert torch.equal(bits(u_h), bits(ops.norm_parts(x_b, g, n_a, torch.float16)[0])), m
        assert torch.equal(p_h, p_b), m
        x_l = x0.clone()
        u_l, p_l, _ = last.residual(to_h16(a.float()) if h16_input else a, x_l, g, n_a)
        assert torch.equal(x_l, x_b) and u_l.dtype == torch.bfloat16 and torch.equal(bits(u_l), bits(u_b)), m


@pytest.mark.parametrize("roles", ["", "all", "gu,head", "wo"])
def test_h16_model_against_the_bf16_model(backend, ops, monkeypatch, roles):
    """The same random model built with h16 matrices (PTI_H16: "" the default, H16_ROLES; "all";
    a list) and (PTI_H16=0) as a bf16 one: the roles asked for take h16 inputs (the attention's
    output matrix from the attention's h16 rows), and the logits are the bf16 model's to within
    what rounding the activations below h16's exact range (under 2^-13, held to 2^-21) moves, in
    prefill rows (eager) and a decode row (graph), both twins."""
    from test_gpu_model import SHAPE, gpu_model, prompt, rel_err
    from pti_cli.gpu_model import ALL_H16_ROLES, H16_ROLES, SeqRows

    dev = DEV
    monkeypatch.setenv("PTI_H16", roles)
    m_h = gpu_model(SHAPE, dev, backend, ops, twins="ab")
    monkeypatch.setenv("PTI_H16", "0")
    m_b = gpu_model(SHAPE, dev, backend, ops, twins="ab")
    want = set(H16_ROLES if roles == "" else ALL_H16_ROLES if roles == "all" else roles.split(","))
    assert m_h.w.h16 == want and not m_b.w.h16 and (m_h.mm_dtype == torch.float16) == ("qkv" in want)
    for lw in m_h.w.layers:
        got = {r for r, lin in (("qkv", lw.wqkv), ("wo", lw.wo), ("gu", lw.wgu), ("down", lw.wdown)) if lin.w.h16}
        assert got == want - {"head"}
    assert m_h.w.output.w.h16 == ("head" in want)
    seqs = [SeqRows(0, prompt(70, SHAPE.vocab, 7), 0, 0), SeqRows(1, prompt(70, SHAPE.vocab, 8), 0, 1)]
    for step in range(2):
        _, lh = m_h.run_pass(seqs, want_logits=True)
        _, lb = m_b.run_pass(seqs, want_logits=True)
        for x, y in zip(lh, lb):
            assert torch.isfinite(x).all() and rel_err(x, y) < 2e-3, (step, rel_err(x, y))
        seqs = [SeqRows(s.slot, [int(y[-1].argmax())], 70, s.twin) for s, y in zip(seqs, lb)]


@pytest.mark.parametrize("variant", ["t1_r1_m2_u1", "t1_r1_m2_u1_p1", "t1_r1_m2_u2_p1", "t1_r1_m4_u1"])
def test_h16_16_row_variants_give_the_bf16_bits(backend, ops, monkeypatch, variant):
    """Each 16- and 32-row variant of the policy forced on every width (PTI_VARIANTS), the matrices
    above too small to pick the wide ones themselves: the h16 kernels' outputs are the bf16 kernels'
    bits (the f16 variants of one block a step convert in pti_cvt4's LEAN form)."""
    from pti_cli.backends.cuda import split_variant
    limit = 16 if split_variant(variant)["m"] == 2 else 32
    monkeypatch.setenv("PTI_VARIANTS", ";".join(f"1:{limit}:{w}={variant}" for w in "nwx"))
    n, k = 1024, 1000
    g = (torch.rand(k, generator=GEN) + 0.5).to(DEV)
    for kind in ("out", "f32", "glu"):
        pairs = [rand_q8(n, k)]
        plain = make_linear(pairs, DEV, backend, out_f32=kind == "f32", glu=kind == "glu")
        h16 = make_linear(pairs, DEV, backend, out_f32=kind == "f32", glu=kind == "glu", h16=(True, kind == "glu"))
        for m in (limit - 3, limit):
            x = in_range(m, k)
            u, p = ops.norm_parts(x, g, m, torch.bfloat16)
            uh, _ = ops.norm_parts(x, g, m, torch.float16)
            want = plain.scaled(u, p, 1e-5, m)
            got = h16.scaled(uh, p, 1e-5, m)
            if kind == "glu":
                want = to_h16(want.float())
            assert torch.equal(bits(got), bits(want)), (kind, m)
