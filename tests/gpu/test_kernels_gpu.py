"""The twin matmul kernels on a GPU: accuracy against an fp64 reference, exact
integer cases, odd shapes, batch invariance bit for bit, CUDA-graph replay.

Every check draws fresh random data and poisons its outputs with NaN first."""

from __future__ import annotations

import pytest
import torch

from pti_cli.backends.repack import join_ssq16
from wg_helpers import backend_with_wgmma, row_of_tiles, tile_layout

pytestmark = pytest.mark.gpu

GEN = torch.Generator(device="cpu")
GEN.manual_seed(20261129)


def rand_q8(n: int, k: int, small: bool = False):
    """Q8_0 rows: int8 [n, nb*32] (zero past k, as a packer pads) and f16 scales [n, nb]."""
    nb = -(-k // 32)
    if small:
        q = torch.randint(-3, 4, (n, nb * 32), generator=GEN, dtype=torch.int8)
        d = torch.tensor([0.5, 1.0, 2.0], dtype=torch.float16)[torch.randint(0, 3, (n, nb), generator=GEN)]
    else:
        q = torch.randint(-127, 128, (n, nb * 32), generator=GEN, dtype=torch.int8)
        d = (torch.rand(n, nb, generator=GEN) * 2e-3 + 1e-4).half() * torch.where(
            torch.rand(n, nb, generator=GEN) < 0.5, -1, 1).half()
    q[:, k:] = 0
    return q, d


def dense64(q, d, k):
    return (q.double() * d.double().repeat_interleave(32, dim=1))[:, :k]


def rand_x(m, k, dtype, small=False, device="cuda"):
    if small:
        return torch.randint(-4, 5, (m, k), generator=GEN).to(dtype).to(device)
    return torch.randn(m, k, generator=GEN).to(dtype).to(device)


def poisoned(m, n, dtype):
    return torch.full((m, n), float("nan"), dtype=dtype, device="cuda")


def load(backend, mats, k):
    """A KernelMatrix from one (Q8) or two (SSQ16, through the 68-byte blocks) twins."""
    if len(mats) == 1:
        return backend.weight_from_q8([(q.cuda(), d.cuda()) for q, d in mats], k)
    (qa, da), (qb, db) = mats
    from pti_cli.backends.cuda import KernelMatrix
    from pti_cli.backends.repack import repack_ssq16
    raw = join_ssq16(qa, da, qb, db).cuda()
    return KernelMatrix(repack_ssq16(raw, k, code=backend.code()), {0: 0, 1: 1}, qa.shape[0], k, False)


def check_close(y, x, q, d, k):
    ref = x.double().cpu() @ dense64(q, d, k).T
    y = y.double().cpu()
    assert not torch.isnan(y).any(), "NaN in output (element not written?)"
    err = (y - ref).abs().max(dim=1).values
    bound = 1e-5 * ref.norm(dim=1) + 1e-30
    assert (err <= bound).all(), f"max error / row norm = {(err / bound * 1e-5).max().item():.3g}"


SHAPES = [(16, 32), (48, 4096), (37, 100), (300, 1000), (130, 4104), (1000, 2048)]
MS = [1, 2, 3, 7, 8, 9, 16, 17, 31, 33, 64, 65, 130]


@pytest.mark.parametrize("act", ["bf16", "f16"])
@pytest.mark.parametrize("n,k", SHAPES)
def test_q8_accuracy(request, act, n, k):
    be = request.getfixturevalue("backend" if act == "bf16" else "backend_f16")
    for m in MS:
        q, d = rand_q8(n, k)
        w = be.weight_from_q8([(q.cuda(), d.cuda())], k)
        x = rand_x(m, k, be.act_dtype)
        y = be.matmul(x, w, 0, out=poisoned(m, n, torch.float32))
        check_close(y, x, q, d, k)


@pytest.mark.parametrize("act", ["bf16", "f16"])
@pytest.mark.parametrize("n,k", SHAPES)
def test_ssq16_twins_accuracy(request, act, n, k):
    be = request.getfixturevalue("backend" if act == "bf16" else "backend_f16")
    for ma, mb in [(1, 1), (1, 0), (0, 3), (2, 5), (8, 8), (9, 16), (17, 1), (33, 64), (64, 64), (70, 3)]:
        mats = [rand_q8(n, k), rand_q8(n, k)]
        w = load(be, mats, k)
        xa, xb = rand_x(ma, k, be.act_dtype), rand_x(mb, k, be.act_dtype)
        ya, yb = be.matmul_twins(xa, xb, w, outs=(poisoned(ma, n, torch.float32), poisoned(mb, n, torch.float32)))
        check_close(ya, xa, *mats[0], k)
        check_close(yb, xb, *mats[1], k)
        # one twin alone through matmul() reads the same plane
        y1 = be.matmul(xb, w, 1, out=poisoned(mb, n, torch.float32))
        check_close(y1, xb, *mats[1], k)


@pytest.mark.parametrize("n,k", [(37, 100), (300, 1000), (64, 4096)])
def test_generic_kernel_accuracy(backend_generic, n, k):
    for m in [1, 5, 17, 64, 70]:
        mats = [rand_q8(n, k), rand_q8(n, k)]
        w = load(backend_generic, mats, k)
        xa, xb = rand_x(m, k, torch.bfloat16), rand_x(m + 1, k, torch.bfloat16)
        ya, yb = backend_generic.matmul_twins(xa, xb, w, outs=(poisoned(m, n, torch.float32),
                                                              poisoned(m + 1, n, torch.float32)))
        check_close(ya, xa, *mats[0], k)
        check_close(yb, xb, *mats[1], k)


@pytest.mark.parametrize("act", ["bf16", "f16"])
@pytest.mark.parametrize("n,k,m", [(48, 256, 5), (100, 1000, 64), (33, 4096, 17), (512, 96, 130)])
def test_integer_cases_exact(request, act, n, k, m):
    be = request.getfixturevalue("backend" if act == "bf16" else "backend_f16")
    mats = [rand_q8(n, k, small=True), rand_q8(n, k, small=True)]
    w = load(be, mats, k)
    xa, xb = rand_x(m, k, be.act_dtype, small=True), rand_x(m, k, be.act_dtype, small=True)
    ya, yb = be.matmul_twins(xa, xb, w, outs=(poisoned(m, n, torch.float32), poisoned(m, n, torch.float32)))
    for y, x, (q, d) in [(ya, xa, mats[0]), (yb, xb, mats[1])]:
        ref = x.double().cpu() @ dense64(q, d, k).T   # small integers times powers of two: exact
        assert torch.equal(y.double().cpu(), ref)


def test_low_precision_output_is_rounded_f32(backend):
    n, k, m = 300, 1000, 19
    q, d = rand_q8(n, k)
    w = backend.weight_from_q8([(q.cuda(), d.cuda())], k)
    x = rand_x(m, k, torch.bfloat16)
    y32 = backend.matmul(x, w, 0, out=poisoned(m, n, torch.float32))
    y16 = backend.matmul(x, w, 0, out=poisoned(m, n, torch.bfloat16))
    assert torch.equal(y16, y32.to(torch.bfloat16))
    assert backend.matmul(x, w, 0).dtype == torch.bfloat16


@pytest.mark.parametrize("twins", [1, 2])
@pytest.mark.parametrize("n,k", [(300, 1000), (512, 4096)])
def test_batch_invariance_bitwise(backend, twins, n, k):
    """A row's bits alone equal its bits inside M = 2..64 rows at every position (and in 130)."""
    mats = [rand_q8(n, k) for _ in range(twins)]
    w = load(backend, mats, k)
    for out_dtype in (torch.float32, torch.bfloat16):
        row = rand_x(1, k, torch.bfloat16)
        other = rand_x(1, k, torch.bfloat16)
        for tw in range(twins):
            alone = backend.matmul(row, w, tw, out=poisoned(1, n, out_dtype))
            got = []
            for m in list(range(2, 65)) + [130]:
                positions = range(m) if m <= 64 else (0, 63, 64, 100, 129)
                for p in positions:
                    x = rand_x(m, k, torch.bfloat16)
                    x[p] = row[0]
                    if twins == 1:
                        got.append(backend.matmul(x, w, tw, out=poisoned(m, n, out_dtype))[p])
                    else:   # the row on its twin, the other twin busy with another M
                        xo = rand_x((m * 7) % 23, k, torch.bfloat16)
                        xs = (x, xo) if tw == 0 else (xo, x)
                        ys = backend.matmul_twins(*xs, w, outs=(poisoned(xs[0].shape[0], n, out_dtype),
                                                                poisoned(xs[1].shape[0], n, out_dtype)))
                        got.append(ys[tw][p])
            got = torch.stack(got)
            same = (got.view(torch.int16 if out_dtype == torch.bfloat16 else torch.int32)
                    == alone.view(torch.int16 if out_dtype == torch.bfloat16 else torch.int32)).all(dim=1)
            assert same.all(), f"{(~same).sum().item()} of {len(same)} placements differ from the row alone"
        del other


def test_cuda_graph_replay(backend):
    n, k = 300, 1000
    mats = [rand_q8(n, k), rand_q8(n, k)]
    w2 = load(backend, mats, k)
    w1 = backend.weight_from_q8([(mats[0][0].cuda(), mats[0][1].cuda())], k)
    xa, xb, x1 = (rand_x(m, k, torch.bfloat16) for m in (3, 5, 9))
    backend.matmul_twins(xa, xb, w2)   # warm-up outside capture (allocator, nothing else)
    backend.matmul(x1, w1, 0)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        ya, yb = backend.matmul_twins(xa, xb, w2)
        y1 = backend.matmul(x1, w1, 0, out_dtype=torch.float32)
    for _ in range(3):
        for t in (xa, xb, x1):
            t.copy_(rand_x(t.shape[0], k, torch.bfloat16))
        for y in (ya, yb, y1):
            y.fill_(float("nan"))
        g.replay()
        ea, eb = backend.matmul_twins(xa, xb, w2)
        assert torch.equal(ya, ea) and torch.equal(yb, eb)
        assert torch.equal(y1, backend.matmul(x1, w1, 0, out_dtype=torch.float32))
        check_close(y1, x1, *mats[0], k)


def test_load_matrix_from_ssq_file(backend, tmp_path):
    """An SSQ16 file packed by `pti pack`: the kernels give its dequantised matrices' products."""
    import sys
    from pathlib import Path
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from ssq_helpers import tiny_llama
    from pti_cli.pack import pack
    from pti_cli.ssq.read import SSQFile

    a, b, out = tmp_path / "a.gguf", tmp_path / "b.gguf", tmp_path / "t.ssq"
    tiny_llama(a, seed=1)
    tiny_llama(b, seed=2)
    pack(a, b, out)
    ssq = SSQFile(out)
    for name in [t for t in ssq.tensor_names if ssq.is_matrix(t)][:6]:
        n, k = ssq.logical_shape(name)
        for twins in ("a", "b", "ab"):
            w = backend.load_matrix(ssq, name, twins)
            assert len(w.packs) == len(twins)
            for tw in (0, 1):
                if "ab"[tw] not in twins:
                    continue
                x = rand_x(5, k, torch.bfloat16)
                y = backend.matmul(x, w, tw, out=poisoned(5, n, torch.float32))
                ref = x.double().cpu() @ torch.from_numpy(ssq.dense(name, tw)).double().T
                err = (y.double().cpu() - ref).abs().max(dim=1).values
                assert (err <= 1e-5 * ref.norm(dim=1)).all()


@pytest.mark.parametrize("k", [1000, 4096, 1004])
def test_every_variant_gives_the_same_bits(backend, k):
    """Every variant (rows per CTA, row tiles, blocks per step, twins) gives one row the
    same bits as the one-row kernel, so the host may pick any per call; K = 1004 takes the
    guarded (unaligned) path."""
    from pti_cli.backends.cuda import all_variants, split_variant
    n = 300
    mats = [rand_q8(n, k), rand_q8(n, k)]
    w = load(backend, mats, k)
    for v in all_variants():
        t, rows = split_variant(v)["t"], 8 * split_variant(v)["m"]
        for m in sorted({1, rows - 3, rows} - {0}):
            xs = [rand_x(m, k, torch.bfloat16) for _ in range(t)]
            ys = [poisoned(m, n, torch.float32) for _ in range(t)]
            backend.launch(w.packs[:t], xs, ys, f"pti_mm_bf16_f32_{v}")
            for tw in range(t):
                check_close(ys[tw], xs[tw], *mats[tw], k)
                for i in range(m):   # the one-row register kernel, row by row
                    one = poisoned(1, n, torch.float32)
                    backend.launch([w.packs[tw]], [xs[tw][i:i + 1]], [one], "pti_mm_bf16_f32_t1_r1_m1_u8")
                    assert torch.equal(ys[tw][i].view(torch.int32), one[0].view(torch.int32)), (v, m, i)


def test_twin_launch_with_one_twin_empty(backend):
    """A twin kernel launched with rows for one twin only computes that twin's rows right (the
    kernels read each twin's row 0 unconditionally: the empty twin is given the other's), and a
    launch without any row is refused."""
    from pti_cli.errors import PtiError
    n, k = 300, 4096
    mats = [rand_q8(n, k), rand_q8(n, k)]
    w = load(backend, mats, k)
    for name in ("pti_mm_bf16_f32_t2_r1_m1_u2", "pti_mm_bf16_f32_t2_r1_m1_u2_p1"):
        for full in (0, 1):
            m = int(torch.randint(1, 9, (1,), generator=GEN))
            xs = [rand_x(m if tw == full else 0, k, torch.bfloat16) for tw in range(2)]
            ys = [poisoned(m if tw == full else 0, n, torch.float32) for tw in range(2)]
            backend.launch(w.packs[:2], xs, ys, name)
            check_close(ys[full], xs[full], *mats[full], k)
    with pytest.raises(PtiError, match="at least one activation row"):
        backend.launch(w.packs[:1], [rand_x(0, k, torch.bfloat16)], [poisoned(0, n, torch.float32)],
                       "pti_mm_bf16_f32_t1_r1_m1_u4")


def test_dependent_chain_with_programmatic_launch(backend):
    """Six dependent matmuls (each reads the previous one's output) in one CUDA graph, launched
    with programmatic dependent launch where the card has it: every kernel must wait for its
    input, so the replay equals the same chain run launch by launch without it."""
    n = k = 2048
    mats = [rand_q8(n, k) for _ in range(6)]
    ws = [backend.weight_from_q8([(q.cuda(), d.cuda())], k) for q, d in mats]
    for m in (1, 3, 16, 40):
        x0 = rand_x(m, k, torch.bfloat16) * 0.05
        bufs = [torch.empty(m, n, dtype=torch.bfloat16, device="cuda") for _ in ws]

        def chain():
            x = x0
            for w, b in zip(ws, bufs):
                x = backend.matmul(x, w, 0, out=b)
        chain()
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            chain()
        pdl, backend.pdl = backend.pdl, False
        try:
            ref, x = [], x0
            for w in ws:
                x = backend.matmul(x, w, 0)
                torch.cuda.synchronize()
                ref.append(x)
        finally:
            backend.pdl = pdl
        for _ in range(3):
            for b in bufs:
                b.fill_(float("nan"))
            g.replay()
            torch.cuda.synchronize()
            for b, r in zip(bufs, ref):
                assert torch.equal(b.view(torch.int16), r.view(torch.int16))


def test_every_matmul_kernel_has_the_pinned_carveout(backend):
    """Every kernel of the matmul module asks for the same shared-memory carveout (MM_CARVEOUT),
    so the SM keeps one configuration across the pass's matmuls whatever ran before them; the "_p2"
    variants (not in the policy) ask all of it, for their activation rows."""
    from cuda.bindings import driver
    from pti_cli.backends.cuda import MM_CARVEOUT
    attr = driver.CUfunction_attribute.CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT
    assert len(backend.funcs) > 10 and any("_p2" in name for name in backend.funcs)
    for name, f in backend.funcs.items():
        err, value = driver.cuFuncGetAttribute(attr, f)
        assert int(err) == 0 and value == (100 if "_p2" in name else MM_CARVEOUT), (name, err, value)


# The Hopper kernels (kernels/pti_kernel.hip, pti_wg_mm; sm_90a, unless PTI_WGMMA=0): 17-64 rows of a tall matrix
# (width class "x") from its ring-layout copy.  They must give the policy kernels' bits.

@pytest.fixture(scope="module")
def wg_backend():
    """A backend with the Hopper kernels (built for sm_90a)."""
    return backend_with_wgmma("1")


@pytest.fixture(scope="module")
def policy_backend():
    """A backend without them (sm_90: the policy kernels only), whatever PTI_WGMMA says."""
    return backend_with_wgmma("0")


@pytest.fixture(scope="module")
def wg_narrow_backend():
    """A backend with the Hopper kernels' cluster forms for the narrower matrices too (PTI_WG_NARROW=1), the rest
    form off."""
    return backend_with_wgmma("1", "1")


@pytest.fixture(scope="module")
def wg_fix_backend():
    """The same with the fixup form for 33-64 rows of the narrower matrices (PTI_WG_FIX=1)."""
    return backend_with_wgmma("1", "1", "1")


@pytest.fixture(scope="module")
def wg_rest_backend():
    """The cluster forms with one twin's 64-row launches of 4096-row matrices split by the rest form (PTI_WG_REST=1,
    the default since session 39: the units past the card's resident clusters in m8_d8, alongside them), its 17-32
    row launches too (PTI_WG_REST32=1, on any K: m4_c8 at two CTAs a SM, the rest in m4_d8), and two twins'
    launches of m8_c8 as one split launch a twin (PTI_WG_REST_TWINS=1), each split with two clusters fewer than the
    card holds (PTI_WG_SPLIT_SLACK=2).  The cluster and fixup backends here leave
    them all off (backend_with_wgmma), so each form is tested alone."""
    return backend_with_wgmma("1", "1", rest="1", rest32="1", rest_twins="1", split_slack="2")


@pytest.fixture(params=["cluster", "fixup", "rest"])
def narrow_backend(request, wg_narrow_backend, wg_fix_backend, wg_rest_backend):
    """The narrower matrices' Hopper forms: the clusters', the fixup form at 33-64 rows, and the clusters' with the
    rest form."""
    return {"cluster": wg_narrow_backend, "fixup": wg_fix_backend, "rest": wg_rest_backend}[request.param]


def hopper(backend) -> bool:
    """Whether this card runs the Hopper kernels, which the backend must load on sm_90."""
    on_sm90 = torch.cuda.get_device_capability(backend.device) == (9, 0)
    assert backend.wgmma == on_sm90
    return on_sm90


def tall(backend) -> int:
    """Rows of a matrix of width class "x" whose padded row groups make whole units (and a partial last 128)."""
    return 128 * (backend.sm_count + 1) - 24


def rings(backend, w):
    for p in w.packs:
        assert backend.with_ring(p).ring is not None
    return w


@pytest.fixture
def wg_calls(wg_backend, monkeypatch):
    """The Hopper launches made during a test (so that a test fails if the policy served instead)."""
    calls = []
    real = wg_backend.launch_wg
    monkeypatch.setattr(wg_backend, "launch_wg", lambda *a: calls.append(real(*a)) or calls[-1])
    return calls


@pytest.mark.parametrize("twins", [1, 2])
@pytest.mark.parametrize("k", [1024, 2048])
def test_hopper_kernels_give_the_policy_bits(policy_backend, wg_backend, wg_calls, twins, k):
    """Each output against a backend of the policy kernels only, bit for bit; also the plain matmul on
    activations given in the tile layout (Epilogue.ti alone, the form `pti bench --kernels` times as "given")."""
    if not hopper(wg_backend):
        return
    from pti_cli.backends.cuda import Epilogue
    backend = policy_backend
    assert not backend.wgmma
    n = tall(wg_backend)
    mats = [rand_q8(n, k) for _ in range(twins)]
    plain, ring = load(backend, mats, k), rings(wg_backend, load(wg_backend, mats, k))
    assert all(p.ring is None for p in plain.packs)
    ms = (9, 14, 16, 17, 23, 32, 33, 50, 64)   # from 9 rows: two twins (WG_TWIN_MIN_ROWS), one of a tall matrix (m2)
    for m in ms:
        for out_dtype in (torch.float32, torch.bfloat16):
            xs = [rand_x(m - 5 * t, k, torch.bfloat16) for t in range(twins)]   # twin B with fewer rows
            got, want = [], []
            for be, w, sink in ((wg_backend, ring, got), (backend, plain, want)):
                ys = [poisoned(x.shape[0], n, out_dtype) for x in xs]
                if twins == 1:
                    be.matmul(xs[0], w, 0, out=ys[0])
                else:
                    be.matmul_twins(xs[0], xs[1], w, outs=tuple(ys))
                sink.extend(ys)
            nr = wg_backend.wg_kernel(m, out_dtype, twins=twins)[1]
            given = [poisoned(x.shape[0], n, out_dtype) for x in xs]
            wg_backend.launch_wg(ring.packs, xs, given, False, Epilogue(0, ti=[tile_layout(x, nr) for x in xs]))
            for y, z, g, x, (q, d) in zip(got, want, given, xs, mats):
                for a in (y, g):
                    assert torch.equal(a.view(torch.int16 if out_dtype == torch.bfloat16 else torch.int32),
                                       z.view(torch.int16 if out_dtype == torch.bfloat16 else torch.int32)), (m, out_dtype)
                if out_dtype == torch.float32:
                    check_close(y, x, q, d, k)
    # one launch a call, both twins in it (and one for the tiles given)
    assert wg_calls == [wg_backend.wg_kernel(m, o, twins=twins)[0] for m in ms for o in (torch.float32, torch.bfloat16)
                        for _ in (0, 1)]


@pytest.mark.parametrize("spread", ["2", "1", "0"])
def test_hopper_m2_spread_keeps_the_policy_bits(policy_backend, wg_backend, wg_calls, monkeypatch, spread):
    """The m2 form (three CTAs a SM) held to two a SM where its grid runs in as many waves of two as of three
    (wg_launch_smem, PTI_WG_SPREAD=2, the default), where it fits one wave of two (1) and never (0): the policy
    kernels' bits either way, on tall matrices of sm_count + 1 units (one wave of two: spread under 1 and 2),
    2 x sm_count + 5 (never) and 3 x sm_count + 5 (two waves either way: spread under 2)."""
    if not hopper(wg_backend):
        return
    from pti_cli.backends.cuda import WG_SMEM_TWO
    # only the tall class's m2 (a cluster form held to two CTAs a SM fits fewer clusters at once)
    assert wg_backend.smem_two and all(n.endswith("_m2") for n in wg_backend.smem_two), wg_backend.smem_two
    assert set(wg_backend.ctas_a_sm) == set(wg_backend.smem_two) and min(wg_backend.ctas_a_sm.values()) == 3
    monkeypatch.setenv("PTI_WG_SPREAD", spread)
    k, sm = 1024, wg_backend.sm_count
    spreads = {"2": (sm + 1, 3 * sm + 5), "1": (sm + 1,), "0": ()}[spread]
    for units in (sm + 1, 2 * sm + 5, 3 * sm + 5):
        n = 128 * units
        mat = rand_q8(n, k)
        plain, ring = load(policy_backend, [mat], k), rings(wg_backend, load(wg_backend, [mat], k))
        name = wg_backend.wg_kernel(16, torch.float32)[0]
        assert name.endswith("_m2") and (wg_backend.wg_launch_smem(name, units) == WG_SMEM_TWO) == (units in spreads)
        for m in (9, 16):
            x = rand_x(m, k, torch.bfloat16)
            y, z = poisoned(m, n, torch.float32), poisoned(m, n, torch.float32)
            wg_backend.matmul(x, ring, 0, out=y)
            policy_backend.matmul(x, plain, 0, out=z)
            assert torch.equal(y.view(torch.int32), z.view(torch.int32)), (units, m)
            check_close(y, x, *mat, k)
    assert wg_calls == [name] * 6   # the Hopper kernels served every call


@pytest.mark.parametrize("twins", [1, 2])
@pytest.mark.parametrize("h16", [False, True])
def test_hopper_glu_and_inv_epilogues_give_the_policy_bits(policy_backend, wg_backend, wg_calls, twins, h16):
    """silu(gate) * up (bf16, or h16 for an h16 matrix after it) and each row scaled by its given inv (the
    RMSNorm's epilogue, Epilogue.inv_only), for a bf16 matrix and an h16 one (f16 inputs, bf16 outputs):
    bit for bit the policy kernels' outputs."""
    if not hopper(wg_backend):
        return
    from pti_cli.backends.cuda import Epilogue
    from pti_cli.backends.repack import H16_SHIFT
    n, k = tall(wg_backend) + 8, 1024   # a gate/up's rows: whole row groups
    pairs = [rand_q8(n, k) for _ in range(twins)]
    want_calls = []
    for glu in (False, True):
        plain = policy_backend.weight_from_q8([(q.cuda(), d.cuda()) for q, d in pairs], k, glu=glu, h16=h16)
        ring = wg_backend.weight_from_q8([(q.cuda(), d.cuda()) for q, d in pairs], k, glu=glu, h16=h16)
        assert all(p.ring is not None for p in ring.packs) and all(p.ring is None for p in plain.packs)
        cols = n // 2 if glu else n
        for m in (12, 17, 40, 64):   # (12: the tall class's m2 form, one twin or two)
            xs = [rand_x(m - 5 * t, k, torch.float16 if h16 else torch.bfloat16) for t in range(twins)]
            invs = [torch.rand(x.shape[0], generator=GEN).add(0.5).cuda() for x in xs]
            outs = [(torch.bfloat16, False), (torch.float16, True)] if glu else [(torch.float32, False), (torch.bfloat16, False)]
            for dt, h16_out in outs + [(None, False)]:
                got, want = [], []
                for be, w, sink in ((wg_backend, ring, got), (policy_backend, plain, want)):
                    if dt is None:   # no epilogue: the plain matmul (a gate/up: silu(gate) * up alone)
                        ys = [poisoned(x.shape[0], cols, torch.bfloat16 if glu else torch.float32) for x in xs]
                        if twins == 1:
                            be.matmul(xs[0], w, 0, out=ys[0])
                        else:
                            be.matmul_twins(xs[0], xs[1], w, outs=tuple(ys))
                    else:
                        ys = [poisoned(x.shape[0], cols, dt) for x in xs]
                        be.matmul_epi(list(range(twins)), xs, w, ys, Epilogue(-(-k // 16), 0.0, inv=invs, h16=h16_out))
                    sink.extend(ys)
                out_dt = torch.bfloat16 if dt is None and glu else torch.float32 if dt is None else dt
                want_calls.append(wg_backend.wg_kernel(m, out_dt, glu, "h16" if h16 else "bf16", twins=twins)[0])
                for y, z in zip(got, want):
                    assert not torch.isnan(y).any()
                    assert torch.equal(y.view(torch.int32 if y.dtype == torch.float32 else torch.int16),
                                       z.view(torch.int32 if z.dtype == torch.float32 else torch.int16)), (glu, m, dt)
                if dt == torch.float32:   # against float64: inv * (x W^T), an h16 matrix's scales times 2^H16_SHIFT
                    for y, x, iv, (q, dd) in zip(got, xs, invs, pairs):
                        ref = (x.double().cpu() @ dense64(q, dd, k).T) * iv.double().cpu()[:, None] * 2.0 ** (H16_SHIFT * h16)
                        err = (y.double().cpu() - ref).abs().max(dim=1).values
                        assert (err <= 1e-5 * ref.norm(dim=1)).all()
    assert wg_calls == want_calls   # one launch a call, both twins in it


@pytest.mark.parametrize("x_first", ["1", "0"])
@pytest.mark.parametrize("twins", [1, 2])
@pytest.mark.parametrize("h16", [False, True])
def test_hopper_residual_form_gives_the_policy_bits(policy_backend, narrow_backend, monkeypatch, twins, h16, x_first):
    """The Hopper kernels' residual form (Epilogue with uo, po, g: x += bf16(x W^T), u = bf16(x g), the partial
    sums of x^2; an h16 matrix: f16 inputs, u as h16) on a narrow matrix (clusters of 8), a wide one (of 4) and a
    tall one (one CTA a unit): the policy kernels' bits in x, u and the partial sums, the inv slots set pending,
    u also in the tile layout (Epilogue.to) where asked, and the inputs from tiles given (Epilogue.ti, the layout
    a gate/up writes) as from the pti_wg_tiles launch.  Both forms of the narrower matrices (narrow_backend), with
    the x values read ahead of the stores (PTI_WG_X_FIRST=1, the default) and each before its own (0)."""
    be = narrow_backend
    monkeypatch.setenv("PTI_WG_X_FIRST", x_first)
    if not hopper(be):
        return
    from pti_cli.backends.cuda import Epilogue
    calls = []
    real = be.launch_wg
    monkeypatch.setattr(be, "launch_wg", lambda p, x, y, glu=False, epi=None: calls.append(1) or real(p, x, y, glu, epi))
    k = 2048
    for n in (1024, 6144, 128 * (be.sm_count + 1)) + ((4096,) if be.wg_rest else ()):   # (the rest form: 32 units)
        pairs = [rand_q8(n, k) for _ in range(twins)]
        plain = policy_backend.weight_from_q8([(q.cuda(), d.cuda()) for q, d in pairs], k, h16=h16)
        ring = be.weight_from_q8([(q.cuda(), d.cuda()) for q, d in pairs], k, h16=h16)
        assert all(p.ring is not None for p in ring.packs)
        g = [torch.rand(n, generator=GEN).add(0.5).cuda() for _ in range(twins)]
        for m in (17, 36, 64):   # (36: two twins of 36 and 31 rows, both in the 64-row form, the tiles laid out so)
            rows = [m - 5 * t for t in range(twins)]
            nr = 32 if max(rows) <= 32 else 64
            xs = [rand_x(r, k, torch.float16 if h16 else torch.bfloat16) for r in rows]
            x0 = [torch.randn(r, n, generator=GEN).mul(3).cuda() for r in rows]
            tiled = n % 256 == 0
            out = {}
            for name, b, w in (("policy", policy_backend, plain), ("hopper", be, ring), ("given", be, ring)):
                x = [t.clone() for t in x0]
                u = [torch.full((r, n), float("nan"), dtype=torch.float16 if h16 else torch.bfloat16, device="cuda") for r in rows]
                p = [torch.full((r, n // 16), float("nan"), device="cuda") for r in rows]
                invo = [torch.full((r,), 1.5, device="cuda") for r in rows]
                to = [torch.full((n * nr,), float("nan"), dtype=u[0].dtype, device="cuda") for _ in rows] if tiled and b is be else []
                ti = [tile_layout(t, nr) for t in xs] if name == "given" else []
                before = len(calls)
                b.matmul_epi(list(range(twins)), xs, w, x, Epilogue(n // 16, 0.0, uo=u, po=p, g=g, invo=invo, h16=h16,
                                                                   to=to, tnr=nr if to else 0, ti=ti))
                assert len(calls) - before == (b is be), (name, n, m)   # one Hopper launch, both twins in it
                out[name] = (x, u, p, invo, to)
            for name in ("hopper", "given"):
                for t in range(twins):
                    for a, c in zip(out[name][:3], out["policy"][:3]):
                        assert torch.equal(a[t].view(torch.int32 if a[t].dtype == torch.float32 else torch.int16),
                                           c[t].view(torch.int32 if c[t].dtype == torch.float32 else torch.int16)), (name, n, m, t)
                    assert (out[name][3][t].view(torch.int32) == -1).all(), (name, n, m, t)
                    if tiled:
                        live = row_of_tiles(nr, n) < rows[t]
                        want = tile_layout(out["policy"][1][t].view(torch.int16), nr)
                        assert torch.equal(out[name][4][t].view(torch.int16)[live], want[live]), (name, n, m, t)


@pytest.mark.parametrize("twins", [1, 2])
def test_policy_residual_writes_16_row_tiles(policy_backend, twins):
    """The policy kernels' residual epilogue at 9-16 rows, given 16-row tiles (the tall class's m2 form reads
    them after it: Epilogue.to, tnr 16): u also in the tile layout, as tile_layout gives it from u."""
    from pti_cli.backends.cuda import Epilogue
    n, k = 1024, 2048
    pairs = [rand_q8(n, k) for _ in range(twins)]
    w = policy_backend.weight_from_q8([(q.cuda(), d.cuda()) for q, d in pairs], k)
    g = [torch.rand(n, generator=GEN).add(0.5).cuda() for _ in range(twins)]
    for m in (9, 16):
        rows = [m - 3 * t for t in range(twins)]
        xs = [rand_x(r, k, torch.bfloat16) for r in rows]
        x = [torch.randn(r, n, generator=GEN).mul(3).cuda() for r in rows]
        u = [torch.full((r, n), float("nan"), dtype=torch.bfloat16, device="cuda") for r in rows]
        p = [torch.full((r, n // 16), float("nan"), device="cuda") for r in rows]
        to = [torch.full((n * 16,), float("nan"), dtype=torch.bfloat16, device="cuda") for _ in rows]
        policy_backend.matmul_epi(list(range(twins)), xs, w, x, Epilogue(n // 16, 0.0, uo=u, po=p, g=g, to=to, tnr=16))
        for t, r in enumerate(rows):
            assert not torch.isnan(u[t].float()).any() and not torch.isnan(p[t]).any()
            live = row_of_tiles(16, n) < r
            assert torch.equal(to[t].view(torch.int16)[live], tile_layout(u[t].view(torch.int16), 16)[live]), (m, t)


@pytest.mark.parametrize("twins", [1, 2])
def test_hopper_glu_writes_the_down_tiles(wg_backend, twins):
    """A gate/up the Hopper kernels take, given the next matrix's tiles (Epilogue.to): silu(gate) * up in the
    tile layout too, as tile_layout gives it from the outputs, bf16 or h16."""
    if not hopper(wg_backend):
        return
    from pti_cli.backends.cuda import Epilogue
    n, k = 512 * -(-tall(wg_backend) // 512), 1024   # 2F rows, F a multiple of 256
    pairs = [rand_q8(n, k) for _ in range(twins)]
    w = wg_backend.weight_from_q8([(q.cuda(), d.cuda()) for q, d in pairs], k, glu=True)
    for h16_out in (False, True):
        for m in (17, 36, 64):   # (36: two twins of 36 and 31 rows, both in the 64-row form, the tiles laid out so)
            rows = [m - 5 * t for t in range(twins)]
            nr = 32 if max(rows) <= 32 else 64
            xs = [rand_x(r, k, torch.bfloat16) for r in rows]
            invs = [torch.rand(r, generator=GEN).add(0.5).cuda() for r in rows]
            ys = [poisoned(r, n // 2, torch.float16 if h16_out else torch.bfloat16) for r in rows]
            to = [torch.full((n // 2 * nr,), float("nan"), dtype=ys[0].dtype, device="cuda") for _ in rows]
            wg_backend.matmul_epi(list(range(twins)), xs, w, ys, Epilogue(k // 16, 0.0, inv=invs, h16=h16_out, to=to, tnr=nr))
            for y, t, r in zip(ys, to, rows):
                assert not torch.isnan(y.float()).any()
                live = row_of_tiles(nr, n // 2) < r
                assert torch.equal(t.view(torch.int16)[live], tile_layout(y.view(torch.int16), nr)[live]), (h16_out, m)


def test_residual_matrices_get_ring_copies(wg_narrow_backend):
    """The attention's output and down matrices take the Hopper kernels' residual form: a model's load makes
    their ring copies as for QKV and gate/up, where the class and K are served (PTI_WG_NARROW=1: all)."""
    be = wg_narrow_backend
    if not hopper(be):
        return
    from pti_cli.gpu_model import GpuShape
    from pti_cli.synthetic import build_weights
    shape = GpuShape(n_layers=1, dim=1024, ffn=2048, n_heads=8, n_kv_heads=2, vocab=1024)
    layer = build_weights(shape, torch.device("cuda"), "ab", 5, be).layers[0]
    for lin in (layer.wqkv, layer.wo, layer.wgu, layer.wdown):
        assert [p.ring is not None for p in lin.w.packs] == [True, True]


@pytest.mark.parametrize("twins,twin_forms", [(1, "1"), (2, "1"), (2, "2"), (2, "0"), (2, "3")])
@pytest.mark.parametrize("n,k", [(4096, 2048), (6144, 1024), (4096, 4096)])
def test_hopper_cluster_forms_give_the_policy_bits(policy_backend, narrow_backend, monkeypatch, n, k, twins, twin_forms):
    """The cluster forms (PTI_WG_NARROW=1: a unit's slices over a cluster of CTAs, summed in slice order over
    distributed shared memory) on matrices of the narrower width classes: bit for bit the policy kernels'
    outputs, plain, silu(gate) * up, and scaled by each row's inv; one launch of a cluster form a call.  With
    PTI_WG_FIX=1, 33-64 rows of the narrow class take the fixup form (the 8 slices through global memory, the
    unit's last CTA adding them), launch after launch on the same counts (each launch must leave them zero).
    Two twins at 9-16 rows a twin take the 16-row form in clusters of 4 (m2_c4, session 34): the narrow class's
    (PTI_WG_TWIN_FORMS=1, the default), the wide class's too (2), or neither (0); or the narrow class's clusters
    of 2 at one CTA a SM (m2_c2, 3)."""
    be = narrow_backend
    monkeypatch.setenv("PTI_WG_TWIN_FORMS", twin_forms)
    if not hopper(be):
        return
    from pti_cli.backends.cuda import Epilogue, width_class
    assert be.wg_classes == ("x", "w", "n") and width_class(n / 16 / be.sm_count) in ("n", "w")
    calls = []
    real = be.launch_wg
    monkeypatch.setattr(be, "launch_wg", lambda *a: calls.append(real(*a)) or calls[-1])
    pairs = [rand_q8(n, k) for _ in range(twins)]
    launches = 0
    for glu in (False, True):
        plain = policy_backend.weight_from_q8([(q.cuda(), d.cuda()) for q, d in pairs], k, glu=glu)
        ring = be.weight_from_q8([(q.cuda(), d.cuda()) for q, d in pairs], k, glu=glu)
        assert all(p.ring is not None for p in ring.packs) and all(p.ring is None for p in plain.packs)
        cols, dt = (n // 2, torch.bfloat16) if glu else (n, torch.float32)
        for m in (17, 32, 40, 64) + ((9, 16) if twins == 2 else ()):   # two twins: from 9 rows (WG_TWIN_MIN_ROWS)
            xs = [rand_x(m - 3 * t, k, torch.bfloat16) for t in range(twins)]
            invs = [torch.rand(x.shape[0], generator=GEN).add(0.5).cuda() for x in xs]
            for scaled in (False, True):
                got, want = [], []
                for b, w, sink in ((be, ring, got), (policy_backend, plain, want)):
                    ys = [poisoned(x.shape[0], cols, dt) for x in xs]
                    if scaled:
                        b.matmul_epi(list(range(twins)), xs, w, ys, Epilogue(-(-k // 16), 0.0, inv=invs))
                    elif twins == 1:
                        b.matmul(xs[0], w, 0, out=ys[0])
                    else:
                        b.matmul_twins(xs[0], xs[1], w, outs=tuple(ys))
                    sink.extend(ys)
                launches += 1
                for y, z in zip(got, want):
                    assert not torch.isnan(y).any()
                    assert torch.equal(y.view(torch.int32 if dt == torch.float32 else torch.int16),
                                       z.view(torch.int32 if dt == torch.float32 else torch.int16)), (glu, m, scaled)
                if not glu and not scaled:
                    for y, x, (q, d) in zip(got, xs, pairs):
                        check_close(y, x, q, d, k)
    fix = bool(be.wg_table["n"][1][6]) and width_class(n / 16 / be.sm_count) == "n"   # the narrow class's 64-row entry
    assert len(calls) == launches and all(c.endswith("_g8") if fix and "_m8_" in c else "_c" in c for c in calls), calls
    from pti_cli.backends.cuda import WG_TWIN_SETTINGS
    own = WG_TWIN_SETTINGS[twin_forms].get(width_class(n / 16 / be.sm_count)) if twins == 2 else None
    assert {c.rsplit("_", 2)[-2] + "_" + c.rsplit("_", 1)[-1] for c in calls if "_m2_c" in c} == ({own[1]} if own else set()), calls
    assert any(c.endswith("_g8") for c in calls) == bool(fix)
    if be.wg_rest and n == 4096:   # the rest form split these launches (more units than resident clusters), a twin's
        from pti_cli.backends.cuda import wg_rest_form
        assert set(be.wg_rest) == {"m8_c8", "m4_c8"} and be.wg_rest_twins
        split = [c for c in calls if wg_rest_form(c)]
        assert {wg_rest_form(c) for c in split} == {"m8_c8", "m4_c8"}, calls
        assert be.wg_split_slack == 2
        assert all(be.wg_rest_units(c, n // 128, 1, 0, k) == n // 128 - be.wg_split_resident[c] + 2 > 0 for c in split)
        assert all(be.wg_twins_apart(c, n // 128, twins, 0, k) == (twins == 2 and c.endswith("_m8_c8")) for c in split)


@pytest.mark.parametrize("twins", [1, 2])
@pytest.mark.parametrize("m", [64, 36, 32])
def test_hopper_rest_form_in_a_graph_launch_after_launch(policy_backend, wg_rest_backend, m, twins):
    """The rest form (PTI_WG_REST=1, at 17-32 rows PTI_WG_REST32=1; two twins at 33-64 rows one split launch a
    twin, PTI_WG_REST_TWINS=1, twin B 5 rows fewer: at 36 and 31 rows both in the 64-row form) captured in a CUDA graph
    of three matmuls in a row, replayed three times: each output bit for bit the policy's on fresh inputs (the
    counts set back by every launch, each rest launch reading its inputs unwaited and waiting for its clusters'
    launch), also with a gate/up's silu(gate) * up."""
    be = wg_rest_backend
    if not hopper(be):
        return
    n, k = 4096, 2048
    for glu in (False, True):
        pairs = [rand_q8(n, k) for _ in range(twins)]
        plain = policy_backend.weight_from_q8([(q.cuda(), d.cuda()) for q, d in pairs], k, glu=glu)
        ring = be.weight_from_q8([(q.cuda(), d.cuda()) for q, d in pairs], k, glu=glu)
        cols, dt = (n // 2, torch.bfloat16) if glu else (n, torch.float32)
        name = be.wg_kernel(m, dt, glu, rows=n, twins=twins)[0]
        assert be.wg_rest_units(name, n // 128, 1, 0, k) > 0, name
        assert be.wg_twins_apart(name, n // 128, twins, 0, k) == (twins == 2 and m > 32), name   # (m8_c8 only)

        def run(b, w, x, y):   # one matmul: one twin, or both (the same rows through each)
            if twins == 1:
                b.matmul(x[0], w, 0, out=y[0])
            else:
                b.matmul_twins(x[0], x[1], w, outs=tuple(y))
        rows = [m - 5 * t for t in range(twins)]
        xs = [[rand_x(r, k, torch.bfloat16) for r in rows] for _ in range(3)]
        ys = [[poisoned(r, cols, dt) for r in rows] for _ in range(3)]
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for x, y in zip(xs, ys):
                run(be, ring, x, y)
        torch.cuda.current_stream().wait_stream(s)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            for x, y in zip(xs, ys):
                run(be, ring, x, y)
        for _ in range(3):
            for x in xs:
                for t in x:
                    t.copy_(rand_x(t.shape[0], k, torch.bfloat16))
            for y in ys:
                for t in y:
                    t.fill_(float("nan"))
            graph.replay()
            for x, y in zip(xs, ys):
                want = [poisoned(r, cols, dt) for r in rows]
                run(policy_backend, plain, x, want)
                for got, ref in zip(y, want):
                    assert not torch.isnan(got.float()).any()
                    assert torch.equal(got.view(torch.int32 if dt == torch.float32 else torch.int16),
                                       ref.view(torch.int32 if dt == torch.float32 else torch.int16)), glu


@pytest.mark.parametrize("short_two", ["16", "32"])
def test_hopper_two_twins_of_a_short_narrow_matrix(policy_backend, monkeypatch, short_two):
    """PTI_WG_NARROW=auto: two twins of a narrow matrix below WG_MIN_K (an 8B model's O, 4096x4096) get their
    ring copies and take the two-twin form (m2_c4) at 9-16 rows a twin, bit for bit the policy's, plain and
    scaled by each row's inv; at 17-32 rows a twin the class's own forms (PTI_WG_SHORT_TWO=32, the default; the
    policy's bits too) or with PTI_WG_SHORT_TWO=16 the policy (no launch).  One twin of it (one model) takes
    the narrow class's own forms at 17-32 rows (wg_short_one), the policy's bits, and the policy at 16 and 33;
    with PTI_WG_SHORT_ONE=0 it gets no ring copy."""
    wg_backend = backend_with_wgmma("1", "auto")
    if not hopper(wg_backend):
        return
    from pti_cli.backends.cuda import WG_TWIN_FORM, Epilogue, width_class
    monkeypatch.delenv("PTI_WG_TWIN_SHORT", raising=False)
    monkeypatch.delenv("PTI_WG_TWIN_FORMS", raising=False)
    monkeypatch.delenv("PTI_WG_SHORT_ONE", raising=False)
    monkeypatch.setenv("PTI_WG_SHORT_TWO", short_two)
    wg_calls = []
    real = wg_backend.launch_wg
    monkeypatch.setattr(wg_backend, "launch_wg", lambda *a: wg_calls.append(real(*a)) or wg_calls[-1])
    n, k = 4096, 4096
    assert width_class(n / 16 / wg_backend.sm_count) == "n" and wg_backend.short_k(repack_like(n, k))
    pairs = [rand_q8(n, k) for _ in range(2)]
    ring = wg_backend.weight_from_q8([(q.cuda(), d.cuda()) for q, d in pairs], k)
    plain = policy_backend.weight_from_q8([(q.cuda(), d.cuda()) for q, d in pairs], k)
    assert all(p.ring is not None for p in ring.packs)
    one = wg_backend.weight_from_q8([(pairs[0][0].cuda(), pairs[0][1].cuda())], k)
    one_plain = policy_backend.weight_from_q8([(pairs[0][0].cuda(), pairs[0][1].cuda())], k)
    assert one.packs[0].ring is not None
    for m, want_calls in ((16, 0), (17, 1), (32, 1), (33, 0)):
        wg_calls.clear()
        x = rand_x(m, k, torch.bfloat16)
        y, z = poisoned(m, n, torch.float32), poisoned(m, n, torch.float32)
        wg_backend.matmul(x, one, 0, out=y)
        policy_backend.matmul(x, one_plain, 0, out=z)
        assert len(wg_calls) == want_calls and not any(c.endswith("_" + WG_TWIN_FORM[1]) for c in wg_calls), wg_calls
        assert not torch.isnan(y).any() and torch.equal(y.view(torch.int32), z.view(torch.int32)), m
        check_close(y, x, *pairs[0], k)
    monkeypatch.setenv("PTI_WG_SHORT_ONE", "0")
    assert wg_backend.weight_from_q8([(pairs[0][0].cuda(), pairs[0][1].cuda())], k).packs[0].ring is None
    monkeypatch.delenv("PTI_WG_SHORT_ONE")
    for m, want_calls in ((9, 1), (16, 1), (17, int(short_two) // 32), (32, int(short_two) // 32), (33, 0)):
        xs = [rand_x(m, k, torch.bfloat16), rand_x(m - 2, k, torch.bfloat16)]
        invs = [torch.rand(x.shape[0], generator=GEN).add(0.5).cuda() for x in xs]
        for scaled in (False, True):
            wg_calls.clear()
            got, want = [], []
            for b, w, sink in ((wg_backend, ring, got), (policy_backend, plain, want)):
                ys = [poisoned(x.shape[0], n, torch.float32) for x in xs]
                if scaled:
                    b.matmul_epi([0, 1], xs, w, ys, Epilogue(-(-k // 16), 0.0, inv=invs))
                else:
                    b.matmul_twins(xs[0], xs[1], w, outs=tuple(ys))
                sink.extend(ys)
            own_form = [c.endswith("_" + WG_TWIN_FORM[1]) for c in wg_calls]
            assert len(wg_calls) == want_calls and all(f == (m <= 16) for f in own_form), wg_calls
            for y, z in zip(got, want):
                assert not torch.isnan(y).any() and torch.equal(y.view(torch.int32), z.view(torch.int32)), (m, scaled)
            if not scaled:
                for y, x, (q, d) in zip(got, xs, pairs):
                    check_close(y, x, q, d, k)
    wg_calls.clear()
    y = poisoned(16, n, torch.float32)
    wg_backend.matmul(rand_x(16, k, torch.bfloat16), ring, 0, out=y)   # one twin's rows of the two-twin matrix
    assert wg_calls == [] and not torch.isnan(y).any()


def repack_like(n: int, k: int):
    """A Packed of that shape (zeros), for the backend's shape rules."""
    from pti_cli.backends.repack import Packed
    return Packed(torch.zeros(n // 16, k // 32, 32, 16, dtype=torch.int8), torch.zeros(n // 16, k // 32, 8, dtype=torch.int32),
                  n, k)


def test_hopper_kernels_integer_cases_exact(wg_backend, wg_calls):
    if not hopper(wg_backend):
        return
    n, k, m = tall(wg_backend), 1024, 40
    mats = [rand_q8(n, k, small=True), rand_q8(n, k, small=True)]
    w = rings(wg_backend, load(wg_backend, mats, k))
    xa, xb = rand_x(m, k, torch.bfloat16, small=True), rand_x(m - 19, k, torch.bfloat16, small=True)
    ya, yb = wg_backend.matmul_twins(xa, xb, w, outs=(poisoned(m, n, torch.float32), poisoned(m - 19, n, torch.float32)))
    for y, x, (q, d) in [(ya, xa, mats[0]), (yb, xb, mats[1])]:
        assert torch.equal(y.double().cpu(), x.double().cpu() @ dense64(q, d, k).T)
    assert len(wg_calls) == 1


def test_hopper_kernels_batch_invariance_and_graph(wg_backend, wg_calls):
    """A row's bits alone (one row: the policy kernels) equal its bits at any place among 17-64 rows (the
    Hopper kernels), eagerly and in a replayed CUDA graph."""
    if not hopper(wg_backend):
        return
    n, k = tall(wg_backend), 2048
    q, d = rand_q8(n, k)
    w = rings(wg_backend, wg_backend.weight_from_q8([(q.cuda(), d.cuda())], k))
    row = rand_x(1, k, torch.bfloat16)
    alone = wg_backend.matmul(row, w, 0, out=poisoned(1, n, torch.float32))
    for m in (9, 16, 17, 31, 32, 48, 64):
        for p in sorted({0, m // 2, m - 1}):
            x = rand_x(m, k, torch.bfloat16)
            x[p] = row[0]
            y = wg_backend.matmul(x, w, 0, out=poisoned(m, n, torch.float32))
            assert torch.equal(y[p].view(torch.int32), alone[0].view(torch.int32)), (m, p)
    x = rand_x(40, k, torch.bfloat16)
    wg_backend.matmul(x, w, 0)   # warm-up outside capture
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        y = wg_backend.matmul(x, w, 0, out_dtype=torch.float32)
    for _ in range(2):
        x.copy_(rand_x(40, k, torch.bfloat16))
        y.fill_(float("nan"))
        g.replay()
        assert torch.equal(y, wg_backend.matmul(x, w, 0, out_dtype=torch.float32))
        check_close(y, x, q, d, k)
    placements = sum(len({0, m // 2, m - 1}) for m in (9, 16, 17, 31, 32, 48, 64))
    assert len(wg_calls) == placements + 1 + 1 + 2   # eager placements, warm-up, capture, the replays' checks


def test_kernel_table_h16_times_the_models_form(wg_backend, monkeypatch):
    """`pti bench --kernels --kernel-act h16` (bench_shape's h16) launches what a bf16 model's matrices run: h16
    weights on float16 inputs writing bf16, through the f16 policy kernel at one row and the Hopper kernels at 32
    rows, plain and on given tiles (the tiles float16, as the launch before writes them)."""
    if not hopper(wg_backend):
        return
    from pti_cli.bench_kernels import bench_shape
    seen = []
    real_wg, real = wg_backend.launch_wg, wg_backend.launch

    def spy_wg(packs, xs, ys, glu=False, epi=None):
        seen.append(("wg", packs[0].ring.code, xs[0].dtype, ys[0].dtype, None if epi is None else epi.ti[0].dtype))
        return real_wg(packs, xs, ys, glu, epi)

    def spy(packs, xs, ys, name, epi=None):
        seen.append((name.split("_")[2] + "_" + name.split("_")[3], packs[0].code, xs[0].dtype, ys[0].dtype, None))
        return real(packs, xs, ys, name, epi)

    monkeypatch.setattr(wg_backend, "launch_wg", spy_wg)
    monkeypatch.setattr(wg_backend, "launch", spy)
    rows = bench_shape(wg_backend, "q8", tall(wg_backend), 4096, (1, 32), 1e12, h16=True)
    assert [(r.m, r.kernel.startswith("wg_"), r.kernel.endswith(" given")) for r in rows] == \
        [(1, False, False), (32, True, False), (32, True, True)]
    assert all(r.us > 0 and r.vs_m1 > 0 for r in rows)
    f16, bf16 = torch.float16, torch.bfloat16
    assert set(seen) == {("f16_out", "h16", f16, bf16, None), ("wg", "h16", f16, bf16, None), ("wg", "h16", f16, bf16, f16)}
