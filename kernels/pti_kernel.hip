// pti kernels: y = x W^T for Q8 (one model) and SSQ16 (both twins in one pass)
// over the load-time repacked layout (docs/ssq-format.md, "In-memory layout").
//
// One source, compiled at run time: by NVRTC to a CUBIN on NVIDIA, by hiprtc
// on AMD.  No headers are included: NVRTC and hiprtc both provide the few
// builtins used here, and the portability header below covers the rest.
//
// Weights (per twin), for row group rg (16 rows) and block b (32 columns):
//   q[rg][b][lane][16] int8: lane = 4g+t holds row g, columns 8t..8t+7 in
//                      bytes 0-7 and row g+8, the same columns, in bytes 8-15
//   s[rg][b][g]        u32: f16 scale of row g (low half), row g+8 (high half)
// A warp's 16-byte loads of one (rg, b) are 512 contiguous bytes and are
// exactly the A fragments of two m16n8k16 MMAs (k permuted inside the block;
// the activations are loaded with the same permutation, which costs nothing:
// thread t's 8 columns are 8 contiguous activations, one 16-byte load).
//
// Batch invariance: an output element is sum over this CTA's 8 warps, in warp
// order, of per-warp sums over the blocks b = warp (mod 8), in block order, of
// fma(scale, block_dot, acc).  block_dot is two chained MMAs whose result for
// one (row, activation row) element depends only on that row's operands.  The
// number of activation rows (MT tiles of 8), the rows per CTA (RG) and the
// unroll (U) change which elements are computed together, never the order of
// any element's sum, so each output row's bits are independent of M and of
// the row's position.  The generic kernel (the HIP path) has its own fixed
// order, also independent of M.

// ---------------------------------------------------------------- portability
#if defined(__HIPCC_RTC__) || defined(__HIP_PLATFORM_AMD__) || defined(__HIP_DEVICE_COMPILE__)
#define PTI_HIP 1
#define PTI_WARP 64  // CDNA/GCN wavefront; the kernels below use shared memory, not shuffles
typedef unsigned long long pti_u64;
__device__ __forceinline__ float pti_f16_to_f32(unsigned short h) {
    return (float)__builtin_bit_cast(_Float16, h);
}
__device__ __forceinline__ unsigned short pti_f32_to_f16(float f) {
    return __builtin_bit_cast(unsigned short, (_Float16)f);
}
#else
#define PTI_CUDA 1
#define PTI_WARP 32
typedef unsigned long long pti_u64;
__device__ __forceinline__ float pti_f16_to_f32(unsigned short h) {
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
    return f;
}
__device__ __forceinline__ unsigned short pti_f32_to_f16(float f) {
    unsigned short h;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));
    return h;
}
#endif

