"""The fused gate/up matmul (silu(gate) * up in the kernel's epilogue) on a GPU: the same
bits as the plain matmul followed by the separate SiLU kernel, for one and two twins,
every variant the host may pick, aligned and unaligned K.

Fresh random data, outputs poisoned with NaN first."""

from __future__ import annotations

import pytest
import torch

from pti_cli.backends.cuda import all_variants, split_variant
from pti_cli.gpu_model import make_linear

pytestmark = pytest.mark.gpu

GEN = torch.Generator(device="cpu")
GEN.manual_seed(20261130)


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


@pytest.mark.parametrize("ffn,k", [(512, 256), (344, 1024), (1536, 576)])   # the model's K: whole blocks
@pytest.mark.parametrize("twins", [1, 2])
def test_fused_glu_equals_matmul_then_silu(backend, ops, ffn, k, twins):
    pairs = [rand_q8(2 * ffn, k) for _ in range(twins)]
    plain = make_linear(pairs, torch.device("cuda"), backend)
    fused = make_linear(pairs, torch.device("cuda"), backend, glu=True)
    assert fused.glu and not plain.glu
    for m in (1, 3, 8, 16, 17, 40):
        n_a = m if twins == 1 else m // 2
        x = torch.randn(m, k, generator=GEN).bfloat16().cuda()
        want = ops.silu_mul(plain(x, n_a), ffn)
        got = fused(x, n_a)
        assert got.shape == (m, ffn) and not torch.isnan(got.float()).any()
        assert torch.equal(got.view(torch.int16), want.view(torch.int16)), (m, twins)
        ref = torch.nn.functional.silu(plain(x, n_a)[:, :ffn].float()) * plain(x, n_a)[:, ffn:].float()
        assert torch.allclose(got.float(), ref, rtol=2e-2, atol=1e-3)


def test_every_variant_fuses_the_same_bits(backend, ops):
    """Every variant with the glu epilogue gives the bits of matmul + SiLU, so the host may
    pick any of them."""
    ffn, k = 344, 1000
    pairs = [rand_q8(2 * ffn, k), rand_q8(2 * ffn, k)]
    plain = backend.weight_from_q8(pairs, k)   # K = 1000: the guarded tail too
    fused = backend.weight_from_q8(pairs, k, glu=True)
    for v in all_variants():
        t, rows = split_variant(v)["t"], 8 * split_variant(v)["m"]
        for m in sorted({1, rows - 3, rows} - {0}):
            xs = [torch.randn(m, k, generator=GEN).bfloat16().cuda() for _ in range(t)]
            ys = [torch.full((m, ffn), float("nan"), dtype=torch.bfloat16, device="cuda") for _ in range(t)]
            backend.launch(fused.packs[:t], xs, ys, f"pti_mm_bf16_glu_{v}")
            for tw in range(t):
                want = ops.silu_mul(backend.matmul(xs[tw], plain, tw), ffn)
                assert torch.equal(ys[tw].view(torch.int16), want.view(torch.int16)), (v, m, tw)
