#!/usr/bin/env python3
"""Read-bandwidth probes on the GPU (diagnostics for the matmul kernels' memory side):
grid-stride reads, one contiguous chunk per CTA (the matmuls' pattern), the same
looped by persistent CTAs, and cp.async.bulk rings into shared memory.
    python3 scripts/read_probe.py"""

import ctypes
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402
from cuda.bindings import driver  # noqa: E402

from pti_cli.backends.compile import compile_nvrtc  # noqa: E402

SRC = r'''
typedef unsigned long long u64;
extern "C" __global__ void grid_stride(const uint4* p, u64 n, unsigned* out) {
    unsigned a = 0; u64 s = (u64)gridDim.x * blockDim.x, i = (u64)blockIdx.x * blockDim.x + threadIdx.x;
    for (; i + 3 * s < n; i += 4 * s) { uint4 v0 = p[i], v1 = p[i + s], v2 = p[i + 2 * s], v3 = p[i + 3 * s];
        a ^= v0.x ^ v1.y ^ v2.z ^ v3.w; }
    out[blockIdx.x * blockDim.x + threadIdx.x] = a;
}
// chunk c (c16 words) per CTA step; CTA b takes chunks b, b + gridDim.x, ...; 8 loads in flight per thread
extern "C" __global__ void chunked(const uint4* p, u64 n, u64 c16, unsigned* out) {
    unsigned a = 0;
    for (u64 c = blockIdx.x; c * c16 < n; c += gridDim.x) {
        const uint4* q = p + c * c16;
        for (u64 i = threadIdx.x; i < c16; i += 8 * blockDim.x) {
            uint4 v[8];
#pragma unroll
            for (int u = 0; u < 8; ++u) v[u] = i + u * blockDim.x < c16 ? q[i + u * blockDim.x] : make_uint4(0,0,0,0);
#pragma unroll
            for (int u = 0; u < 8; ++u) a ^= v[u].x ^ v[u].w;
        }
    }
    out[blockIdx.x * blockDim.x + threadIdx.x] = a;
}
__device__ unsigned sa(const void* p) { unsigned r; asm("{ .reg .u64 t; cvta.to.shared.u64 t, %1; cvt.u32.u64 %0, t; }" : "=r"(r) : "l"(p)); return r; }
// bulk ring: ST stages of SB bytes; CTA b streams chunks b, b + gridDim.x, ... of SB bytes
extern "C" __global__ void bulk_ring(const unsigned char* p, u64 nbytes, int SB, int ST, int fence, unsigned* out) {
    extern __shared__ __align__(128) unsigned char sm[];
    unsigned bars = sa(sm), ring = bars + 128;
    u64 nchunks = nbytes / SB;
    int items = blockIdx.x < nchunks ? (int)((nchunks - 1 - blockIdx.x) / gridDim.x + 1) : 0;
    if (threadIdx.x == 0) {
        for (int s = 0; s < ST; ++s) asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" :: "r"(bars + 8 * s));
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
        for (int j = 0; j < ST && j < items; ++j) {
            asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" :: "r"(bars + 8 * j), "r"(SB) : "memory");
            asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
                :: "r"(ring + j * SB), "l"(p + (blockIdx.x + (u64)j * gridDim.x) * SB), "r"(SB), "r"(bars + 8 * j) : "memory");
        }
    }
    __syncthreads();
    unsigned a = 0;
    for (int j = 0; j < items; ++j) {
        int s = j % ST; unsigned done;
        do { asm volatile("{ .reg .pred q; mbarrier.try_wait.parity.shared::cta.b64 q, [%1], %2; selp.u32 %0, 1, 0, q; }"
                          : "=r"(done) : "r"(bars + 8 * s), "r"((j / ST) & 1) : "memory"); } while (!done);
        const uint4* st = (const uint4*)(sm + 128 + s * SB);
        for (int i = threadIdx.x; i < SB / 16; i += blockDim.x) { uint4 v = st[i]; a ^= v.x ^ v.w; }
        __syncthreads();
        int jn = j + ST;
        if (threadIdx.x == 0 && jn < items) {
            if (fence) asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
            asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" :: "r"(bars + 8 * s), "r"(SB) : "memory");
            asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
                :: "r"(ring + s * SB), "l"(p + (blockIdx.x + (u64)jn * gridDim.x) * SB), "r"(SB), "r"(bars + 8 * s) : "memory");
        }
    }
    out[blockIdx.x * blockDim.x + threadIdx.x] = a;
}
'''


def main():
    torch.cuda.init()
    torch.empty(1, device="cuda")
    cu = compile_nvrtc(SRC, "sm_90")
    mod = driver.cuModuleLoadData(cu.binary)[1]
    f = {n: driver.cuModuleGetFunction(mod, n.encode())[1] for n in ("grid_stride", "chunked", "bulk_ring")}
    driver.cuFuncSetAttribute(f["bulk_ring"], driver.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                              220 * 1024)
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    nbytes = 4 << 30
    buf = torch.empty(nbytes, dtype=torch.uint8, device="cuda").random_()
    out = torch.empty(1 << 26, dtype=torch.int32, device="cuda")   # one word per thread of the largest grid
    stream = torch.cuda.current_stream().cuda_stream

    def timed(name, grid, args, types, smem=0):
        def go():
            driver.cuLaunchKernel(f[name], grid, 1, 1, 256, 1, 1, smem, stream, (args, types), 0)
        go()
        torch.cuda.synchronize()
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        for _ in range(5):
            go()
        b.record()
        torch.cuda.synchronize()
        return nbytes * 5 / (a.elapsed_time(b) / 1e3) / 1e9

    P = (buf.data_ptr(), nbytes // 16, out.data_ptr())
    print(f"grid_stride {sms * 8} CTAs: {timed('grid_stride', sms * 8, P, (ctypes.c_void_p, ctypes.c_uint64, ctypes.c_void_p)):.0f} GB/s")
    for chunk in (64 << 10, 256 << 10):
        for grid in (nbytes // chunk, sms, 2 * sms, 4 * sms):
            gbs = timed("chunked", grid, (buf.data_ptr(), nbytes // 16, chunk // 16, out.data_ptr()),
                        (ctypes.c_void_p, ctypes.c_uint64, ctypes.c_uint64, ctypes.c_void_p))
            print(f"chunked chunk {chunk >> 10} KB grid {grid}: {gbs:.0f} GB/s")
    for sb, st, per, fence in ((16384, 4, 1, 1), (16384, 4, 1, 0), (16384, 8, 1, 0), (16384, 12, 1, 0),
                               (16384, 4, 2, 0), (32768, 6, 1, 0), (65536, 3, 1, 0), (8192, 12, 1, 0)):
        smem = 128 + sb * st
        gbs = timed("bulk_ring", sms * per, (buf.data_ptr(), nbytes, sb, st, fence, out.data_ptr()),
                    (ctypes.c_void_p, ctypes.c_uint64, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_void_p), smem)
        print(f"bulk_ring stage {sb >> 10} KB x {st} stages, {per} CTA/SM, proxy fence {fence}: {gbs:.0f} GB/s")


if __name__ == "__main__":
    main()
