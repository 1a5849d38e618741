"""PROTOTYPE probe (session 15; removed in the next commit, kept in history): scripts/proto_px.hip against the
policy at 16 rows on the H200: same bits?, us and % of the read bandwidth.  python3 scripts/proto_px_probe.py"""
import math, re, sys
from pathlib import Path
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import torch
from cuda.bindings import driver
from pti_cli.backends.cuda import CudaBackend, launch_kernel, _cu, Epilogue
from pti_cli.backends.compile import compile_nvrtc
from pti_cli.bench_kernels import random_packs, time_graph, read_bandwidth, WORKING_SET

be = CudaBackend()
src = open('kernels/pti_kernel.hip').read()
src = re.sub(r'^PTI_TC_ALL\(.*\)$', '', src, flags=re.M)
src = src.replace('#endif  // PTI_CUDA', open('scripts/proto_px.hip').read() + '\n#endif  // PTI_CUDA')
mod = _cu(driver.cuModuleLoadData(compile_nvrtc(src, 'sm_90').binary), 'load')
A = driver.CUfunction_attribute
denom = read_bandwidth(be)["denominator"]
print(f"read bandwidth {denom / 1e9:.0f} GB/s", flush=True)
kinds = {"px_m2_u2_g4": (2, 4), "px_m2_u4_g4": (4, 4), "px_m2_u8_g2": (8, 2), "px_m2_u4_g3": (4, 3)}
for n, k in ((28672, 4096), (6144, 4096), (4096, 4096)):
    m = 16
    one = random_packs(be, n, k, 1)[0]
    copies = max(2, math.ceil(WORKING_SET / one.nbytes))
    packs = [one] + random_packs(be, n, k, copies - 1)
    reps = max(20, 2 * copies)
    x = torch.randn(m, k, device=be.device).bfloat16()
    name = be.kernel_name(1, m, be.act_dtype, be.act_dtype, rows=n)
    ref = torch.full((m, n), float('nan'), device=be.device).bfloat16()
    be.launch([one], [x], [ref], name)
    ys = [torch.empty(m, n, device=be.device, dtype=torch.bfloat16) for _ in range(2)]
    t = time_graph(lambda: [be.launch([packs[i % copies]], [x], [ys[i % 2]], name) for i in range(reps)]) / reps
    nbytes = one.nbytes + 2 * m * k + 2 * m * n
    print(f"{n}x{k} M=16 {name.split('_', 4)[4]:22} {t * 1e6:7.2f} us {100 * nbytes / t / denom:5.1f}%", flush=True)
    for kn, (U, GR) in kinds.items():
        f = _cu(driver.cuModuleGetFunction(mod, kn.encode()), kn)
        smem = 2 * 8 * (k + 32) * 2 + GR * 4224 * 4
        _cu(driver.cuFuncSetAttribute(f, A.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, smem), "smem")
        _cu(driver.cuFuncSetAttribute(f, A.CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT, 100), "carveout")
        n_rg = -(-n // 16)
        grid = min(be.sm_count, -(-n_rg // GR))
        def go(pk, y):
            _, vals, types = be.launch_args(name, [pk], [x], [y])
            launch_kernel(be._drv, f, (grid,), (256 * GR,), smem, torch.cuda.current_stream().cuda_stream,
                          (vals, types), be.pdl, kn)
        got = torch.full((m, n), float('nan'), device=be.device).bfloat16()
        go(one, got)
        torch.cuda.synchronize()
        same = torch.equal(got, ref)
        t = time_graph(lambda: [go(packs[i % copies], ys[i % 2]) for i in range(reps)]) / reps
        print(f"{n}x{k} M=16 {kn:22} {t * 1e6:7.2f} us {100 * nbytes / t / denom:5.1f}%  same bits: {same}", flush=True)
    del packs, one
    torch.cuda.empty_cache()
