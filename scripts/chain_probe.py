#!/usr/bin/env python3
"""The floor of one kernel per matrix (GPU machine): the 8b pass's weight reads (QKV, O, gate/up,
down per layer, 32 layers, then the output head) as a CUDA graph of read-only kernels with the
matmuls' memory pattern and no arithmetic, chained with programmatic dependent launch as the pass
is; and one persistent kernel reading the same matrices with a grid barrier between them.  Compared
with one streaming kernel over the same bytes, it says what a dependency per matrix costs by itself
(docs/perf.md, session 10, item 3).  Also the chain with no wait (no dependency), with the wait at
each CTA's end, and with a dependency per row group (a flag byte each CTA publishes, polled by the
next kernel: dataflow) instead of the wait (session 18, item 4).  Then each matrix shape alone, its copies chained (the setting of
`pti bench --kernels`).
    python3 scripts/chain_probe.py"""

import ctypes
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402
from cuda.bindings import driver  # noqa: E402

from pti_cli.backends.compile import compile_nvrtc  # noqa: E402
from pti_cli.backends.cuda import launch_kernel  # noqa: E402
from pti_cli.bench_kernels import time_graph  # noqa: E402

SRC = r'''
typedef unsigned long long u64;
// The CTA's reads folded into one word per lane of out, so that no load is optimised away.
__device__ __forceinline__ void cta_out(unsigned a, unsigned* out) {
    __shared__ unsigned red[256];
    red[threadIdx.x] = a;
    __syncthreads();
    if (threadIdx.x < 32) {
        unsigned r = 0;
        for (int i = threadIdx.x; i < 256; i += 32) r ^= red[i];
        out[blockIdx.x * 32 + threadIdx.x] = r;
    }
}
// One CTA per row group of 16 rows (nb blocks of 512 weight bytes + 32 scale bytes), 8 warps, warp w
// reading blocks w, w + 8, ... U at a time, as the matmul kernels do; EARLY: the first step before
// griddepcontrol.wait; WAIT: 0 before the loads (the dependency a matmul has), 1 never (no data
// dependency: the kernel's CTAs read beside the previous kernel's last ones), 2 at the CTA's end only
// (so that the next kernel's wait still covers this one's predecessor).
template <int U, int EARLY, int WAIT = 0>
__device__ void rg_read(const uint4* q, const unsigned* s, int nb, unsigned* out) {
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const uint4* qp = q + ((u64)blockIdx.x * nb + warp) * 32 + lane;
    const unsigned* sp = s + ((u64)blockIdx.x * nb + warp) * 8 + (lane >> 2);
    unsigned a = 0;
    uint4 v[U]; unsigned sv[U];
    int b = warp;
    if (EARLY) {
#pragma unroll
        for (int u = 0; u < U; ++u) if (b + 8 * u < nb) { v[u] = qp[u * 8 * 32]; sv[u] = sp[u * 8 * 8]; }
    }
    if (WAIT == 0) asm volatile("griddepcontrol.wait;" ::: "memory");
    for (; b < nb; b += 8 * U, qp += 8 * U * 32, sp += 8 * U * 8) {
        if (!EARLY || b != warp) {
#pragma unroll
            for (int u = 0; u < U; ++u) if (b + 8 * u < nb) { v[u] = __ldg(qp + u * 8 * 32); sv[u] = __ldg(sp + u * 8 * 8); }
        }
#pragma unroll
        for (int u = 0; u < U; ++u) if (b + 8 * u < nb) a ^= v[u].x ^ v[u].y ^ v[u].z ^ v[u].w ^ sv[u];
    }
    cta_out(a, out);
    if (WAIT == 2) asm volatile("griddepcontrol.wait;" ::: "memory");
}
extern "C" __global__ void __launch_bounds__(256, 2) rg_read_u4_nowait(const uint4* q, const unsigned* s, int nb, unsigned* out) { rg_read<4, 0, 1>(q, s, nb, out); }
extern "C" __global__ void __launch_bounds__(256, 2) rg_read_u4_endwait(const uint4* q, const unsigned* s, int nb, unsigned* out) { rg_read<4, 0, 2>(q, s, nb, out); }
// Dataflow between the chained kernels, as a matmul whose inputs come from the matrix before could
// have it: no griddepcontrol.wait before the loads (unless wait_start); before using a step's blocks a
// warp makes sure the producer's row groups those blocks take their activations from have published
// their flag (one byte a row group, 1 when done), scanning the flags from its high-water mark, 512 at a
// time (16 a lane), with an acquire fence once they are; at its end the CTA publishes its own flag
// (a fence, then the byte) and waits for its predecessor grid (so that the next kernel's wait still
// covers the grids before).  Consumer block b of nb takes producer row groups up to (b + 1) prg / nb.
template <int V>
__device__ __forceinline__ void flow_ensure(const unsigned char* pf, int prg, int need, int& H, int lane, int* sH) {
    if (V == 2 && H < need) H = max(H, *(volatile int*)sH);   // another warp of the CTA may have seen more
    if (H >= need) return;
    bool first = true;
    while (H < need) {
        if (V == 2 && !first) __nanosleep(256);
        first = false;
        const int base = (H & ~15) + 16 * lane;
        uint4 v = make_uint4(0x01010101u, 0x01010101u, 0x01010101u, 0x01010101u);
        if (base < prg) v = __ldcg((const uint4*)(pf + base));
        unsigned w[4] = {v.x, v.y, v.z, v.w};
        int lead = 0;
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            unsigned m = __vcmpeq4(w[i], 0x01010101u);   // 0xff per ready byte
            int n = m == 0xffffffffu ? 4 : (__ffs(~m) - 1) / 8;
            if (lead == 4 * i) lead += n;
        }
        for (int i = 0; i < 16; ++i) if (base + i >= prg && lead == i) lead = 16;   // past the end: ready
        const unsigned full = __ballot_sync(0xffffffffu, lead == 16);
        const int fl = full == 0xffffffffu ? 32 : __ffs(~full) - 1;
        const int add = fl == 32 ? 0 : __shfl_sync(0xffffffffu, lead, fl);
        H = (H & ~15) + 16 * fl + add;
    }
    if (V == 2 && lane == 0) atomicMax(sH, H);
    asm volatile("fence.acq_rel.gpu;" ::: "memory");
}
template <int V>
__device__ void rg_flow(const uint4* q, const unsigned* s, int nb, unsigned* out, const unsigned char* pf, int prg,
                        unsigned char* myf, int wait_start) {
    constexpr int U = 4;
    __shared__ int sH;
    if (threadIdx.x == 0) sH = 0;
    __syncthreads();
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const uint4* qp = q + ((u64)blockIdx.x * nb + warp) * 32 + lane;
    const unsigned* sp = s + ((u64)blockIdx.x * nb + warp) * 8 + (lane >> 2);
    unsigned a = 0;
    int H = 0;
    if (wait_start) asm volatile("griddepcontrol.wait;" ::: "memory");
    for (int b = warp; b < nb; b += 8 * U, qp += 8 * U * 32, sp += 8 * U * 8) {
        uint4 v[U]; unsigned sv[U];
#pragma unroll
        for (int u = 0; u < U; ++u) if (b + 8 * u < nb) { v[u] = __ldg(qp + u * 8 * 32); sv[u] = __ldg(sp + u * 8 * 8); }
        if (pf) {
            const int bmax = min(nb - 1, b + 8 * (U - 1));
            flow_ensure<V>(pf, prg, min(prg, (int)(((long long)(bmax + 1) * prg + nb - 1) / nb)), H, lane, &sH);
        }
#pragma unroll
        for (int u = 0; u < U; ++u) if (b + 8 * u < nb) a ^= v[u].x ^ v[u].y ^ v[u].z ^ v[u].w ^ sv[u];
    }
    cta_out(a, out);
    __syncthreads();
    if (threadIdx.x == 0) {
        __threadfence();
        ((volatile unsigned char*)myf)[blockIdx.x] = 1;
    }
    if (!wait_start) asm volatile("griddepcontrol.wait;" ::: "memory");
}
extern "C" __global__ void __launch_bounds__(256, 2) rg_flow_u4(const uint4* q, const unsigned* s, int nb, unsigned* out,
        const unsigned char* pf, int prg, unsigned char* myf, int wait_start) { rg_flow<1>(q, s, nb, out, pf, prg, myf, wait_start); }
// V 2: the CTA's warps share their high-water mark (shared memory), and back off 256 ns between polls
extern "C" __global__ void __launch_bounds__(256, 2) rg_flow2_u4(const uint4* q, const unsigned* s, int nb, unsigned* out,
        const unsigned char* pf, int prg, unsigned char* myf, int wait_start) { rg_flow<2>(q, s, nb, out, pf, prg, myf, wait_start); }
extern "C" __global__ void __launch_bounds__(256, 2) rg_read_u4(const uint4* q, const unsigned* s, int nb, unsigned* out) { rg_read<4, 0>(q, s, nb, out); }
extern "C" __global__ void __launch_bounds__(256, 2) rg_read_u4_early(const uint4* q, const unsigned* s, int nb, unsigned* out) { rg_read<4, 1>(q, s, nb, out); }
extern "C" __global__ void __launch_bounds__(256, 2) rg_read_u8(const uint4* q, const unsigned* s, int nb, unsigned* out) { rg_read<8, 0>(q, s, nb, out); }
// Chunks of 64 KB (16 loads of 16 bytes per thread, U = 4 in flight), chunk c by CTA c % gridDim.x.
__device__ __forceinline__ unsigned chunk_read(const uint4* p, u64 n16, u64 c) {
    unsigned a = 0;
    const uint4* q = p + c * 4096 + threadIdx.x;
    const u64 left = n16 - c * 4096;
#pragma unroll
    for (int j = 0; j < 16; j += 4) {
        uint4 v[4];
#pragma unroll
        for (int u = 0; u < 4; ++u) v[u] = (u64)(j + u) * 256 + threadIdx.x < left ? __ldg(q + (j + u) * 256) : make_uint4(0, 0, 0, 0);
#pragma unroll
        for (int u = 0; u < 4; ++u) a ^= v[u].x ^ v[u].y ^ v[u].z ^ v[u].w;
    }
    return a;
}
// One launch per matrix: a CTA per 64 KB chunk.
extern "C" __global__ void __launch_bounds__(256) chunks_one(const uint4* p, u64 n16, unsigned* out) {
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
    asm volatile("griddepcontrol.wait;" ::: "memory");
    unsigned a = chunk_read(p, n16, blockIdx.x);
    if (a == 0x9e3779b9u) out[0] = a;
}
// One persistent launch for all matrices (all CTAs resident): matrix i's chunks spread over the CTAs,
// then a grid barrier (a counter; every CTA adds 1 and waits for (i + 1) x gridDim.x) before matrix
// i + 1, as a dependent matmul would need.  early: the CTA's first chunk of matrix i + 1 requested
// before the barrier (weights do not depend on it).
extern "C" __global__ void __launch_bounds__(256, 2) chunks_persistent(const u64* ptrs, const u64* n16s, int nm,
                                                                     unsigned* bar, int early, unsigned* out) {
    unsigned a = 0;
    uint4 pre[16];
    int have = 0;
    for (int i = 0; i < nm; ++i) {
        const uint4* p = (const uint4*)ptrs[i];
        const u64 n16 = n16s[i], nch = (n16 + 4095) / 4096;
        for (u64 c = blockIdx.x; c < nch; c += gridDim.x) {
            if (have && c == blockIdx.x) {
#pragma unroll
                for (int j = 0; j < 16; ++j) a ^= pre[j].x ^ pre[j].w;
                have = 0;
            } else {
                a ^= chunk_read(p, n16, c);
            }
        }
        if (i + 1 < nm && early) {   // the next matrix's first chunk of this CTA, into registers
            const uint4* pn = (const uint4*)ptrs[i + 1];
            const u64 nn = n16s[i + 1];
            if ((u64)blockIdx.x * 4096 < nn) {
                const uint4* q = pn + (u64)blockIdx.x * 4096 + threadIdx.x;
                const u64 left = nn - (u64)blockIdx.x * 4096;
#pragma unroll
                for (int j = 0; j < 16; ++j) pre[j] = (u64)j * 256 + threadIdx.x < left ? __ldg(q + j * 256) : make_uint4(0, 0, 0, 0);
                have = 1;
            }
        }
        __syncthreads();
        if (threadIdx.x == 0) {
            __threadfence();
            atomicAdd(bar, 1u);
            const unsigned want = (unsigned)(i + 1) * gridDim.x;
            while (*(volatile unsigned*)bar < want) {}
            __threadfence();
        }
        __syncthreads();
    }
    if (a == 0x9e3779b9u) out[0] = a;
}
extern "C" __global__ void grid_stride(const uint4* p, u64 n, unsigned* out) {
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
    asm volatile("griddepcontrol.wait;" ::: "memory");
    unsigned a = 0; u64 st = (u64)gridDim.x * blockDim.x, i = (u64)blockIdx.x * blockDim.x + threadIdx.x;
    for (; i + 3 * st < n; i += 4 * st) { uint4 v0 = p[i], v1 = p[i + st], v2 = p[i + 2 * st], v3 = p[i + 3 * st];
        a ^= v0.x ^ v1.y ^ v2.z ^ v3.w; }
    for (; i < n; i += st) a ^= p[i].x;
    if (a == 0x9e3779b9u) out[0] = a;
}
'''

