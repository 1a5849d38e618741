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

// NTW twins (1 or 2), RG row groups per CTA, MT tiles of 8 activation rows,
// U blocks per warp per step (loads in flight).  256 threads, 8 warps.
template <int TIN, int TOUT, int NTW, int RG, int MT, int U>
__device__ __forceinline__ void pti_mm_tc(
    const uint4* __restrict__ qa, const unsigned* __restrict__ sa,
    const uint4* __restrict__ qb, const unsigned* __restrict__ sb,
    const unsigned short* __restrict__ xa, const unsigned short* __restrict__ xb,
    void* ya, void* yb, int Ma, int Mb, int N, int K, int nb, int ldx, int ldy, int vec_ok) {
    constexpr int S = NTW * RG * MT;  // accumulator slots of 4 floats per thread
    __shared__ __align__(16) float red[8][4][128];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int rg0 = blockIdx.x * RG;
    float acc[S * 4];
#pragma unroll
    for (int i = 0; i < S * 4; ++i) acc[i] = 0.f;

    for (int b0 = warp; b0 < nb; b0 += 8 * U) {
        uint4 wv[U][NTW][RG];
        unsigned sv[U][NTW][RG];
        uint4 xv[U][NTW][MT];
#pragma unroll
        for (int u = 0; u < U; ++u) {
            const int b = b0 + 8 * u;
            if (b < nb) {
#pragma unroll
                for (int tw = 0; tw < NTW; ++tw)
#pragma unroll
                    for (int r = 0; r < RG; ++r) {
                        const pti_u64 blk = (pti_u64)(rg0 + r) * nb + b;
                        wv[u][tw][r] = pti_ld_stream((tw ? qb : qa) + blk * 32 + lane);
                        sv[u][tw][r] = __ldg((tw ? sb : sa) + blk * 8 + g);
                    }
            }
        }
#pragma unroll
        for (int u = 0; u < U; ++u) {
            const int b = b0 + 8 * u;
            if (b < nb) {
#pragma unroll
                for (int tw = 0; tw < NTW; ++tw)
#pragma unroll
                    for (int mt = 0; mt < MT; ++mt)
                        xv[u][tw][mt] = pti_load_x(tw ? xb : xa, mt * 8 + g, tw ? Mb : Ma, b * 32 + 8 * t,
                                                   K, ldx, vec_ok);
            }
        }
#pragma unroll
        for (int u = 0; u < U; ++u) {
            const int b = b0 + 8 * u;
            if (b < nb) {
#pragma unroll
                for (int tw = 0; tw < NTW; ++tw)
#pragma unroll
                    for (int r = 0; r < RG; ++r) {
                        const uint4 w = wv[u][tw][r];
                        unsigned g01, g23, g45, g67, h01, h23, h45, h67;  // row g / row g+8
                        pti_cvt4<TIN>(w.x, g01, g23);
                        pti_cvt4<TIN>(w.y, g45, g67);
                        pti_cvt4<TIN>(w.z, h01, h23);
                        pti_cvt4<TIN>(w.w, h45, h67);
                        const float d_lo = pti_f16_to_f32((unsigned short)(sv[u][tw][r] & 0xffffu));
                        const float d_hi = pti_f16_to_f32((unsigned short)(sv[u][tw][r] >> 16));
#pragma unroll
                        for (int mt = 0; mt < MT; ++mt) {
                            const uint4 xx = xv[u][tw][mt];
                            float c[4] = {0.f, 0.f, 0.f, 0.f};
                            pti_mma<TIN>(c, g01, h01, g23, h23, xx.x, xx.y);
                            pti_mma<TIN>(c, g45, h45, g67, h67, xx.z, xx.w);
                            float* a = acc + ((tw * RG + r) * MT + mt) * 4;
                            a[0] = __fmaf_rn(d_lo, c[0], a[0]);
                            a[1] = __fmaf_rn(d_lo, c[1], a[1]);
                            a[2] = __fmaf_rn(d_hi, c[2], a[2]);
                            a[3] = __fmaf_rn(d_hi, c[3], a[3]);
                        }
                    }
            }
        }
    }

    // Sum the 8 warps' partial sums in warp order, 4 slots at a time.
#pragma unroll
    for (int s0 = 0; s0 < S; s0 += 4) {
#pragma unroll
        for (int s = s0; s < s0 + 4 && s < S; ++s)
            *(float4*)&red[warp][s - s0][lane * 4] =
                make_float4(acc[s * 4], acc[s * 4 + 1], acc[s * 4 + 2], acc[s * 4 + 3]);
        __syncthreads();
        const int nslot = S - s0 < 4 ? S - s0 : 4;
        for (int idx = threadIdx.x; idx < nslot * 128; idx += 256) {
            const int sl = idx >> 7, l = (idx >> 2) & 31, c = idx & 3;
            float v = red[0][sl][idx & 127];
#pragma unroll
            for (int w = 1; w < 8; ++w) v += red[w][sl][idx & 127];
            const int slot = s0 + sl;
            const int mt = slot % MT, r = (slot / MT) % RG, tw = slot / (MT * RG);
            const int n = (rg0 + r) * 16 + (l >> 2) + (c >= 2 ? 8 : 0);
            const int m = mt * 8 + 2 * (l & 3) + (c & 1);
            if (n < N && m < (tw ? Mb : Ma)) pti_store<TIN, TOUT>(tw ? yb : ya, (pti_u64)m * ldy + n, v);
        }
        __syncthreads();
    }
}

