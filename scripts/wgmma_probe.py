#!/usr/bin/env python3
"""The wgmma probe (scripts/wgmma_probe.cu) on the H200: its registers and spills, whether its outputs
have the policy kernels' bits, and its time next to the policy's, rotating copies past the L2 as
`pti bench --kernels` does.
    python3 scripts/wgmma_probe.py [--compile-only] [--variants A,B,...] [--shapes NxK,...] [--no-pdl]
    (--compile-only: no GPU, NVRTC's report)
    python3 scripts/wgmma_probe.py --launch VARIANT N K M (two launches of one variant, for ncu)"""

import ctypes
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pti_cli.backends.compile import compile_nvrtc, kernel_source  # noqa: E402

HERE = Path(__file__).resolve().parent
# session 22's best of each width (one unit a step, slices over a cluster), then session 23's lean form
VARIANTS = ["m2_u4_w2", "m4_u2_w2", "m8_u2_w2"]
# b blocks a phase, d blocks of weights ahead in registers, g blocks' wgmmas a wait, f blocks ahead into L2
# (prefetch; 0: none), o the launch bounds' CTAs a SM
VARIANTS += [f"m{m}_w{w}_b{b}_d{d}_g{g}_f{f}_o{o}" for m, w, b, d, g, f, o in (
    (2, 2, 8, 4, 1, 0, 2), (2, 2, 8, 8, 2, 0, 1), (2, 2, 8, 4, 1, 16, 2), (4, 1, 4, 4, 1, 0, 3),
    (4, 2, 8, 4, 1, 0, 2), (4, 2, 8, 4, 2, 0, 1), (4, 2, 8, 8, 1, 0, 1), (4, 1, 4, 4, 1, 16, 3),
    (4, 2, 8, 4, 2, 16, 1), (8, 1, 4, 2, 1, 0, 2), (8, 1, 4, 4, 1, 0, 2), (8, 1, 8, 8, 1, 0, 2),
    (8, 1, 4, 4, 2, 0, 2), (8, 2, 4, 2, 1, 0, 2), (8, 2, 4, 4, 1, 0, 1), (8, 2, 4, 2, 2, 0, 1),
    (8, 1, 4, 2, 1, 8, 2), (8, 1, 4, 2, 1, 16, 2), (8, 1, 4, 4, 2, 16, 2), (8, 2, 4, 2, 2, 16, 1))]
# session 24's long form: c CTAs a cluster, each taking 8 / c slices in sequence
VARIANTS += ["m8_w2_b4_d2_o2_c4", "m8_w1_b4_d2_o2_c4", "m8_w1_b4_d4_o2_c4", "m8_w1_b4_d2_o2_c2", "m8_w1_b4_d4_o2_c2",
             "m8_w1_b2_d2_o1_c1", "m4_w2_b8_d4_o2_c4", "m4_w2_b8_d4_o2_c2"]
# session 25's ring form: r stages of b blocks' weights and scales, bulk copies
RING = ["m8_w4_b4_r4_o1_c8", "m8_w4_b4_r3_o1_c8", "m8_w4_b2_r6_o1_c8", "m8_w4_b2_r8_o1_c8", "m8_w2_b2_r6_o2_c8", "m8_w2_b4_r3_o2_c8", "m8_w4_b2_r4_o1_c4", "m4_w4_b4_r4_o1_c8", "m4_w4_b2_r8_o1_c8", "m4_w2_b4_r4_o2_c8",
        "m8_w4_b2_r4_o1_c1", "m8_w4_b4_r3_o1_c1", "m8_w2_b2_r6_o2_c1", "m8_w1_b2_r3_o4_c1", "m4_w4_b4_r4_o1_c1", "m4_w2_b4_r4_o2_c1",
        "m4_w1_b2_r4_o4_c1", "m8_w2_b2_r4_o2_c1", "m4_w2_b2_r8_o2_c1", "m4_w2_b2_r4_o3_c1",
        "m4_w2_b4_r4_o2_c1_l1", "m8_w2_b2_r4_o2_c1_l1", "m8_w2_b2_r6_o2_c1_l1", "m4_w2_b4_r4_o2_c8_l1", "m8_w4_b2_r4_o1_c4_l1",
        "m4_w2_b4_r3_o2_c1_x1", "m4_w2_b2_r6_o2_c1_x1", "m8_w2_b2_r4_o2_c1_x1", "m4_w2_b4_r4_o2_c8_x1", "m8_w4_b2_r3_o1_c4_x1",
        "m4_w2_b2_r4_o2_c8_x1", "m4_w2_b4_r3_o2_c4_x1", "m4_w1_b2_r4_o4_c4_x1", "m4_w1_b4_r3_o4_c8_x1", "m8_w2_b2_r4_o2_c8_x1", "m4_w2_b2_r4_o3_c8_x1", "m8_w1_b2_r3_o3_c4_x1", "m8_w4_b2_r3_o1_c8_x1",
        "m4_w2_b4_r3_o2_c1_x1_e1", "m8_w2_b2_r4_o2_c1_x1_e1", "m4_w2_b4_r3_o2_c4_x1_e1", "m4_w2_b2_r4_o3_c8_x1_e1", "m4_w1_b4_r3_o4_c8_x1_e1", "m8_w4_b2_r3_o1_c4_x1_e1", "m8_w2_b2_r4_o2_c8_x1_e1", "m8_w1_b2_r3_o3_c4_x1_e1",
        "m4_w2_b4_r3_o2_c1_x1_i1", "m8_w2_b2_r4_o2_c1_x1_i1", "m4_w2_b4_r3_o2_c4_x1_i1", "m4_w2_b2_r4_o3_c8_x1_i1", "m4_w1_b4_r3_o4_c8_x1_i1", "m8_w4_b2_r3_o1_c4_x1_i1", "m8_w1_b2_r3_o3_c4_x1_i1"]
