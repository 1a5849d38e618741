// pti kernels: y = x W^T for Q8 (one model) and SSQ16 (both twins in one pass)
// over the load-time repacked layout (docs/ssq-format.md, "In-memory layout").
//
// One source, compiled at run time: by NVRTC to a CUBIN on NVIDIA, by hiprtc
// on AMD.  No headers are included: NVRTC and hiprtc both provide the few
// builtins used here, and the portability header below covers the rest.
//
// Weights (per twin), for row group rg (16 rows) and block b (32 columns):
//   q[rg][b][lane][16] int8: lane = 4g+t holds row g, columns 8t..8t+7 in
//                      bytes 0-7 and row g+8, the same columns, in bytes 8-15;
//                      sign-magnitude for the bf16 kernels, offset binary for f16
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
// unroll (U) change which elements are computed together, and the pipelined
// main loop (PF) changes only when the loads are issued, never the order of
// any element's sum, so each output row's bits are independent of M and of
// the row's position (and of the variant).  The generic kernel (the HIP path) has its own fixed
// order, also independent of M.

// ---------------------------------------------------------------- portability
#if defined(__HIP__) || defined(__HIPCC_RTC__) || defined(__HIP_PLATFORM_AMD__) || defined(__HIP_DEVICE_COMPILE__)
#define PTI_HIP 1
#define PTI_WARP 64  // CDNA/GCN wavefront; the kernels below use shared memory, not shuffles
#if !defined(__HIPCC_RTC__)
#include <hip/hip_runtime.h>  // hipcc (the offline check); hiprtc provides these itself
#endif
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