#define PTI_TC(NAME, TIN, TOUT, NTW, RG, MT, U)                                               \
    extern "C" __global__ void __launch_bounds__(256) NAME(                                    \
        const uint4* qa, const unsigned* sa, const uint4* qb, const unsigned* sb,              \
        const unsigned short* xa, const unsigned short* xb, void* ya, void* yb, int Ma,        \
        int Mb, int N, int K, int nb, int ldx, int ldy, int vec_ok) {                          \
        pti_mm_tc<TIN, TOUT, NTW, RG, MT, U>(qa, sa, qb, sb, xa, xb, ya, yb, Ma, Mb, N, K, nb, \
                                             ldx, ldy, vec_ok);                                \
    }

// Variants: pti_mm_{bf16,f16}_{f32,out}_t{1,2}_r{RG}_m{MT}_u{U}.  The host
// (pti_cli/backends/cuda.py, TC_VARIANTS) picks one per call from M alone.
#define PTI_TC_ALL(TAG, TIN, TOUT)                                 \
    PTI_TC(pti_mm_##TAG##_t1_r1_m1_u8, TIN, TOUT, 1, 1, 1, 8)      \
    PTI_TC(pti_mm_##TAG##_t1_r2_m1_u4, TIN, TOUT, 1, 2, 1, 4)      \
    PTI_TC(pti_mm_##TAG##_t1_r2_m2_u4, TIN, TOUT, 1, 2, 2, 4)      \
    PTI_TC(pti_mm_##TAG##_t1_r2_m4_u2, TIN, TOUT, 1, 2, 4, 2)      \
    PTI_TC(pti_mm_##TAG##_t1_r2_m8_u2, TIN, TOUT, 1, 2, 8, 2)      \
    PTI_TC(pti_mm_##TAG##_t2_r1_m1_u4, TIN, TOUT, 2, 1, 1, 4)      \
    PTI_TC(pti_mm_##TAG##_t2_r2_m1_u2, TIN, TOUT, 2, 2, 1, 2)      \
    PTI_TC(pti_mm_##TAG##_t2_r2_m2_u2, TIN, TOUT, 2, 2, 2, 2)      \
    PTI_TC(pti_mm_##TAG##_t2_r2_m4_u1, TIN, TOUT, 2, 2, 4, 1)      \
    PTI_TC(pti_mm_##TAG##_t2_r1_m8_u1, TIN, TOUT, 2, 1, 8, 1)

PTI_TC_ALL(bf16_f32, 0, 0)
PTI_TC_ALL(bf16_out, 0, 1)
PTI_TC_ALL(f16_f32, 1, 0)
PTI_TC_ALL(f16_out, 1, 1)

#endif  // PTI_CUDA