# (row groups, blocks per row) of the 8b pass's matrices, per layer, then the output head
LAYER = ((384, 128), (256, 128), (1792, 128), (256, 448))
HEAD = (3072, 128)


def main():
    torch.cuda.init()
    torch.empty(1, device="cuda")
    cu = compile_nvrtc(SRC, "sm_90")
    mod = driver.cuModuleLoadData(cu.binary)[1]
    names = ("rg_read_u4", "rg_read_u4_early", "rg_read_u4_nowait", "rg_read_u4_endwait", "rg_flow_u4", "rg_flow2_u4", "rg_read_u8", "grid_stride", "chunks_one", "chunks_persistent")
    f = {n: driver.cuModuleGetFunction(mod, n.encode())[1] for n in names}
    mats = [m for _ in range(32) for m in LAYER] + [HEAD]
    bufs = [(torch.empty(g * nb * 512, dtype=torch.uint8, device="cuda"),
             torch.empty(g * nb * 32, dtype=torch.uint8, device="cuda"), g, nb) for g, nb in mats]
    total = sum(q.numel() + s.numel() for q, s, _, _ in bufs)
    flat = torch.empty(total, dtype=torch.uint8, device="cuda")
    out = torch.empty(1 << 20, dtype=torch.int32, device="cuda")
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    P, I = ctypes.c_void_p, ctypes.c_int

    def stream():
        return torch.cuda.current_stream().cuda_stream

    def chain(name, pdl):
        def go():
            for q, s, g, nb in bufs:
                launch_kernel(driver, f[name], (g,), (256,), 0, stream(),
                              ((q.data_ptr(), s.data_ptr(), nb, out.data_ptr()), (P, P, I, P)), pdl, name)
        return go

    def per_matrix_stride(pdl):
        def go():
            for q, s, g, nb in bufs:
                for t in (q, s):
                    launch_kernel(driver, f["grid_stride"], (sms * 4,), (512,), 0, stream(),
                                  ((t.data_ptr(), t.numel() // 16, out.data_ptr()), (P, ctypes.c_uint64, P)), pdl, "gs")
        return go

    def one_stream():
        launch_kernel(driver, f["grid_stride"], (sms * 4,), (512,), 0, stream(),
                      ((flat.data_ptr(), flat.numel() // 16, out.data_ptr()), (P, ctypes.c_uint64, P)), True, "gs")

    # the chunked probes: each matrix's weights and scales as one array
    arrays = [torch.empty(q.numel() + s.numel(), dtype=torch.uint8, device="cuda") for q, s, _, _ in bufs]
    ptrs = torch.tensor([t.data_ptr() for t in arrays], dtype=torch.int64, device="cuda")
    n16s = torch.tensor([t.numel() // 16 for t in arrays], dtype=torch.int64, device="cuda")
    bar = torch.zeros(1, dtype=torch.int32, device="cuda")

    def chunks_chain():
        for t in arrays:
            launch_kernel(driver, f["chunks_one"], (-(-t.numel() // 65536),), (256,), 0, stream(),
                          ((t.data_ptr(), t.numel() // 16, out.data_ptr()), (P, ctypes.c_uint64, P)), True, "c1")

    def persistent(early, per_sm=2):
        def go():
            bar.zero_()
            launch_kernel(driver, f["chunks_persistent"], (sms * per_sm,), (256,), 0, stream(),
                          ((ptrs.data_ptr(), n16s.data_ptr(), len(arrays), bar.data_ptr(), early, out.data_ptr()),
                           (P, P, I, P, I, P)), False, "cp")
        return go

    # the dataflow chain: a flag byte per row group of every matrix (reset at the graph's start)
    offs, o = [], 0
    for _, _, g, _ in bufs:
        offs.append(o)
        o += -(-g // 16) * 16
    flags = torch.zeros(o, dtype=torch.uint8, device="cuda")

    def flow(which, kern="rg_flow_u4"):
        """which(i): 'wait' (griddepcontrol.wait first, as after the attention) or 'flow' for matrix i."""
        def go():
            flags.zero_()
            for i, (q, s, g, nb) in enumerate(bufs):
                w = which(i)
                pf = flags.data_ptr() + offs[i - 1] if (i and w == "flow") else 0
                prg = bufs[i - 1][2] if i else 0
                launch_kernel(driver, f[kern], (g,), (256,), 0, stream(),
                              ((q.data_ptr(), s.data_ptr(), nb, out.data_ptr(), pf, prg, flags.data_ptr() + offs[i],
                                int(w == "wait")), (P, P, I, P, P, I, P, I)), True, "flow")
        return go

    floor = time_graph(one_stream, 10)
    bw = total / floor
    print(f"{len(bufs)} matrices, {total / 1e9:.3f} GB; one streaming kernel over the same bytes: "
          f"{floor * 1e3:.3f} ms ({bw / 1e9:.0f} GB/s)")
    for label, fn in (("row-group reads, U=4, PDL", chain("rg_read_u4", True)),
                      ("row-group reads, U=4, no PDL", chain("rg_read_u4", False)),
                      ("row-group reads, U=4, first step before the wait, PDL", chain("rg_read_u4_early", True)),
                      ("row-group reads, U=4, PDL, no wait (no dependency)", chain("rg_read_u4_nowait", True)),
                      ("row-group reads, U=4, PDL, the wait at the CTA's end", chain("rg_read_u4_endwait", True)),
                      ("flags: every matrix waits (griddepcontrol.wait), flags published", flow(lambda i: "wait")),
                      ("flags: dataflow but O (after the attention) waits", flow(lambda i: "wait" if i == 0 or (i < 128 and i % 4 == 1) else "flow")),
                      ("flags: dataflow everywhere", flow(lambda i: "wait" if i == 0 else "flow")),
                      ("flags, shared mark + backoff: dataflow but O waits", flow(lambda i: "wait" if i == 0 or (i < 128 and i % 4 == 1) else "flow", "rg_flow2_u4")),
                      ("flags, shared mark + backoff: dataflow everywhere", flow(lambda i: "wait" if i == 0 else "flow", "rg_flow2_u4")),
                      ("row-group reads, U=8, PDL", chain("rg_read_u8", True)),
                      ("grid-stride kernel per matrix (weights, scales), PDL", per_matrix_stride(True)),
                      ("64 KB chunks, a kernel per matrix, PDL", chunks_chain),
                      ("64 KB chunks, one persistent kernel, barrier per matrix", persistent(0)),
                      ("  the same, next array's first chunk before the barrier", persistent(1)),
                      ("  the same, 1 CTA per SM", persistent(1, 1))):
        t = time_graph(fn, 10)
        print(f"{label:<58} {t * 1e3:.3f} ms  ({total / t / 1e9:.0f} GB/s, {100 * floor / t:.1f}% of one kernel; "
              f"{(t - floor) / len(bufs) * 1e6:.2f} us a matrix above it)", flush=True)
    for g, nb in LAYER:   # one shape at a time: its 32 copies chained (the kernel table's setting)
        same = [b for b in bufs if b[2:] == (g, nb)]
        nbytes = sum(q.numel() + s.numel() for q, s, _, _ in same)

        def go(same=same):
            for q, s, g_, nb_ in same:
                launch_kernel(driver, f["rg_read_u4"], (g_,), (256,), 0, stream(),
                              ((q.data_ptr(), s.data_ptr(), nb_, out.data_ptr()), (P, P, I, P)), True, "rg")
        t = time_graph(go, 10) / len(same)
        print(f"{g * 16}x{nb * 32}: row-group reads, U=4, PDL, 32 copies chained: {t * 1e6:.2f} us a matrix, "
              f"{100 * nbytes / len(same) / t / bw:.1f}% of the streaming kernel's bandwidth", flush=True)


if __name__ == "__main__":
    main()