__device__ __forceinline__ float pti_bf16_to_f32(unsigned short h) {
    return __uint_as_float(((unsigned)h) << 16);
}
// Round to nearest even, NaN kept quiet.
__device__ __forceinline__ unsigned short pti_f32_to_bf16(float f) {
    unsigned u = __float_as_uint(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (unsigned short)((u >> 16) | 0x40);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (unsigned short)(u >> 16);
}

// TIN: 0 = bf16 activations, 1 = f16.  TOUT: 0 = f32 output, 1 = same as input.
template <int TIN>
__device__ __forceinline__ float pti_act_to_f32(unsigned short h) {
    return TIN == 0 ? pti_bf16_to_f32(h) : pti_f16_to_f32(h);
}
template <int TIN, int TOUT>
__device__ __forceinline__ void pti_store(void* y, pti_u64 i, float v) {
    if (TOUT == 0) ((float*)y)[i] = v;
    else ((unsigned short*)y)[i] = TIN == 0 ? pti_f32_to_bf16(v) : pti_f32_to_f16(v);
}

// ---------------------------------------------------------- streaming read
// The denominator of the benchmark: how fast this card can read memory.
extern "C" __global__ void pti_stream_read(const uint4* __restrict__ p, pti_u64 n16, unsigned* out) {
    unsigned a = 0;
    const pti_u64 stride = (pti_u64)gridDim.x * blockDim.x;
    pti_u64 i = (pti_u64)blockIdx.x * blockDim.x + threadIdx.x;
    for (; i + 3 * stride < n16; i += 4 * stride) {
        uint4 v0 = p[i], v1 = p[i + stride], v2 = p[i + 2 * stride], v3 = p[i + 3 * stride];
        a ^= v0.x ^ v0.y ^ v0.z ^ v0.w ^ v1.x ^ v1.y ^ v1.z ^ v1.w;
        a ^= v2.x ^ v2.y ^ v2.z ^ v2.w ^ v3.x ^ v3.y ^ v3.z ^ v3.w;
    }
    for (; i < n16; i += stride) { uint4 v = p[i]; a ^= v.x ^ v.y ^ v.z ^ v.w; }
    out[(pti_u64)blockIdx.x * blockDim.x + threadIdx.x] = a;
}

// ------------------------------------------------------------ generic kernel
// Portable and simple: CTA = 256 threads = one row group of 16 rows; thread
// (i, j) owns row i and blocks b = j (mod 16).  Every activation row is
// computed the same way, whatever M.  Used on HIP, and on CUDA as a check.
template <int TIN, int TOUT, int NTW>
__device__ __forceinline__ void pti_mm_generic(
    const signed char* __restrict__ qa, const unsigned* __restrict__ sa,
    const signed char* __restrict__ qb, const unsigned* __restrict__ sb,
    const unsigned short* __restrict__ xa, const unsigned short* __restrict__ xb,
    void* ya, void* yb, int Ma, int Mb, int N, int K, int nb, int ldx, int ldy) {
    __shared__ float part[16][17];
    const int i = threadIdx.x >> 4, j = threadIdx.x & 15;
    const int rg = blockIdx.x;
    const int n = rg * 16 + i;
    const int lane_row = (i & 7) * 4, half = (i >> 3) * 8;
    for (int tw = 0; tw < NTW; ++tw) {
        const signed char* q = tw ? qb : qa;
        const unsigned* s = tw ? sb : sa;
        const unsigned short* x = tw ? xb : xa;
        void* y = tw ? yb : ya;
        const int M = tw ? Mb : Ma;
        for (int m = 0; m < M; ++m) {
            float acc = 0.f;
            for (int b = j; b < nb; b += 16) {
                const pti_u64 blk = (pti_u64)rg * nb + b;
                const unsigned sw = s[blk * 8 + (i & 7)];
                const float d = pti_f16_to_f32((unsigned short)(i < 8 ? sw & 0xffff : sw >> 16));
                float dot = 0.f;
                for (int kk = 0; kk < 32; ++kk) {
                    const int k = b * 32 + kk;
                    const int lane = lane_row + (kk >> 3);
                    const float w = (float)q[blk * 512 + lane * 16 + half + (kk & 7)];
                    const float a = k < K ? pti_act_to_f32<TIN>(x[(pti_u64)m * ldx + k]) : 0.f;
                    dot = __fmaf_rn(w, a, dot);
                }
                acc = __fmaf_rn(d, dot, acc);
            }
            part[i][j] = acc;
            __syncthreads();
            if (j == 0 && n < N) {
                float v = part[i][0];
                for (int jj = 1; jj < 16; ++jj) v += part[i][jj];
                pti_store<TIN, TOUT>(y, (pti_u64)m * ldy + n, v);
            }
            __syncthreads();
        }
    }
}

#define PTI_GENERIC(NAME, TIN, TOUT, NTW)                                                    \
    extern "C" __global__ void __launch_bounds__(256) NAME(                                    \
        const signed char* qa, const unsigned* sa, const signed char* qb, const unsigned* sb,  \
        const unsigned short* xa, const unsigned short* xb, void* ya, void* yb, int Ma,        \
        int Mb, int N, int K, int nb, int ldx, int ldy, int vec_ok) {                          \
        pti_mm_generic<TIN, TOUT, NTW>(qa, sa, qb, sb, xa, xb, ya, yb, Ma, Mb, N, K, nb, ldx,  \
                                       ldy);                                                   \
    }
PTI_GENERIC(pti_mmg_bf16_f32_t1, 0, 0, 1)
PTI_GENERIC(pti_mmg_bf16_f32_t2, 0, 0, 2)
PTI_GENERIC(pti_mmg_bf16_out_t1, 0, 1, 1)
PTI_GENERIC(pti_mmg_bf16_out_t2, 0, 1, 2)
PTI_GENERIC(pti_mmg_f16_f32_t1, 1, 0, 1)
PTI_GENERIC(pti_mmg_f16_f32_t2, 1, 0, 2)
PTI_GENERIC(pti_mmg_f16_out_t1, 1, 1, 1)
PTI_GENERIC(pti_mmg_f16_out_t2, 1, 1, 2)

// ------------------------------------------------------ tensor-core kernel
#if defined(PTI_CUDA)

// 4 int8 (one row, 4 consecutive columns) -> two bf16x2 / f16x2 words, exact.
template <int TIN>
__device__ __forceinline__ void pti_cvt4(unsigned w, unsigned& lo, unsigned& hi) {
    const unsigned u = w ^ 0x80808080u;  // each byte: value + 128
    if (TIN == 0) {
        // fp32 2^23 + byte, minus 2^23 + 128: the integer, exact; its bf16 is
        // the float's high half (at most 8 significant bits).
        const float f0 = __uint_as_float(__byte_perm(u, 0x4b000000u, 0x7440)) - 8388736.f;
        const float f1 = __uint_as_float(__byte_perm(u, 0x4b000000u, 0x7441)) - 8388736.f;
        const float f2 = __uint_as_float(__byte_perm(u, 0x4b000000u, 0x7442)) - 8388736.f;
        const float f3 = __uint_as_float(__byte_perm(u, 0x4b000000u, 0x7443)) - 8388736.f;
        lo = __byte_perm(__float_as_uint(f0), __float_as_uint(f1), 0x7632);
        hi = __byte_perm(__float_as_uint(f2), __float_as_uint(f3), 0x7632);
    } else {
        // f16 1024 + byte, minus 1152, two at a time, exact.
        const unsigned h01 = __byte_perm(u, 0x64646464u, 0x5140);
        const unsigned h23 = __byte_perm(u, 0x64646464u, 0x5342);
        asm("sub.f16x2 %0, %1, %2;" : "=r"(lo) : "r"(h01), "r"(0x64806480u));
        asm("sub.f16x2 %0, %1, %2;" : "=r"(hi) : "r"(h23), "r"(0x64806480u));
    }
}

template <int TIN>
__device__ __forceinline__ void pti_mma(float* c, unsigned a0, unsigned a1, unsigned a2, unsigned a3,
                                        unsigned b0, unsigned b1) {
    if (TIN == 0)
        asm volatile(
            "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
            "{%8,%9}, {%0,%1,%2,%3};"
            : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
            : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
    else
        asm volatile(
            "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
            "{%8,%9}, {%0,%1,%2,%3};"
            : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
            : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

__device__ __forceinline__ uint4 pti_ld_stream(const uint4* p) {
    uint4 v;
    asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(p));
    return v;
}

// Activations of row `row`, columns k0..k0+7, as 4 words of 2 halves; zero
// past M or K (the padded weights there are zero, but 0 * garbage is not).
__device__ __forceinline__ uint4 pti_load_x(const unsigned short* __restrict__ x, int row, int M, int k0,
                                            int K, int ldx, int vec_ok) {
    uint4 v = make_uint4(0, 0, 0, 0);
    if (row >= M) return v;
    const unsigned short* p = x + (pti_u64)row * ldx + k0;
    if (vec_ok && k0 + 8 <= K) return __ldg((const uint4*)p);
    unsigned h[8];
#pragma unroll
    for (int e = 0; e < 8; ++e) h[e] = k0 + e < K ? p[e] : 0u;
    v.x = h[0] | (h[1] << 16);
    v.y = h[2] | (h[3] << 16);
    v.z = h[4] | (h[5] << 16);
    v.w = h[6] | (h[7] << 16);
    return v;
}

__device__ __forceinline__ void pti_cp16(unsigned dst, const void* src, int bytes) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(dst), "l"(src), "r"(bytes) : "memory");
}
__device__ __forceinline__ void pti_cp4(unsigned dst, const void* src) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4;" ::"r"(dst), "l"(src) : "memory");
}
__device__ __forceinline__ void pti_cp_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
template <int N>
__device__ __forceinline__ void pti_cp_wait() { asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory"); }
__device__ __forceinline__ uint4 pti_lds16(unsigned a) {
    uint4 v;
    asm volatile("ld.shared.v4.u32 {%0,%1,%2,%3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "r"(a) : "memory");
    return v;
}
__device__ __forceinline__ unsigned pti_lds4(unsigned a) {
    unsigned v;
    asm volatile("ld.shared.u32 %0, [%1];" : "=r"(v) : "r"(a) : "memory");
    return v;
}

struct PtiArgs {
    const uint4* q[2];
    const unsigned* s[2];
    const unsigned short* x[2];
    void* y[2];
    int M[2];
    int N, K, nb, ldx, ldy, vec_ok;
};

// Per-warp ring slot: U blocks x NTW twins x RG row groups of weights (16 bytes
// a lane) and scales (4 bytes a lane), and, when XS, the activation fragments
// (16 bytes a lane).  Each lane copies (cp.async) and later reads back only its
// own bytes, so no barrier is needed between the copy and the use.
template <int NTW, int RG, int MT, int U, int XS>
struct PtiSlot {
    static constexpr int W = U * NTW * RG * 512;
    static constexpr int SC = U * NTW * RG * 128;
    static constexpr int X = XS ? U * NTW * MT * 512 : 0;
    static constexpr int BYTES = W + SC + X;
};

template <int NTW, int RG, int MT, int U, int XS>
__device__ __forceinline__ void pti_issue(unsigned slot, const PtiArgs& a, int unit, int jb, int warp, int lane) {
    using L = PtiSlot<NTW, RG, MT, U, XS>;
#pragma unroll
    for (int u = 0; u < U; ++u) {
        const int b = warp + 8 * (U * jb + u);
        if (b < a.nb) {
#pragma unroll
            for (int tw = 0; tw < NTW; ++tw)
#pragma unroll
                for (int r = 0; r < RG; ++r) {
                    const int item = (u * NTW + tw) * RG + r;
                    const pti_u64 blk = (pti_u64)(unit * RG + r) * a.nb + b;
                    pti_cp16(slot + item * 512 + lane * 16, (tw ? a.q[1] : a.q[0]) + blk * 32 + lane, 16);
                    pti_cp4(slot + L::W + item * 128 + lane * 4, (tw ? a.s[1] : a.s[0]) + blk * 8 + (lane >> 2));
                }
            if (XS && a.vec_ok) {
#pragma unroll
                for (int tw = 0; tw < NTW; ++tw)
#pragma unroll
                    for (int mt = 0; mt < MT; ++mt) {
                        const int row = mt * 8 + (lane >> 2), k0 = b * 32 + 8 * (lane & 3);
                        const bool ok = row < (tw ? a.M[1] : a.M[0]) && k0 < a.K;   // vec_ok: K % 8 == 0
                        const unsigned short* x = tw ? a.x[1] : a.x[0];
                        pti_cp16(slot + L::W + L::SC + ((u * NTW + tw) * MT + mt) * 512 + lane * 16,
                                 ok ? x + (pti_u64)row * a.ldx + k0 : x, ok ? 16 : 0);   // 0: zero-fill
                    }
            }
        }
    }
}

// The arithmetic of one block (32 columns) for RG row groups of NTW twins and
// MT tiles of 8 activation rows: two chained MMAs per (row group, tile), then
// acc = fma(scale, block sum, acc).  Every kernel variant calls exactly this.
template <int TIN, int NTW, int RG, int MT>
__device__ __forceinline__ void pti_block(const uint4 (&wv)[NTW][RG], const unsigned (&sv)[NTW][RG],
                                          const uint4 (&xv)[NTW][MT], float* acc) {
#pragma unroll
    for (int tw = 0; tw < NTW; ++tw)
#pragma unroll
        for (int r = 0; r < RG; ++r) {
            const uint4 w = wv[tw][r];
            unsigned g01, g23, g45, g67, h01, h23, h45, h67;  // row g / row g+8
            pti_cvt4<TIN>(w.x, g01, g23);
            pti_cvt4<TIN>(w.y, g45, g67);
            pti_cvt4<TIN>(w.z, h01, h23);
            pti_cvt4<TIN>(w.w, h45, h67);
            const float d_lo = pti_f16_to_f32((unsigned short)(sv[tw][r] & 0xffffu));
            const float d_hi = pti_f16_to_f32((unsigned short)(sv[tw][r] >> 16));
#pragma unroll
            for (int mt = 0; mt < MT; ++mt) {
                const uint4 xx = xv[tw][mt];
                float c[4] = {0.f, 0.f, 0.f, 0.f};
                pti_mma<TIN>(c, g01, h01, g23, h23, xx.x, xx.y);
                pti_mma<TIN>(c, g45, h45, g67, h67, xx.z, xx.w);
                float* p = acc + ((tw * RG + r) * MT + mt) * 4;
                p[0] = __fmaf_rn(d_lo, c[0], p[0]);
                p[1] = __fmaf_rn(d_lo, c[1], p[1]);
                p[2] = __fmaf_rn(d_hi, c[2], p[2]);
                p[3] = __fmaf_rn(d_hi, c[3], p[3]);
            }
        }
}

template <int TIN, int NTW, int RG, int MT, int U, int XS>
__device__ __forceinline__ void pti_compute(unsigned slot, const PtiArgs& a, int jb, int warp, int lane, float* acc) {
    using L = PtiSlot<NTW, RG, MT, U, XS>;
#pragma unroll
    for (int u = 0; u < U; ++u) {
        const int b = warp + 8 * (U * jb + u);
        if (b < a.nb) {
            uint4 xv[NTW][MT], wv[NTW][RG];
            unsigned sv[NTW][RG];
#pragma unroll
            for (int tw = 0; tw < NTW; ++tw)
#pragma unroll
                for (int mt = 0; mt < MT; ++mt)
                    xv[tw][mt] = XS && a.vec_ok
                        ? pti_lds16(slot + L::W + L::SC + ((u * NTW + tw) * MT + mt) * 512 + lane * 16)
                        : pti_load_x(tw ? a.x[1] : a.x[0], mt * 8 + (lane >> 2), tw ? a.M[1] : a.M[0],
                                     b * 32 + 8 * (lane & 3), a.K, a.ldx, a.vec_ok);
#pragma unroll
            for (int tw = 0; tw < NTW; ++tw)
#pragma unroll
                for (int r = 0; r < RG; ++r) {
                    const int item = (u * NTW + tw) * RG + r;
                    wv[tw][r] = pti_lds16(slot + item * 512 + lane * 16);
                    sv[tw][r] = pti_lds4(slot + L::W + item * 128 + lane * 4);
                }
            pti_block<TIN, NTW, RG, MT>(wv, sv, xv, acc);
        }
    }
}

// Sum the 8 warps' partial sums in warp order (4 slots at a time), write the
// unit's outputs, and zero the accumulators for the next unit.
template <int TIN, int TOUT, int NTW, int RG, int MT>
__device__ __forceinline__ void pti_finish(const PtiArgs& a, int unit, int warp, int lane, float* acc, float* red) {
    constexpr int S = NTW * RG * MT;
#pragma unroll
    for (int s0 = 0; s0 < S; s0 += 4) {
#pragma unroll
        for (int s = s0; s < s0 + 4 && s < S; ++s)
            *(float4*)&red[(warp * 4 + s - s0) * 128 + lane * 4] =
                make_float4(acc[s * 4], acc[s * 4 + 1], acc[s * 4 + 2], acc[s * 4 + 3]);
        __syncthreads();
        const int nslot = S - s0 < 4 ? S - s0 : 4;
        for (int idx = threadIdx.x; idx < nslot * 128; idx += 256) {
            const int sl = idx >> 7, l = (idx >> 2) & 31, c = idx & 3;
            float v = red[idx];
#pragma unroll
            for (int w = 1; w < 8; ++w) v += red[w * 512 + idx];
            const int slot = s0 + sl;
            const int mt = slot % MT, r = (slot / MT) % RG, tw = slot / (MT * RG);
            const int n = (unit * RG + r) * 16 + (l >> 2) + (c >= 2 ? 8 : 0);
            const int m = mt * 8 + 2 * (l & 3) + (c & 1);
            // tw is a run-time value here: select, don't index (an indexed struct goes to local memory)
            if (n < a.N && m < (tw ? a.M[1] : a.M[0]))
                pti_store<TIN, TOUT>(tw ? a.y[1] : a.y[0], (pti_u64)m * a.ldy + n, v);
        }
        __syncthreads();
    }
#pragma unroll
    for (int i = 0; i < S * 4; ++i) acc[i] = 0.f;
}

// NTW twins (1 or 2), RG row groups per unit, MT tiles of 8 activation rows,
// U blocks per warp per batch, XS: activations through the ring too, ST ring
// slots per warp.  256 threads = 8 warps; warp w owns blocks b = w (mod 8) of
// each unit.  The grid may be smaller than the number of units: a CTA takes
// units blockIdx.x, + gridDim.x, ...; each warp streams its batches through
// all of them with ST - 1 batches of cp.async copies in flight, across unit
// boundaries too.  Dynamic shared memory: 16 KB reduction + 8 rings.
template <int TIN, int TOUT, int NTW, int RG, int MT, int U, int XS, int ST>
__device__ __forceinline__ void pti_mm_tc(const PtiArgs& a) {
    using L = PtiSlot<NTW, RG, MT, U, XS>;
    constexpr int S = NTW * RG * MT;  // accumulator slots of 4 floats per thread
    extern __shared__ __align__(16) unsigned char pti_smem[];
    float* red = (float*)pti_smem;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const unsigned ring = (unsigned)__cvta_generic_to_shared(pti_smem) + 16384 + warp * ST * L::BYTES;
    const int units = ((a.N + 31) / 32) * 2 / RG;
    const int nbat = (a.nb + 8 * U - 1) / (8 * U);
    const int J = ((units - (int)blockIdx.x + (int)gridDim.x - 1) / (int)gridDim.x) * nbat;
    float acc[S * 4];
#pragma unroll
    for (int i = 0; i < S * 4; ++i) acc[i] = 0.f;
    int unit_i = blockIdx.x, jb_i = 0;   // the issue stream's position
    int unit_c = blockIdx.x, jb_c = 0;   // the compute stream's position
#pragma unroll
    for (int st = 0; st < ST - 1; ++st) {
        if (st < J) {
            pti_issue<NTW, RG, MT, U, XS>(ring + st * L::BYTES, a, unit_i, jb_i, warp, lane);
            if (++jb_i == nbat) { jb_i = 0; unit_i += gridDim.x; }
        }
        pti_cp_commit();
    }
    int slot_i = ST - 1, slot_c = 0;
    for (int j = 0; j < J; ++j) {
        if (j + ST - 1 < J) {
            pti_issue<NTW, RG, MT, U, XS>(ring + slot_i * L::BYTES, a, unit_i, jb_i, warp, lane);
            if (++jb_i == nbat) { jb_i = 0; unit_i += gridDim.x; }
        }
        slot_i = slot_i + 1 == ST ? 0 : slot_i + 1;
        pti_cp_commit();
        pti_cp_wait<ST - 1>();   // this lane's copies of batch j have landed
        pti_compute<TIN, NTW, RG, MT, U, XS>(ring + slot_c * L::BYTES, a, jb_c, warp, lane, acc);
        slot_c = slot_c + 1 == ST ? 0 : slot_c + 1;
        if (++jb_c == nbat) {
            pti_finish<TIN, TOUT, NTW, RG, MT>(a, unit_c, warp, lane, acc, red);
            jb_c = 0;
            unit_c += gridDim.x;
        }
    }
}

// The plain variant ("_rl"): one unit per CTA (grid = units), U blocks per warp
// loaded into registers at once, then computed; latency is hidden by other
// warps and CTAs only.  Same per-element arithmetic as the ring kernel.
template <int TIN, int TOUT, int NTW, int RG, int MT, int U>
__device__ __forceinline__ void pti_mm_rl(const PtiArgs& a) {
    constexpr int S = NTW * RG * MT;
    extern __shared__ __align__(16) unsigned char pti_smem[];
    float* red = (float*)pti_smem;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int unit = blockIdx.x;
    float acc[S * 4];
#pragma unroll
    for (int i = 0; i < S * 4; ++i) acc[i] = 0.f;
    for (int b0 = warp; b0 < a.nb; b0 += 8 * U) {
        uint4 wv[U][NTW][RG], xv[U][NTW][MT];
        unsigned sv[U][NTW][RG];
#pragma unroll
        for (int u = 0; u < U; ++u) {
            const int b = b0 + 8 * u;
            if (b < a.nb) {
#pragma unroll
                for (int tw = 0; tw < NTW; ++tw)
#pragma unroll
                    for (int r = 0; r < RG; ++r) {
                        const pti_u64 blk = (pti_u64)(unit * RG + r) * a.nb + b;
                        wv[u][tw][r] = pti_ld_stream((tw ? a.q[1] : a.q[0]) + blk * 32 + lane);
                        sv[u][tw][r] = __ldg((tw ? a.s[1] : a.s[0]) + blk * 8 + (lane >> 2));
                    }
            }
        }
#pragma unroll
        for (int u = 0; u < U; ++u) {
            const int b = b0 + 8 * u;
            if (b < a.nb) {
#pragma unroll
                for (int tw = 0; tw < NTW; ++tw)
#pragma unroll
                    for (int mt = 0; mt < MT; ++mt)
                        xv[u][tw][mt] = pti_load_x(tw ? a.x[1] : a.x[0], mt * 8 + (lane >> 2), tw ? a.M[1] : a.M[0],
                                                   b * 32 + 8 * (lane & 3), a.K, a.ldx, a.vec_ok);
            }
        }
#pragma unroll
        for (int u = 0; u < U; ++u)
            if (b0 + 8 * u < a.nb) pti_block<TIN, NTW, RG, MT>(wv[u], sv[u], xv[u], acc);
    }
    pti_finish<TIN, TOUT, NTW, RG, MT>(a, unit, warp, lane, acc, red);
}

#define PTI_RL(NAME, TIN, TOUT, NTW, RG, MT, U)                                              \
    extern "C" __global__ void __launch_bounds__(256) NAME(                                    \
        const uint4* qa, const unsigned* sa, const uint4* qb, const unsigned* sb,              \
        const unsigned short* xa, const unsigned short* xb, void* ya, void* yb, int Ma,        \
        int Mb, int N, int K, int nb, int ldx, int ldy, int vec_ok) {                          \
        const PtiArgs a = {{qa, qb}, {sa, sb}, {xa, xb}, {ya, yb}, {Ma, Mb},                   \
                           N, K, nb, ldx, ldy, vec_ok};                                        \
        pti_mm_rl<TIN, TOUT, NTW, RG, MT, U>(a);                                               \
    }

#define PTI_TC(NAME, TIN, TOUT, NTW, RG, MT, U, XS, ST)                                       \
    extern "C" __global__ void __launch_bounds__(256) NAME(                                    \
        const uint4* qa, const unsigned* sa, const uint4* qb, const unsigned* sb,              \
        const unsigned short* xa, const unsigned short* xb, void* ya, void* yb, int Ma,        \
        int Mb, int N, int K, int nb, int ldx, int ldy, int vec_ok) {                          \
        const PtiArgs a = {{qa, qb}, {sa, sb}, {xa, xb}, {ya, yb}, {Ma, Mb},                   \
                           N, K, nb, ldx, ldy, vec_ok};                                        \
        pti_mm_tc<TIN, TOUT, NTW, RG, MT, U, XS, ST>(a);                                       \
    }

// Variants: pti_mm_{bf16,f16}_{f32,out}_t{NTW}_r{RG}_m{MT}_u{U}_x{XS}_s{ST}.  The
// host (pti_cli/backends/cuda.py) picks one per call from M alone and sizes the
// dynamic shared memory from the name: 16384 + 8 * ST * slot bytes.
#define PTI_TC_ALL(TAG, TIN, TOUT)                                          \
    PTI_TC(pti_mm_##TAG##_t1_r1_m1_u2_x1_s5, TIN, TOUT, 1, 1, 1, 2, 1, 5)   \
    PTI_TC(pti_mm_##TAG##_t1_r1_m1_u2_x0_s6, TIN, TOUT, 1, 1, 1, 2, 0, 6)   \
    PTI_TC(pti_mm_##TAG##_t1_r2_m1_u2_x1_s4, TIN, TOUT, 1, 2, 1, 2, 1, 4)   \
    PTI_TC(pti_mm_##TAG##_t1_r2_m2_u2_x1_s4, TIN, TOUT, 1, 2, 2, 2, 1, 4)   \
    PTI_TC(pti_mm_##TAG##_t1_r2_m4_u2_x0_s4, TIN, TOUT, 1, 2, 4, 2, 0, 4)   \
    PTI_TC(pti_mm_##TAG##_t2_r1_m1_u2_x1_s4, TIN, TOUT, 2, 1, 1, 2, 1, 4)   \
    PTI_TC(pti_mm_##TAG##_t2_r1_m2_u1_x1_s6, TIN, TOUT, 2, 1, 2, 1, 1, 6)   \
    PTI_RL(pti_mm_##TAG##_t1_r1_m1_u8_rl, TIN, TOUT, 1, 1, 1, 8)            \
    PTI_RL(pti_mm_##TAG##_t1_r2_m1_u4_rl, TIN, TOUT, 1, 2, 1, 4)            \
    PTI_RL(pti_mm_##TAG##_t1_r2_m2_u4_rl, TIN, TOUT, 1, 2, 2, 4)            \
    PTI_RL(pti_mm_##TAG##_t1_r2_m4_u2_rl, TIN, TOUT, 1, 2, 4, 2)            \
    PTI_RL(pti_mm_##TAG##_t1_r2_m8_u2_rl, TIN, TOUT, 1, 2, 8, 2)            \
    PTI_RL(pti_mm_##TAG##_t2_r2_m1_u2_rl, TIN, TOUT, 2, 2, 1, 2)            \
    PTI_RL(pti_mm_##TAG##_t2_r1_m1_u4_rl, TIN, TOUT, 2, 1, 1, 4)            \
    PTI_RL(pti_mm_##TAG##_t2_r2_m2_u2_rl, TIN, TOUT, 2, 2, 2, 2)

PTI_TC_ALL(bf16_f32, 0, 0)
PTI_TC_ALL(bf16_out, 0, 1)
PTI_TC_ALL(f16_f32, 1, 0)
PTI_TC_ALL(f16_out, 1, 1)

#endif  // PTI_CUDA
