#!/usr/bin/env python3
"""Does a programmatic dependent launch start early on this card, in a stream and inside a
captured CUDA graph?  A one-CTA kernel spins for 50 us after triggering its dependents; the next
kernel (256 or 1024 CTAs of 256 threads, 0 or 70 KB of dynamic shared memory each) records when
its CTAs enter (before griddepcontrol.wait) and when the wait returns, on the global timer.
On sm_90+ also with the next kernel launched in clusters of 2 (session 52: the K-split pairs, clusters of two,
lost 1-2.4 us a launch against the same work in plain CTAs; does a clustered grid still start early?).
    python3 scripts/pdl_probe.py"""

import ctypes
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402
from cuda.bindings import driver  # noqa: E402

from pti_cli.backends.compile import compile_nvrtc  # noqa: E402
from pti_cli.backends.cuda import _cu, launch_kernel  # noqa: E402

SRC = r'''
typedef unsigned long long u64;
__device__ __forceinline__ u64 now() { u64 t; asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)); return t; }
extern "C" __global__ void spin(u64 ns, u64* t) {
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
    asm volatile("griddepcontrol.wait;" ::: "memory");
    if (threadIdx.x == 0) {
        u64 s = now(); t[0] = s;
        while (now() < s + ns) {}
        t[1] = now();
    }
}
extern "C" __global__ void probe(u64* t) {
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
    u64 e = now();
    asm volatile("griddepcontrol.wait;" ::: "memory");
    u64 w = now();
    if (threadIdx.x == 0) { atomicMin(t + 2, e); atomicMax(t + 3, e); atomicMin(t + 4, w); }
}
'''


def main() -> None:
    torch.zeros(1, device="cuda")
    _cu(driver.cuInit(0), "cuInit")
    major, minor = torch.cuda.get_device_capability()
    mod = _cu(driver.cuModuleLoadData(compile_nvrtc(SRC, f"sm_{major}{minor}").binary), "load")
    spin = _cu(driver.cuModuleGetFunction(mod, b"spin"), "spin")
    probe = _cu(driver.cuModuleGetFunction(mod, b"probe"), "probe")
    _cu(driver.cuFuncSetAttribute(probe, driver.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                  100 * 1024), "attr")
    t = torch.zeros(8, dtype=torch.int64, device="cuda")
    P, U = ctypes.c_void_p, ctypes.c_uint64

    def run(ctas: int, smem: int, pdl: bool, cluster: int):
        # t: spin start, spin end, first entry (min), last entry (max), first wait return (min)
        t.zero_()
        t[2:5].fill_(2 ** 62)   # (a kernel: no host copy, so it can be captured)
        t[3:4].zero_()
        s = torch.cuda.current_stream().cuda_stream
        launch_kernel(driver, spin, (1,), (32,), 0, s, ((50_000, t.data_ptr()), (U, P)), pdl, "spin")
        launch_kernel(driver, probe, (ctas,), (256,), smem, s, ((t.data_ptr(),), (P,)), pdl, "probe", cluster)

    clusters = (0, 2) if major >= 9 else (0,)
    print(f"{'how':>6} {'pdl':>4} {'CTAs':>5} {'smem':>6} {'cl':>3} | first entry, last entry, wait returns (us after the spin starts); spin ends")
    for how in ("graph", "stream"):
        for pdl in (False, True):
            for ctas, smem, cluster in ((c, m, cl) for c, m in ((256, 0), (256, 70 * 1024), (1024, 70 * 1024))
                                        for cl in clusters):
                if how == "stream":
                    run(ctas, smem, pdl, cluster)
                else:
                    g = torch.cuda.CUDAGraph()
                    side = torch.cuda.Stream()
                    with torch.cuda.stream(side):
                        run(ctas, smem, pdl, cluster)   # warm
                    torch.cuda.synchronize()
                    with torch.cuda.graph(g):
                        run(ctas, smem, pdl, cluster)
                    g.replay()
                torch.cuda.synchronize()
                v = t.tolist()
                print(f"{how:>6} {int(pdl):>4} {ctas:>5} {smem:>6} {cluster:>3} | {(v[2] - v[0]) / 1e3:8.1f} {(v[3] - v[0]) / 1e3:8.1f} "
                      f"{(v[4] - v[0]) / 1e3:8.1f}; {(v[1] - v[0]) / 1e3:.1f}")


if __name__ == "__main__":
    main()
