"""The RMSNorm fused into the matmul launch (kernels/pti_kernel.hip pti_norm_rows, the "_n"
variants) on a GPU: the same bits as the ops' add_rmsnorm kernel followed by the plain
matmul, and the same residual sums, for one and two twins, one and two rows per twin, with
and without the added rows, plain / float32 / gate-up outputs, narrow and wide matrices
(both variants of the policy), K a multiple of 32 or not.  Fresh random data; the residual
output poisoned with NaN first."""

from __future__ import annotations

import pytest
import torch

from pti_cli.gpu_model import make_linear

pytestmark = pytest.mark.gpu

GEN = torch.Generator(device="cpu")
GEN.manual_seed(int(torch.randint(0, 1 << 30, (1,)).item()))


@pytest.fixture(scope="module")
def ops():
    from pti_cli.gpu_ops import CudaOps
    return CudaOps(torch.device("cuda"))


def rand_q8(n: int, k: int):
    nb = -(-k // 32)
    q = torch.randint(-127, 128, (n, nb * 32), generator=GEN, dtype=torch.int8)
    q[:, k:] = 0
    d = ((torch.rand(n, nb, generator=GEN) * 4 + 1) / (127 * k ** 0.5)).half()
    return q.cuda(), d.cuda()


@pytest.mark.parametrize("n,k", [(512, 4096), (6144, 4096), (1024, 1000), (256, 6144)])
@pytest.mark.parametrize("twins", [1, 2])
@pytest.mark.parametrize("kind", ["out", "f32", "glu"])
def test_fused_norm_equals_norm_then_matmul(backend, ops, n, k, twins, kind):
    dev = torch.device("cuda")
    lin = make_linear([rand_q8(n, k) for _ in range(twins)], dev, backend, out_f32=kind == "f32", glu=kind == "glu")
    assert lin.glu == (kind == "glu")
    g = (torch.rand((twins, k) if twins == 2 else (k,), generator=GEN) + 0.5).cuda()
    for rows in (1, 2):
        for with_r in (False, True):
            m = rows * twins
            n_a = rows if twins == 2 else m
            x = (torch.randn(m, k, generator=GEN) * 3).cuda()
            r = torch.randn(m, k, generator=GEN).bfloat16().cuda() if with_r else None
            xo = torch.full_like(x, float("nan"))
            got = lin.normed(x, r, xo, g, 1e-5, n_a)
            assert got is not None
            xo_want = torch.full_like(x, float("nan"))
            want = lin(ops.add_norm(x.clone(), r, g, 1e-5, torch.bfloat16, n_a, out=xo_want), n_a)
            assert got.dtype == want.dtype and got.shape == want.shape
            assert torch.equal(xo, xo_want), (rows, with_r)
            bits = torch.int32 if got.dtype == torch.float32 else torch.int16
            assert torch.equal(got.view(bits), want.view(bits)), (rows, with_r)
            assert not torch.isnan(got.float()).any()
    # more rows per twin than the fused norm takes: the caller falls back to the norm kernel
    x = torch.randn(3 * twins, k, generator=GEN).cuda()
    assert lin.normed(x, None, torch.empty_like(x), g, 1e-5, 3 if twins == 2 else 3 * twins) is None


def test_norm_kernel_matches_torch(ops):
    """add_rmsnorm (256 threads, the layout the fused norm repeats) against float64 torch."""
    for d in (4096, 1000, 6144):
        x = torch.randn(5, d, generator=GEN).cuda()
        r = torch.randn(5, d, generator=GEN).bfloat16().cuda()
        w = (torch.rand(d, generator=GEN) + 0.5).cuda()
        xo = torch.full_like(x, float("nan"))
        h = ops.add_norm(x, r, w, 1e-5, torch.bfloat16, None, out=xo)
        v = x.double() + r.double()
        ref = v * torch.rsqrt(v.pow(2).mean(-1, keepdim=True) + 1e-5) * w.double()
        assert torch.equal(xo, (x + r.float()))
        assert torch.allclose(h.double(), ref, rtol=8e-3, atol=1e-6)
