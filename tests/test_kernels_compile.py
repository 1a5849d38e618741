"""CPU checks of the kernels' toolchain: NVRTC compiles the source (no GPU
needed) with no local memory, the binary cache works, and the load-time
repack is lossless and lays bytes out as docs/ssq-format.md says."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from pti_cli.backends.repack import join_ssq16, repack_q8, repack_ssq16, split_ssq16, unpack_q8


def test_nvrtc_compiles_and_caches(tmp_path, monkeypatch):
    from pti_cli.backends.compile import cached_binary

    monkeypatch.setenv("PTI_CACHE_DIR", str(tmp_path))
    first = cached_binary("cuda", "sm_90")
    assert not first.cached and first.binary[:4] == b"\x7fELF"      # a CUBIN, not PTX
    res = first.resources
    from pti_cli.backends.cuda import all_variants
    variants = all_variants()
    from pti_cli.backends.cuda import INV_VARIANTS
    for tag in ("bf16_f32", "bf16_out", "f16_f32", "f16_out"):   # every kernel the host may launch
        assert all(f"pti_mm_{tag}_{v}" in res for v in variants)
        assert all(f"pti_mm_{tag}_{v}_i1" in res for v in INV_VARIANTS)
        assert f"pti_mmg_{tag}_t1" in res and f"pti_mmg_{tag}_t2" in res
    assert "pti_stream_read" in res
    from pti_cli.backends.cuda import MM_TAGS
    assert len(MM_TAGS) == 6   # every form the loader asks for (CudaBackend._load_module)
    assert all(f"pti_mm_{tag}_{v}_i1" in res for v in INV_VARIANTS for tag in MM_TAGS)
    for name, r in res.items():
        assert r["stack"] == 0 and r["spill_stores"] == 0 and r["spill_loads"] == 0, name
    again = cached_binary("cuda", "sm_90")
    assert again.cached and again.binary == first.binary
    assert len(list((tmp_path / "kernels").iterdir())) == 1
    from pti_cli.backends.compile import cache_path   # what scripts/device_cache.sh saves
    assert cache_path("cuda", "sm_90").read_bytes() == first.binary
    assert not cache_path("cuda", "sm_80").exists() and not cache_path("cuda", "sm_90", "pti_ops.hip").exists()


def test_nvrtc_reports_compile_errors():
    from pti_cli.backends.compile import compile_nvrtc
    from pti_cli.errors import PtiError

    with pytest.raises(PtiError, match="could not compile"):
        compile_nvrtc('extern "C" __global__ void k() { undefined_thing(); }', "sm_80")


def _rand_q8(rng, n, nb):
    q = torch.from_numpy(rng.integers(-127, 128, (n, nb * 32), dtype=np.int8))   # Q8_0's range
    d = torch.from_numpy(rng.standard_normal((n, nb)).astype(np.float16))
    return q, d


@pytest.mark.parametrize("code", ["bf16", "f16", "h16"])
@pytest.mark.parametrize("n,k", [(1, 32), (37, 100), (64, 4096), (33, 8)])
def test_repack_layout_is_the_documented_one(n, k, code):
    rng = np.random.default_rng(n * 1000 + k)
    nb = -(-k // 32)
    q, d = _rand_q8(rng, n, nb)
    p = repack_q8(q, d, k, code)
    G = p.q.shape[0]
    assert G * 16 % 32 == 0 and G * 16 >= n and p.q.shape == (G, nb, 32, 16) and p.s.shape == (G, nb, 8)
    # independent index arithmetic: group r, block b, lane 4g+t, byte 8h+kk
    r, b, lane, byte = np.meshgrid(np.arange(G), np.arange(nb), np.arange(32), np.arange(16), indexing="ij")
    rows = 16 * r + lane // 4 + 8 * (byte // 8)
    cols = 32 * b + 8 * (lane % 4) + byte % 8
    qpad = np.zeros((G * 16, nb * 32), np.int8)
    qpad[:n] = q.numpy()
    if code == "bf16":   # sign-magnitude bytes
        want = np.where(qpad < 0, 0x80 | -qpad.astype(np.int16), qpad).astype(np.uint8)
    else:                # offset binary: w + 128
        want = (qpad.astype(np.int16) + 128).astype(np.uint8)
    assert np.array_equal(p.q.numpy().view(np.uint8), want[rows, cols])
    dpad = np.zeros((G * 16, nb), np.float16)
    dpad[:n] = d.numpy() * (16 if code == "h16" else 1)   # h16: the scales carry 2^H16_SHIFT
    words = p.s.numpy().view(np.uint32)
    r, b, g = np.meshgrid(np.arange(G), np.arange(nb), np.arange(8), indexing="ij")
    lo = (words & 0xFFFF).astype(np.uint16).view(np.float16)
    hi = (words >> 16).astype(np.uint16).view(np.float16)
    assert np.array_equal(lo.view(np.uint16), dpad[16 * r + g, b].view(np.uint16))
    assert np.array_equal(hi.view(np.uint16), dpad[16 * r + g + 8, b].view(np.uint16))
    q2, d2 = unpack_q8(p)
    assert torch.equal(q2, q) and torch.equal(d2.view(torch.int16), d.view(torch.int16))


@pytest.mark.parametrize("n,k", [(128, 256), (1900, 1024), (1000, 2048)])
def test_ring_pack_layout_is_the_documented_one(n, k):
    """ring_pack (the Hopper kernels' copy): unit u, position j = s nb/8 + t, row group r of the unit
    holds the policy layout's block (8 u + r, s + 8 t), weights and scales, byte for byte."""
    from pti_cli.backends.repack import ring_pack
    rng = np.random.default_rng(n + k)
    nb = k // 32
    p = repack_q8(*_rand_q8(rng, n, nb), k)
    ring = ring_pack(p)
    G = p.q.shape[0]
    assert G % 8 == 0 and ring.q.shape == p.q.shape and ring.s.shape == p.s.shape
    assert (ring.rows, ring.cols, ring.code, ring.ring) == (p.rows, p.cols, p.code, None)
    q = ring.q.reshape(G // 8, nb, 8, 512).numpy()
    s = ring.s.reshape(G // 8, nb, 8, 8).numpy()
    for u in range(G // 8):
        for j in range(nb):
            block = j % (nb // 8) * 8 + j // (nb // 8)   # slice j // (nb / 8), its (j mod nb / 8)-th block
            for r in range(8):
                assert np.array_equal(q[u, j, r], p.q[8 * u + r, block].reshape(512).numpy())
                assert np.array_equal(s[u, j, r], p.s[8 * u + r, block].numpy())


def test_ring_pack_refuses_shapes_it_cannot_lay_out():
    from pti_cli.backends.repack import ring_pack
    from pti_cli.errors import PtiError
    rng = np.random.default_rng(7)
    for n, k in ((96, 256), (128, 200)):   # 6 row groups; 7 blocks
        p = repack_q8(*_rand_q8(rng, n, -(-k // 32)), k)
        with pytest.raises(PtiError, match="ring layout"):
            ring_pack(p)


def test_split_ssq16_reads_the_block_as_specified():
    """One hand-built 68-byte block: scales A, B, then (B, A) byte pairs."""
    qa = np.arange(-16, 16, dtype=np.int8)
    qb = np.arange(100, 68, -1, dtype=np.int64).astype(np.int8)
    da, db = np.float16(0.5), np.float16(-3.0)
    block = da.tobytes() + db.tobytes() + b"".join(bytes([int(b) & 0xFF, int(a) & 0xFF]) for a, b in zip(qa, qb))
    raw = torch.frombuffer(bytearray(block), dtype=torch.uint8).reshape(1, 68)
    a, sa, b, sb = split_ssq16(raw)
    assert np.array_equal(a.numpy()[0], qa) and np.array_equal(b.numpy()[0], qb)
    assert sa.item() == 0.5 and sb.item() == -3.0
    assert torch.equal(join_ssq16(a, sa, b, sb), raw)


def test_repack_round_trips_ssq_files(tmp_path):
    """Both twins of a packed SSQ16 file, and a Q8 (identical) file, bit for bit vs SSQFile.q8."""
    import sys
    from pathlib import Path
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from ssq_helpers import tiny_llama
    from pti_cli.pack import pack
    from pti_cli.ssq.read import SSQFile

    a, b = tmp_path / "a.gguf", tmp_path / "b.gguf"
    tiny_llama(a, seed=3)
    tiny_llama(b, seed=4)
    pack(a, b, tmp_path / "ab.ssq")
    pack(a, None, tmp_path / "a.ssq")
    twin, one = SSQFile(tmp_path / "ab.ssq"), SSQFile(tmp_path / "a.ssq")
    assert twin.mode == 16 and one.identical
    mats = [t for t in twin.tensor_names if twin.is_matrix(t)]
    assert len(mats) >= 5
    for name in mats:
        k = twin.logical_shape(name)[1]
        raw = torch.from_numpy(np.array(twin.raw(name)))
        packs = repack_ssq16(raw, k, "ab")
        for tw, p in enumerate(packs):
            q, d = unpack_q8(p)
            rq, rd = twin.q8(name, tw)
            assert np.array_equal(q.numpy(), rq) and np.array_equal(d.numpy().view(np.uint16), rd.view(np.uint16))
        (pb,) = repack_ssq16(raw, k, "b")
        assert torch.equal(pb.q, packs[1].q) and torch.equal(pb.s, packs[1].s)
        rq, rd = one.q8(name, 0)
        q, d = unpack_q8(repack_q8(torch.from_numpy(np.array(rq)), torch.from_numpy(np.array(rd)), k))
        assert np.array_equal(q.numpy(), rq) and np.array_equal(d.numpy().view(np.uint16), rd.view(np.uint16))


def test_h16_shift_is_one_constant_everywhere():
    """The h16 scale 2^-H16_SHIFT: the repack's scales, pti_kernel.hip's and pti_ops.hip's
    conversions and gpu_model.to_h16 must agree, or the h16 model's sums are off by a power of two."""
    import re
    from pathlib import Path
    from pti_cli.backends.repack import H16_SHIFT
    root = Path(__file__).resolve().parents[1] / "kernels"
    assert re.search(r"#define PTI_H16_SHIFT (\d+)", (root / "pti_kernel.hip").read_text()).group(1) == str(H16_SHIFT)
    assert re.search(r"#define H16_SHIFT (\d+)", (root / "pti_ops.hip").read_text()).group(1) == str(H16_SHIFT)


def test_both_sources_place_tile_elements_as_the_tile_layout():
    """The Hopper matmul's activation tiles are written by pti_kernel.hip (pti_wg_tile_at: the residual and
    gate/up epilogues) and by pti_ops.hip (wg_tile_at: the attention's AttnOut); both index functions,
    evaluated here as written, must place every element where the torch tile layout does (tests/gpu/
    wg_helpers.tile_layout, pti_wg_tiles' layout), or a matmul reads another element's value."""
    import importlib.util
    import re
    from pathlib import Path
    root = Path(__file__).resolve().parent
    spec = importlib.util.spec_from_file_location("wg_helpers", root / "gpu" / "wg_helpers.py")
    helpers = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(helpers)
    for src, fn in (("pti_kernel.hip", "pti_wg_tile_at"), ("pti_ops.hip", "wg_tile_at")):
        text = (root.parent / "kernels" / src).read_text()
        body = re.search(fn + r"\(int m, int n, int nb, int nr\) \{(.*?)\n\}", text, re.S).group(1)
        lets, ret = re.sub(r"\((pti_u64|long)\)", "", body).split("return")
        lines = [v.strip() for v in lets.replace("const int", "").replace(",", ";").split(";") if v.strip()]
        env: dict = {}
        exec("def at(m, n, nb, nr):\n" + "".join(f"    {v}\n" for v in lines) + f"    return {' '.join(ret.split()).strip(';')}\n", env)
        for k, nr in ((256, 32), (512, 64), (1024, 16)):
            rows = nr - 3   # rows past them: the tile layout's zeros, which no writer writes
            want = helpers.tile_layout(torch.arange(1, rows * k + 1, dtype=torch.int64).view(rows, k), nr)
            got = torch.zeros_like(want)   # element (m, n) holds m k + n + 1
            at = [env["at"](m, n, k // 32, nr) for m in range(rows) for n in range(k)]
            got[torch.tensor(at)] = torch.arange(1, rows * k + 1)
            assert torch.equal(got, want), (src, k, nr)


def test_argmax_launch_constants_are_the_kernels():
    """gpu_ops sizes the argmax's grid and its state buffer from ARGMAX_THREADS and ARGMAX_CHUNK:
    they must be pti_ops.hip's, or the kernel writes past the state it is given."""
    import re
    from pathlib import Path
    from pti_cli.gpu_ops import ARGMAX_CHUNK, ARGMAX_THREADS
    src = (Path(__file__).resolve().parents[1] / "kernels" / "pti_ops.hip").read_text()
    threads = int(re.search(r"#define ARGMAX_THREADS (\d+)", src).group(1))
    per_thread = int(re.search(r"#define ARGMAX_PER_THREAD (\d+)", src).group(1))
    assert "#define ARGMAX_CHUNK (ARGMAX_THREADS * ARGMAX_PER_THREAD)" in src
    assert (ARGMAX_THREADS, ARGMAX_CHUNK) == (threads, threads * per_thread)


def test_to_h16_holds_bf16_values_exactly_in_its_range():
    """to_h16: bf16(t) * 2^-H16_SHIFT as float16, exact for 2^-13 <= |v| < 2^20; below, the nearest
    multiple of 2^-20 (float16's subnormals); norm_parts in float16 gives it."""
    from pti_cli.backends.repack import H16_SHIFT
    from pti_cli.gpu_model import norm_parts, to_h16
    g = torch.Generator().manual_seed(int(np.random.default_rng().integers(1 << 30)))
    mag = torch.exp2(torch.empty(20000).uniform_(-13, 19.99, generator=g))
    t = (mag * torch.where(torch.rand(20000, generator=g) < 0.5, -1.0, 1.0)).float()
    b = t.to(torch.bfloat16).float()
    h = to_h16(t)
    assert h.dtype == torch.float16 and torch.equal(h.float() * 2.0 ** H16_SHIFT, b)
    tiny = torch.exp2(torch.empty(2000).uniform_(-30, -13.01, generator=g))
    err = (to_h16(tiny).double() * 2.0 ** H16_SHIFT - tiny.to(torch.bfloat16).double()).abs()
    assert bool((err <= 2.0 ** -21).all())
    assert torch.isinf(to_h16(torch.tensor([2.0 ** 20 * 1.0001]))).all()   # past the range: inf, not a wrong finite
    x = torch.randn(3, 40, generator=g) * 10
    w = torch.randn(40, generator=g)
    u, p = norm_parts(x, w, 3, torch.float16)
    u_b, p_b = norm_parts(x, w, 3, torch.bfloat16)
    assert torch.equal(u, to_h16(x * w)) and torch.equal(p, p_b) and torch.equal(u.float() * 16, u_b.float())


def test_repack_refuses_minus_128():
    from pti_cli.errors import PtiError

    q = torch.zeros(16, 32, dtype=torch.int8)
    q[3, 5] = -128
    with pytest.raises(PtiError, match="-128"):
        repack_q8(q, torch.ones(16, 1, dtype=torch.float16), 32)
    # offset binary holds -128 (the f16 kernels' encoding); a scale that h16's 2^4 takes past f16 is refused
    q2, _ = unpack_q8(repack_q8(q, torch.ones(16, 1, dtype=torch.float16), 32, "f16"))
    assert torch.equal(q2, q)
    with pytest.raises(PtiError, match="float16's range"):
        repack_q8(q, torch.full((16, 1), 5000.0, dtype=torch.float16), 32, "h16")
    with pytest.raises(PtiError, match="no encoding"):
        repack_q8(q, torch.ones(16, 1, dtype=torch.float16), 32, "int4")


def test_gpu_backends_refuse_cleanly_without_their_gpu():
    """No GPU (CI): the CUDA and HIP backends raise the one-line PtiError, no traceback."""
    import torch
    from pti_cli.backends.cuda import CudaBackend
    from pti_cli.backends.hip import HipBackend
    from pti_cli.errors import PtiError

    if torch.cuda.is_available():   # on a GPU machine this check does not apply
        return
    for cls in (CudaBackend, HipBackend):
        with pytest.raises(PtiError):
            cls()


def test_ops_source_has_every_kernel_the_host_launches(tmp_path, monkeypatch):
    """kernels/pti_ops.hip compiles (NVRTC, no GPU) with every name gpu_ops.py may launch,
    without local memory."""
    from pti_cli.backends.compile import cached_binary
    from pti_cli.gpu_ops import KERNELS

    monkeypatch.setenv("PTI_CACHE_DIR", str(tmp_path))
    res = cached_binary("cuda", "sm_90", "pti_ops.hip").resources
    assert set(KERNELS) <= set(res), sorted(set(KERNELS) - set(res))
    for name, r in res.items():
        assert r["stack"] == 0 and r["spill_stores"] == 0 and r["spill_loads"] == 0, name


def test_glu_rows_interleave_gate_and_up_for_the_epilogue():
    """A fused gate/up matrix's rows go 8 gate, then the same 8 up rows, per 16-row group:
    the epilogue's lane with row g (output column 8 * group + g) then has both values."""
    from pti_cli.backends.repack import interleave_glu_rows
    from pti_cli.errors import PtiError

    ffn = 8 * int(torch.randint(1, 9, (1,)))
    t = torch.randn(2 * ffn, 5)
    out = interleave_glu_rows(t)
    for f in range(ffn):
        group, g = divmod(f, 8)
        assert torch.equal(out[16 * group + g], t[f])            # gate row f
        assert torch.equal(out[16 * group + 8 + g], t[ffn + f])  # up row f
    with pytest.raises(PtiError, match="multiple of 16"):
        interleave_glu_rows(torch.zeros(2 * ffn + 8, 3))


def test_variant_names_match_the_kernel_source():
    """Every variant the host may launch is instantiated in kernels/pti_kernel.hip with the
    template arguments its name says (t, r, m, u, and p: the pipelined main loop, 0 when
    absent), and the name parses as launch_args parses it."""
    import re
    from pti_cli.backends.compile import kernel_source
    from pti_cli.backends.cuda import INV_VARIANTS, all_variants, split_variant

    assert split_variant("t1_r1_m1_u4_p1") == {"t": 1, "r": 1, "m": 1, "u": 4, "p": 1, "i": 0}
    assert split_variant("t2_r2_m1_u2") == {"t": 2, "r": 2, "m": 1, "u": 2, "p": 0, "i": 0}
    # (the "_p2" variants' MINB is PTI_P2_MINB: 2 from sm_90, 1 on sm_80)
    src = kernel_source()
    assert src.count("#define PTI_P2_MINB 2") == 1 and src.count("#define PTI_P2_MINB 1") == 1
    inst = {m.group(1): tuple(int(v) for v in m.group(2).split(","))
            for m in re.finditer(r"PTI_TC\(pti_mm_##TAG##_(\w+), TIN, TOUT, ([\d, ]+)\)",
                                 src.replace("PTI_P2_MINB)", "2)"))}
    assert any(split_variant(v)["p"] for v in all_variants())
    assert any(split_variant(v)["p"] == 2 for v in all_variants())
    for v in all_variants():
        *args, minb = inst[v]
        assert tuple(args) == tuple(split_variant(v)[k] for k in "trmup"), v
        assert minb in (1, 2, 3, 4, 5), v
        assert split_variant(f"pti_mm_bf16_f32_{v}".split("_", 4)[4]) == split_variant(v)
    # the inv CTAs' form: the same template arguments and MINB as the plain variant, one twin, 2+ row tiles
    inv = {m.group(1): tuple(int(v) for v in m.group(2).split(","))
           for m in re.finditer(r"PTI_TC_I\(pti_mm_##TAG##_(\w+)_i1, TIN, TOUT, ([\d, ]+)\)", kernel_source())}
    assert sorted(inv) == sorted(INV_VARIANTS) and INV_VARIANTS
    for v in INV_VARIANTS:
        assert inv[v] == inst[v] and split_variant(v)["t"] == 1 and split_variant(v)["m"] >= 2, v
        assert split_variant(f"{v}_i1")["i"] == 1 and split_variant(v)["i"] == 0


def test_variant_overrides_from_the_environment(monkeypatch):
    """PTI_VARIANTS replaces chosen entries of the variant policy (for A/B runs) and refuses a
    name that is not a kernel variant."""
    from pti_cli.backends.cuda import variant_for
    from pti_cli.errors import PtiError

    base = [variant_for(1, m, w) for m in (1, 16) for w in "nwx"]
    twins = variant_for(2, 3)
    monkeypatch.setenv("PTI_VARIANTS", "1:16:w=t1_r1_m2_u4;1:8:n=t1_r1_m1_u8;1:16:x=t1_r1_m2_u3")
    assert [variant_for(1, m, w) for m in (1, 16) for w in "nwx"] == \
        ["t1_r1_m1_u8", base[1], base[2], base[3], "t1_r1_m2_u4", "t1_r1_m2_u3"]
    assert variant_for(2, 3) == twins   # entries not named keep the policy
    for bad in ("1:16:w=t9_r1_m2_u4", "1:16=t1_r1_m2_u4", "1:16:y=t1_r1_m2_u4"):
        monkeypatch.setenv("PTI_VARIANTS", bad)
        with pytest.raises(PtiError, match="PTI_VARIANTS"):
            variant_for(1, 16, "w")


def test_p2_opt_in_takes_one_twins_short_rows_of_k_it_prefetches(monkeypatch):
    """PTI_P2=1 puts one twin's 1-8 rows of a matrix of K <= P2_MAX_K (QKV, O, gate/up of an 8B model) on the
    "_p2" variant and leaves down (K = 14336), unknown K, two twins and 9+ rows on the policy; PTI_VARIANTS
    still wins, and another value of PTI_P2 is refused."""
    import torch
    from pti_cli.backends.cuda import P2_MAX_K, P2_VARIANT, CudaBackend, variant_for
    from pti_cli.errors import PtiError

    cells = [(tw, m, w, k) for tw in (1, 2) for m in (1, 8, 9)[:4 - tw] for w in "nwx" for k in (0, 4096, P2_MAX_K + 32, 14336)]
    base = {c: variant_for(c[0], c[1], c[2], "f16", c[3]) for c in cells}
    assert P2_VARIANT not in base.values()
    monkeypatch.setenv("PTI_P2", "1")
    for c in cells:
        p2 = c[0] == 1 and c[1] <= 8 and 0 < c[3] <= P2_MAX_K
        assert variant_for(c[0], c[1], c[2], "f16", c[3]) == (P2_VARIANT if p2 else base[c]), c
    b = CudaBackend.__new__(CudaBackend)   # kernel_name reads only these two (no GPU here)
    b.generic, b.sm_count = False, 132
    assert b.kernel_name(1, 4, torch.float16, torch.bfloat16, rows=4096, cols=4096) == f"pti_mm_f16_out_{P2_VARIANT}"
    assert b.kernel_name(1, 4, torch.float16, torch.bfloat16, rows=4096, cols=14336) != f"pti_mm_f16_out_{P2_VARIANT}"
    monkeypatch.setenv("PTI_VARIANTS", "1:8:n=t1_r1_m1_u8")
    assert variant_for(1, 4, "n", "f16", 4096) == "t1_r1_m1_u8"
    monkeypatch.setenv("PTI_P2", "yes")
    with pytest.raises(PtiError, match="PTI_P2"):
        variant_for(1, 4, "n", "f16", 4096)


def test_width_classes_pick_the_policy():
    """Matrices are put in width classes by row groups per SM, and an entry without an extra-wide
    variant uses its wide one there."""
    from pti_cli.backends.cuda import TC_BF16_VARIANTS, TC_VARIANTS, WIDTHS, variant_for, width_class

    assert [width_class(g) for g in (0.5, WIDTHS["w"] - 0.01, WIDTHS["w"], WIDTHS["x"] - 0.01, WIDTHS["x"], 99)] \
        == ["n", "n", "w", "w", "x", "x"]
    for twins, entries in TC_VARIANTS.items():
        for limit, names in entries:
            assert variant_for(twins, limit, "x") == names.get("x", names["w"])
            assert variant_for(twins, limit, "n") == names["n"]
            for width in "nwx":   # the bf16 kernels' own entries, the rest as f16's (h16 inputs are f16)
                f16 = variant_for(twins, limit, width)
                assert variant_for(twins, limit, width, "f16") == f16
                assert variant_for(twins, limit, width, "bf16") == TC_BF16_VARIANTS.get((twins, limit, width), f16)
    assert variant_for(1, 5, "w", "bf16") == "t1_r1_m1_u2_p1" != variant_for(1, 5, "w", "f16")


def test_the_backend_names_the_bf16_kernels_entry():
    """kernel_name passes the activations' type to the policy: bf16 rows of a wide matrix take the bf16 entry."""
    import torch
    from pti_cli.backends.cuda import CudaBackend, TC_BF16_VARIANTS

    (twins, limit, width), v = next(iter(TC_BF16_VARIANTS.items()))
    b = CudaBackend.__new__(CudaBackend)   # kernel_name reads only these two (no GPU here)
    b.generic, b.sm_count = False, 132
    rows = {"n": 2048, "w": 6144, "x": 28672}[width]
    assert b.kernel_name(twins, limit, torch.bfloat16, torch.bfloat16, rows=rows) == f"pti_mm_bf16_out_{v}"
    assert b.kernel_name(twins, limit, torch.float16, torch.bfloat16, rows=rows) != f"pti_mm_f16_out_{v}"


def test_hopper_setting_and_ring_reserve(monkeypatch):
    """PTI_WGMMA: on unless "0" (sm_90a on sm_90 only), a clear error for anything else; a ring copy is
    made only while RING_RESERVE of the card's memory stays free after ring_pack's peak (twice the matrix)."""
    from pti_cli.backends.compile import device_arch, hopper_wanted
    from pti_cli.backends.cuda import RING_RESERVE, ring_fits
    from pti_cli.errors import PtiError
    monkeypatch.delenv("PTI_WGMMA", raising=False)
    assert hopper_wanted()
    monkeypatch.setenv("PTI_WGMMA", "0")
    assert not hopper_wanted()
    for bad in ("yes", "2", ""):
        monkeypatch.setenv("PTI_WGMMA", bad)
        with pytest.raises(PtiError, match="PTI_WGMMA"):
            hopper_wanted()
    assert [device_arch(9, 0, True), device_arch(9, 0, False), device_arch(8, 0, True), device_arch(10, 0, True)] \
        == ["sm_90a", "sm_90", "sm_80", "sm_100"]
    total = 100 << 30
    reserve = int(RING_RESERVE * total)
    assert ring_fits(reserve + (2 << 30), total, 1 << 30)
    assert not ring_fits(reserve + (2 << 30) - 1, total, 1 << 30)
    assert not ring_fits(total, total, total)


def test_hopper_kernel_names_match_the_kernel_source():
    """Every Hopper kernel the host loads is instantiated, for sm_90a only, with the tiles, blocks a phase,
    slots and cluster size of its WG_VARIANTS (or WG_TWIN_VARIANTS) entry, and the input and output types its
    name says."""
    import re
    from pti_cli.backends.compile import kernel_source
    from pti_cli.backends.cuda import WG_FIX, WG_OUTS, WG_RESTS, WG_TWIN_VARIANTS, WG_VARIANTS, wg_name
    src = kernel_source()
    guard = src.index("#if defined(__CUDA_ARCH_FEAT_SM90_ALL)")
    assert "pti_wg_mm<" not in src[:guard]
    guarded = src[guard:]
    assert re.findall(r"^PTI_WG_ALL\((\w+), (\d)\)", guarded, re.M) == [("bf16", "0"), ("f16", "1")]
    outs = re.findall(r"PTI_WG\(pti_wg_##TY##_(\w+)_##SUFFIX, TIN, (\d), MT, PB, S, C, G\)", guarded)
    assert outs == [(o, str(i)) for i, o in enumerate(WG_OUTS)] and wg_name("h16", "glu", "m4") == "pti_wg_f16_glu_m4"
    inst = {m.group(1): tuple(int(v) for v in m.group(2).split(","))
            for m in re.finditer(r"PTI_WG_OUTS\(TY, TIN, (\w+), ([\d, ]+)\)", guarded)}
    entries = {v[1]: v[2:] for vs in WG_VARIANTS.values() for v in vs + (WG_FIX,) + tuple(WG_RESTS.values())}
    twin_entries = {v[1]: v[2:] for vs in WG_TWIN_VARIANTS.values() for v in vs}
    assert not set(twin_entries) & set(entries) and inst == {**entries, **twin_entries}
    # two twins' own forms: 16-row cluster forms of the narrower classes, ahead of their classes' own entries
    assert set(WG_TWIN_VARIANTS) <= {"n", "w"} and all(v[0] == 16 and v[5] > 1 for vs in WG_TWIN_VARIANTS.values() for v in vs)
    for cls, vs in WG_VARIANTS.items():
        assert [v[0] for v in vs] == ([16] if cls == "x" else []) + [32, 64] and all(8 % v[5] == 0 for v in vs), cls
        assert all((v[5] == 1) == (cls == "x") for v in vs)   # the cluster forms serve the narrower classes
    assert WG_FIX[5:] == (8, 1) and WG_FIX[2:5] == dict((v[1], v[2:5]) for v in WG_VARIANTS["n"])["m8_c8"]
    narrow = {v[1]: v for v in WG_VARIANTS["n"]}
    for form, rest in WG_RESTS.items():   # a rest form: its cluster form's loop and rows, the epilogue shared (G = 2)
        assert rest[5:] == (8, 2) and rest[2:5] == narrow[form][2:5] and rest[0] == narrow[form][0], form


def test_launch_config_sets_grid_pdl_and_cluster():
    """launch_config (every CUDA launch's, and scripts/wg_gap.py's occupancy query): the grid and block
    padded to 3 dimensions, the shared memory, and the attributes asked for, in a struct that outlives
    the attribute objects it was built from."""
    import gc
    from cuda.bindings import driver
    from pti_cli.backends.cuda import launch_config
    cfg = launch_config(driver, (64, 2), (256,), 1000, 0, True, 8)
    gc.collect()
    assert (cfg.gridDimX, cfg.gridDimY, cfg.gridDimZ, cfg.blockDimX, cfg.blockDimY, cfg.sharedMemBytes) == (64, 2, 1, 256, 1, 1000)
    ids = driver.CUlaunchAttributeID
    assert cfg.numAttrs == 2 and [a.id for a in cfg.attrs] == [
        ids.CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION, ids.CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION]
    assert cfg.attrs[0].value.programmaticStreamSerializationAllowed == 1
    assert (cfg.attrs[1].value.clusterDim.x, cfg.attrs[1].value.clusterDim.y) == (8, 1)
    assert launch_config(driver, (5,), (256,), 0, 0, False).numAttrs == 0
    assert launch_config(driver, (8,), (256,), 0, 0, False, 4).attrs[0].id == ids.CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION


def test_hopper_eligibility_wants_whole_units_and_blocks():
    """wg_eligible: the Hopper kernels take a matrix of a width class they serve, of whole units of row
    groups, K in whole phases of every slice and in whole blocks (pti_wg_tiles copies whole blocks of a
    row: past a ragged K it would read the next row); the policy kernels take the rest."""
    from pti_cli.backends.cuda import CudaBackend
    from pti_cli.backends.repack import RING_GROUPS, Packed
    be = object.__new__(CudaBackend)   # the fields wg_eligible reads; no GPU here
    be.wgmma, be.sm_count, be.wg_classes, be.wg_min_k = True, 4, ("x",), None

    def pack(groups: int, k: int) -> Packed:
        nb = -(-k // 32)
        return Packed(torch.zeros(groups, nb, 32, 16, dtype=torch.int8), torch.zeros(groups, nb, 8, dtype=torch.int32),
                      16 * groups, k)
    tall = 8 * be.sm_count   # row groups: width class "x" from 8 a SM
    assert be.wg_eligible(pack(tall, 1024)) and be.wg_eligible(pack(tall + RING_GROUPS, 2048))
    assert not be.wg_eligible(pack(tall, 1000))                # a ragged K
    assert not be.wg_eligible(pack(tall, 992))                 # 31 blocks: not whole phases of 8 slices
    assert not be.wg_eligible(pack(tall + 1, 1024))            # not whole units
    assert not be.wg_eligible(pack(tall - RING_GROUPS, 1024))  # a narrower class, not served
    be.wg_classes = ("x", "w", "n")
    assert be.wg_eligible(pack(tall - RING_GROUPS, 1024)) and not be.wg_eligible(pack(tall - RING_GROUPS, 1000))
    be.wgmma = False
    assert not be.wg_eligible(pack(tall, 1024))


def test_hopper_narrow_class_on_a_long_k_or_few_rows(monkeypatch):
    """PTI_WG_NARROW=auto (WG_MIN_K): the Hopper kernels take a narrow matrix at 17-64 rows from K = 8192, where
    they were measured faster than the policy; below it one model's only at 17-32 rows (wg_short_one), and with
    PTI_WG_SHORT_ONE=0 not at all, its ring copy then not made; the other classes at any K.  wg_ready: rows
    through packs that all have their copy, with an epilogue that only scales by each row's inv, given or summed
    (Epilogue.wg_ok)."""
    from pti_cli.backends.cuda import WG_MIN_K, WG_SHORT_ONE_MAX_ROWS, CudaBackend, Epilogue
    from pti_cli.errors import PtiError
    from pti_cli.backends.repack import Packed
    monkeypatch.delenv("PTI_WG_SHORT_ONE", raising=False)
    be = object.__new__(CudaBackend)
    be.wgmma, be.sm_count, be.wg_classes, be.wg_min_k = True, 4, ("x", "w", "n"), WG_MIN_K

    def pack(groups: int, k: int) -> Packed:
        nb = k // 32
        p = Packed(torch.zeros(groups, nb, 32, 16, dtype=torch.int8), torch.zeros(groups, nb, 8, dtype=torch.int32),
                   16 * groups, k)
        p.ring = p if be.wg_eligible(p) else None   # (wg_ready asks only whether there is one)
        return p
    tall, wide, narrow = 32, 16, 8   # row groups (8, 4 and 2 a SM): width classes x, w (from 2.5 a SM) and n
    assert [be.wg_eligible(pack(g, 1024)) for g in (tall, wide, narrow)] == [True, True, True]
    assert WG_SHORT_ONE_MAX_ROWS == 32 and be.short_k(pack(narrow, 8192 - 1024)) and not be.short_k(pack(narrow, 8192))
    short = pack(narrow, 8192 - 1024)   # one model: 17-32 rows (wg_short_one), not 16 nor 33
    assert [be.wg_ready([short], m) for m in (16, 17, 32, 33, 64)] == [False, True, True, False, False]
    monkeypatch.setenv("PTI_WG_SHORT_ONE", "0")
    assert [be.wg_eligible(pack(g, 1024)) for g in (tall, wide, narrow)] == [True, True, False]
    assert be.wg_eligible(pack(narrow, 8192)) and not be.wg_eligible(pack(narrow, 8192 - 1024))
    assert not be.wg_ready([short], 17)   # (a copy made before the setting changed)
    monkeypatch.setenv("PTI_WG_SHORT_ONE", "64")
    assert [be.wg_ready([short], m) for m in (16, 17, 64, 65)] == [False, True, True, False]
    for bad in ("65", "-1", "x", ""):
        monkeypatch.setenv("PTI_WG_SHORT_ONE", bad)
        with pytest.raises(PtiError, match="PTI_WG_SHORT_ONE"):
            be.wg_eligible(short)
    monkeypatch.delenv("PTI_WG_SHORT_ONE")
    for p, least in ((pack(tall, 1024), 9), (pack(wide, 1024), 17), (pack(narrow, 8192), 17)):
        ms = (least - 1, least, 64, 65)   # one model: the tall class from 9 rows (WG_TALL_MIN_ROWS), the others 17
        assert [be.wg_ready([p], m) for m in ms] == [False, True, True, False]
        assert be.wg_ready([p, p], 17)
    assert not be.wg_ready([pack(tall, 1024), pack(narrow, 1024)], 40)    # every pack must have its copy
    res = lambda: Epilogue(32, uo=[torch.ones(1)], po=[torch.ones(1)], g=[torch.ones(1)])   # noqa: E731 (residual)
    ragged = pack(tall, 1024)
    ragged.rows -= 8   # not whole 128-row units: the residual form's launch would refuse it, so the policy's
    assert be.wg_ready([pack(tall, 1024)], 40, res()) and not be.wg_ready([ragged], 40, res())
    assert be.wg_ready([ragged], 40)
    inv, pin = [torch.ones(40)], [torch.ones(40, 2)]
    assert be.wg_ready([pack(tall, 1024)], 40, Epilogue(32, inv=inv))
    assert be.wg_ready([pack(tall, 1024)], 40, Epilogue(32, pin=pin, inv=inv, sum_inv=True))
    assert not be.wg_ready([pack(tall, 1024)], 40, Epilogue(32, pin=pin, inv=inv))   # the policy's inv CTAs' form
    assert not be.wg_ready([pack(tall, 1024)], 40, Epilogue(32, pin=pin, inv=inv, invo=inv, sum_inv=True))
    be.wg_min_k = None
    assert be.wg_eligible(pack(narrow, 1024))


def test_hopper_two_twins_take_a_short_narrow_matrix_in_their_form(monkeypatch):
    """Two twins of a narrow matrix below WG_MIN_K (an 8B model's O) get its ring copy and take their two-twin
    form (m2_c4) at 9-16 rows a twin, the class's forms at 17-32 (wg_short_two; PTI_WG_SHORT_TWO=16: not past 16),
    and nothing else: not past 32 rows a twin, not a launch of one of the two twins' packs (one model's matrix at
    17-32 rows: wg_short_one); neither with PTI_WG_TWIN_SHORT=0 nor with no
    two-twin form (PTI_WG_TWIN_FORMS=0).  One model's copy is made only while wg_short_one is on.  A long-K
    narrow matrix keeps every form."""
    from pti_cli.backends.cuda import WG_MIN_K, WG_TWIN_FORM, CudaBackend, PtiError, wg_twin_short
    from pti_cli.backends.repack import Packed
    for v in ("PTI_WG_TWIN_SHORT", "PTI_WG_TWIN_FORMS", "PTI_WG_TWIN_MIN_ROWS", "PTI_WG_M2", "PTI_WG_SHORT_ONE",
              "PTI_WG_SHORT_TWO"):
        monkeypatch.delenv(v, raising=False)
    be = object.__new__(CudaBackend)
    be.wgmma, be.sm_count, be.wg_classes, be.wg_min_k = True, 4, ("x", "w", "n"), WG_MIN_K

    def packs(k: int, twins: int) -> list[Packed]:
        out = []
        for _ in range(twins):
            p = Packed(torch.zeros(8, k // 32, 32, 16, dtype=torch.int8), torch.zeros(8, k // 32, 8, dtype=torch.int32),
                       128, k)
            p.twins, p.ring = twins, p if be.wg_eligible(p, twins) else None
            out.append(p)
        return out
    short, long_k = 4096, 8192
    assert [p.ring is not None for p in packs(short, 2)] == [True, True]
    assert [p.ring is not None for p in packs(short, 1)] == [True]   # one model at 17-32 rows (wg_short_one)
    two = packs(short, 2)
    assert [be.wg_ready(two, m) for m in (8, 9, 16, 17, 32, 33)] == [False, True, True, True, True, False]
    assert not any(be.wg_ready(two[:1], m) for m in (16, 17, 32, 33))   # one twin's rows of the two: not measured
    assert [be.wg_ready(packs(short, 1), m) for m in (16, 17, 32, 33)] == [False, True, True, False]
    be.wg_table = {"n": ((32, "m4_c8", 4, 2, 4, 8, 0),)}
    assert be.wg_kernel(16, torch.float32, rows=128, twins=2)[0].endswith("_" + WG_TWIN_FORM[1])
    two_long = packs(long_k, 2)
    assert [be.wg_ready(two_long, m) for m in (9, 16, 17, 64)] == [True, True, True, True]
    assert [be.wg_ready(packs(long_k, 1), m) for m in (16, 17)] == [False, True]
    assert be.wg_kernel(24, torch.float32, rows=128, twins=2)[0].endswith("_m4_c8")   # past their own form
    monkeypatch.setenv("PTI_WG_SHORT_TWO", "16")   # only their own form
    assert [be.wg_ready(two, m) for m in (8, 9, 16, 17, 64)] == [False, True, True, False, False]
    for bad in ("65", "x"):
        monkeypatch.setenv("PTI_WG_SHORT_TWO", bad)
        with pytest.raises(PtiError, match="PTI_WG_SHORT_TWO"):
            be.wg_ready(two, 16)
    monkeypatch.delenv("PTI_WG_SHORT_TWO")
    monkeypatch.setenv("PTI_WG_SHORT_ONE", "0")
    assert [p.ring is not None for p in packs(short, 1)] == [False] and be.wg_ready(two, 16)
    monkeypatch.setenv("PTI_WG_TWIN_SHORT", "0")
    assert not wg_twin_short() and [p.ring is not None for p in packs(short, 2)] == [False, False]
    assert not be.wg_ready(two, 16)                            # (a copy made before the setting changed)
    monkeypatch.setenv("PTI_WG_TWIN_SHORT", "1")
    monkeypatch.setenv("PTI_WG_TWIN_FORMS", "0")
    assert [p.ring is not None for p in packs(short, 2)] == [False, False] and not be.wg_ready(two, 16)
    monkeypatch.setenv("PTI_WG_TWIN_SHORT", "2")
    with pytest.raises(PtiError, match="PTI_WG_TWIN_SHORT"):
        wg_twin_short()


def test_hopper_session30_forms(monkeypatch):
    """Session 30's forms (kernels/pti_kernel.hip pti_wg_mm): two twins from WG_TWIN_MIN_ROWS rows a twin, one
    from WG_MIN_ROWS; the scaled matmul on tiles given (pin and inv: its inv CTAs); the residual form (uo, po, g,
    with or without invo and tiles given, never scaled; PTI_WG_RESIDUAL=0: the policy's); the plain matmul on tiles
    given (`pti bench --kernels`' "given" rows); and Epilogue.to_ok,
    the tiles a launch writes for the next matrix."""
    from pti_cli.backends.cuda import WG_MIN_ROWS, WG_TALL_MIN_ROWS, WG_TWIN_MIN_ROWS, CudaBackend, Epilogue, width_class
    from pti_cli.backends.repack import Packed
    monkeypatch.delenv("PTI_WG_TWIN_MIN_ROWS", raising=False)
    monkeypatch.delenv("PTI_WG_TALL_MIN_ROWS", raising=False)
    monkeypatch.delenv("PTI_WG_RESIDUAL", raising=False)
    be = object.__new__(CudaBackend)
    be.wgmma, be.sm_count, be.wg_classes, be.wg_min_k = True, 4, ("x", "w", "n"), None
    p = Packed(torch.zeros(32, 32, 32, 16, dtype=torch.int8), torch.zeros(32, 32, 8, dtype=torch.int32), 512, 1024)
    p.ring = p
    narrow = Packed(torch.zeros(8, 32, 32, 16, dtype=torch.int8), torch.zeros(8, 32, 8, dtype=torch.int32), 128, 1024)
    narrow.ring = narrow
    assert width_class(p.rows / 16 / be.sm_count) == "x" and width_class(narrow.rows / 16 / be.sm_count) == "n"
    assert WG_TWIN_MIN_ROWS <= WG_TALL_MIN_ROWS < WG_MIN_ROWS
    for m in (WG_TWIN_MIN_ROWS - 1, WG_TWIN_MIN_ROWS, WG_TALL_MIN_ROWS - 1, WG_TALL_MIN_ROWS, WG_MIN_ROWS - 1, WG_MIN_ROWS):
        assert be.wg_ready([p, p], m) == (m >= WG_TWIN_MIN_ROWS) and be.wg_ready([p], m) == (m >= WG_TALL_MIN_ROWS), m
        assert be.wg_ready([narrow], m) == (m >= WG_MIN_ROWS), m   # one model of a narrower class: from 17
    monkeypatch.setenv("PTI_WG_TWIN_MIN_ROWS", "17")
    assert not be.wg_ready([p, p], 16) and be.wg_ready([p, p], 17)
    monkeypatch.setenv("PTI_WG_TALL_MIN_ROWS", "17")
    assert not be.wg_ready([p], 16) and be.wg_ready([p], 17)
    monkeypatch.delenv("PTI_WG_TWIN_MIN_ROWS")
    monkeypatch.delenv("PTI_WG_TALL_MIN_ROWS")
    rows, tiles = [torch.ones(40)], [torch.zeros(1024 * 64, dtype=torch.bfloat16)]
    pin, uo, po, g = [torch.ones(40, 64)], [torch.ones(40, 512, dtype=torch.bfloat16)], [torch.ones(40, 32)], [torch.ones(512)]
    assert be.wg_ready([p], 40, Epilogue(64, pin=pin, inv=rows, ti=tiles))
    assert not be.wg_ready([p], 40, Epilogue(64, pin=pin, ti=tiles))              # the inv slots are needed
    assert be.wg_ready([p], 40, Epilogue(0, ti=tiles))                           # plain, on tiles given (bench)
    for epi in (Epilogue(32, uo=uo, po=po, g=g), Epilogue(32, uo=uo, po=po, g=g, invo=rows, ti=tiles)):
        assert be.wg_ready([p], 40, epi)
        monkeypatch.setenv("PTI_WG_RESIDUAL", "0")
        assert not be.wg_ready([p], 40, epi)
        monkeypatch.delenv("PTI_WG_RESIDUAL")
    assert not be.wg_ready([p], 40, Epilogue(32, uo=uo, po=po))                   # no norm weights
    assert not be.wg_ready([p], 40, Epilogue(32, uo=uo, po=po, g=g, inv=rows))    # a residual form is not scaled
    out = Epilogue(32, to=[torch.zeros(512 * 64, dtype=torch.float16)], tnr=64)
    assert out.to_ok(512, 64) and out.to_ok(512, 33) and not out.to_ok(512, 65) and not out.to_ok(768, 64)
    assert not Epilogue(32, to=out.to, tnr=32).to_ok(512, 32)                     # [512 x 32] expected
    sixteen = Epilogue(32, to=[torch.zeros(512 * 16, dtype=torch.bfloat16)], tnr=16)   # the tall class's m2 form
    assert sixteen.to_ok(512, 16) and sixteen.to_ok(512, 9) and not sixteen.to_ok(512, 17)
    assert not Epilogue(32, to=[torch.zeros(512 * 64)], tnr=64).to_ok(512, 64)    # 16-bit only
    assert not Epilogue(32, to=[torch.zeros(512 * 48, dtype=torch.float16)], tnr=48).to_ok(512, 40)


def test_hopper_settings_and_shared_memory(monkeypatch):
    """PTI_WG_NARROW ("auto" unless "0", "w" or "1"; a clear error otherwise), and wg_smem: the cluster forms park
    the sums of their 8 / C slices where the one-CTA form keeps one running sum, all within two CTAs a SM."""
    from pti_cli.backends.cuda import WG_MIN_K, WG_VARIANTS, wg_classes_wanted, wg_min_k_wanted, wg_smem
    from pti_cli.errors import PtiError
    monkeypatch.delenv("PTI_WG_NARROW", raising=False)
    assert wg_classes_wanted() == ("x", "w", "n") and wg_min_k_wanted() is WG_MIN_K
    for v, want in (("0", ("x",)), ("w", ("x", "w")), ("1", ("x", "w", "n"))):
        monkeypatch.setenv("PTI_WG_NARROW", v)
        assert wg_classes_wanted() == want and wg_min_k_wanted() is None
    for bad in ("on", "n", ""):
        monkeypatch.setenv("PTI_WG_NARROW", bad)
        with pytest.raises(PtiError, match="PTI_WG_NARROW"):
            wg_classes_wanted()
    assert wg_smem(4, 4, 3) == 128 + 3 * 4 * (8 * 544 + 32 * 64) + 16 * 256 * 4
    assert wg_smem(4, 4, 3, 4) - wg_smem(4, 4, 3) == 16 * 256 * 4   # two slices parked instead of one sum
    assert wg_smem(8, 2, 4, 8) == wg_smem(8, 2, 4)                   # one slice parked
    for vs in WG_VARIANTS.values():
        for _, _, mt, pb, slots, c, _ in vs:
            assert 2 * (wg_smem(mt, pb, slots, c) + 1024) <= 228 * 1024   # the H200's SM, 1 KB reserved a CTA


def test_matmul_carveout_setting(monkeypatch):
    """The matmul kernels' shared-memory carveout: the measured default, a percentage from
    PTI_CARVEOUT_MM, `driver` for none, and a clear error for anything else."""
    from pti_cli.backends.cuda import MM_CARVEOUT, mm_carveout
    from pti_cli.errors import PtiError
    monkeypatch.delenv("PTI_CARVEOUT_MM", raising=False)
    assert mm_carveout() == MM_CARVEOUT == 44
    for v, want in (("0", 0), ("58", 58), ("100", 100), ("driver", None)):
        monkeypatch.setenv("PTI_CARVEOUT_MM", v)
        assert mm_carveout() == want
    for bad in ("101", "-1", "44%", "max"):
        monkeypatch.setenv("PTI_CARVEOUT_MM", bad)
        with pytest.raises(PtiError, match="PTI_CARVEOUT_MM"):
            mm_carveout()


def test_attention_cluster_setting(monkeypatch):
    """The fused attention's cluster size limit (16; PTI_ATTN_CLUSTER 0-16, 0 for none), and when a
    launch takes the cluster form: only when its whole grid fits the GPU at once."""
    from pti_cli.errors import PtiError
    from pti_cli.gpu_ops import (ATTN_CLUSTER_MAX, ATTN_WIDE_CLUSTER_MAX, attention_cluster, attn_cluster_max,
                                 attn_wide_cluster_max)
    monkeypatch.delenv("PTI_ATTN_CLUSTER", raising=False)
    monkeypatch.delenv("PTI_ATTN_WIDE_CL", raising=False)
    assert attn_cluster_max() == ATTN_CLUSTER_MAX == 16
    assert attn_wide_cluster_max() == ATTN_WIDE_CLUSTER_MAX == 16
    monkeypatch.setenv("PTI_ATTN_WIDE_CL", "3")
    assert attn_wide_cluster_max() == 3
    monkeypatch.setenv("PTI_ATTN_WIDE_CL", "x")
    with pytest.raises(PtiError, match="PTI_ATTN_WIDE_CL"):
        attn_wide_cluster_max()
    for v in ("0", "3", "16"):
        monkeypatch.setenv("PTI_ATTN_CLUSTER", v)
        assert attn_cluster_max() == int(v)
    for bad in ("17", "-1", "on", "8.0"):
        monkeypatch.setenv("PTI_ATTN_CLUSTER", bad)
        with pytest.raises(PtiError, match="PTI_ATTN_CLUSTER"):
            attn_cluster_max()
    # clusters of 1..16 blocks that the H200 holds at once (cuOccupancyMaxActiveClusters, session 13),
    # at the pinned carveout (also at most 2 blocks per SM: 264 / cl) and at the driver's
    pinned = [0, 264, 132, 88, 66, 52, 44, 37, 33, 29, 26, 24, 22, 20, 18, 17, 16]
    wide = [0, 528, 264, 163, 124, 94, 79, 69, 62, 51, 44, 37, 37, 30, 30, 28, 28]
    assert attention_cluster(11, 8, 16, pinned) == (11, False)           # the 8b at one sequence: 88 blocks
    assert attention_cluster(11, 8 * 2, 16, pinned) == (11, False)       # two sequences: 176
    assert attention_cluster(11, 8 * 16, 16, pinned) == (0, False)       # 16 sequences: 1408 blocks, the counter form
    assert attention_cluster(129, 8, 16, pinned) == (16, False)          # long contexts: 16 blocks, several chunks each
    assert attention_cluster(129, 8 * 3, 16, pinned) == (0, False)       # 24 clusters of 16 do not fit
    assert attention_cluster(11, 8, 0, pinned) == (0, False)             # clusters off
    assert attention_cluster(1, 8 * 32, 16, pinned) == (1, False)        # one chunk: clusters of one block
    # at the driver's carveout: the fewest rounds of chunks (blocks taking every cl-th chunk) that
    # fit, from the fewest blocks
    assert attention_cluster(11, 8 * 4, 16, pinned, 16, wide) == (11, True)    # 32 of 37 clusters of 11
    assert attention_cluster(11, 8 * 8, 16, pinned, 16, wide) == (6, True)     # 7 fit; 2 rounds from 6
    assert attention_cluster(11, 8 * 16, 16, pinned, 16, wide) == (3, True)    # 124 clusters of 4 < 128
    assert attention_cluster(11, 8 * 32, 16, pinned, 16, wide) == (2, True)
    assert attention_cluster(11, 8 * 64, 16, pinned, 16, wide) == (0, False)   # clusters of one: the counter form
    assert attention_cluster(11, 8 * 16, 16, pinned, 2, wide) == (2, True)     # at most wide_max
    assert attention_cluster(129, 8 * 3, 16, pinned, 16, wide) == (15, True)   # 9 rounds: 15 blocks give them
    assert attention_cluster(11, 8 * 16, 0, pinned, 16, wide) == (0, False)    # clusters off
    assert attention_cluster(11, 8 * 2, 16, pinned, 16, wide) == (11, False)   # the pinned form first
    assert attention_cluster(11, 8 * 16, 16, pinned, 0, wide) == (0, False)    # wide clusters off


def test_attention_tile_arguments(monkeypatch):
    """The fused attention's tile arguments (AttnOut's ta, tb, na, tnr): none, one twin's tiles or two twins'
    split after twin A's rows; tiles the kernel would write past (fewer tile rows than a twin's rows, rows not
    in whole groups of 8, a width not in whole groups of 8 blocks of 32, three twins) refused, since the kernel
    writes them unchecked.  On by default (PTI_ATTN_TILES=0 off: session 37 measured it on the H200)."""
    from pti_cli.errors import PtiError
    from pti_cli.gpu_ops import attn_tile_args
    W = 512
    room = lambda nr: torch.empty(W * nr, dtype=torch.float16)   # noqa: E731
    a, b = room(32), room(16)
    got = attn_tile_args([a, b], 12, 20, W)
    assert got[0][0] is a and got[1][0] is b and [v for v, _ in got[2:]] == [12, 32]
    got = attn_tile_args([a], 5, 20, W)   # one twin: all 20 rows into a (n_a is not a split then)
    assert got[0][0] is a and got[1][0] == 0 and [v for v, _ in got[2:]] == [20, 32]
    assert [v for v, _ in attn_tile_args(None, 5, 20, W)] == [0, 0, 20, 0]
    for to, n_a, M, w in (([a, b], 12, 29, W),   # twin B has 17 rows, its tiles 16
                          ([room(12)], 0, 8, W),   # 12 tile rows: not whole groups of 8
                          ([a], 0, 33, W),   # 33 rows in 32
                          ([room(32)], 0, 8, 480),   # 15 blocks of 32
                          ([a, a, a], 4, 12, W)):
        with pytest.raises(PtiError, match="cannot lay out"):
            attn_tile_args(to, n_a, M, w)
    from pti_cli.gpu_ops import attn_tiles
    monkeypatch.delenv("PTI_ATTN_TILES", raising=False)
    assert attn_tiles() is True
    for v in ("0", "1"):
        monkeypatch.setenv("PTI_ATTN_TILES", v)
        assert attn_tiles() == (v == "1")
    monkeypatch.setenv("PTI_ATTN_TILES", "on")
    with pytest.raises(PtiError, match="PTI_ATTN_TILES"):
        attn_tiles()


def test_attention_push_setting(monkeypatch):
    """The push combine is the default for cluster launches of one chunk a block; PTI_ATTN_PUSH=0
    keeps the partials in L2 (A/B runs); anything else is refused."""
    from pti_cli.errors import PtiError
    from pti_cli.gpu_ops import attn_push
    monkeypatch.delenv("PTI_ATTN_PUSH", raising=False)
    assert attn_push() is True
    monkeypatch.setenv("PTI_ATTN_PUSH", "0")
    assert attn_push() is False
    monkeypatch.setenv("PTI_ATTN_PUSH", "1")
    assert attn_push() is True
    for bad in ("2", "yes"):
        monkeypatch.setenv("PTI_ATTN_PUSH", bad)
        with pytest.raises(PtiError, match="PTI_ATTN_PUSH"):
            attn_push()


def test_tile_outputs_are_checked_before_a_launch():
    """A launch that also writes the next Hopper matmul's tiles (Epilogue.to) is refused, with PtiError, unless
    they fit: the policy's residual launch (launch_args) and the Hopper kernels' residual form and gate/up
    (CudaBackend._wg_outs, whose argument tuple ends with the tiles' pointers and tile rows).  CPU tensors:
    only shapes and pointers are read."""
    from pti_cli.backends.cuda import CudaBackend, Epilogue
    from pti_cli.backends.repack import Packed
    from pti_cli.errors import PtiError
    be = object.__new__(CudaBackend)
    n, k, m = 512, 1024, 40
    p = Packed(torch.zeros(n // 16, k // 32, 32, 16, dtype=torch.int8), torch.zeros(n // 16, k // 32, 8, dtype=torch.int32), n, k)
    x, y = torch.zeros(m, k, dtype=torch.bfloat16), torch.zeros(m, n)
    res = dict(uo=[torch.zeros(m, n, dtype=torch.bfloat16)], po=[torch.zeros(m, n // 16)], g=[torch.ones(n)],
               invo=[torch.zeros(m)])
    good = [torch.zeros(n * 64, dtype=torch.bfloat16)]
    name = "pti_mm_bf16_f32_t1_r1_m8_u1_i1"
    _, vals, types = be.launch_args(name, [p], [x], [y], Epilogue(n // 16, **res, to=good, tnr=64))
    assert vals[-3:] == (good[0].data_ptr(), 0, 64) and len(vals) == len(types)   # (no twin B: null)
    for bad in (Epilogue(n // 16, **res, to=good, tnr=32),                                 # its size is 64 rows'
                Epilogue(n // 16, **res, to=[torch.zeros(n * 64)], tnr=64),                # not 16-bit
                Epilogue(n // 16, to=good, tnr=64, pin=[torch.zeros(m, k // 16)], inv=[torch.zeros(m)])):   # no residual
        with pytest.raises(PtiError, match="tiles"):
            be.launch_args(name if bad.po else "pti_mm_bf16_out_t1_r1_m8_u1_i1", [p], [x], [y], bad)
    outs = CudaBackend._wg_outs(Epilogue(n // 16, **res, to=good, tnr=64), [0], n, False, [y], m)
    assert len(outs) == 11 and outs[-3:] == (good[0].data_ptr(), good[0].data_ptr(), 64)
    glu_tiles = [torch.zeros(n // 2 * 32, dtype=torch.float16)]   # silu(gate) * up: n / 2 columns
    for rows in (12, 32):   # a 16-row (m2) gate/up may write the 32-row tiles of the down after it
        assert CudaBackend._wg_outs(Epilogue(k // 16, inv=[torch.ones(rows)], to=glu_tiles, tnr=32), [0], n, True,
                                    [torch.zeros(rows, n // 2, dtype=torch.float16)], rows)[-1] == 32
    small = [torch.zeros(n * 16, dtype=torch.bfloat16)]
    for epi, glu, rows in ((Epilogue(n // 16, **res, to=small, tnr=16), False, m),          # more rows than tiles
                           (Epilogue(k // 16, inv=[torch.ones(m)], to=good, tnr=64), False, m),   # plain outputs
                           (Epilogue(k // 16, inv=[torch.ones(m)], to=glu_tiles, tnr=32), True, m),  # 40 > 32
                           (Epilogue(n // 16, **res, to=good, tnr=32), False, 32)):           # 64 rows' size
        with pytest.raises(PtiError, match="tiles"):
            CudaBackend._wg_outs(epi, [0], n, glu, [y], rows)


def test_hopper_fixup_form_setting_and_buffers(monkeypatch):
    """PTI_WG_FIX=1 gives 33-64 rows of the narrow class to the fixup form (WG_FIX: m8_c8's loop, no
    cluster), the other classes keep theirs; a clear error for anything but 0 or 1.  _wg_fixup: no arguments
    without it; with it, room for every CTA's slice sums and a zero count a unit, twin B's past twin A's,
    kept per shape (a captured graph holds the addresses)."""
    from pti_cli.backends.cuda import THREADS, WG_FIX, WG_VARIANTS, CudaBackend, wg_variants
    from pti_cli.errors import PtiError
    monkeypatch.delenv("PTI_WG_FIX", raising=False)
    assert wg_variants() == WG_VARIANTS
    monkeypatch.setenv("PTI_WG_FIX", "1")
    table = wg_variants()
    assert table["x"] == WG_VARIANTS["x"] and table["w"] == WG_VARIANTS["w"]
    assert table["n"][0] == WG_VARIANTS["n"][0] and table["n"][1] == WG_FIX
    monkeypatch.setenv("PTI_WG_FIX", "yes")
    with pytest.raises(PtiError, match="PTI_WG_FIX"):
        wg_variants()
    monkeypatch.setenv("PTI_WG_FIX", "0")   # PTI_WG_M2=0: the tall class's 9-16 rows take its 32-row form
    monkeypatch.setenv("PTI_WG_M2", "0")
    assert wg_variants()["x"] == WG_VARIANTS["x"][1:] and WG_VARIANTS["x"][0][:2] == (16, "m2")
    assert wg_variants()["n"] == WG_VARIANTS["n"] and wg_variants()["w"] == WG_VARIANTS["w"]
    monkeypatch.setenv("PTI_WG_M2", "3")
    with pytest.raises(PtiError, match="PTI_WG_M2"):
        wg_variants()
    be = object.__new__(CudaBackend)
    be.device, be._fix = torch.device("cpu"), {}
    assert be._wg_fixup(32, 64, 2, 0) == (0,) * 4 and not be._fix
    fpa, fpb, fca, fcb = be._wg_fixup(32, 64, 2, 1)
    fp, fc = be._fix[(32, 64, 1)]
    per = 32 * 8 * 32 * THREADS
    assert fp.numel() == 2 * per and fp.dtype == torch.float32 and (fpa, fpb) == (fp.data_ptr(), fp.data_ptr() + 4 * per)
    assert fc.numel() == 64 and not fc.any() and (fca, fcb) == (fc.data_ptr(), fc.data_ptr() + 4 * 32)
    assert be._wg_fixup(32, 64, 1, 1) == (fpa, fpa, fca, fca) and len(be._fix) == 1   # one twin: A's, reused
    fpa, fpb, fca, fcb = be._wg_fixup(32, 64, 2, 2)   # the shared-epilogue form (G = 2): two counts a unit, its own
    fp, fc = be._fix[(32, 64, 2)]
    assert fc.numel() == 2 * 64 and not fc.any() and (fca, fcb) == (fc.data_ptr(), fc.data_ptr() + 4 * 64)
    assert fp.numel() == 2 * per and len(be._fix) == 2


def test_hopper_rest_form_split_rule(monkeypatch):
    """PTI_WG_REST=1 (the default since session 39) splits a 64-row launch of one twin of m8_c8 whose units outnumber the
    clusters the card holds: the units past them go to m8_d8 when their CTAs fit the slots the clusters leave
    free; never for two twins, with inv CTAs, for another form, or with the setting off; a clear error for
    anything but 0 or 1.  PTI_WG_REST32 (default 0) splits m4_c8's 17-32 row launches the same way, against the
    clusters it holds at two CTAs a SM (wg_split_smem), on any K (1) or the narrow class's long K only (2).
    PTI_WG_REST_TWINS (default 0): two twins of m8_c8 (WG_TWINS_APART) as one split launch a twin."""
    from pti_cli.backends.cuda import (WG_MIN_K, WG_RESTS, WG_SMEM_TWO, CudaBackend, wg_rest_name, wg_rest_setting,
                                        wg_rest_twins_setting)
    from pti_cli.errors import PtiError
    be = object.__new__(CudaBackend)
    c8, d8 = "pti_wg_bf16_f32_m8_c8", "pti_wg_bf16_f32_" + WG_RESTS["m8_c8"][1]
    c4, d4 = "pti_wg_f16_glu_m4_c8", "pti_wg_f16_glu_" + WG_RESTS["m4_c8"][1]
    assert (wg_rest_name(c8), wg_rest_name(c4), wg_rest_name("pti_wg_bf16_f32_m4_c4")) == (d8, d4, None)
    # the H200's (session 39): 30 clusters of 8 at two CTAs a SM; m4_c8 holds 45 at its own shared memory (three a SM)
    be.sm_count, be.wg_split_resident, be.wg_split_a_sm = 132, {c8: 30, c4: 30}, {d8: 2, d4: 2}
    be.wg_split_slack = 0
    k, short = 14336, WG_MIN_K["n"] - 32
    monkeypatch.setenv("PTI_WG_REST", "0")
    be.wg_rest = wg_rest_setting()
    assert not be.wg_rest and be.wg_rest_units(c8, 32, 1, 0, k) == 0
    monkeypatch.delenv("PTI_WG_REST")                 # the default: on
    assert be.wg_rest_units(c8, 32, 1, 0, k) == 0     # read when the kernels load, not at each launch
    be.wg_rest = wg_rest_setting()
    assert be.wg_rest_units(c8, 32, 1, 0, k) == 2     # 240 CTAs in clusters, 16 in the 24 free slots
    assert be.wg_rest_units(c8, 32, 1, 0, short) == 2   # any K
    assert be.wg_rest_units(c8, 33, 1, 0, k) == 3     # 24 CTAs: exactly the free slots
    assert be.wg_rest_units(c8, 34, 1, 0, k) == 0     # 32 CTAs do not fit beside the clusters: one launch
    assert be.wg_rest_units(c8, 30, 1, 0, k) == 0     # every unit resident: one launch
    assert be.wg_rest_units(c8, 32, 2, 0, k) == 0     # two twins
    assert be.wg_rest_units(c8, 32, 1, 8, k) == 0     # inv CTAs
    assert be.wg_rest_units(c4, 32, 1, 0, k) == 0     # 17-32 rows: off by default
    assert be.wg_rest_units("pti_wg_bf16_f32_m4_c4", 64, 1, 0, k) == 0   # a form without a rest form
    monkeypatch.setenv("PTI_WG_REST32", "1")
    be.wg_rest = wg_rest_setting()
    assert be.wg_rest_units(c4, 32, 1, 0, k) == 2 and be.wg_rest_units(c4, 32, 1, 0, short) == 2
    assert be.wg_rest_units(c4, 34, 1, 0, k) == 0 and be.wg_rest_units(c4, 32, 2, 0, k) == 0
    assert be.wg_rest_units(c8, 32, 1, 0, k) == 2     # the 64-row split stays
    monkeypatch.setenv("PTI_WG_REST32", "2")          # the long K only: down, not O
    be.wg_rest = wg_rest_setting()
    assert be.wg_rest_units(c4, 32, 1, 0, k) == 2 and be.wg_rest_units(c4, 32, 1, 0, short) == 0
    assert be.wg_rest_units(c8, 32, 1, 0, short) == 2
    monkeypatch.setenv("PTI_WG_REST", "0")            # each form its own setting
    be.wg_rest = wg_rest_setting()
    assert be.wg_rest_units(c8, 32, 1, 0, k) == 0 and be.wg_rest_units(c4, 32, 1, 0, k) == 2
    be.wg_split_a_sm = {d8: 2}                        # the rest form not loaded
    assert be.wg_rest_units(c4, 32, 1, 0, k) == 0
    # PTI_WG_REST_TWINS (default 0): two twins' launch as one split launch a twin, where one twin's would be split
    be.wg_split_a_sm = {d8: 2, d4: 2}
    monkeypatch.setenv("PTI_WG_REST", "1")
    be.wg_rest, be.wg_rest_twins = wg_rest_setting(), wg_rest_twins_setting()
    assert not be.wg_rest_twins and not be.wg_twins_apart(c8, 32, 2, 0, k)
    monkeypatch.setenv("PTI_WG_REST_TWINS", "1")
    be.wg_rest_twins = wg_rest_twins_setting()
    assert be.wg_twins_apart(c8, 32, 2, 0, k) and be.wg_twins_apart(c8, 32, 2, 0, short)
    assert be.wg_rest_units(c4, 32, 1, 0, k) == 2 and not be.wg_twins_apart(c4, 32, 2, 0, k)   # m4_c8: not apart
    assert not be.wg_twins_apart(c8, 32, 1, 0, k)     # one twin: its own split, one launch pair
    assert not be.wg_twins_apart(c8, 30, 2, 0, k)     # each twin's units resident: one launch
    assert not be.wg_twins_apart(c8, 32, 2, 8, k)     # inv CTAs
    assert not be.wg_twins_apart(c8, 48, 2, 0, k)     # QKV's 48 units: the 18 left over do not fit the free slots
    assert not be.wg_twins_apart("pti_wg_bf16_f32_m2_c4", 32, 2, 0, k)
    # both parts of a split launch ask for at least WG_SMEM_TWO: no SM takes a third CTA
    assert CudaBackend.wg_split_smem(1000) == WG_SMEM_TWO and CudaBackend.wg_split_smem(WG_SMEM_TWO + 4) == WG_SMEM_TWO + 4
    for name, v, read in (("PTI_WG_REST", "yes", wg_rest_setting), ("PTI_WG_REST32", "3", wg_rest_setting),
                          ("PTI_WG_REST_TWINS", "2", wg_rest_twins_setting)):
        monkeypatch.setenv(name, v)
        with pytest.raises(PtiError, match=name):
            read()
        monkeypatch.delenv(name)


def test_hopper_x_first_setting(monkeypatch):
    """PTI_WG_X_FIRST (1 unless 0; a clear error otherwise) sets bit 2 of the Hopper launch's h16 word, which
    the kernel's residual form reads (x read ahead of the stores): the source tests that bit.  (Both settings'
    bits: tests/gpu/test_kernels_gpu.py, the residual form's test.)"""
    import re
    from pti_cli.backends.compile import kernel_source
    from pti_cli.backends.cuda import wg_x_first
    from pti_cli.errors import PtiError
    monkeypatch.delenv("PTI_WG_X_FIRST", raising=False)
    assert wg_x_first() is True
    monkeypatch.setenv("PTI_WG_X_FIRST", "0")
    assert wg_x_first() is False
    for bad in ("yes", "", "2"):
        monkeypatch.setenv("PTI_WG_X_FIRST", bad)
        with pytest.raises(PtiError, match="PTI_WG_X_FIRST"):
            wg_x_first()
    src = kernel_source()
    assert re.search(r"x_first = TOUT == 0 && po != nullptr && \(a\.h16 & 4\) != 0;", src)


def test_mm_smem_setting(monkeypatch):
    """PTI_MM_SMEM (A/B): bytes the policy kernels ask at least; a bad value is a PtiError, not a traceback."""
    from pti_cli.backends.cuda import mm_smem
    from pti_cli.errors import PtiError
    monkeypatch.delenv("PTI_MM_SMEM", raising=False)
    assert mm_smem() == 0
    monkeypatch.setenv("PTI_MM_SMEM", "34000")
    assert mm_smem() == 34000
    for bad in ("-1", "lots", str(300 * 1024)):
        monkeypatch.setenv("PTI_MM_SMEM", bad)
        with pytest.raises(PtiError, match="PTI_MM_SMEM"):
            mm_smem()


def test_hopper_spread_holds_a_grid_to_two_ctas_a_sm_when_waves_allow(monkeypatch):
    """WG_SMEM_TWO is m8's shared memory: two CTAs of it fit a H100/H200 SM (228 KB, 1 KB reserved a CTA), three
    do not, while m2's fits three; wg_launch_smem gives it to a launch of a form that has it only when the grid
    runs in as many waves of two CTAs a SM as of three (PTI_WG_SPREAD=2, the default), when it fits one wave
    of two (1), and never under PTI_WG_SPREAD=0."""
    from pti_cli.backends.cuda import CudaBackend, WG_SMEM_TWO, WG_VARIANTS, wg_smem
    from pti_cli.errors import PtiError
    sm = 228 * 1024
    m2 = next(v for v in WG_VARIANTS["x"] if v[1] == "m2")
    assert WG_SMEM_TWO == wg_smem(8, 2, 4) and 2 * (WG_SMEM_TWO + 1024) <= sm < 3 * (WG_SMEM_TWO + 1024)
    assert 3 * (wg_smem(*m2[2:6]) + 1024) <= sm
    be = object.__new__(CudaBackend)
    be.sm_count, be.smem, be.smem_two = 132, {"a_m2": wg_smem(*m2[2:6]), "a_m4": 93312}, {"a_m2": WG_SMEM_TWO}
    be.ctas_a_sm = {"a_m2": 3}
    monkeypatch.delenv("PTI_WG_SPREAD", raising=False)
    # as many waves at two a SM as at three: 1-264 (one) and 397-528 (two) CTAs; not 265-396 or 529 and more
    grids = (1, 224, 264, 265, 396, 397, 448, 528, 529, 792, 1002, 2004)
    two = [c for c in grids if be.wg_launch_smem("a_m2", c) == WG_SMEM_TWO]
    assert two == [1, 224, 264, 397, 448, 528]
    assert all(be.wg_launch_smem("a_m2", c) == be.smem["a_m2"] for c in grids if c not in two)
    assert be.wg_launch_smem("a_m4", 224) == be.wg_launch_smem("a_m4", 448) == 93312
    monkeypatch.setenv("PTI_WG_SPREAD", "1")   # session 33's rule: one wave of two only
    assert [c for c in grids if be.wg_launch_smem("a_m2", c) == WG_SMEM_TWO] == [1, 224, 264]
    monkeypatch.setenv("PTI_WG_SPREAD", "0")
    assert be.wg_launch_smem("a_m2", 224) == be.smem["a_m2"]
    monkeypatch.setenv("PTI_WG_SPREAD", "yes")
    with pytest.raises(PtiError, match="PTI_WG_SPREAD"):
        be.wg_launch_smem("a_m2", 224)


def test_hopper_twin_form_of_the_narrow_class(monkeypatch):
    """wg_kernel: two twins of the narrow class take clusters of 4 in the 16-row form at 9-16 rows a twin
    (WG_TWIN_SETTINGS, m2_c4; PTI_WG_TWIN_FORMS=1, the default), the wide class too under 2, neither under 0 (the
    classes' own m4_c8 / m4_c4), the narrow class clusters of 2 under 3 (m2_c2, A/B); one model never; 17-64 rows and the tall class keep their forms.  The form fits
    three CTAs a SM (so 64 clusters of 4 fit the H200's 92 at once) and its 8 slices split evenly over 4 ranks,
    an element pair a rank."""
    import torch as t
    from pti_cli.backends.cuda import (CudaBackend, WG_TWIN_FORM, WG_TWIN_FORM_C2, WG_TWIN_SETTINGS, WG_TWIN_VARIANTS,
                                       wg_smem, wg_variants)
    from pti_cli.errors import PtiError
    _, suffix, mt, pb, slots, c, fix = WG_TWIN_FORM
    assert WG_TWIN_VARIANTS == {"n": (WG_TWIN_FORM, WG_TWIN_FORM_C2), "w": (WG_TWIN_FORM,)}
    assert c == 4 and not fix and 3 * (wg_smem(mt, pb, slots, c) + 1024) <= 228 * 1024 and (8 * mt // 2) // 2 == c
    # m2_c2 (PTI_WG_TWIN_FORMS=3): one CTA a SM by its shared memory, two element pairs a rank
    _, _, mt, pb, slots, c, fix = WG_TWIN_FORM_C2
    assert c == 2 and not fix and 228 * 1024 < 2 * (wg_smem(mt, pb, slots, c) + 1024) and (8 * mt // 2) // 2 == 2 * c
    assert WG_TWIN_SETTINGS["3"] == {"n": WG_TWIN_FORM_C2}
    monkeypatch.delenv("PTI_WG_FIX", raising=False)
    be = object.__new__(CudaBackend)
    be.sm_count, be.wg_table = 132, wg_variants()
    name = lambda m, tw, rows=4096: be.wg_kernel(m, t.float32, rows=rows, twins=tw)   # noqa: E731
    for setting, narrow, wide in ((None, "m2_c4", False), ("1", "m2_c4", False), ("2", "m2_c4", True), ("0", None, False),
                                  ("3", "m2_c2", False)):
        if setting is None:
            monkeypatch.delenv("PTI_WG_TWIN_FORMS", raising=False)
        else:
            monkeypatch.setenv("PTI_WG_TWIN_FORMS", setting)
        for m in (9, 16):
            assert name(m, 2) == ((f"pti_wg_bf16_f32_{narrow}", 16, int(narrow[-1]), 0) if narrow
                                  else ("pti_wg_bf16_f32_m4_c8", 32, 8, 0))
            assert name(m, 2, 6144)[0].endswith("_m2_c4" if wide else "_m4_c4")
            assert name(m, 1)[0].endswith("_m4_c8") and name(m, 2, 28672)[0].endswith("_m2")
        assert name(17, 2)[0].endswith("_m4_c8") and name(32, 2, 6144)[0].endswith("_m4_c4") and name(33, 2)[0].endswith("_m8_c8")
    monkeypatch.setenv("PTI_WG_TWIN_FORMS", "c4")
    with pytest.raises(PtiError, match="PTI_WG_TWIN_FORMS"):
        name(16, 2)


def test_hopper_tall_16_row_form_for_one_model_and_two_twins(monkeypatch):
    """wg_kernel: 9-16 rows of a tall matrix take the m2 form (16 tile rows), one model or two twins (the default,
    PTI_WG_M2=2); PTI_WG_M2=1 keeps two twins on the 32-row form (m4, session 33's path), PTI_WG_M2=0 one model
    too; 17-32 rows m4; the narrow class has no 16-row form."""
    import torch as t
    from pti_cli.backends.cuda import CudaBackend, wg_variants
    monkeypatch.delenv("PTI_WG_FIX", raising=False)
    m2, m4 = ("pti_wg_bf16_glu_m2", 16), ("pti_wg_bf16_glu_m4", 32)
    for setting, one_model, twins in ((None, m2, m2), ("2", m2, m2), ("1", m2, m4), ("0", m4, m4)):
        if setting is None:
            monkeypatch.delenv("PTI_WG_M2", raising=False)
        else:
            monkeypatch.setenv("PTI_WG_M2", setting)
        be = object.__new__(CudaBackend)
        be.sm_count, be.wg_table = 132, wg_variants()
        assert be.wg_kernel(12, t.bfloat16, glu=True)[:2] == one_model
        assert be.wg_kernel(16, t.bfloat16, glu=True, twins=2)[:2] == twins
        assert be.wg_kernel(17, t.float32)[:2] == be.wg_kernel(17, t.float32, twins=2)[:2] == ("pti_wg_bf16_f32_m4", 32)
        assert be.wg_kernel(17, t.bfloat16, glu=True, twins=2)[:2] == m4
        assert be.wg_kernel(12, t.float32, rows=4096)[0].endswith("_m4_c8")   # (two twins: the test above)
