"""The RMSNorm split around the matmuls on a GPU (kernels/pti_kernel.hip PtiArgs,
gpu_model.scaled / residual): the residual epilogue adds the matmul's bf16 outputs into the
float32 rows exactly as a separate add would and writes the next norm's parts with the bits of
the `norm_parts` kernel; the scaled epilogue matches a float64 reference and gives every row
the same bits whatever the rows beside it.  One and two twins, plain / float32 / gate-up
outputs, K a multiple of 32 or not.  Fresh random data; outputs poisoned with NaN first."""

from __future__ import annotations

import pytest
import torch

from pti_cli.gpu_model import INV_IN_EPILOGUE_ROWS, make_linear, norm_parts
from wg_helpers import row_of_tiles, tile_layout

pytestmark = pytest.mark.gpu

GEN = torch.Generator(device="cpu")
GEN.manual_seed(int(torch.randint(0, 1 << 30, (1,)).item()))
DEV = torch.device("cuda")


@pytest.fixture(scope="module")
def ops():
    from pti_cli.gpu_ops import CudaOps
    return CudaOps(DEV)


def rand_q8(n: int, k: int):
    """int8 [n, k] and float16 scales [n, k / 32 rounded up] (make_linear pads the blocks)."""
    nb = -(-k // 32)
    q = torch.randint(-127, 128, (n, k), generator=GEN, dtype=torch.int8)
    d = ((torch.rand(n, nb, generator=GEN) * 4 + 1) / (127 * k ** 0.5)).half()
    return q.to(DEV), d.to(DEV)


def norm_weights(twins: int, d: int) -> torch.Tensor:
    return (torch.rand((twins, d) if twins == 2 else (d,), generator=GEN) + 0.5).to(DEV)


@pytest.mark.parametrize("n,k", [(512, 256), (1000, 4096), (4096, 1000)])
@pytest.mark.parametrize("twins", [1, 2])
def test_residual_epilogue(backend, ops, n, k, twins):
    """x += bf16(a @ W^T), u = bf16(x * g) and the partial sums, as the plain matmul + an add +
    the norm_parts kernel give them; past INV_IN_EPILOGUE_ROWS rows the next matmul's inv slots, set
    pending (over poison)."""
    lin = make_linear([rand_q8(n, k) for _ in range(twins)], DEV, backend)
    g = norm_weights(twins, n)
    for m in (1, 2, 5, 9, 16, 40, 130):
        n_a = m // 2 if twins == 2 else m
        a = torch.randn(m, k, generator=GEN).bfloat16().to(DEV)
        x = (torch.randn(m, n, generator=GEN) * 3).to(DEV)
        x_ref = x + lin(a, n_a).float()
        u_want, p_want = ops.norm_parts(x_ref, g, n_a, torch.bfloat16)
        torch.empty(4096, dtype=torch.float32, device=DEV).fill_(1.5)   # poison what torch.empty may reuse
        u, p, inv = lin.residual(a, x, g, n_a)
        # one launch, one twin, and a matrix the policy kernels take (the Hopper kernels, where they take
        # it (1000x4096 with PTI_WG_NARROW=1), take the rows' inv given: no slots for the next matmul)
        want_inv = twins == 1 and INV_IN_EPILOGUE_ROWS < m <= 64 and not backend.wg_ready(lin.w.packs, m)
        assert (inv is not None) == want_inv, m
        if inv is not None:
            assert (inv.view(torch.int32) == -1).all(), m   # PTI_INV_PENDING
        assert torch.equal(x, x_ref), m
        assert torch.equal(u.view(torch.int16), u_want.view(torch.int16)), m
        assert torch.equal(p, p_want), m
        u_t, p_t = norm_parts(x_ref, g, n_a, torch.bfloat16)
        assert torch.equal(u.view(torch.int16), u_t.view(torch.int16))
        assert torch.allclose(p, p_t, rtol=1e-5, atol=0)


def test_residual_epilogue_needs_float32_rows(backend):
    """Only the float32 kernels add into the residual stream (the bf16 and gate/up kernels drop
    that path at compile time): a residual epilogue on bf16 outputs is refused, and the rows
    are left as they were, not silently skipped."""
    from pti_cli.backends.cuda import Epilogue
    from pti_cli.errors import PtiError
    n, k, m = 512, 256, 3
    lin = make_linear([rand_q8(n, k)], DEV, backend)
    a = torch.randn(m, k, generator=GEN).bfloat16().to(DEV)
    y = torch.full((m, n), float("nan"), dtype=torch.bfloat16, device=DEV)
    u = torch.empty((m, n), dtype=torch.bfloat16, device=DEV)
    p = torch.empty((m, n // 16), dtype=torch.float32, device=DEV)
    epi = Epilogue(n // 16, 0.0, uo=[u], po=[p], g=[norm_weights(1, n)])
    with pytest.raises(PtiError, match="float32 outputs"):
        backend.matmul_epi([0], [a], lin.w, [y], epi)
    torch.cuda.synchronize()
    assert torch.isnan(y.float()).all()


@pytest.mark.parametrize("n,k", [(512, 256), (1024, 1000), (6144, 4096)])
@pytest.mark.parametrize("twins", [1, 2])
@pytest.mark.parametrize("kind", ["out", "f32", "glu"])
def test_scaled_epilogue(backend, ops, n, k, twins, kind):
    """inv * (u @ W^T) against float64, and every row's bits the same alone and among 40 rows."""
    pairs = [rand_q8(n, k) for _ in range(twins)]
    lin = make_linear(pairs, DEV, backend, out_f32=kind == "f32", glu=kind == "glu")
    assert lin.glu == (kind == "glu")
    g = norm_weights(twins, k)
    x = (torch.randn(40, k, generator=GEN) * 2).to(DEV)
    n_a = 20 if twins == 2 else 40
    u, p = ops.norm_parts(x, g, n_a, torch.bfloat16)
    y = lin.scaled(u, p, 1e-5, n_a)
    assert y is not None and not torch.isnan(y.float()).any()
    inv = torch.rsqrt(p.double().sum(-1, keepdim=True) / k + 1e-5)
    ref = []
    for tw, rows in ((0, slice(0, n_a)), (1, slice(n_a, 40))):
        if rows.start == rows.stop:
            continue
        q, d = pairs[tw if twins == 2 else 0]
        w = q.double() * d.double().repeat_interleave(32, dim=1)[:, :k]
        ref.append(inv[rows] * (u[rows].double() @ w.T))
    ref = torch.cat(ref)
    if kind == "glu":
        f = n // 2
        ref = torch.nn.functional.silu(ref[:, :f]) * ref[:, f:]
    err = (y.double() - ref).norm(dim=1) / ref.norm(dim=1)
    assert err.max() < (1e-5 if kind == "f32" else 2e-2), err.max()
    bits = torch.int32 if y.dtype == torch.float32 else torch.int16
    # the inv from the launch's own first CTAs (slots a residual launch set pending), and from its
    # matmul CTAs themselves where no inv CTA did them (the fallback): the same bits.  Two twins' rows
    # (two parts) take the launch's inv instead and leave the slots alone, and so do the Hopper kernels
    # where they take the matrix (6144x4096 by default, PTI_WG_NARROW=w): they take the rows' inv given.
    fills = twins == 1 and not backend.wg_ready(lin.w.packs, 40)
    for fallback in (False, True):
        slots = torch.full((40,), -1, dtype=torch.int32, device=DEV).view(torch.float32)
        if not fallback:
            y2 = lin.scaled(u, p, 1e-5, n_a, slots)
            if fills:
                assert torch.equal(slots, backend.row_inv(p, k, 1e-5))
        elif twins == 1:
            y2 = poisoned_scaled(backend, lin, u, p, n_a, slots)
        else:
            continue
        if not fills or fallback:
            assert (slots.view(torch.int32) == -1).all()   # nobody wrote them
        assert torch.equal(y2.view(bits), y.view(bits)), fallback
    for i in (0, 7, n_a - 1, 39):   # alone, as twin A's or twin B's only row
        tw_a = 1 if (twins == 2 and i < n_a) else 0
        one = lin.scaled(u[i:i + 1], p[i:i + 1], 1e-5, tw_a if twins == 2 else 1)
        assert torch.equal(one.view(bits), y[i:i + 1].view(bits)), i


@pytest.mark.parametrize("n,k,twins", [(512, 256, 1), (6144, 4096, 1), (6144, 4096, 2)])
def test_sum_inv_epilogue(backend, ops, n, k, twins):
    """Epilogue.sum_inv (what lin.scaled gives the Hopper kernels): the rows' inv summed before the
    matmul into slots holding anything (poison), by the launch that lays out the Hopper kernels'
    activations where they take the matrix (6144x4096 at 40 rows), and by row_inv into the slots where the
    policy does (512x256): row_inv's bits in the slots, and the outputs of the inv given."""
    from pti_cli.backends.cuda import Epilogue
    lin = make_linear([rand_q8(n, k) for _ in range(twins)], DEV, backend)
    parts = lin._parts(40, 20 if twins == 2 else 40)
    x = (torch.randn(40, k, generator=GEN) * 2).to(DEV)
    u, p = ops.norm_parts(x, norm_weights(twins, k), 20 if twins == 2 else 40, torch.bfloat16)
    cut = lambda t: [t[lo:hi] for _, lo, hi in parts]   # noqa: E731
    tw = [t for t, _, _ in parts]
    packs = [lin.w.packs[lin.w.plane[t]] for t in tw]
    assert backend.wg_ready(packs, max(hi - lo for _, lo, hi in parts)) == (n == 6144 and backend.wgmma)
    inv = backend.row_inv(p, k, 1e-5)
    want = torch.full((40, n), float("nan"), device=DEV)
    backend.matmul_epi(tw, cut(u), lin.w, cut(want), Epilogue(p.shape[1], 1e-5, inv=cut(inv)))
    slots = torch.full((40,), 1.5, device=DEV)
    got = torch.full((40, n), float("nan"), device=DEV)
    backend.matmul_epi(tw, cut(u), lin.w, cut(got), Epilogue(p.shape[1], 1e-5, pin=cut(p), inv=cut(slots), sum_inv=True))
    assert torch.equal(slots, inv)
    assert not torch.isnan(got).any() and torch.equal(got.view(torch.int32), want.view(torch.int32))


def poisoned_scaled(backend, lin, u, p, n_a, slots):
    """lin.scaled's launch with the inv slots given and no inv CTA (the fallback: every matmul CTA
    sums the rows itself), into NaN-poisoned outputs."""
    from pti_cli.backends.cuda import Epilogue
    M = u.shape[0]
    parts = lin._parts(M, n_a)
    y = torch.full((M, lin.w.rows // 2 if lin.glu else lin.w.rows), float("nan"), dtype=lin.out_dtype or u.dtype,
                   device=DEV)
    cut = lambda t: [t[lo:hi] for _, lo, hi in parts]   # noqa: E731
    backend.matmul_epi([t for t, _, _ in parts], cut(u), lin.w, cut(y),
                       Epilogue(p.shape[1], 1e-5, pin=cut(p), inv=cut(slots), no_inv_ctas=True))
    return y


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_norm_parts_kernel_matches_torch(ops, dtype):
    """bf16 u, or h16 (float16: gpu_model.to_h16, tiny and huge values included), as torch gives them."""
    for d, twins in ((4096, 1), (1000, 2), (576, 2)):
        x = torch.randn(6, d, generator=GEN).to(DEV)
        x[0, :8] = torch.tensor([1e-9, -3e-6, 2e-5, 7e5, -1e6, 2e6, 0.0, -0.0])
        g = norm_weights(twins, d)
        u, p = ops.norm_parts(x, g, 3, dtype)
        u_t, p_t = norm_parts(x, g, 3, dtype)
        assert u.dtype == dtype and torch.equal(u.view(torch.int16), u_t.view(torch.int16))
        assert p.shape == (6, -(-d // 16)) and torch.allclose(p, p_t, rtol=1e-5)


def test_inv_ctas_form_of_every_variant(backend, ops, monkeypatch):
    """Each "_i1" variant (kernels/pti_kernel.hip PtiArgs), picked through PTI_VARIANTS: as the
    residual launch it sets the slots pending; as the scaled launch it fills them with row_inv's bits
    and gives the outputs of the plain variant with a row_inv launch, also with no inv CTA (the fallback,
    every matmul CTA sums the rows itself).  K not a multiple of 32."""
    from pti_cli.backends.cuda import INV_VARIANTS, TC_VARIANTS, split_variant
    n, k = 512, 1000
    for v in INV_VARIANTS:
        rows = 8 * split_variant(v)["m"] - 3   # a partial last tile
        limit = next(lim for lim, _ in TC_VARIANTS[1] if rows <= lim)
        monkeypatch.setenv("PTI_VARIANTS", ";".join(f"1:{limit}:{w}={v}" for w in "nwx"))
        res = make_linear([rand_q8(k, n)], DEV, backend)
        a = torch.randn(rows, n, generator=GEN).bfloat16().to(DEV)
        x = (torch.randn(rows, k, generator=GEN) * 2).to(DEV)
        g = norm_weights(1, k)
        torch.empty(4096, dtype=torch.float32, device=DEV).fill_(1.5)   # poison what torch.empty may reuse
        u, p, slots = res.residual(a, x, g, rows)
        assert slots is not None and (slots.view(torch.int32) == -1).all(), v
        for kind in ("out", "f32", "glu"):
            lin = make_linear([rand_q8(n, k)], DEV, backend, out_f32=kind == "f32", glu=kind == "glu")
            bits = torch.int32 if kind == "f32" else torch.int16
            want = lin.scaled(u, p, 1e-5, rows)   # the plain variant after a row_inv launch
            s = slots.clone()
            got = lin.scaled(u, p, 1e-5, rows, s)
            assert torch.equal(s, backend.row_inv(p, k, 1e-5)), (v, kind)
            assert torch.equal(got.view(bits), want.view(bits)), (v, kind)
            s = slots.clone()
            got = poisoned_scaled(backend, lin, u, p, rows, s)
            assert (s.view(torch.int32) == -1).all() and torch.equal(got.view(bits), want.view(bits)), (v, kind)



@pytest.mark.parametrize("twins", [1, 2])
def test_residual_lays_out_tiles_for_the_hopper_matmul(backend, ops, twins):
    """A residual launch of the policy kernels given the next matrix's input_tiles (Epilogue.to) also writes u
    in the tile layout pti_wg_tiles gives, where the Hopper kernels take that matrix (a cluster form at 6144 rows,
    the one-CTA form on a tall one), and sets the inv slots pending; the Hopper matmul on those tiles, its own
    first CTAs summing the inv, gives the bits of the pti_wg_tiles path, also with no inv CTA (every matmul CTA
    sums the rows itself).  Plain, float32 and silu(gate) * up outputs; 17, 40 and 64 rows of one twin, 40, 64
    and 100 of two (split unevenly)."""
    from pti_cli.backends.cuda import Epilogue
    d = 1024
    res = make_linear([rand_q8(d, 512) for _ in range(twins)], DEV, backend)   # (K 512: the policy's)
    g = norm_weights(twins, d)
    tall = 128 * (backend.sm_count + 1)
    feeds = {"w_out": make_linear([rand_q8(6144, d) for _ in range(twins)], DEV, backend),
             "x_glu": make_linear([rand_q8(tall, d) for _ in range(twins)], DEV, backend, glu=True),
             "w_f32": make_linear([rand_q8(6144, d) for _ in range(twins)], DEV, backend, out_f32=True)}
    for m in ((17, 40, 64) if twins == 1 else (40, 64, 100)):   # each twin 17-64 rows
        n_a = m // 2 - 3 if twins == 2 else m
        a = torch.randn(m, 512, generator=GEN).bfloat16().to(DEV)
        x = (torch.randn(m, d, generator=GEN) * 3).to(DEV)
        for kind, lin in feeds.items():
            x_ref = x.clone()
            u_ref, p_ref, _ = res.residual(a, x_ref, g, n_a)
            tiles = lin.input_tiles(m, n_a)
            assert (tiles is not None) == backend.wgmma, (m, kind)
            if tiles is None:
                continue
            for t in tiles:
                t.fill_(float("nan"))
            xt = x.clone()
            u, p, inv = res.residual(a, xt, g, n_a, to=tiles)
            assert torch.equal(xt, x_ref) and torch.equal(u.view(torch.int16), u_ref.view(torch.int16)) and torch.equal(p, p_ref)
            parts = lin._parts(m, n_a)
            nr = 32 if max(hi - lo for _, lo, hi in parts) <= 32 else 64
            assert len(tiles) == len(parts) and (inv.view(torch.int32) == -1).all(), (m, kind)
            for t, (_, lo, hi) in zip(tiles, parts):
                live = row_of_tiles(nr, d) < hi - lo   # the rows past the twin's are never read
                want = tile_layout(u[lo:hi].view(torch.int16), nr)
                assert torch.equal(t.view(torch.int16)[live], want[live]), (m, kind, lo)
            bits = torch.int32 if kind == "w_f32" else torch.int16
            want = lin.scaled(u, p, 1e-5, n_a)   # the pti_wg_tiles launch, summing the inv
            s = inv.clone()
            got = lin.scaled(u, p, 1e-5, n_a, s, tiles)
            assert torch.equal(s, backend.row_inv(p, d, 1e-5)), (m, kind)
            assert torch.equal(got.view(bits), want.view(bits)), (m, kind)
            s = inv.clone()
            cut = lambda t: [t[lo:hi] for _, lo, hi in parts]   # noqa: E731
            got = torch.full_like(want, float("nan"))
            backend.matmul_epi([t for t, _, _ in parts], cut(u), lin.w, cut(got),
                               Epilogue(p.shape[1], 1e-5, pin=cut(p), inv=cut(s), ti=tiles, no_inv_ctas=True))
            assert (s.view(torch.int32) == -1).all() and torch.equal(got.view(bits), want.view(bits)), (m, kind)
