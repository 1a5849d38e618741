"""PROTOTYPE probe (session 15, docs/perf.md item 10; removed after commit, kept in history):
scripts/proto_epilogue.hip's plain 8-warp kernel with pieces of pti_finish added, against the policy
kernel on 28672x4096 at 1 and 16 rows (outputs compared with the policy's).
    python3 scripts/proto_epilogue_probe.py"""
import math, re, sys
from pathlib import Path
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import torch
from cuda.bindings import driver
from pti_cli.backends.cuda import CudaBackend, launch_kernel, _cu, mm_carveout, set_carveout
from pti_cli.backends.compile import compile_nvrtc
from pti_cli.bench_kernels import random_packs, time_graph, read_bandwidth, WORKING_SET

be = CudaBackend()
src = open('kernels/pti_kernel.hip').read()
src = re.sub(r'^PTI_TC_ALL\(.*\)$', '', src, flags=re.M)
src = src.replace('#endif  // PTI_CUDA', open('scripts/proto_epilogue.hip').read() + '\n#endif  // PTI_CUDA')
mod = _cu(driver.cuModuleLoadData(compile_nvrtc(src, 'sm_90').binary), 'load')
denom = read_bandwidth(be)["denominator"]
print(f"read bandwidth {denom / 1e9:.0f} GB/s", flush=True)
W16 = False
shapes = ((28672, 4096),)
protos = {(28672, 1): ["ep0_m1_u2", "ep1_m1_u2", "ep2_m1_u2", "ep4_m1_u2", "ep7_m1_u2"],
          (28672, 16): ["ep0_m2_u1", "ep7_m2_u1"]}
for n, k in shapes:
    one = random_packs(be, n, k, 1)[0]
    copies = max(2, math.ceil(WORKING_SET / one.nbytes))
    packs = [one] + random_packs(be, n, k, copies - 1)
    reps = max(20, 2 * copies)
    for m in (1, 16):
        x = torch.randn(m, k, device=be.device).bfloat16()
        name = be.kernel_name(1, m, be.act_dtype, be.act_dtype, rows=n)
        ref = torch.full((m, n), float('nan'), device=be.device).bfloat16()
        be.launch([one], [x], [ref], name)
        ys = [torch.empty(m, n, device=be.device, dtype=torch.bfloat16) for _ in range(2)]
        t = time_graph(lambda: [be.launch([packs[i % copies]], [x], [ys[i % 2]], name) for i in range(reps)]) / reps
        nbytes = one.nbytes + 2 * m * k + 2 * m * n
        print(f"{n}x{k} M={m:<2} {name.split('_', 4)[4]:18} {t * 1e6:7.2f} us {100 * nbytes / t / denom:5.1f}%", flush=True)
        for kn in protos[(n, m)]:
            nw = 8
            f = _cu(driver.cuModuleGetFunction(mod, kn.encode()), kn)
            if mm_carveout() is not None:
                set_carveout(driver, f, mm_carveout(), kn)
            smem = nw * 4 * 128 * 4 if W16 else 16384 + 512 + 16 * 512   # item 8's run / the policy's
            def go(pk, y):
                _, vals, types = be.launch_args(name, [pk], [x], [y])
                launch_kernel(be._drv, f, (-(-n // 16),), (32 * nw,), smem, torch.cuda.current_stream().cuda_stream,
                              (vals, types), be.pdl, kn)
            got = torch.full((m, n), float('nan'), device=be.device).bfloat16()
            go(one, got)
            torch.cuda.synchronize()
            diff = ((got.float() - ref.float()).norm() / ref.float().norm()).item()
            t = time_graph(lambda: [go(packs[i % copies], ys[i % 2]) for i in range(reps)]) / reps
            print(f"{n}x{k} M={m:<2} {kn:18} {t * 1e6:7.2f} us {100 * nbytes / t / denom:5.1f}%  "
                  f"same bits: {torch.equal(got, ref)}, rel diff {diff:.1e}", flush=True)
    del packs, one
    torch.cuda.empty_cache()