// Programmatic dependent launch (sm_90+; no-ops elsewhere and when a kernel is
// launched without the attribute).  Every kernel triggers its dependents at
// once (the next kernel's CTAs may then be scheduled as this grid's retire,
// hiding the launch gap) and reads or writes global memory only after
// pti_pdl_wait(), which returns once the previous grid has completed and its
// writes are visible, except the pipelined variants' first step of weights (weights never
// change; pti_mm_tc).
__device__ __forceinline__ void pti_pdl_trigger() {
#if defined(PTI_CUDA) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}
__device__ __forceinline__ void pti_pdl_wait() {
#if defined(PTI_CUDA) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

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

// TIN: 0 = bf16 activations, 1 = f16.  TOUT: 0 = f32 output, 1 = same as input, 2 = the
// fused gate/up epilogue (PTI_GLU below).
template <int TIN>
__device__ __forceinline__ float pti_act_to_f32(unsigned short h) {
    return TIN == 0 ? pti_bf16_to_f32(h) : pti_f16_to_f32(h);
}
// bf16_out: f16 inputs that stand for a bf16 model's activations (h16, below) give bf16 outputs.
template <int TIN, int TOUT>
__device__ __forceinline__ void pti_store(void* y, pti_u64 i, float v, bool bf16_out = false) {
    if (TOUT == 0) ((float*)y)[i] = v;
    else ((unsigned short*)y)[i] = TIN == 0 || bf16_out ? pti_f32_to_bf16(v) : pti_f32_to_f16(v);
}

// h16: how a bf16 model hands its matmuls their inputs (pti_cli/gpu_model.py to_h16): the f16
// of the bf16 value times 2^-PTI_H16_SHIFT, exact for 2^-13 <= |v| < 2^20 (a bf16 value has 8
// significant bits, an f16 11); the weights' scales carry 2^PTI_H16_SHIFT (repack.py), so the sums
// are those of the bf16 inputs.  The f16 MMA's weights take 2 instructions per pair, the bf16 MMA's 4.
#define PTI_H16_SHIFT 4
__device__ __forceinline__ unsigned short pti_bf16_to_h16(unsigned short b) {
    return pti_f32_to_f16(__fmul_rn(pti_bf16_to_f32(b), 1.f / (1 << PTI_H16_SHIFT)));
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
    pti_pdl_trigger();
    pti_pdl_wait();
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
                    const int e = (unsigned char)q[blk * 512 + lane * 16 + half + (kk & 7)];
                    // sign-magnitude for bf16 activations, offset binary (w + 128) for f16 (repack.py)
                    const float w = (float)(TIN == 1 ? e - 128 : e & 0x80 ? -(e & 0x7f) : e);
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

// 4 weights of one row (4 consecutive columns) -> two bf16x2 / f16x2 words, exact.
// bf16 (7 mantissa bits, too few for a byte): stored sign-magnitude (bit 7 sign, bits 0-6 |w|;
// the repack writes them so), the sign and magnitude placed under the exponent of 128 give
// +-(128 + |w|); adding -+128 gives w: 2 PRMT + 4 LOP3 + 2 HFMA2 for 4 weights.
// f16: stored offset binary (w + 128), each byte placed under the exponent of 1024 (one PRMT for two
// weights) gives 1152 + w; adding -1152 gives w: 2 PRMT + 2 HADD2 for 4 weights.
// PtiCvt: the masks 0x807f807f, C and 0x80008000 as run-time values held in registers by the
// caller (made from a kernel argument that is always 0).  A LOP3 takes one immediate, so
// (p & mask) | C is one instruction only with the mask and C both in registers; written in C,
// ptxas folds the mask's making into the AND and needs a second LOP3 for the OR (3 LOP3 per
// pair of weights instead of 2: scripts/sass_mix.py counts them), hence the lop3 in PTX.  The f16
// conversion uses km only, holding -1152 in both halves (on sm_80: pti_cvt4).
struct PtiCvt {
    unsigned km, c, ks;
};
template <int TIN>
__device__ __forceinline__ PtiCvt pti_cvt_masks(unsigned zero) {
    return {(TIN == 0 ? 0x807f807fu : 0xe480e480u) ^ zero, 0x43004300u ^ zero, 0x80008000u ^ zero};
}
// LEAN: one register fewer, for variants whose registers are the limit (pti_lean): bf16, v from the
// mask and an immediate C (two LOP3s: ptxas folds the mask into the first); f16, the exponent or-ed
// in after the permute (3 instructions a pair instead of 2).
template <int TIN, bool LEAN = false>
__device__ __forceinline__ void pti_cvt4(unsigned w, unsigned& lo, unsigned& hi, const PtiCvt& k) {
    if (TIN == 1) {   // f16: offset-binary bytes (w + 128) under the exponent of 1024 give 1152 + w
        // -1152 in both halves from k (sm_80) or as a constant (sm_90): the other form leaves a few bytes
        // of spills in some variants there (ptxas' allocation; the same arithmetic)
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
        const unsigned neg = k.km;
#else
        const unsigned neg = 0xe480e480u;
#endif
        unsigned p01, p23;
        if (LEAN) {   // no constant in a register: bytes w0, 0, w1, 0, then the exponent or-ed in
            p01 = __byte_perm(w, 0u, 0x4140) | 0x64006400u;
            p23 = __byte_perm(w, 0u, 0x4342) | 0x64006400u;
        } else {
            p01 = __byte_perm(w, 0x64646464u, 0x4140);   // bytes w0, 0x64, w1, 0x64
            p23 = __byte_perm(w, 0x64646464u, 0x4342);
        }
        asm("add.rn.f16x2 %0, %1, %2;" : "=r"(lo) : "r"(p01), "r"(neg));
        asm("add.rn.f16x2 %0, %1, %2;" : "=r"(hi) : "r"(p23), "r"(neg));
        return;
    }
    constexpr unsigned C = 0x43004300u;      // +128 bf16
    constexpr unsigned ONE = 0x3f803f80u;
    unsigned p01, p23;   // bytes e0, sign(e0), e1, sign(e1) (prmt's sign-replicate mode: selector bit 3)
    asm("prmt.b32 %0, %1, 0, 0x9180;" : "=r"(p01) : "r"(w));
    asm("prmt.b32 %0, %1, 0, 0xb3a2;" : "=r"(p23) : "r"(w));
    unsigned v01, v23, c01, c23;   // v = (p & km) | c, c = (p & ks) ^ (C | 0x80008000): one LOP3 each
    if (LEAN) {
        v01 = (p01 & k.km) | C;
        v23 = (p23 & k.km) | C;
        c01 = (p01 & k.ks) ^ (C | 0x80008000u);
        c23 = (p23 & k.ks) ^ (C | 0x80008000u);
    } else {
        asm("lop3.b32 %0, %1, %2, %3, 0xea;" : "=r"(v01) : "r"(p01), "r"(k.km), "r"(k.c));
        asm("lop3.b32 %0, %1, %2, %3, 0xea;" : "=r"(v23) : "r"(p23), "r"(k.km), "r"(k.c));
        asm("lop3.b32 %0, %1, %2, %3, 0x6a;" : "=r"(c01) : "r"(p01), "r"(k.ks), "n"(C | 0x80008000u));
        asm("lop3.b32 %0, %1, %2, %3, 0x6a;" : "=r"(c23) : "r"(p23), "r"(k.ks), "n"(C | 0x80008000u));
    }
    if (TIN == 0) {
        asm("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(lo) : "r"(v01), "r"(ONE), "r"(c01));
        asm("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(hi) : "r"(v23), "r"(ONE), "r"(c23));
    } else {
        asm("fma.rn.f16x2 %0, %1, %2, %3;" : "=r"(lo) : "r"(v01), "r"(ONE), "r"(c01));
        asm("fma.rn.f16x2 %0, %1, %2, %3;" : "=r"(hi) : "r"(v23), "r"(ONE), "r"(c23));
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

// The same loads without .nc, for loads that must stay on their side of griddepcontrol.wait: ptxas moves
// .nc loads across the wait (SASS ACQBULK) both ways, and keeps coherent ones where they are (docs/perf.md,
// sessions 55-57).  So the weights requested before the wait (the _p1 kernels' first step, PF = 2's slice)
// and every scale are coherent, which keeps them there, and so is every activation load (pti_ld_v4), which
// keeps those after it: with .nc activations NVRTC 13.5 moved them above the wait, a race
// (check_kernels.py --nvdisasm fails on that; scripts/probe_source.py xnc puts it back).  With .nc weights
// or scales in the first step, ptxas put the wait above them in 36 of the 54 _p1 kernels.
__device__ __forceinline__ uint4 pti_ld_stream_pre(const uint4* p) {
    uint4 v;
    asm volatile("ld.global.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(p));
    return v;
}
__device__ __forceinline__ unsigned pti_ld_u32(const unsigned* p) {
    unsigned v;
    asm volatile("ld.global.u32 %0, [%1];" : "=r"(v) : "l"(p));
    return v;
}
__device__ __forceinline__ uint4 pti_ld_v4(const void* p) {
    uint4 v;
    asm volatile("ld.global.v4.u32 {%0,%1,%2,%3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
    return v;
}

// Activations of row `row`, columns k0..k0+7, as 4 words of 2 halves; zero
// past M or K (the padded weights there are zero, but 0 * garbage is not).
__device__ __forceinline__ uint4 pti_load_x(const unsigned short* __restrict__ x, int row, int M, int k0,
                                            int K, int ldx, int vec_ok) {
    uint4 v = make_uint4(0, 0, 0, 0);
    if (row >= M) return v;
    const unsigned short* p = x + (pti_u64)row * ldx + k0;
    if (vec_ok && k0 + 8 <= K) return pti_ld_v4(p);
    unsigned h[8];
#pragma unroll
    for (int e = 0; e < 8; ++e) h[e] = k0 + e < K ? p[e] : 0u;
    v.x = h[0] | (h[1] << 16);
    v.y = h[2] | (h[3] << 16);
    v.z = h[4] | (h[5] << 16);
    v.w = h[6] | (h[7] << 16);
    return v;
}

struct PtiArgs {
    const uint4* q[2];
    const unsigned* s[2];
    const unsigned short* x[2];
    void* y[2];
    int M[2];
    int N, K, nb, ldx, ldy, vec_ok;
    // The RMSNorm split around the matmuls (pti_cli/gpu_model.py, forward).  A matrix that reads
    // the residual stream takes u = bf16(x * g) and scales its sums by each row's
    // inv = rsqrt(sum(pin row) / K + eps) (pin: the row's partial sums of x^2, ng of them; null:
    // no scaling).  A matrix that writes the residual stream (po not null) adds bf16(its sums) into
    // the float32 rows y (= x) and writes the next norm's u = bf16(x * g) and the partial sums of
    // x^2 over each group of 16 columns, po[row][column / 16].
    const float* pin[2];
    int ng;
    float eps;
    const float* inv[2];   // or each row's inv itself (pti_row_inv_rows: for many rows, summed once)
    unsigned short* uo[2];
    float* po[2];
    const float* g[2];
    // Both pin and inv: the launch's first n_inv CTAs (the inv CTAs, ceil(rows / 8); 0 in a test of
    // the fallback) compute the
    // rows' inv from pin into inv (a warp per row, pti_row_inv_rows's arithmetic) and exit; the
    // matmul's CTAs read inv, and if any row is still PTI_INV_PENDING they sum every row from pin
    // themselves (the same bits).  A residual launch given invo sets the next matmul's inv slots to
    // PTI_INV_PENDING.
    float* invo[2];
    int n_inv;
    // Bit 0: the norm parts (uo) and the fused gate/up's outputs are written as h16 (pti_bf16_to_h16),
    // for an h16 matrix after this one.  Bit 1: f16 inputs that are h16 (a bf16 model's), so the
    // plain outputs (TOUT 1) are bf16, not f16.
    int h16;
    // A residual launch given to: u also in the tile layout of tnr rows (pti_wg_tile_at) that the Hopper
    // matmul after it reads, so that no pti_wg_tiles launch sits between them (docs/perf.md, session 30).
    unsigned short* to[2];
    int tnr;
};
// Where pti_wg_tiles puts element (row m, column n) of rows of 32 nb columns in its tile layout of nr rows
// (the Hopper kernels' activations): tile j = (b mod 8) nb / 8 + b / 8 of block b = n / 32, and in it column
// c = 16 h + 8 j' + 2 w + e of row m at (m / 8) 256 + 64 w + 8 (m mod 8) + 4 h + 2 j' + e.
__device__ __forceinline__ pti_u64 pti_wg_tile_at(int m, int n, int nb, int nr) {
    const int b = n >> 5, c = n & 31;
    return (pti_u64)((b & 7) * (nb >> 3) + (b >> 3)) * nr * 32 + (m >> 3) * 256 + ((c >> 1) & 3) * 64 + (m & 7) * 8
           + 4 * (c >> 4) + 2 * ((c >> 3) & 1) + (c & 1);
}

// No inv is this bit pattern (a NaN the hardware never produces: its NaNs are 0x7fffffff).
#define PTI_INV_PENDING 0xffffffffu

// inv of one row from its ng partial sums: lane l adds partials l, l + 32, ... in order, then the
// xor tree.  Every scaled matmul computes it this way, so a row's bits never depend on the kernel.
__device__ __forceinline__ float pti_row_inv(const float* __restrict__ p, int ng, int K, float eps, int lane) {
    float s = 0.f;
    for (int j = lane; j < ng; j += 32) s = __fadd_rn(s, p[j]);
    for (int o = 16; o > 0; o >>= 1) s = __fadd_rn(s, __shfl_xor_sync(0xffffffffu, s, o));
    return rsqrtf(__fdiv_rn(s, (float)K) + eps);
}

// inv of `rows` rows of ng partial sums each (a warp per row), for launches of many rows: their
// CTAs then read one float per row instead of ng.  grid: rows / 8 rounded up, 256 threads.
extern "C" __global__ void __launch_bounds__(256) pti_row_inv_rows(const float* __restrict__ p, int rows, int ng,
                                                                   int K, float eps, float* __restrict__ inv) {
    pti_pdl_trigger();
    pti_pdl_wait();
    const int row = blockIdx.x * 8 + (threadIdx.x >> 5), lane = threadIdx.x & 31;
    if (row >= rows) return;
    const float v = pti_row_inv(p + (pti_u64)row * ng, ng, K, eps, lane);
    if (lane == 0) inv[row] = v;
}

// The arithmetic of one block (32 columns) for RG row groups of NTW twins and
// MT tiles of 8 activation rows: two chained MMAs per (row group, tile), then
// acc = fma(scale, block sum, acc).  Every kernel variant calls exactly this.
// pti_cvt4's LEAN form: the bf16 variants of 4 or more row tiles (over which the conversion is shared),
// the f16 ones of two or more tiles and one block a step (without it, the 64- and 80-register ones
// spill a few bytes; docs/perf.md session 19).
template <int TIN, int MT, int U>
__device__ constexpr bool pti_lean() {
    return TIN == 0 ? MT >= 4 : MT >= 2 && U == 1;
}

template <int TIN, int NTW, int RG, int MT, bool LEAN>
__device__ __forceinline__ void pti_block(const uint4 (&wv)[NTW][RG], const unsigned (&sv)[NTW][RG],
                                          const uint4 (&xv)[NTW][MT], float* acc, const PtiCvt& k) {
#pragma unroll
    for (int tw = 0; tw < NTW; ++tw)
#pragma unroll
        for (int r = 0; r < RG; ++r) {
            const uint4 w = wv[tw][r];
            unsigned g01, g23, g45, g67, h01, h23, h45, h67;  // row g / row g+8
            pti_cvt4<TIN, LEAN>(w.x, g01, g23, k);
            pti_cvt4<TIN, LEAN>(w.y, g45, g67, k);
            pti_cvt4<TIN, LEAN>(w.z, h01, h23, k);
            pti_cvt4<TIN, LEAN>(w.w, h45, h67, k);
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

// PTI_GLU: a fused gate/up matrix (rows interleaved at load time, 8 gate rows then the same
// 8 up rows per row group: pti_cli/backends/repack.py interleave_glu_rows) writes
// bf16(silu(g) * u) of the bf16-rounded gate and up sums, the arithmetic of pti_ops.hip's
// silu_mul kernel, so the fused pass has the bits of matmul + silu_mul.
__device__ __forceinline__ unsigned short pti_glu(float g, float u) {
    g = pti_bf16_to_f32(pti_f32_to_bf16(g));
    u = pti_bf16_to_f32(pti_f32_to_bf16(u));
    return pti_f32_to_bf16(g / (1.f + expf(-g)) * u);
}

// inv of the launch's row (twin tw, row m of that twin) from its partial sums (pin); one warp.
__device__ __forceinline__ float pti_pin_inv(const PtiArgs& a, int tw, int m, int lane) {
    return pti_row_inv((tw ? a.pin[1] : a.pin[0]) + (pti_u64)m * a.ng, a.ng, a.K, a.eps, lane);
}

// Each row's inv from its partial sums into inv_s (a warp per row).
__device__ __forceinline__ void pti_inv_from_pin(const PtiArgs& a, float* inv_s, int rows, int warp, int lane) {
    for (int rr = warp; rr < rows; rr += 8) {
        const int tw = rr >= a.M[0], m = tw ? rr - a.M[0] : rr;
        const float v = pti_pin_inv(a, tw, m, lane);
        if (lane == 0) inv_s[tw * 64 + m] = v;
    }
}

// Sum the 8 warps' partial sums in warp order (4 slots at a time) and write
// the CTA's outputs (scaled by the rows' inv, or added into the residual stream: PtiArgs).
// Shared memory: red (16 KB), then inv per (twin, row) (512 B), then the residual's new
// values per (slot, row, column) (S * 512 B), whose squares make the partial sums.
template <int TIN, int TOUT, int NTW, int RG, int MT, bool INVC>
__device__ __forceinline__ void pti_finish(const PtiArgs& a, int unit, int warp, int lane, const float* acc,
                                           float* red) {
    constexpr int S = NTW * RG * MT;
    float* inv_s = red + 4096;
    float* res_s = inv_s + 128;
    // Only float32 outputs add into the residual stream (the host refuses it elsewhere), so the bf16
    // and GLU kernels drop that path's code: it costs up to 0.5 us a launch even where it is not
    // taken (docs/perf.md, sessions 15-16).  The one-tile GLU kernels keep it: without it ptxas
    // spills in the 48-register one.
    constexpr bool RES = TOUT == 0 || (TOUT == 2 && MT == 1);
    const bool scaled = a.pin[0] != nullptr || a.inv[0] != nullptr, residual = RES && a.po[0] != nullptr;
    if (scaled) {   // read before the first barrier below, used after it
        const int rows = a.M[0] + (NTW > 1 ? a.M[1] : 0);
        if (INVC && a.pin[0] && a.inv[0]) {   // the inv CTAs' form (PtiArgs)
            bool pending = false;
            if (threadIdx.x < rows) {   // (at most 128 rows)
                const int tw = threadIdx.x >= a.M[0], m = tw ? threadIdx.x - a.M[0] : threadIdx.x;
                const float v = __ldcg((tw ? a.inv[1] : a.inv[0]) + m);   // written during this launch
                inv_s[tw * 64 + m] = v;
                pending = __float_as_uint(v) == PTI_INV_PENDING;
            }
            if (__syncthreads_or(pending)) pti_inv_from_pin(a, inv_s, rows, warp, lane);   // an inv CTA was late
        } else if (a.inv[0]) {
            for (int rr = threadIdx.x; rr < rows; rr += 256) {
                const int tw = rr >= a.M[0], m = tw ? rr - a.M[0] : rr;
                inv_s[tw * 64 + m] = (tw ? a.inv[1] : a.inv[0])[m];
            }
        } else {
            pti_inv_from_pin(a, inv_s, rows, warp, lane);
        }
    }
#pragma unroll
    for (int s0 = 0; s0 < S; s0 += 4) {
#pragma unroll
        for (int s = s0; s < s0 + 4 && s < S; ++s)
            *(float4*)&red[(warp * 4 + s - s0) * 128 + lane * 4] =
                make_float4(acc[s * 4], acc[s * 4 + 1], acc[s * 4 + 2], acc[s * 4 + 3]);
        __syncthreads();
        const int nslot = S - s0 < 4 ? S - s0 : 4;
        if (TOUT == 2) {   // PTI_GLU: one thread per (gate, up) pair: c0 with c2, c1 with c3
            for (int idx = threadIdx.x; idx < nslot * 64; idx += 256) {
                const int sl = idx >> 6, l = (idx >> 1) & 31, c = idx & 1;
                const int i = sl * 128 + l * 4 + c;
                float g = red[i], u = red[i + 2];
#pragma unroll
                for (int w = 1; w < 8; ++w) { g += red[w * 512 + i]; u += red[w * 512 + i + 2]; }
                const int slot = s0 + sl;
                const int mt = slot % MT, r = (slot / MT) % RG, tw = slot / (MT * RG);
                const int f = (unit * RG + r) * 8 + (l >> 2);
                const int m = mt * 8 + 2 * (l & 3) + c;
                if (2 * f < a.N && m < (tw ? a.M[1] : a.M[0])) {
                    if (scaled) {
                        const float iv = inv_s[tw * 64 + m];
                        g = __fmul_rn(g, iv);
                        u = __fmul_rn(u, iv);
                    }
                    ((unsigned short*)(tw ? a.y[1] : a.y[0]))[(pti_u64)m * a.ldy + f] =
                        (a.h16 & 1) ? pti_bf16_to_h16(pti_glu(g, u)) : pti_glu(g, u);
                }
            }
            __syncthreads();
            continue;
        }
        for (int idx = threadIdx.x; idx < nslot * 128; idx += 256) {
            const int sl = idx >> 7, l = (idx >> 2) & 31, c = idx & 3;
            float v = red[idx];
#pragma unroll
            for (int w = 1; w < 8; ++w) v += red[w * 512 + idx];
            const int slot = s0 + sl;
            const int mt = slot % MT, r = (slot / MT) % RG, tw = slot / (MT * RG);
            const int col = (l >> 2) + (c >= 2 ? 8 : 0);
            const int n = (unit * RG + r) * 16 + col;
            const int m = mt * 8 + 2 * (l & 3) + (c & 1);
            // tw is a run-time value here: select, don't index (an indexed struct goes to local memory)
            const bool row_ok = m < (tw ? a.M[1] : a.M[0]);
            if (residual) {   // x += bf16(v); u = bf16(x * g); the new x kept for the partial sums
                float nx = 0.f;
                if (n < a.N && row_ok) {
                    float* xp = (float*)(tw ? a.y[1] : a.y[0]) + (pti_u64)m * a.ldy + n;
                    nx = __fadd_rn(*xp, pti_bf16_to_f32(pti_f32_to_bf16(v)));
                    *xp = nx;
                    unsigned short ub = pti_f32_to_bf16(__fmul_rn(nx, (tw ? a.g[1] : a.g[0])[n]));
                    if (a.h16 & 1) ub = pti_bf16_to_h16(ub);
                    (tw ? a.uo[1] : a.uo[0])[(pti_u64)m * a.ldy + n] = ub;
                    unsigned short* to = tw ? a.to[1] : a.to[0];
                    if (to) to[pti_wg_tile_at(m, n, a.N >> 5, a.tnr)] = ub;
                }
                res_s[(slot * 8 + (m - mt * 8)) * 16 + col] = nx;
            } else if (n < a.N && row_ok) {
                if (scaled) v = __fmul_rn(v, inv_s[tw * 64 + m]);
                pti_store<TIN, TOUT>(tw ? a.y[1] : a.y[0], (pti_u64)m * a.ldy + n, v, (a.h16 & 2) != 0);
            }
        }
        __syncthreads();
    }
    if (residual)   // the partial sums of x^2: one per (row, group of 16 columns), columns in order
        for (int t = threadIdx.x; t < S * 8; t += 256) {
            const int slot = t >> 3, ml = t & 7;
            const int mt = slot % MT, r = (slot / MT) % RG, tw = slot / (MT * RG);
            const int m = mt * 8 + ml;
            if (m < (tw ? a.M[1] : a.M[0]) && (unit * RG + r) < a.ng) {
                const float* e = res_s + (slot * 8 + ml) * 16;
                float p = 0.f;
#pragma unroll
                for (int i = 0; i < 16; ++i) p = __fmaf_rn(e[i], e[i], p);
                (tw ? a.po[1] : a.po[0])[(pti_u64)m * a.ng + unit * RG + r] = p;
            }
        }
}

// An inv CTA (PtiArgs.invo): rows 8 c .. 8 c + 7 of the launch, a warp per row.
__device__ __forceinline__ void pti_inv_cta(const PtiArgs& a, int c, int warp, int lane) {
    const int rr = c * 8 + warp;
    if (rr >= a.M[0] + a.M[1]) return;
    const int tw = rr >= a.M[0], m = tw ? rr - a.M[0] : rr;
    const float v = pti_pin_inv(a, tw, m, lane);
    if (lane == 0) ((float*)(tw ? a.inv[1] : a.inv[0]))[m] = v;
}

// U blocks b0, b0+8, ... of this warp, with checks (the tail: blocks past the
// end, a partial last block, unaligned activations): issue every load, then
// compute.
template <int TIN, int NTW, int RG, int MT, int U>
__device__ __forceinline__ void pti_step_guarded(const PtiArgs& a, int unit, int b0, int lane, float* acc,
                                                 const PtiCvt& k) {
    uint4 wv[U][NTW][RG], xv[U][NTW][MT];
    unsigned sv[U][NTW][RG];
#pragma unroll
    for (int u = 0; u < U; ++u) {
        const int b = b0 + 8 * u;
        if (b < a.nb) {
#pragma unroll
            for (int tw = 0; tw < NTW; ++tw) {
#pragma unroll
                for (int r = 0; r < RG; ++r) {
                    const pti_u64 blk = (pti_u64)(unit * RG + r) * a.nb + b;
                    wv[u][tw][r] = pti_ld_stream((tw ? a.q[1] : a.q[0]) + blk * 32 + lane);
                    sv[u][tw][r] = __ldg((tw ? a.s[1] : a.s[0]) + blk * 8 + (lane >> 2));
                }
#pragma unroll
                for (int mt = 0; mt < MT; ++mt)
                    xv[u][tw][mt] = pti_load_x(tw ? a.x[1] : a.x[0], mt * 8 + (lane >> 2), tw ? a.M[1] : a.M[0],
                                               b * 32 + 8 * (lane & 3), a.K, a.ldx, a.vec_ok);
            }
        }
    }
#pragma unroll
    for (int u = 0; u < U; ++u)
        if (b0 + 8 * u < a.nb) pti_block<TIN, NTW, RG, MT, pti_lean<TIN, MT, U>()>(wv[u], sv[u], xv[u], acc, k);
}

// The per-lane pointers of the unchecked main loop (weights, scales, activation
// rows) and the loads of one whole step: U blocks b, b+8, ... of this warp, in
// registers.  A lane whose activation row is past M reads row 0 instead: an MMA's
// output column depends only on its own activation row, and the columns of rows
// past M are never stored (pti_finish), so they need no zeros, and the loads no
// predicate (a twin without rows is given the other twin's: launch_args).  Except
// with 4 or more row tiles (xok: the row exists, zeros otherwise), where the
// unpredicated loads cost ptxas registers it does not have.
template <int NTW, int RG, int MT>
struct PtiPtrs {
    const uint4* q[NTW][RG];
    const unsigned* s[NTW][RG];
    const uint4* x[NTW][MT];
    bool xok[NTW][MT];
};
template <int NTW, int RG, int MT, int U>
struct PtiStep {
    uint4 w[U][NTW][RG], x[U][NTW][MT];
    unsigned s[U][NTW][RG];
};

// Issue the loads of the step J steps past the pointers (J: constant offsets):
// weights and scales, then activations (XFIRST: activations first).  The loads
// are independent, so the order only steers ptxas' scheduling and registers:
// the pipelined twin kernel at U = 2 fits 128 registers only with XFIRST, the
// pipelined one-twin U = 3 and U = 6 fit 80 and 128 only without it (and the
// twin U = 1 issues its scales earlier without it).
template <int J, int NTW, int RG, int MT, int U>
__device__ __forceinline__ void pti_load_x_step(PtiStep<NTW, RG, MT, U>& st, const PtiPtrs<NTW, RG, MT>& p) {
#pragma unroll
    for (int u = 0; u < U; ++u)
#pragma unroll
        for (int tw = 0; tw < NTW; ++tw)
#pragma unroll
            for (int mt = 0; mt < MT; ++mt)
                st.x[u][tw][mt] = MT < 4 || p.xok[tw][mt] ? pti_ld_v4(p.x[tw][mt] + (J * U + u) * 8 * 4)
                                                          : make_uint4(0, 0, 0, 0);
}
// PRE: the step requested before the wait (PF = 1's first), its weights coherent (pti_ld_stream_pre).  The
// scales are coherent in every step: with only the first step's coherent, the f16 twin kernel (t2_r1_m1_u2_p1)
// spilled 4 bytes under NVRTC 13.5; with the first step's .nc, ptxas left some after the wait (session 57).
template <int J, int NTW, int RG, int MT, int U, bool PRE = false>
__device__ __forceinline__ void pti_load_w_step(PtiStep<NTW, RG, MT, U>& st, const PtiPtrs<NTW, RG, MT>& p) {
#pragma unroll
    for (int u = 0; u < U; ++u)
#pragma unroll
        for (int tw = 0; tw < NTW; ++tw)
#pragma unroll
            for (int r = 0; r < RG; ++r) {
                st.w[u][tw][r] = PRE ? pti_ld_stream_pre(p.q[tw][r] + (J * U + u) * 8 * 32)
                                     : pti_ld_stream(p.q[tw][r] + (J * U + u) * 8 * 32);
                st.s[u][tw][r] = pti_ld_u32(p.s[tw][r] + (J * U + u) * 8 * 8);
            }
}
template <int J, bool XFIRST, int NTW, int RG, int MT, int U>
__device__ __forceinline__ void pti_load_step(PtiStep<NTW, RG, MT, U>& st, const PtiPtrs<NTW, RG, MT>& p) {
    if (XFIRST) pti_load_x_step<J>(st, p);
    pti_load_w_step<J>(st, p);
    if (!XFIRST) pti_load_x_step<J>(st, p);
}

// Move the pointers on by STEPS steps.
template <int STEPS, int U, int NTW, int RG, int MT>
__device__ __forceinline__ void pti_advance(PtiPtrs<NTW, RG, MT>& p) {
#pragma unroll
    for (int tw = 0; tw < NTW; ++tw) {
#pragma unroll
        for (int r = 0; r < RG; ++r) {
            p.q[tw][r] += STEPS * 8 * U * 32;
            p.s[tw][r] += STEPS * 8 * U * 8;
        }
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) p.x[tw][mt] += STEPS * 8 * U * 4;
    }
}

// The arithmetic of one loaded step, its blocks in order.
template <int TIN, int NTW, int RG, int MT, int U>
__device__ __forceinline__ void pti_compute_step(const PtiStep<NTW, RG, MT, U>& st, float* acc,
                                                 const PtiCvt& k) {
#pragma unroll
    for (int u = 0; u < U; ++u) pti_block<TIN, NTW, RG, MT, pti_lean<TIN, MT, U>()>(st.w[u], st.s[u], st.x[u], acc, k);
}

// PF = 2's activations in shared memory, after pti_finish's (SMEM_BYTES in pti_cli/backends/cuda.py): up
// to 8 rows of PTI_XS_ROW_MAX bytes, each row padded by 64 bytes so that the 8 rows a quarter-warp reads
// fall in different banks.
#define PTI_XS_OFF (16384 + 512 + 16 * 512)
#define PTI_XS_ROW_MAX (4096 * 2 + 64)

// PF = 2 after the wait: the launch's activation rows (one twin, M <= 8) into shared memory, then the
// warp's nmain preloaded blocks in order, each with its fragment from there (a lane whose row is past M
// reads row 0, as the register loop does).  Where the rows do not fit (K > 4096), the fragments come
// from global memory instead.
template <int TIN, int NTW, int RG, int MT, int U>
__device__ __forceinline__ void pti_mm_xs_main(const PtiArgs& a, const PtiStep<NTW, RG, MT, U>& A, int nmain, int nfull,
                                               int warp, int lane, bool xok, float* acc, const PtiCvt& k) {
    extern __shared__ __align__(16) unsigned char pti_smem[];
    unsigned char* xs = pti_smem + PTI_XS_OFF;
    const int xstride = a.K * 2 + 64;
    const bool in_smem = nfull > 0 && a.K * 2 + 64 <= PTI_XS_ROW_MAX && a.M[0] <= 8;
    if (in_smem) {
        const int chunks = a.K / 8;   // 16-byte chunks a row (nfull > 0: vec_ok, K a multiple of 8)
        for (int r = 0; r < a.M[0]; ++r)
            for (int c = threadIdx.x; c < chunks; c += 256)
                *(uint4*)(xs + r * xstride + c * 16) = pti_ld_v4((const uint4*)(a.x[0] + (pti_u64)r * a.ldx) + c);
        __syncthreads();
    }
    const int row = xok ? lane >> 2 : 0;
    const unsigned char* xl = xs + row * xstride + warp * 64 + (lane & 3) * 16;
    const uint4* xg = (const uint4*)(a.x[0] + (pti_u64)row * a.ldx + warp * 32 + 8 * (lane & 3));
#pragma unroll
    for (int u = 0; u < U; ++u)
        if (u < nmain) {
            uint4 xv[1][1];
            xv[0][0] = in_smem ? *(const uint4*)(xl + u * 8 * 64) : pti_ld_v4(xg + u * 8 * 4);
            const uint4 wv[1][1] = {{A.w[u][0][0]}};
            const unsigned sv[1][1] = {{A.s[u][0][0]}};
            pti_block<TIN, 1, 1, 1, false>(wv, sv, xv, acc, k);
        }
}

// NTW twins (1 or 2), RG row groups (16 rows each) per CTA, MT tiles of 8
// activation rows, U blocks per warp per step.  256 threads = 8 warps; warp w
// owns blocks b = w (mod 8), in order; the CTA sums the warps in warp order.
// PF = 1: the main loop is software-pipelined (the next step's loads are issued
// before this step is computed: twice the registers for loads); PF = 0: a step
// is loaded, then computed, and the warp has nothing in flight while it computes.
// PF = 2 (one twin, one row group, one tile): the warp's first U whole blocks, at K = 256 U all of them,
// are requested before the wait, so a CTA that enters while the launch before ends has its whole slice
// in flight; after the wait the CTA copies its activation rows into shared memory (PTI_XS_OFF), and
// each block's fragment comes from there just before its MMAs (no registers held for it in flight).
// Blocks past those U go through the checked tail one at a time.
template <int TIN, int TOUT, int NTW, int RG, int MT, int U, int PF, bool INVC>
__device__ __forceinline__ void pti_mm_tc(const PtiArgs& a) {
    static_assert(PF != 2 || (NTW == 1 && RG == 1 && MT == 1), "PF = 2: one twin, one row group, one row tile");
    constexpr int S = NTW * RG * MT;
    extern __shared__ __align__(16) unsigned char pti_smem[];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    int unit = blockIdx.x;
    pti_pdl_trigger();
    if (INVC && a.n_inv) {   // the inv CTAs first: dispatched first, so done before the epilogues
        if (unit < a.n_inv) {
            pti_pdl_wait();
            pti_inv_cta(a, unit, warp, lane);
            return;
        }
        unit -= a.n_inv;
    }
    // The cvt masks as run-time values (vec_ok is 0 or 1, so the shift gives 0): PtiCvt.
    const PtiCvt k = pti_cvt_masks<TIN>((unsigned)a.vec_ok >> 31);
    float acc[S * 4];
#pragma unroll
    for (int i = 0; i < S * 4; ++i) acc[i] = 0.f;
    // Whole steps (all U blocks whole and vector-loadable) run unchecked, with
    // per-lane pointers that advance by one or two steps: loads at constant offsets.
    const int nfull = a.vec_ok ? a.K / 32 : 0;
    const int nsteps = nfull > warp + 8 * (U - 1) ? (nfull - warp - 8 * (U - 1) + 8 * U - 1) / (8 * U) : 0;
    PtiPtrs<NTW, RG, MT> p;
#pragma unroll
    for (int tw = 0; tw < NTW; ++tw) {
#pragma unroll
        for (int r = 0; r < RG; ++r) {
            const pti_u64 blk = (pti_u64)(unit * RG + r) * a.nb + warp;
            p.q[tw][r] = (tw ? a.q[1] : a.q[0]) + blk * 32 + lane;
            p.s[tw][r] = (tw ? a.s[1] : a.s[0]) + blk * 8 + (lane >> 2);
        }
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
            const int row = mt * 8 + (lane >> 2);
            p.xok[tw][mt] = row < (tw ? a.M[1] : a.M[0]);
            p.x[tw][mt] = (const uint4*)((tw ? a.x[1] : a.x[0]) + (p.xok[tw][mt] ? (pti_u64)row * a.ldx : 0) +
                                         warp * 32 + 8 * (lane & 3));
        }
    }
    // PF = 1: the first step's weights are requested before the wait (weights never change, so
    // they may travel while the previous kernel ends); activations only after it is done.  (Not
    // with PF = 0: no gain at one row there, and spills in the register-tight variants: docs/perf.md.)
    PtiStep<NTW, RG, MT, U> A;
    if (PF == 1 && nsteps > 0) pti_load_w_step<0, NTW, RG, MT, U, true>(A, p);
    // PF = 2: blocks warp + 8 u below nfull, u < U, by coherent loads (pti_ld_stream_pre); a block past nmain
    // reads the matrix's first block instead, and is not used (no predicates on the loads).
    const int nmain = PF != 2 ? 0 : nfull > warp ? min(U, (nfull - warp + 7) / 8) : 0;
    if (PF == 2) {
#pragma unroll
        for (int u = 0; u < U; ++u) {
            A.w[u][0][0] = pti_ld_stream_pre(u < nmain ? p.q[0][0] + u * 8 * 32 : a.q[0] + lane);
            A.s[u][0][0] = pti_ld_u32(u < nmain ? p.s[0][0] + u * 8 * 8 : a.s[0] + (lane >> 2));
        }
    }
    pti_pdl_wait();
    if (PF == 2) {
        pti_mm_xs_main<TIN>(a, A, nmain, nfull, warp, lane, p.xok[0][0], acc, k);
    } else if (PF == 0) {
        // The unroll is fixed (what NVVM's size heuristic chose for bf16): left to it, the f16 kernels'
        // shorter steps were unrolled further, spilled and ran slower (docs/perf.md, session 19).
#pragma unroll(U == 1 && MT <= 2 ? 2 : 1)
        for (int i = 0; i < nsteps; ++i) {
            PtiStep<NTW, RG, MT, U> C;
            pti_load_step<0, false>(C, p);
            pti_advance<1, U>(p);
            pti_compute_step<TIN>(C, acc, k);
        }
    } else {
        // Two buffers, unrolled by two so that no registers are copied: step i+1's loads are
        // issued before step i is computed, so a warp always has a step in flight.  The loop
        // has no branches around loads; the last one or two steps are computed after it.
        constexpr bool XF = NTW == 2 && U > 1 && TIN == 0;   // see pti_load_step (f16: spills with it)
        PtiStep<NTW, RG, MT, U> B;
        if (nsteps > 0) pti_load_x_step<0>(A, p);
        int i = 0;
#pragma unroll 1
        for (; i + 2 < nsteps; i += 2) {        // A holds step i, at the pointers
            pti_load_step<1, XF>(B, p);
            pti_compute_step<TIN>(A, acc, k);
            pti_load_step<2, XF>(A, p);
            pti_compute_step<TIN>(B, acc, k);
            pti_advance<2, U>(p);
        }
        if (i + 1 < nsteps) {                   // two steps left
            pti_load_step<1, XF>(B, p);
            pti_compute_step<TIN>(A, acc, k);
            pti_compute_step<TIN>(B, acc, k);
        } else if (i < nsteps) {                // one
            pti_compute_step<TIN>(A, acc, k);
        }
    }
    // PF = 0, U = 1: the tail's first block from where the pointers have got to (= warp + 8 U nsteps),
    // not from nsteps, which NVRTC 13.0 (the H200 image's) otherwise kept in local memory across the
    // loop in the 64-register f16 m2_u1 kernels (elsewhere this form spilled instead).
    const int b_tail = PF == 2 ? warp + 8 * nmain
                       : PF == 1 || U != 1 ? warp + nsteps * 8 * U
                                           : (int)((p.q[0][0] - (a.q[0] + lane)) / 32 - (pti_u64)unit * RG * a.nb);
    constexpr int UT = PF == 2 ? 1 : U;   // the tail's blocks a step
    for (int b0 = b_tail; b0 < a.nb; b0 += 8 * UT)
        pti_step_guarded<TIN, NTW, RG, MT, UT>(a, unit, b0, lane, acc, k);
    pti_finish<TIN, TOUT, NTW, RG, MT, INVC>(a, unit, warp, lane, acc, (float*)pti_smem);
    if (INVC && TOUT == 0 && a.invo[0] && unit == 0)   // a residual launch: the next matmul's inv pending
        for (int rr = threadIdx.x; rr < a.M[0] + a.M[1]; rr += 256)
            (rr < a.M[0] ? a.invo[0] : a.invo[1])[rr < a.M[0] ? rr : rr - a.M[0]] = __uint_as_float(PTI_INV_PENDING);
}

// ---- Hopper (sm_90a) helpers of the wgmma matmul below (pti_wg_mm); here, ahead of the tensor-core
// kernels' instantiations, so that scripts/wgmma_probe.cu's forms use them too.
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)

// A k16 block's shared-memory descriptor: start >> 4, K-direction core stride 128 B, N-direction 512 B,
// no swizzle.  The tile: core matrices of 8 rows x 16 bytes, core (c, n8) at c * 128 + n8 * 512.
__device__ __forceinline__ unsigned long long pti_wg_desc(unsigned addr) {
    return (unsigned long long)((addr & 0x3ffffu) >> 4) | ((unsigned long long)(128 >> 4) << 16) |
           ((unsigned long long)(512 >> 4) << 32);
}
#define PTI_WG_D8(d, o, c) c(d[o + 0]), c(d[o + 1]), c(d[o + 2]), c(d[o + 3]), c(d[o + 4]), c(d[o + 5]), \
                           c(d[o + 6]), c(d[o + 7])
#define PTI_WG_IN "+f"
#define PTI_WG_OUT "=f"
// D = A B (FIRST: D not read) or D += A B for one k16: A this warp's 16 rows from registers, B from
// shared memory (desc); NR activation rows (the wgmma's N); TIN: bf16 (0) or f16 (1) operands.
#define PTI_WG_MMA(TY, NR, FIRST)                                                                              \
    if (NR == 16 && FIRST)                                                                                     \
        asm volatile("wgmma.mma_async.sync.aligned.m64n16k16.f32." TY "." TY " "                               \
                     "{%0,%1,%2,%3,%4,%5,%6,%7}, {%8,%9,%10,%11}, %12, 0, 1, 1, 0;\n"                          \
                     : PTI_WG_D8(d, 0, PTI_WG_OUT)                                                             \
                     : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "l"(desc));                                         \
    if (NR == 16 && !FIRST)                                                                                    \
        asm volatile("wgmma.mma_async.sync.aligned.m64n16k16.f32." TY "." TY " "                               \
                     "{%0,%1,%2,%3,%4,%5,%6,%7}, {%8,%9,%10,%11}, %12, 1, 1, 1, 0;\n"                          \
                     : PTI_WG_D8(d, 0, PTI_WG_IN)                                                              \
                     : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "l"(desc));                                         \
    if (NR == 32 && FIRST)                                                                                     \
        asm volatile("wgmma.mma_async.sync.aligned.m64n32k16.f32." TY "." TY " "                               \
                     "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15}, {%16,%17,%18,%19}, %20, 0, 1, 1, 0;\n" \
                     : PTI_WG_D8(d, 0, PTI_WG_OUT), PTI_WG_D8(d, 8, PTI_WG_OUT)                                \
                     : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "l"(desc));                                         \
    if (NR == 32 && !FIRST)                                                                                    \
        asm volatile("wgmma.mma_async.sync.aligned.m64n32k16.f32." TY "." TY " "                               \
                     "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15}, {%16,%17,%18,%19}, %20, 1, 1, 1, 0;\n" \
                     : PTI_WG_D8(d, 0, PTI_WG_IN), PTI_WG_D8(d, 8, PTI_WG_IN)                                  \
                     : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "l"(desc));                                         \
    if (NR == 64 && FIRST)                                                                                     \
        asm volatile("wgmma.mma_async.sync.aligned.m64n64k16.f32." TY "." TY " "                               \
                     "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,"  \
                     "%24,%25,%26,%27,%28,%29,%30,%31}, {%32,%33,%34,%35}, %36, 0, 1, 1, 0;\n"                 \
                     : PTI_WG_D8(d, 0, PTI_WG_OUT), PTI_WG_D8(d, 8, PTI_WG_OUT), PTI_WG_D8(d, 16, PTI_WG_OUT), \
                       PTI_WG_D8(d, 24, PTI_WG_OUT)                                                            \
                     : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "l"(desc));                                         \
    if (NR == 64 && !FIRST)                                                                                    \
        asm volatile("wgmma.mma_async.sync.aligned.m64n64k16.f32." TY "." TY " "                               \
                     "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,"  \
                     "%24,%25,%26,%27,%28,%29,%30,%31}, {%32,%33,%34,%35}, %36, 1, 1, 1, 0;\n"                 \
                     : PTI_WG_D8(d, 0, PTI_WG_IN), PTI_WG_D8(d, 8, PTI_WG_IN), PTI_WG_D8(d, 16, PTI_WG_IN),   \
                       PTI_WG_D8(d, 24, PTI_WG_IN)                                                             \
                     : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "l"(desc));
template <int NR, bool FIRST, int TIN = 0>
__device__ __forceinline__ void pti_wg_mma(float* d, unsigned a0, unsigned a1, unsigned a2, unsigned a3,
                                           unsigned long long desc) {
    if (TIN == 0) {
        PTI_WG_MMA("bf16", NR, FIRST)
    } else {
        PTI_WG_MMA("f16", NR, FIRST)
    }
}

// The policy's step after a block's wgmmas have been waited for: acc = fma(scale, D, acc), the scale word's
// low half for weight row g, its high half for row g + 8.
template <int ND>
__device__ __forceinline__ void pti_wg_scale(float* acc, float* d, unsigned sc) {
#pragma unroll
    for (int i = 0; i < ND; ++i) asm volatile("" : "+f"(d[i])::"memory");   // after the wait
    const float d_lo = pti_f16_to_f32((unsigned short)(sc & 0xffffu));
    const float d_hi = pti_f16_to_f32((unsigned short)(sc >> 16));
#pragma unroll
    for (int i = 0; i < ND; ++i) acc[i] = __fmaf_rn((i & 2) ? d_hi : d_lo, d[i], acc[i]);
}

// One block: the warp's 16 weight rows of it (w, this lane's 16 bytes) to bf16 A fragments, two chained
// k16 wgmmas (the first overwrites D; desc0, desc1: the tile's two k16 halves, 256 bytes apart: passed
// apart, since a descriptor plus an offset made ptxas spill in the probe's long form), wait, pti_wg_scale.
template <int NR, int TIN = 0>
__device__ __forceinline__ void pti_wg_block(float* acc, const uint4& w, unsigned long long desc0,
                                             unsigned long long desc1, unsigned sc, const PtiCvt& k) {
    unsigned a[8];
    pti_cvt4<TIN, false>(w.x, a[0], a[2], k);
    pti_cvt4<TIN, false>(w.y, a[4], a[6], k);
    pti_cvt4<TIN, false>(w.z, a[1], a[3], k);
    pti_cvt4<TIN, false>(w.w, a[5], a[7], k);
    float d[NR / 2];
    asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
    pti_wg_mma<NR, true, TIN>(d, a[0], a[1], a[2], a[3], desc0);
    pti_wg_mma<NR, false, TIN>(d, a[4], a[5], a[6], a[7], desc1);
    asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
    asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
    pti_wg_scale<NR / 2>(acc, d, sc);
}

__device__ __forceinline__ void pti_wg_bar_wait(unsigned bar, unsigned parity) {
    unsigned done;
    do {
        asm volatile("{ .reg .pred p;\n"
                     "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
                     "selp.u32 %0, 1, 0, p; }" : "=r"(done) : "r"(bar), "r"(parity) : "memory");
    } while (!done);
}
__device__ __forceinline__ void pti_wg_bulk(unsigned dst, const void* src, unsigned bytes, unsigned bar) {
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
                 ::"r"(dst), "l"(src), "r"(bytes), "r"(bar) : "memory");
}

#endif  // __CUDA_ARCH_FEAT_SM90_ALL

#define PTI_TC_K(NAME, TIN, TOUT, NTW, RG, MT, U, PF, MINB, INVC)                               \
    extern "C" __global__ void __launch_bounds__(256, MINB) NAME(                              \
        const uint4* qa, const unsigned* sa, const uint4* qb, const unsigned* sb,              \
        const unsigned short* xa, const unsigned short* xb, void* ya, void* yb, int Ma,        \
        int Mb, int N, int K, int nb, int ldx, int ldy, int vec_ok,                            \
        const float* pina, const float* pinb, int ng, float eps, const float* inva,            \
        const float* invb, unsigned short* uoa, unsigned short* uob, float* poa, float* pob,   \
        const float* ga, const float* gb, float* ioa, float* iob, int n_inv, int h16,          \
        unsigned short* toa, unsigned short* tob, int tnr) {                                   \
        const PtiArgs a = {{qa, qb}, {sa, sb}, {xa, xb}, {ya, yb}, {Ma, Mb},                   \
                           N, K, nb, ldx, ldy, vec_ok, {pina, pinb}, ng, eps, {inva, invb},    \
                           {uoa, uob}, {poa, pob}, {ga, gb}, {ioa, iob}, n_inv, h16,           \
                           {toa, tob}, tnr};                                                   \
        pti_mm_tc<TIN, TOUT, NTW, RG, MT, U, PF, INVC>(a);                                     \
    }
#define PTI_TC(NAME, TIN, TOUT, NTW, RG, MT, U, PF, MINB) PTI_TC_K(NAME, TIN, TOUT, NTW, RG, MT, U, PF, MINB, false)
// "_i1": the same variant in the inv CTAs' form (PtiArgs; more than 8 rows, one twin): its own
// instantiation, so that the plain variants' code is not touched by it.
#define PTI_TC_I(NAME, TIN, TOUT, NTW, RG, MT, U, PF, MINB) PTI_TC_K(NAME, TIN, TOUT, NTW, RG, MT, U, PF, MINB, true)

// Variants: pti_mm_{bf16,f16}_{f32,out}_t{NTW}_r{RG}_m{MT}_u{U}[_p1].  The host
// (pti_cli/backends/cuda.py) picks one per call from M and the matrix's rows; 24.5 KB of dynamic
// shared memory (pti_finish: the reduction, the rows' inv, the residual's new values).  The last number is MINB, the CTAs per SM that
// __launch_bounds__ asks registers for (5: <= 48 registers, 4: <= 64, 3: <= 80, 2: <= 128, 1: <= 255).
// "_p1": the software-pipelined main loop (PF = 1), at the MINB given here (one
// MINB per name); "_p2": PF = 2 (the slice before the wait, the activations from shared memory: its launches
// ask SMEM_BYTES + XS_BYTES, pti_cli/backends/cuda.py).
// "_p2" at two CTAs a SM from sm_90 (the early loads need programmatic dependent launch); on sm_80 the
// f16 conversion holds one more register and NVRTC 13.0 spilled 32 bytes at two, so one there.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
#define PTI_P2_MINB 1
#else
#define PTI_P2_MINB 2
#endif
#define PTI_TC_ALL(TAG, TIN, TOUT)                                     \
    PTI_TC(pti_mm_##TAG##_t1_r1_m1_u8, TIN, TOUT, 1, 1, 1, 8, 0, 1)    \
    PTI_TC(pti_mm_##TAG##_t1_r1_m1_u4, TIN, TOUT, 1, 1, 1, 4, 0, 3)    \
    PTI_TC(pti_mm_##TAG##_t2_r1_m1_u2, TIN, TOUT, 2, 1, 1, 2, 0, 3)    \
    PTI_TC(pti_mm_##TAG##_t1_r1_m2_u3, TIN, TOUT, 1, 1, 2, 3, 0, 3)    \
    PTI_TC(pti_mm_##TAG##_t1_r1_m4_u1, TIN, TOUT, 1, 1, 4, 1, 0, 3)    \
    PTI_TC(pti_mm_##TAG##_t1_r2_m1_u4, TIN, TOUT, 1, 2, 1, 4, 0, 1)    \
    PTI_TC(pti_mm_##TAG##_t1_r2_m2_u4, TIN, TOUT, 1, 2, 2, 4, 0, 1)    \
    PTI_TC(pti_mm_##TAG##_t1_r2_m4_u2, TIN, TOUT, 1, 2, 4, 2, 0, 1)    \
    PTI_TC(pti_mm_##TAG##_t1_r2_m8_u1, TIN, TOUT, 1, 2, 8, 1, 0, 1)    \
    PTI_TC(pti_mm_##TAG##_t1_r1_m2_u4, TIN, TOUT, 1, 1, 2, 4, 0, 2)    \
    PTI_TC(pti_mm_##TAG##_t1_r1_m2_u6, TIN, TOUT, 1, 1, 2, 6, 0, 2)    \
    PTI_TC(pti_mm_##TAG##_t1_r1_m2_u8, TIN, TOUT, 1, 1, 2, 8, 0, 1)    \
    PTI_TC(pti_mm_##TAG##_t1_r1_m4_u2, TIN, TOUT, 1, 1, 4, 2, 0, 2)    \
    PTI_TC(pti_mm_##TAG##_t1_r1_m4_u4, TIN, TOUT, 1, 1, 4, 4, 0, 1)    \
    PTI_TC(pti_mm_##TAG##_t1_r1_m8_u1, TIN, TOUT, 1, 1, 8, 1, 0, 1)    \
    PTI_TC(pti_mm_##TAG##_t2_r1_m1_u4, TIN, TOUT, 2, 1, 1, 4, 0, 1)    \
    PTI_TC(pti_mm_##TAG##_t2_r1_m2_u4, TIN, TOUT, 2, 1, 2, 4, 0, 1)    \
    PTI_TC(pti_mm_##TAG##_t2_r2_m1_u2, TIN, TOUT, 2, 2, 1, 2, 0, 1)    \
    PTI_TC(pti_mm_##TAG##_t1_r1_m1_u4_p1, TIN, TOUT, 1, 1, 1, 4, 1, 2) \
    PTI_TC(pti_mm_##TAG##_t2_r1_m1_u2_p1, TIN, TOUT, 2, 1, 1, 2, 1, 2) \
    PTI_TC(pti_mm_##TAG##_t1_r1_m2_u1_p1, TIN, TOUT, 1, 1, 2, 1, 1, 3) \
    PTI_TC(pti_mm_##TAG##_t1_r1_m2_u1, TIN, TOUT, 1, 1, 2, 1, 0, 4)    \
    PTI_TC(pti_mm_##TAG##_t1_r1_m2_u2_p1, TIN, TOUT, 1, 1, 2, 2, 1, 2) \
    PTI_TC(pti_mm_##TAG##_t1_r1_m1_u2, TIN, TOUT, 1, 1, 1, 2, 0, 5)    \
    PTI_TC(pti_mm_##TAG##_t1_r1_m1_u2_p1, TIN, TOUT, 1, 1, 1, 2, 1, 3) \
    PTI_TC(pti_mm_##TAG##_t1_r2_m1_u2_p1, TIN, TOUT, 1, 2, 1, 2, 1, 2) \
    PTI_TC(pti_mm_##TAG##_t1_r2_m1_u4_p1, TIN, TOUT, 1, 2, 1, 4, 1, 1) \
    PTI_TC(pti_mm_##TAG##_t1_r1_m1_u16_p2, TIN, TOUT, 1, 1, 1, 16, 2, PTI_P2_MINB) \
    PTI_TC_I(pti_mm_##TAG##_t1_r1_m2_u2_p1_i1, TIN, TOUT, 1, 1, 2, 2, 1, 2) \
    PTI_TC_I(pti_mm_##TAG##_t1_r1_m2_u1_p1_i1, TIN, TOUT, 1, 1, 2, 1, 1, 3) \
    PTI_TC_I(pti_mm_##TAG##_t1_r1_m2_u1_i1, TIN, TOUT, 1, 1, 2, 1, 0, 4)    \
    PTI_TC_I(pti_mm_##TAG##_t1_r1_m4_u2_i1, TIN, TOUT, 1, 1, 4, 2, 0, 2)    \
    PTI_TC_I(pti_mm_##TAG##_t1_r1_m4_u1_i1, TIN, TOUT, 1, 1, 4, 1, 0, 3)    \
    PTI_TC_I(pti_mm_##TAG##_t1_r1_m8_u1_i1, TIN, TOUT, 1, 1, 8, 1, 0, 1)

PTI_TC_ALL(bf16_f32, 0, 0)
PTI_TC_ALL(bf16_out, 0, 1)
PTI_TC_ALL(f16_f32, 1, 0)
PTI_TC_ALL(f16_out, 1, 1)
PTI_TC_ALL(bf16_glu, 0, 2)
PTI_TC_ALL(f16_glu, 1, 2)   // an h16 model's gate/up (its outputs h16: PtiArgs.h16)

// ---- Hopper (sm_90a): the wgmma matmul for 17-64 rows of tall matrices (docs/perf.md, sessions 22-26) ----
// Past 16 rows the mma.sync kernels above are bound inside the SM: every warp loads every activation
// fragment for its 16 weight rows.  wgmma (a warpgroup's MMA) reads its B operand, the activations, from
// shared memory, once for the warpgroup's 64 weight rows.  Here a CTA of 2 warpgroups (a unit of 8 row
// groups, 128 weight rows) takes all K: the 8 slices (block b mod 8) one after another, each slice's blocks
// in block order with the policy's step acc = fma(scale, block_dot, acc) (block_dot two chained k16 MMAs,
// the same k permutation as pti_block), and a running sum over the slices in slice order (v = p0;
// v += p1; ...: pti_finish's order).  So every output has the policy kernels' bits (batch invariance).
// The weights and scales (the ring layout, repack.py: ring_pack) and the activations (the tile layout
// pti_wg_tiles writes) reach shared memory by bulk copies (cp.async.bulk, the copy engine) into an
// S-slot ring, one mbarrier a slot; thread 0 refills a slot after the barrier that ends its phase.
// Only compiled for sm_90a (the 'a' features: wgmma): the backend's target on sm_90 with PTI_WGMMA=1.
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)

// y = x W^T for M <= 8 MT rows of one twin (blockIdx.y: twin B's pointers, when given), PB blocks a phase,
// S ring slots.  q, s: the ring layout (a unit's blocks contiguous in slice-major order: slice r's blocks
// r, r + 8, ...; each block [8 row groups][512 bytes], its scales [8][8 words]); xt: the tiles, nb of
// NR x 32 bf16 in the same slice-major order (pti_wg_tiles).  nb a multiple of 8 PB, rows of 128.
// Shared memory: S mbarriers (128 bytes), S slots of (PB blocks' weights, their scales, their tiles), the
// running sums [ND][256].
struct PtiWgArgs {
    const char* q[2];
    const char* s[2];
    const char* x[2];     // the tiles
    void* y[2];
    const float* inv[2];  // each row's inv (the RMSNorm's scale, PtiArgs.inv), or null: none
    int M[2];
    int N, nb, ldy;
    int h16;              // PtiArgs.h16: bit 0, silu(gate) * up comes out as h16; bit 1, h16 inputs give bf16;
                          // bit 2, the residual form reads its x values before its first store (PTI_WG_X_FIRST)
    // The inv CTAs' form (PtiArgs.inv; the tiles written by the residual launch before, which set the inv
    // slots pending): the first n_inv CTAs (whole clusters) sum the rows' inv from the partial sums pin
    // into inv, 8 rows a CTA; the matmul's CTAs read the slots after their main loop, and a row still
    // pending makes them sum every row themselves (the same bits).  pin null: inv is given.
    const float* pin[2];
    int ng;
    float eps;
    int n_inv;
    // The residual form (TOUT 0, po not null; PtiArgs): y is the float32 residual stream, x += bf16(sums);
    // u = bf16(x * g) into uo, and the partial sums of x^2 over each group of 16 columns into po, in
    // pti_finish's order; the first CTA sets the next matmul's inv slots invo pending.  to: the GLU's
    // outputs or the residual form's u, also in the tile layout of tnr rows (pti_wg_tile_at), for the
    // Hopper matmul after it.
    unsigned short* uo[2];
    float* po[2];
    const float* g[2];
    float* invo[2];
    unsigned short* to[2];
    int tnr;
    // G (the fixup form): each CTA's slice sums, [unit][slice][element][thread] a twin, and each unit's
    // count of CTAs done (zero between launches: the unit's last CTA sets it back).
    float* fixp[2];
    unsigned* fixc[2];
    // A launch split in two (the rest form, launch_wg; docs/perf.md, session 39): this launch's first unit.
    int unit0;
};
// C > 1 (the cluster form, for matrices too narrow to fill the card with one CTA a unit): a cluster of C
// CTAs takes a unit, rank r the slices r, r + C, ... (SPC = 8 / C of them, each from the same ring layout),
// parking each slice's sums in its shared memory; after a cluster barrier rank r adds the 8 slices' sums
// of its share of every thread's elements in slice order (v = p0; v += p1; ...: the C = 1 running sum's
// order) over distributed shared memory, and writes them (scripts/wgmma_probe.cu's pti_wg_cluster_out).
// G (the fixup form, C = 8 CTAs a unit that are not a cluster): each CTA parks its slice's sums in global
// memory (a.fixp) and counts itself done (a.fixc); the unit's last CTA adds the 8 slices in slice order into
// C = 1's running sums and writes the whole unit, as C = 1 does.  Why: a cluster of 8 must sit in one GPC, so the H200 holds 30 of
// them at two CTAs a SM (240 of 264 CTA slots), and a matrix of 32 units (4096 rows) ran in two waves;
// without clusters its 256 CTAs are one wave (docs/perf.md, session 31).  G = 2 (sessions 38-39): every CTA
// parks its slice and counts itself in (a.fixc[2 unit]), waits until the unit's 8 have, then writes its share of
// the elements as the cluster form's rank does, reading the 8 slices from L2 in slice order; the last CTA to count
// itself out (a.fixc[2 unit + 1]) sets both counts back.  The wait needs the unit's 8 CTAs resident together: the
// host launches it only for the few units a split launch leaves to the card's free CTA slots (launch_wg).
template <int TIN, int TOUT, int MT, int PB, int S, int C = 1, int G = 0>
__device__ __forceinline__ void pti_wg_mm(const PtiWgArgs& a) {
    constexpr int NR = 8 * MT, ND = NR / 2, T = 256, R = 8, SPC = 8 / C;
    constexpr int PHASE = PB * NR * 64, WB = R * 512, SB = R * 32, WSTAGE = PB * (WB + SB), SLOT = WSTAGE + PHASE;
    static_assert(C == 1 || C == 2 || C == 4 || C == 8, "a cluster takes the 8 slices in equal shares");
    static_assert(!G || C == 8, "the fixup form: one slice a CTA");
    extern __shared__ __align__(128) unsigned char pti_smem[];
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, twin = blockIdx.y;
    // (selects, not a.q[twin]: an indexed parameter array is copied to local memory)
    const int M = twin ? a.M[1] : a.M[0], nb = a.nb;
    const float* pin = twin ? a.pin[1] : a.pin[0];
    // The rest form (bits 3 and 4 of a.h16): a launch of the resident clusters (bit 3) lets the launch after it
    // (bit 4, the units left over, in the free CTA slots) start only once every CTA is past its wait, so the
    // previous grid has completed and its writes are visible: the rest reads its inputs without a wait of its
    // own, and waits for the clusters' launch before it ends, so that the launch after both sees both.
    const bool late = (a.h16 & 8) != 0, rest = (a.h16 & 16) != 0;
    if ((int)blockIdx.x < a.n_inv) {   // an inv CTA: rows 8 blockIdx.x .. + 7, a warp a row
        if (!late) pti_pdl_trigger();
        pti_pdl_wait();
        if (late) pti_pdl_trigger();
        const int row = blockIdx.x * 8 + warp;
        if (row < M) {
            const float v = pti_row_inv(pin + (pti_u64)row * a.ng, a.ng, 32 * nb, a.eps, lane);
            if (lane == 0) ((float*)(twin ? a.inv[1] : a.inv[0]))[row] = v;
        }
        return;
    }
    const int bx = blockIdx.x - a.n_inv;   // (n_inv a multiple of C: bx's rank is the cluster's)
    const int unit = a.unit0 + (C == 1 ? bx : bx / C), rank = C == 1 ? 0 : bx % C;
    const int nst = C == 1 ? nb / PB : SPC * (nb / 8) / PB, nphs = nst / SPC;
    // this CTA's first slice (rank): its blocks from (unit nb + rank nb / 8), its tiles from rank nb / 8
    const pti_u64 first = (pti_u64)rank * (nb / 8);
    const char* qc = (twin ? a.q[1] : a.q[0]) + ((pti_u64)unit * nb + first) * WB;   // phases: this CTA's, a slice's
    const char* scs = (twin ? a.s[1] : a.s[0]) + ((pti_u64)unit * nb + first) * SB;
    const char* xc = (twin ? a.x[1] : a.x[0]) + first * (NR * 64);
    void* y = twin ? a.y[1] : a.y[0];
    const unsigned sbase = (unsigned)__cvta_generic_to_shared(pti_smem), full = sbase, wbase = sbase + 128;
    float* run = (float*)(pti_smem + 128 + S * SLOT);   // C = 1: the running sums; else SPC slices' sums
    // phase i into slot st: what 1 = the weights and scales (and the barrier's byte count, the tiles'
    // included), 2 = the tiles.  Its first block, from the CTA's first: i PB, and for the CTA's j-th slice
    // (rank + j C, j = i / nphs) C - 1 slices more per j.  j without a division (SASS, session 28: thread
    // 0's I2F/MUFU/F2I in every phase's refill): the used C are 1, 4 and 8 (2, m2_c2's A/B form, divides).
    auto fill = [&](int i, int st, int what) {
        const unsigned slot = wbase + st * SLOT, bar = full + 8 * st;
        const int j = SPC == 8 || SPC == 1 ? 0 : SPC == 2 ? (i >= nphs) : i / nphs;
        const pti_u64 b = (pti_u64)i * PB + (pti_u64)j * (C - 1) * (nb / 8);
        if (what & 1) {
            asm volatile("{ .reg .b64 st; mbarrier.arrive.expect_tx.shared::cta.b64 st, [%0], %1; }"
                         ::"r"(bar), "r"(SLOT) : "memory");
            pti_wg_bulk(slot, qc + b * WB, PB * WB, bar);
            pti_wg_bulk(slot + PB * WB, scs + b * SB, PB * SB, bar);
        }
        if (what & 2) pti_wg_bulk(slot + WSTAGE, xc + b * (NR * 64), PHASE, bar);
    };
    if (tid == 0) {
        for (int i = 0; i < S; ++i) asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(full + 8 * i) : "memory");
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
        for (int i = 0; i < min(S, nst); ++i) fill(i, i, 1);   // the weights need not wait for the previous kernel
    }
    __syncthreads();
    if (!late) pti_pdl_trigger();
    const PtiCvt k = pti_cvt_masks<TIN>(0u);
    if (!rest) pti_pdl_wait();
    if (late) pti_pdl_trigger();
    if (tid == 0)   // the tiles must (their bytes are already in the barriers' counts)
        for (int i = 0; i < min(S, nst); ++i) fill(i, i, 2);

    float acc[ND];
#pragma unroll
    for (int i = 0; i < ND; ++i) acc[i] = 0.f;
    const unsigned long long desc0 = pti_wg_desc(wbase + WSTAGE);   // slot 0's first tile; the rest by offsets
    int st = 0, left = nphs, slice = 0;   // ph % S, phases left in the slice, the slice
    unsigned parity = 0;                  // (ph / S) & 1
    for (int ph = 0; ph < nst; ++ph) {
        const unsigned wq = wbase + st * SLOT + warp * 512 + lane * 16;
        const unsigned ws = wbase + st * SLOT + PB * WB + warp * 32 + (lane >> 2) * 4;
        uint4 wn;
        unsigned sn;
        pti_wg_bar_wait(full + 8 * st, parity);
        asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];" : "=r"(wn.x), "=r"(wn.y), "=r"(wn.z), "=r"(wn.w) : "r"(wq) : "memory");
        asm volatile("ld.shared.u32 %0, [%1];" : "=r"(sn) : "r"(ws) : "memory");
#pragma unroll
        for (int u = 0; u < PB; ++u) {
            const uint4 w = wn;
            const unsigned sc = sn;
            if (u + 1 < PB) {
                asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];" : "=r"(wn.x), "=r"(wn.y), "=r"(wn.z), "=r"(wn.w)
                             : "r"(wq + (u + 1) * WB) : "memory");
                asm volatile("ld.shared.u32 %0, [%1];" : "=r"(sn) : "r"(ws + (u + 1) * SB) : "memory");
            }
            const unsigned long long desc = desc0 + ((st * SLOT + u * NR * 64) >> 4);   // no carry: < 256 KB
            pti_wg_block<NR, TIN>(acc, w, desc, desc + (256 >> 4), sc, k);
        }
        if (SPC > 1 && --left == 0) {   // a slice done: v = p0, then v += p_slice (C > 1: parked), each thread its own elements
            left = nphs;
#pragma unroll
            for (int i = 0; i < ND; ++i) {
                if (C == 1) run[i * T + tid] = slice == 0 ? acc[i] : __fadd_rn(run[i * T + tid], acc[i]);
                else run[(slice * ND + i) * T + tid] = acc[i];
                acc[i] = 0.f;
            }
            ++slice;
        }
        __syncthreads();   // every warp is past slot st's words and tiles
        if (tid == 0 && ph + S < nst) fill(ph + S, st, 3);
        if (++st == S) {
            st = 0;
            parity ^= 1u;
        }
    }
    if (SPC == 1)   // the one slice's sums, parked after the loop (not behind a branch in it)
#pragma unroll
        for (int i = 0; i < ND; ++i) run[i * T + tid] = acc[i];
    // D layout (per warp as mma.sync's C): element i is weight row 16 warp + g + 8 ((i >> 1) & 1) of the
    // unit, activation row 8 (i >> 2) + 2 t + (i & 1).  The policy's epilogue arithmetic (pti_finish).
    const int g = lane >> 2, t = lane & 3, rg = unit * R + warp;
    const float* inv = twin ? a.inv[1] : a.inv[0];
    unsigned short* const to = twin ? a.to[1] : a.to[0];
    float* const po = TOUT == 0 ? (twin ? a.po[1] : a.po[0]) : nullptr;   // the residual form
    float* const res_s = (float*)(pti_smem + 128 + 256) + warp * (NR * 16);   // its new x, [row][16 columns] a warp
    if (po != nullptr && bx == 0) {   // the next matmul's inv slots: pending until its inv CTAs fill them
        float* invo = twin ? a.invo[1] : a.invo[0];
        if (invo != nullptr && tid < M) invo[tid] = __uint_as_float(PTI_INV_PENDING);
    }
    // G: this slice's sums out, then only the unit's last CTA goes on (the threadFenceReduction pattern:
    // every thread's stores fenced before one thread counts the CTA done)
    const float* fixu = G ? (twin ? a.fixp[1] : a.fixp[0]) + (pti_u64)unit * 8 * ND * T : nullptr;
    unsigned* const fixn = G == 2 ? (twin ? a.fixc[1] : a.fixc[0]) + 2 * unit : nullptr;
    if (G == 2) {   // this slice's sums out, fenced, then counted in (a release: the fence before the count)
#pragma unroll
        for (int i = 0; i < ND; ++i) __stcg((float*)fixu + ((pti_u64)rank * ND + i) * T + tid, acc[i]);
        __threadfence();
        __syncthreads();
        if (tid == 0) atomicAdd(fixn, 1u);
    }
    if (G == 1) {
        __shared__ int last;
#pragma unroll
        for (int i = 0; i < ND; ++i) __stcg((float*)fixu + ((pti_u64)rank * ND + i) * T + tid, acc[i]);
        __threadfence();
        __syncthreads();
        if (tid == 0) {
            unsigned* cnt = (twin ? a.fixc[1] : a.fixc[0]) + unit;
            last = atomicAdd(cnt, 1u) == 7u;
            if (last) *cnt = 0u;   // every CTA of the unit has counted: ready for the next launch
        }
        __syncthreads();
        if (!last) return;
        __threadfence();
        // the 8 slices' sums into the running sums' place (C = 1's), v = p0; v += p1; ...: 8 elements at a
        // time, their 64 loads issued together (one L2 round trip an element, in turn, cost 12 us a launch)
#pragma unroll
        for (int e0 = 0; e0 < ND; e0 += 8) {
            float p[8][8];
#pragma unroll
            for (int r = 0; r < 8; ++r)
#pragma unroll
                for (int j = 0; j < 8; ++j) p[r][j] = __ldcg(fixu + ((pti_u64)r * ND + e0 + j) * T + tid);
#pragma unroll
            for (int j = 0; j < 8; ++j) {
                float v = p[0][j];
#pragma unroll
                for (int r = 1; r < 8; ++r) v = __fadd_rn(v, p[r][j]);
                run[(e0 + j) * T + tid] = v;
            }
        }
    }
    if (pin) {   // the inv CTAs' slots into shared memory (the ring's, free now), or every row summed here
        float* inv_s = (float*)(pti_smem + 128);
        bool pending = false;
        if (tid < M) {   // (M <= 64)
            const float v = __ldcg(inv + tid);   // written during this launch
            inv_s[tid] = v;
            pending = __float_as_uint(v) == PTI_INV_PENDING;
        }
        if (__syncthreads_or(pending))   // an inv CTA was late
            for (int r = warp; r < M; r += 8) {
                const float v = pti_row_inv(pin + (pti_u64)r * a.ng, a.ng, 32 * nb, a.eps, lane);
                if (lane == 0) inv_s[r] = v;
            }
        __syncthreads();
        inv = inv_s;
    }
    // The cluster's sum: slice r's sums are set r / C of rank r % C.  The first barrier publishes every
    // rank's sums, the second keeps them until the last reader is done (a reader's loads have returned,
    // used by its stores, before its relaxed arrive).  Rank r takes the elements i with (i >> 1) / NP == r,
    // NP = ND / 2 / C pairs (i, i + 2) of them: a GLU's gate and up elements stay together.
    const unsigned park = (unsigned)__cvta_generic_to_shared(run);
    // element e's finished sum: this thread's own (C == 1) or the 8 slices' in slice order (C > 1)
    // (plain lambdas: NVRTC 13.0, the H200 image's, refuses a generic one in device code)
    auto sum = [&](int e) -> float {
        if (C == 1 || G == 1) return run[e * T + tid];
        float v = 0.f;
        if (G == 2) {
#pragma unroll
            for (int r = 0; r < 8; ++r) {
                const float pv = __ldcg(fixu + ((pti_u64)r * ND + e) * T + tid);
                v = r == 0 ? pv : __fadd_rn(v, pv);
            }
            return v;
        }
#pragma unroll
        for (int r = 0; r < 8; ++r) {
            unsigned ra;
            float pv;
            asm("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(ra) : "r"(park + 4u * (((r / C) * ND + e) * T + tid)), "r"(r % C));
            asm volatile("ld.shared::cluster.f32 %0, [%1];" : "=f"(pv) : "r"(ra) : "memory");
            v = r == 0 ? pv : __fadd_rn(v, pv);
        }
        return v;
    };
    // The residual form's x of element i, or 0.  Read ahead of the elements' stores (bit 2 of a.h16): a load
    // behind a store to y waits for it, so element by element each x is one L2 round trip in turn (the fixup
    // form's one-CTA epilogue: 32 a thread; docs/perf.md, sessions 31-32).
    const bool x_first = TOUT == 0 && po != nullptr && (a.h16 & 4) != 0;
    auto x_in = [&](int i) -> float {
        const int m = 8 * (i >> 2) + 2 * t + (i & 1), n = rg * 16 + g + ((i & 2) ? 8 : 0);
        return x_first && m < M && n < a.N ? __ldcg((const float*)y + (pti_u64)m * a.ldy + n) : 0.f;
    };
    // element i out (and a GLU's up element i + 2); xv: its x, read ahead (x_first)
    auto out = [&](int i, float xv) {
        const int m = 8 * (i >> 2) + 2 * t + (i & 1);
        if (TOUT == 2) {   // PTI_GLU: gate row g with up row g + 8 of the row group (element i with i + 2)
            const int f = rg * 8 + g;
            if ((i & 2) || m >= M || 2 * f >= a.N) return;
            float gv = sum(i), uv = sum(i + 2);
            if (inv) {
                gv = __fmul_rn(gv, inv[m]);
                uv = __fmul_rn(uv, inv[m]);
            }
            unsigned short h = pti_glu(gv, uv);
            if (a.h16 & 1) h = pti_bf16_to_h16(h);
            ((unsigned short*)y)[(pti_u64)m * a.ldy + f] = h;
            if (to) to[pti_wg_tile_at(m, f, a.N >> 6, a.tnr)] = h;
        } else {
            const int n = rg * 16 + g + ((i & 2) ? 8 : 0);
            if (m >= M || n >= a.N) return;
            float v = sum(i);
            if (inv) v = __fmul_rn(v, inv[m]);
            if (TOUT == 0 && po) {   // x += bf16(v); u = bf16(x * g); the new x kept for the partial sums
                float* xp = (float*)y + (pti_u64)m * a.ldy + n;
                const float nx = __fadd_rn(x_first ? xv : *xp, pti_bf16_to_f32(pti_f32_to_bf16(v)));
                *xp = nx;
                unsigned short ub = pti_f32_to_bf16(__fmul_rn(nx, (twin ? a.g[1] : a.g[0])[n]));
                if (a.h16 & 1) ub = pti_bf16_to_h16(ub);
                (twin ? a.uo[1] : a.uo[0])[(pti_u64)m * a.ldy + n] = ub;
                if (to) to[pti_wg_tile_at(m, n, a.N >> 5, a.tnr)] = ub;
                res_s[m * 16 + (n & 15)] = nx;
            } else {
                pti_store<TIN, TOUT>(y, (pti_u64)m * a.ldy + n, v, (a.h16 & 2) != 0);
            }
        }
    };
    // The residual form's partial sums: row m's of the warp's 16 columns (a whole row group, rg) in column
    // order, as pti_finish; C > 1: the rows whose elements this rank wrote (pair (m / 8) 2 + m mod 2).
    auto partials = [&]() {
        if (TOUT != 0 || !po) return;
        __syncwarp();
        for (int m = lane; m < M; m += 32) {
            if (C > 1 && G != 1 && ((m >> 3) * 2 + (m & 1)) / (ND / 2 / C) != rank) continue;
            const float* e = res_s + m * 16;
            float p = 0.f;
#pragma unroll
            for (int c = 0; c < 16; ++c) p = __fmaf_rn(e[c], e[c], p);
            po[(pti_u64)m * (a.N >> 4) + rg] = p;
        }
    };
    if (C == 1 || G == 1) {
        float xv[ND];
#pragma unroll
        for (int i = 0; i < ND; ++i) xv[i] = x_in(i);
#pragma unroll
        for (int i = 0; i < ND; ++i) out(i, xv[i]);
        partials();
        return;
    }
    constexpr int NP = ND / 2 / C;
    static_assert(NP >= 1, "at least one element pair a rank");
    float xv[2 * NP];   // (x is this launch's alone: read before the cluster barrier, to overlap it)
#pragma unroll
    for (int p = 0; p < NP; ++p) {
        const int pr = rank * NP + p, i = (pr >> 1) * 4 + (pr & 1);   // pair pr: elements i, i + 2
        xv[2 * p] = x_in(i);
        xv[2 * p + 1] = x_in(i + 2);
    }
    if (G == 2) {   // the unit's 8 slices parked: thread 0 acquires the count, the CTA barrier passes it on
        if (tid == 0) {
            unsigned n;
            do {
                asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(n) : "l"(fixn) : "memory");
            } while (n < 8u);
        }
        __syncthreads();
        __threadfence();
    } else {
        asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;" ::: "memory");
    }
#pragma unroll
    for (int p = 0; p < NP; ++p) {
        const int pr = rank * NP + p, i = (pr >> 1) * 4 + (pr & 1);
        out(i, xv[2 * p]);
        if (TOUT != 2) out(i + 2, xv[2 * p + 1]);
    }
    partials();
    if (G == 2) {   // every read of the slices has returned (its value stored): count out; the last sets both back
        __syncthreads();
        if (tid == 0 && atomicAdd(fixn + 1, 1u) == 7u) {
            fixn[0] = 0u;
            fixn[1] = 0u;
        }
        if (rest) pti_pdl_wait();   // the clusters' launch before it done: the launch after may read both
    } else {
        asm volatile("barrier.cluster.arrive.relaxed.aligned;\nbarrier.cluster.wait.aligned;" ::: "memory");
    }
}

// The activations of one or two twins (blockIdx.y) in the tile layout pti_wg_mm reads: nb tiles of
// NR x 32 bf16, file block b at sequence position (b % 8) nb / 8 + b / 8 (slice-major); within a tile,
// row r, column c = 16 h + 8 j + 2 w + e at element (r >> 3) 256 + w 64 + (r & 7) 8 + 4 h + 2 j + e (the
// k permutation the repack gives the A fragments).  Rows past M repeat row M - 1.  One thread a 16-byte
// piece (row r, word w of a tile).  With partial sums (pa): the CTAs past the tiles' also write each row's
// inv from them (pti_row_inv_rows's arithmetic, a warp a row) for the matmul's epilogue, so that a scaled
// matmul needs no row_inv launch of its own: one dependent launch fewer in the chain (docs/perf.md,
// session 29).
extern "C" __global__ void __launch_bounds__(256) pti_wg_tiles(const unsigned short* xa, const unsigned short* xb,
                                                               unsigned short* ta, unsigned short* tb, int ma,
                                                               int mb, int nb, int ldx, int nr, const float* pa,
                                                               const float* pb, int ng, int K, float eps,
                                                               float* inva, float* invb) {
    pti_pdl_trigger();   // the matmul after may start its weight copies
    pti_pdl_wait();
    const int twin = blockIdx.y, M = twin ? mb : ma;
    const int pieces = nb * nr * 4, tile_ctas = (pieces + 255) / 256;
    if ((int)blockIdx.x >= tile_ctas) {   // the rows' inv
        const int row = (blockIdx.x - tile_ctas) * 8 + (threadIdx.x >> 5), lane = threadIdx.x & 31;
        if (row >= M) return;
        const float v = pti_row_inv((twin ? pb : pa) + (pti_u64)row * ng, ng, K, eps, lane);
        if (lane == 0) (twin ? invb : inva)[row] = v;
        return;
    }
    const unsigned short* x = twin ? xb : xa;
    unsigned short* out = twin ? tb : ta;
    const int p = blockIdx.x * 256 + threadIdx.x;
    if (p >= pieces) return;
    const int j = p / (nr * 4), r = (p >> 2) % nr, w = p & 3;   // tile j of the sequence, row, word
    const int nblk = nb / 8, b = (j % nblk) * 8 + j / nblk;
    const unsigned* src = (const unsigned*)(x + (pti_u64)min(r, M - 1) * ldx + 32 * b) + w;   // columns 2w, 2w + 1
    uint4 v;
    v.x = src[0];    // h 0, j 0
    v.y = src[4];    // h 0, j 1: columns 8 + 2w
    v.z = src[8];    // h 1, j 0: 16 + 2w
    v.w = src[12];   // h 1, j 1: 24 + 2w
    *(uint4*)(out + (pti_u64)j * nr * 32 + (r >> 3) * 256 + w * 64 + (r & 7) * 8) = v;
}

// pti_wg_{bf16,f16}_{f32,out,glu}_m{MT}[_c{C}]: bf16 or f16 (h16) inputs, MT tiles of 8 rows (9-16 rows of
// one model of the tall matrices: m2, session 32; 17-32 rows: m4, 33-64: m8), PB and S as measured best in
// scripts/wgmma_probe.py (docs/perf.md, sessions 26-27: on 28672x4096 m4_w2_b4_r3_o2_c1_x1 and
// m8_w2_b2_r4_o2_c1_x1; the cluster forms, C > 1, on the narrow matrices: m4_w2_b4_r3_o2_c4_x1,
// m4_w2_b2_r4_o2_c8_x1, m8_w2_b2_r4_o2_c8_x1); two CTAs a SM.  _g8: m8_c8's loop in the fixup form (G)
// instead of a cluster; m8_d8: m8_c8's loop in the fixup form whose 8 CTAs share the epilogue (G = 2), for the
// units of a 64-row launch left over after the card's resident clusters (the rest form, session 39); m4_d8: m4_c8's
// loop so, for a 32-row launch split the same way (PTI_WG_REST32, session 40).  m2_c4: two twins of the narrow
// class at 9-16 rows a twin, clusters of 4 at three CTAs a SM (PB 2), so that a 4096-row matrix's 64 clusters fit
// one wave (session 34); m2_c2 (A/B): clusters of 2 whose shared memory (119 KB) holds them to one CTA a SM, so
// that they cannot pile up on some SMs.
#define PTI_WG(NAME, TIN, TOUT, MT, PB, S, C, G)                                                        \
    extern "C" __global__ void __launch_bounds__(256, 2) NAME(                                          \
        const char* qa, const char* sa, const char* qb, const char* sb, const char* xa, const char* xb,  \
        void* ya, void* yb, const float* ia, const float* ib, int Ma, int Mb, int N, int nb, int ldy,    \
        int h16, const float* pa, const float* pb, int ng, float eps, int n_inv, unsigned short* uoa,    \
        unsigned short* uob, float* poa, float* pob, const float* ga, const float* gb, float* ioa,       \
        float* iob, unsigned short* toa, unsigned short* tob, int tnr, float* fpa, float* fpb,           \
        unsigned* fca, unsigned* fcb, int unit0) {                                                       \
        const PtiWgArgs a = {{qa, qb}, {sa, sb}, {xa, xb}, {ya, yb}, {ia, ib}, {Ma, Mb}, N, nb, ldy, h16, \
                             {pa, pb}, ng, eps, n_inv, {uoa, uob}, {poa, pob}, {ga, gb}, {ioa, iob},     \
                             {toa, tob}, tnr, {fpa, fpb}, {fca, fcb}, unit0};                            \
        pti_wg_mm<TIN, TOUT, MT, PB, S, C, G>(a);                                                       \
    }
#define PTI_WG_OUTS(TY, TIN, SUFFIX, MT, PB, S, C, G)                    \
    PTI_WG(pti_wg_##TY##_f32_##SUFFIX, TIN, 0, MT, PB, S, C, G)          \
    PTI_WG(pti_wg_##TY##_out_##SUFFIX, TIN, 1, MT, PB, S, C, G)          \
    PTI_WG(pti_wg_##TY##_glu_##SUFFIX, TIN, 2, MT, PB, S, C, G)
#define PTI_WG_ALL(TY, TIN)                          \
    PTI_WG_OUTS(TY, TIN, m2, 2, 4, 3, 1, 0)          \
    PTI_WG_OUTS(TY, TIN, m4, 4, 4, 3, 1, 0)          \
    PTI_WG_OUTS(TY, TIN, m8, 8, 2, 4, 1, 0)          \
    PTI_WG_OUTS(TY, TIN, m4_c4, 4, 4, 3, 4, 0)       \
    PTI_WG_OUTS(TY, TIN, m4_c8, 4, 2, 4, 8, 0)       \
    PTI_WG_OUTS(TY, TIN, m8_c8, 8, 2, 4, 8, 0)       \
    PTI_WG_OUTS(TY, TIN, m8_g8, 8, 2, 4, 8, 1)       \
    PTI_WG_OUTS(TY, TIN, m8_d8, 8, 2, 4, 8, 2)       \
    PTI_WG_OUTS(TY, TIN, m4_d8, 4, 2, 4, 8, 2)       \
    PTI_WG_OUTS(TY, TIN, m2_c4, 2, 2, 4, 4, 0)       \
    PTI_WG_OUTS(TY, TIN, m2_c2, 2, 4, 4, 2, 0)
PTI_WG_ALL(bf16, 0)
PTI_WG_ALL(f16, 1)

#endif  // __CUDA_ARCH_FEAT_SM90_ALL

#endif  // PTI_CUDA