VARIANTS += RING


def probe_source() -> str:
    """pti_kernel.hip's helpers (cut before its tensor-core kernels' instantiations) + the probe."""
    src = kernel_source()
    cut = src.index("#define PTI_TC_K(")
    return src[:cut] + (HERE / "wgmma_probe.cu").read_text() + "\n#endif  // PTI_CUDA\n"


def parts(v: str) -> dict:
    return {p[0]: int(p[1:]) for p in v.split("_")}


def smem_bytes(v: str) -> int:
    p = parts(v)
    nr = 8 * p["m"]
    part = (nr // 2) * 128 * p["w"] * 4
    if "r" in p:   # the ring form: barriers, 3 phases of tiles, r stages of b blocks (weights, scales), sums
        rings = 3 * p["b"] * nr * 64 + p["r"] * p["b"] * 4 * p["w"] * 544
        if p.get("x"):   # the tiles in the ring's slots instead
            rings = p["r"] * p["b"] * (4 * p["w"] * 544 + nr * 64)
        if p["c"] == 8:
            return 128 + max(rings, part)
        return 128 + rings + (1 if p["c"] == 1 else 8 // p["c"]) * part   # c1: one running sum
    if "c" in p:   # the long form: 3 phases of b blocks' tiles, then the 8 / c slices' partial sums
        return 3 * p["b"] * nr * 64 + (8 // p["c"]) * (nr // 2) * 128 * p["w"] * 4
    if "b" in p:   # the lean form: 3 phases of b blocks' tiles; the partial sums reuse them
        return max(3 * p["b"] * nr * 64, part)
    if "s" in p:   # the cp.async ring: S stages of U blocks (tile + each warp's weights and scales)
        return p["s"] * p["u"] * (nr * 64 + 4 * p["w"] * 544) + part
    return 2 * p["u"] * nr * 64 + part


def block_sequence(c: int, nb: int):
    """[c ranks][8 / c slices x nb / 8 blocks]: the file block at each step of a cluster rank's sequence
    (pti_wg_seq_block: slices r, r + c, ..., block b of a slice at r + 8 b)."""
    import torch
    nblk = nb // 8
    j = torch.arange((8 // c) * nblk)
    return torch.arange(c)[:, None] + c * (j // nblk)[None, :] + 8 * (j % nblk)[None, :]


def tile_offsets(nr: int):
    """Element offsets, within one block's activation tile (nr rows x 32 k, bf16), of x[row, k], as
    pti_wg_store_half lays them: 8-row groups of 512 bytes, each 4 words w of 128 bytes holding, a row,
    the k pairs 2w of both 8-k pieces of its two 16-k halves."""
    import torch
    r = torch.arange(nr)[:, None]
    k = torch.arange(32)[None, :]
    half, kk = k // 16, k % 16
    return (r >> 3) * 256 + ((kk % 8) // 2) * 64 + (r & 7) * 8 + 4 * half + 2 * (kk // 8) + kk % 2


def x_tiles(x, v: str, nb: int):
    """The activations in the ring form's x1 layout (pti_wg5_mm, XB): [c ranks][sequence of 8 / c slices x
    nb / 8 blocks][tile], rows past x's last repeating it, as the kernel staging them does."""
    import torch
    p = parts(v)
    nr, c = 8 * p["m"], p["c"]
    seq = block_sequence(c, nb)
    rows = torch.arange(nr).clamp(max=x.shape[0] - 1).to(x.device)
    blocks = x[rows, :nb * 32].reshape(nr, nb, 32)[:, seq.to(x.device)]   # [nr, c, seq, 32]
    out = torch.empty(c, seq.shape[1], nr * 32, dtype=x.dtype, device=x.device)
    out[:, :, tile_offsets(nr).flatten().to(x.device)] = blocks.permute(1, 2, 0, 3).reshape(c, seq.shape[1], -1)
    return out


def unit_layout(p, v: str):
    """The i1 variants' weight layout: the backend's blocks with each unit's R row groups interleaved a
    block, [unit][file block][R][512 bytes] (scales [unit][block][R][8 words]), so that a block of a unit
    is one 4 KB copy (R = 8) in any order of blocks."""
    from pti_cli.backends.repack import Packed
    g, nb = p.q.shape[:2]
    r = 4 * parts(v)["w"]

    def perm(t):
        return t.reshape(g // r, r, nb, -1).permute(0, 2, 1, 3).contiguous()
    return Packed(perm(p.q.reshape(g, nb, 512)).reshape(p.q.shape), perm(p.s).reshape(p.s.shape), p.rows, p.cols, p.code)


def ring_layout(p, v: str):
    """The ring form's weight layout (wgmma_probe.cu, pti_wg5_mm): each CTA's blocks contiguous, in its
    sequence of slices, [R row groups] within a block; the scales the same way."""
    from pti_cli.backends.repack import Packed
    g, nb = p.q.shape[:2]
    r, seq = 4 * parts(v)["w"], block_sequence(parts(v)["c"], nb).to(p.q.device)

    def perm(t):   # [unit, row group, block, ...] -> [unit, rank, sequence, row group, ...]
        return t.reshape(g // r, r, nb, -1)[:, :, seq].permute(0, 2, 3, 1, 4).contiguous()
    return Packed(perm(p.q.reshape(g, nb, 512)).reshape(p.q.shape), perm(p.s).reshape(p.s.shape), p.rows, p.cols, p.code)


def main() -> None:
    compiled = compile_nvrtc(probe_source(), "sm_90a", options=("-std=c++17", "-lineinfo", "--ptxas-options=-v"))
    for name, r in sorted(compiled.resources.items()):
        if name.startswith("pti_wg_bf16_out_"):
            print(f"{name:32} {r}")
    for line in compiled.log.splitlines():   # ptxas says when it had to serialize the wgmmas
        if "wgmma" in line.lower():
            print(line)
    if "--compile-only" in sys.argv:
        return
    if "--variants" in sys.argv:   # a comma-separated subset
        VARIANTS[:] = sys.argv[sys.argv.index("--variants") + 1].split(",")
    import torch

    from pti_cli.backends.cuda import CudaBackend, _cu, launch_kernel
    from pti_cli.backends.repack import unpack_q8
    from pti_cli.bench_kernels import WORKING_SET, random_packs, read_bandwidth, time_graph

    be = CudaBackend()
    drv = be._drv
    mod = _cu(drv.cuModuleLoadData(compiled.binary), "load probe")
    fn = {}
    for tag in ("bf16_f32", "bf16_out"):
        for v in VARIANTS:
            f = fn[f"{tag}_{v}"] = _cu(drv.cuModuleGetFunction(mod, f"pti_wg_{tag}_{v}".encode()), v)
            _cu(drv.cuFuncSetAttribute(f, drv.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                       smem_bytes(v)), "smem attr")

    # programmatic dependent launch as the policy's launches (be.pdl); --no-pdl: without (sessions 22-25's calls 1-8)
    pdl = be.pdl and "--no-pdl" not in sys.argv
    ring_packs = {}   # (id(pack), w, c) -> (pack, its ring layout): the pack is kept so its id is not reused
    tile_xs = {}      # (id(x), v) -> (x, its x1 tiles), the same way: built outside the timed launches, as the
                      # kernel producing the activations would write them

    def launch_wg(tag, v, p, x, y):
        m, k = x.shape
        nb = p.q.shape[1]
        c = parts(v).get("c", 8)
        if "r" in parts(v):   # the ring form reads its own layout (cached a pack)
            key = (id(p), parts(v)["w"], c)
            if parts(v).get("i"):
                key = key + ("i",)
            if key not in ring_packs:
                ring_packs[key] = (p, (unit_layout if parts(v).get("i") else ring_layout)(p, v))
            p = ring_packs[key][1]
        xp = x
        if parts(v).get("x"):
            key = (id(x), v)
            if key not in tile_xs:
                tile_xs[key] = (x, x_tiles(x, v, nb))
            xp = tile_xs[key][1]
        vals = (p.q.data_ptr(), p.s.data_ptr(), xp.data_ptr(), y.data_ptr(), m, p.rows, p.cols, nb, x.stride(0), y.stride(0))
        types = (ctypes.c_void_p,) * 4 + (ctypes.c_int,) * 6
        stream = torch.cuda.current_stream().cuda_stream
        launch_kernel(drv, fn[f"{tag}_{v}"], (c * (p.q.shape[0] // (4 * parts(v)["w"])),), (128 * parts(v)["w"],),
                      smem_bytes(v), stream, (vals, types), pdl, v, cluster=c)

    def fits(v, m):
        return 8 * parts(v)["m"] >= m and 8 * parts(v)["m"] < 2 * max(m, 8) + 8

    if "--launch" in sys.argv:
        v, n, k, m = sys.argv[sys.argv.index("--launch") + 1:][:4]
        n, k, m = int(n), int(k), int(m)
        p = random_packs(be, n, k, 1)[0]
        x = torch.randn(m, k, device="cuda").bfloat16()
        y = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
        for _ in range(2):
            launch_wg("bf16_out", v, p, x, y)
        torch.cuda.synchronize()
        return

    # 1. bits: against the policy kernel (float32 outputs), and the error against a float64 reference
    print("\nbits against the policy kernel (float32 outputs), 4096x4096 and 1024x14336")
    for n, k in ((4096, 4096), (1024, 14336)):
        p = random_packs(be, n, k, 1)[0]
        qs, d = unpack_q8(p)
        w64 = (qs.double().reshape(n, -1, 32) * d.double()[:, :, None]).reshape(n, -1)[:, :k]
        for m in (1, 5, 16, 23, 32, 37, 64):
            x = torch.randn(m, k, device="cuda").bfloat16()
            yp = torch.full((m, n), float("nan"), device="cuda")
            pol = be.kernel_name(1, m, torch.bfloat16, torch.float32, rows=n)
            be.launch([p], [x], [yp], pol)
            ref = x.double() @ w64.T
            for v in VARIANTS:
                if m > 8 * parts(v)["m"]:
                    continue
                y = torch.full((m, n), float("nan"), device="cuda")
                launch_wg("bf16_f32", v, p, x, y)
                torch.cuda.synchronize()
                same = (y.view(torch.int32) == yp.view(torch.int32)).float().mean().item()
                err = ((y.double() - ref).norm(dim=1) / ref.norm(dim=1)).max().item()
                print(f"{n}x{k} M={m:<2} {v:10} vs {pol.split('_', 4)[4]:16} same bits {100 * same:6.2f}%  "
                      f"nan {int(torch.isnan(y).sum())}  rel err {err:.2e}", flush=True)

    # 2. time: policy against the probe's variants, bf16 outputs as the bench
    denom = read_bandwidth(be)["denominator"]
    print(f"\nread bandwidth {denom / 1e9:.0f} GB/s; us per call (% of it), t / t(policy, M = 1)")
    shapes = ((28672, 4096), (4096, 14336), (6144, 4096), (4096, 4096))
    if "--shapes" in sys.argv:   # a comma-separated subset, NxK
        shapes = [tuple(map(int, a.split("x"))) for a in sys.argv[sys.argv.index("--shapes") + 1].split(",")]
    for n, k in shapes:
        one = random_packs(be, n, k, 1)[0]
        copies = max(2, -(-WORKING_SET // one.nbytes))
        packs = [one] + random_packs(be, n, k, copies - 1)
        reps = max(20, 2 * copies)
        t1 = None
        for m in (1, 16, 32, 64):
            x = torch.randn(m, k, device="cuda").bfloat16()
            y = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
            nbytes = one.nbytes + 2 * m * k + 2 * m * n
            pol = be.kernel_name(1, m, torch.bfloat16, torch.bfloat16, rows=n)
            for _ in range(2 if m == 1 else 1):   # M = 1 twice: the first shape's first timing ran 11% slow
                t = time_graph(lambda: [be.launch([packs[i % copies]], [x], [y], pol) for i in range(reps)]) / reps
            t1 = t if m == 1 else t1
            line = [f"{n}x{k} M={m:<2} policy {pol.split('_', 4)[4]:14} {t * 1e6:7.1f} ({100 * nbytes / t / denom:4.1f}%) x{t / t1:4.2f}"]
            if m > 1:
                for v in VARIANTS:
                    if not fits(v, m):
                        continue
                    tv = time_graph(lambda: [launch_wg("bf16_out", v, packs[i % copies], x, y) for i in range(reps)]) / reps
                    line.append(f"{v} {tv * 1e6:7.1f} ({100 * nbytes / tv / denom:4.1f}%) x{tv / t1:4.2f}")
            print(" | ".join(line), flush=True)
        del packs
        ring_packs.clear()
        tile_xs.clear()
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
