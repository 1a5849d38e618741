// pti_ops.hip: the non-matmul kernels of a pass (one source for CUDA and HIP).
//
// Every kernel computes each output row from that row's inputs alone, with a
// fixed reduction order, so a row's bits never depend on how many rows share
// the pass (batch invariance: lossless speculation needs it).  Attention
// splits the KV cache into chunks of ATTN_CHUNK absolute positions (fixed,
// whatever the number of rows) and combines them in chunk order.
//
// Activations are bf16 (kept as raw 16-bit words, so no vendor header is
// needed), the residual stream float32.  T = the matmul output type: bf16 or
// float32, both instantiated below.

#ifdef __HIPCC__
#include <hip/hip_runtime.h>
#define WARP 64
#define SHFL_XOR(v, m) __shfl_xor(v, m)
#else
#define WARP 32
#define SHFL_XOR(v, m) __shfl_xor_sync(0xffffffffu, v, m)
#endif

// Programmatic dependent launch (sm_90+, no-op elsewhere and without the launch
// attribute): every kernel lets the next one start early and waits for the
// previous one to finish before its first global access.
#if !defined(__HIPCC__) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define PDL_TRIGGER() asm volatile("griddepcontrol.launch_dependents;" ::: "memory")
#define PDL_WAIT() asm volatile("griddepcontrol.wait;" ::: "memory")
#else
#define PDL_TRIGGER()
#define PDL_WAIT()
#endif
#define PDL_ENTRY() do { PDL_TRIGGER(); PDL_WAIT(); } while (0)

#define ATTN_CHUNK 64
#define MAX_G 8        // query heads per KV head; kernels are instantiated for NG = 1, 2, 4, 8 >= G
// Chunks a block of the cluster form keeps in shared memory (attn_rope_clusters): 8 KB of partial
// outputs, within the 48 KB of static shared memory at HD = 128 and NG = 8.
#define ATTN_SLOTS(HD, NG) ((NG) * (HD) <= 512 ? 4 : 2)
#define ATTN_THREADS 256
#define NEG_INF __int_as_float(0xff800000)

typedef unsigned short bf16_t;

__device__ __forceinline__ float bf2f(bf16_t v) { return __uint_as_float(((unsigned)v) << 16); }
__device__ __forceinline__ float ld(const bf16_t* p, long i) { return bf2f(p[i]); }
__device__ __forceinline__ float ld(const float* p, long i) { return p[i]; }

// round to nearest even, as torch's float -> bfloat16 conversion
__device__ __forceinline__ bf16_t f2bf(float f) {
    unsigned u = __float_as_uint(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (bf16_t)0x7fc0;
    u += 0x7fffu + ((u >> 16) & 1u);
    return (bf16_t)(u >> 16);
}
// float -> f16 bits, round to nearest even
__device__ __forceinline__ unsigned short f2h16(float f) {
#ifdef __HIPCC__
    return __builtin_bit_cast(unsigned short, (_Float16)f);
#else
    unsigned short h;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));
    return h;
#endif
}

// = pti_wg_tile_at of kernels/pti_kernel.hip: where element (row m, column n) of rows of 32 nb columns sits in
// the Hopper matmul's tile layout of nr rows (tile (b mod 8) nb / 8 + b / 8 of block b = n / 32).
__device__ __forceinline__ long wg_tile_at(int m, int n, int nb, int nr) {
    const int b = n >> 5, c = n & 31;
    return (long)((b & 7) * (nb >> 3) + (b >> 3)) * nr * 32 + (m >> 3) * 256 + ((c >> 1) & 3) * 64 + (m & 7) * 8
           + 4 * (c >> 4) + 2 * ((c >> 3) & 1) + (c & 1);
}

// The attention's output rows: bf16, or h16 where the matrix after takes h16 inputs (the f16 of the
// bf16 value times 2^-H16_SHIFT, as kernels/pti_kernel.hip's pti_bf16_to_h16).
#define H16_SHIFT 4   // = PTI_H16_SHIFT of pti_kernel.hip
// With ta: also in the tile layout of tnr rows that the Hopper matmul after reads (the attention's output
// matrix; kernels/pti_kernel.hip pti_wg_tile_at), rows below na into ta (twin A's), the rest into tb from
// their row 0, so that no pti_wg_tiles launch sits between the attention and that matrix.  Rows past a
// twin's last stay unwritten, as the residual form leaves them: a matmul row reads only its own.
struct AttnOut {
    bf16_t* p;
    int h16;
    int W;   // the row's width, H * HD
    bf16_t* ta;
    bf16_t* tb;
    int na, tnr;
    __device__ __forceinline__ void put(int m, int n, float v) const {
        bf16_t b = f2bf(v);
        b = h16 ? f2h16(__fmul_rn(bf2f(b), 1.f / (1 << H16_SHIFT))) : b;
        p[(long)m * W + n] = b;
        if (ta) {
            const bool tw = m >= na;
            (tw ? tb : ta)[wg_tile_at(tw ? m - na : m, n, W >> 5, tnr)] = b;
        }
    }
};

// One RoPE rotation, rounded step by step (no contraction), so that the RoPE
// kernel and the fused attention give the same bits.
__device__ __forceinline__ void rope_pair(float a, float b, float c, float s, float& ra, float& rb) {
    ra = __fsub_rn(__fmul_rn(a, c), __fmul_rn(b, s));
    rb = __fadd_rn(__fmul_rn(a, s), __fmul_rn(b, c));
}

__device__ __forceinline__ float warp_sum(float v) {
    for (int m = WARP / 2; m > 0; m >>= 1) v += SHFL_XOR(v, m);
    return v;
}

// Block-wide sum with a fixed tree: same bits whatever the row.
__device__ float block_sum(float v, float* red) {
    int lane = threadIdx.x % WARP, w = threadIdx.x / WARP, nw = blockDim.x / WARP;
    v = warp_sum(v);
    if (lane == 0) red[w] = v;
    __syncthreads();
    float s = 0.f;
    for (int i = 0; i < nw; i++) s += red[i];
    __syncthreads();
    return s;
}

// x[m] += r[m] (when r); h[m] = bf16(x[m] * rsqrt(mean(x^2) + eps) * w), w = wa for the first n_a
// rows (twin A), wb for the rest.  grid: rows,
// NORM_THREADS threads; each thread keeps its <= NORM_PER values in registers, so
// every load is in flight at once (d <= NORM_THREADS * NORM_PER).
#define NORM_THREADS 1024
#define NORM_PER 6
template <typename T>
__device__ void add_rmsnorm(float* __restrict__ x, const T* __restrict__ r, const float* __restrict__ wa,
                            const float* __restrict__ wb, int n_a, bf16_t* __restrict__ h, int d, float eps) {
    PDL_ENTRY();
    __shared__ float red[32];
    const float* __restrict__ w = (int)blockIdx.x < n_a ? wa : wb;   // rows of twin A come first
    long base = (long)blockIdx.x * d;
    float v[NORM_PER], a[NORM_PER], g[NORM_PER];
    // every load first (restrict: the stores to x below cannot alias them), then the math
#pragma unroll
    for (int j = 0; j < NORM_PER; j++) {
        int i = threadIdx.x + j * NORM_THREADS;
        v[j] = i < d ? x[base + i] : 0.f;
        a[j] = (r && i < d) ? ld(r, base + i) : 0.f;
        g[j] = i < d ? w[i] : 0.f;
    }
    float ss = 0.f;
#pragma unroll
    for (int j = 0; j < NORM_PER; j++) { v[j] += a[j]; ss += v[j] * v[j]; }
    if (r) {
#pragma unroll
        for (int j = 0; j < NORM_PER; j++) {
            int i = threadIdx.x + j * NORM_THREADS;
            if (i < d) x[base + i] = v[j];
        }
    }
    float inv = rsqrtf(block_sum(ss, red) / (float)d + eps);
#pragma unroll
    for (int j = 0; j < NORM_PER; j++) {
        int i = threadIdx.x + j * NORM_THREADS;
        if (i < d) h[base + i] = f2bf(v[j] * inv * g[j]);
    }
}

// RoPE and the KV write.  grid (H + 2 Hk, rows), hd / 2 threads: blocks of the
// first H heads rotate q into q_out, the next Hk rotate k into the layer's cache
// [slots][Hk][ctx1][hd] at the row's position, the last Hk copy v there.
// pos < 0: a padding row, no cache write.
template <typename T>
__device__ void rope_kv(const T* qkv, const int* pos, const int* slot, const float* cos_t, const float* sin_t,
                        bf16_t* q_out, bf16_t* kc, bf16_t* vc, int H, int Hk, int hd, int ctx1, int neox) {
    PDL_ENTRY();
    int head = blockIdx.x, m = blockIdx.y, p = pos[m], half = hd / 2, i = threadIdx.x;
    if (i >= half) return;
    int pa = p < 0 ? 0 : p;
    long src = ((long)m * (H + 2 * Hk) + head) * hd;
    if (head >= H + Hk) {  // v: copy two elements
        if (p < 0) return;
        long o = (((long)slot[m] * Hk + (head - H - Hk)) * ctx1 + p) * hd;
        vc[o + i] = f2bf(ld(qkv, src + i));
        vc[o + i + half] = f2bf(ld(qkv, src + i + half));
        return;
    }
    int ia = neox ? i : 2 * i, ib = neox ? i + half : 2 * i + 1;
    float a = ld(qkv, src + ia), b = ld(qkv, src + ib);
    float c = cos_t[(long)pa * half + i], s = sin_t[(long)pa * half + i];
    float ra, rb;
    rope_pair(a, b, c, s, ra, rb);
    if (head < H) {
        long o = ((long)m * H + head) * hd;
        q_out[o + ia] = f2bf(ra);
        q_out[o + ib] = f2bf(rb);
    } else if (p >= 0) {
        long o = (((long)slot[m] * Hk + (head - H)) * ctx1 + p) * hd;
        kc[o + ia] = f2bf(ra);
        kc[o + ib] = f2bf(rb);
    }
}

// out = bf16(silu(gate) * up); gu rows are [gate F | up F].  Grid-stride over rows * F.
template <typename T>
__device__ void silu_mul(const T* gu, bf16_t* out, int F, long total) {
    PDL_ENTRY();
    for (long i = (long)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (long)gridDim.x * blockDim.x) {
        long m = i / F, j = i % F;
        float g = ld(gu, m * 2 * F + j), u = ld(gu, m * 2 * F + F + j);
        out[i] = f2bf(g / (1.f + expf(-g)) * u);
    }
}

#define INSTANTIATE(T, SUF)                                                                              \
extern "C" __global__ void add_rmsnorm_##SUF(float* x, const T* r, const float* wa, const float* wb,      \
        int n_a, bf16_t* h, int d, float eps) { add_rmsnorm<T>(x, r, wa, wb, n_a, h, d, eps); }            \
extern "C" __global__ void rope_kv_##SUF(const T* qkv, const int* pos, const int* slot, const float* c,    \
        const float* s, bf16_t* q, bf16_t* kc, bf16_t* vc, int H, int Hk, int hd, int ctx1, int neox) {   \
    rope_kv<T>(qkv, pos, slot, c, s, q, kc, vc, H, Hk, hd, ctx1, neox); }                                 \
extern "C" __global__ void silu_mul_##SUF(const T* gu, bf16_t* out, int F, long total) {                  \
    silu_mul<T>(gu, out, F, total); }

INSTANTIATE(bf16_t, bf16)
INSTANTIATE(float, f32)

// Keys and values sit in shared memory in rows of HD + 8 bf16 (KSTR): the padding puts
// neighbouring rows' 16-byte words in different banks (one thread per key in the scalar
// scores, eight rows per ldmatrix in the tensor-core path).  The scores' rows are padded
// the same way (SCSTR) for the value sum's B operands.
#define KSTR(HD) ((HD) + 8)
#define SCSTR (ATTN_CHUNK + 8)

// The tensor-core attention (sm_80+ on CUDA): scores = K q^T and the value sum V^T p by
// bf16 mma.sync with float32 sums, q kept as its bf16 value, p rounded to bf16 (as
// FlashAttention does).  Elsewhere (HIP, older CUDA) the scalar float32 loops.  Either way
// one row's arithmetic depends only on that row's position and data.
#if !defined(__HIPCC__) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800 && !defined(PTI_ATTN_NO_MMA)
#define ATTN_MMA 1
#endif

// The push combine (attn_rope_push, sm_90 clusters): each chunk's partial outputs go straight from
// the value sum's registers into the shared memory of the block that combines them, by st.async,
// which counts the bytes on that block's mbarrier.  Outputs are owned in groups of 16: group q =
// i / 16 of the G x HD outputs belongs to receiver q % W (W receivers, each owning a group at
// least), at place q / W of its slice; a chunk c's slice starts at c x str floats of the receiver's
// buffer (acc), its (max, sum) pairs at [c][head] of ml.  Addresses are shared::cluster ones of
// this block's copy (mapa finds the peer's).
struct AttnPush {
    unsigned acc, ml, bar;
    int W, str, c;
};
#if !defined(__HIPCC__) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define ATTN_PUSH 1
__device__ __forceinline__ unsigned attn_mapa(unsigned addr, int rank) {
    unsigned a;
    asm("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(a) : "r"(addr), "r"(rank));
    return a;
}
__device__ __forceinline__ void attn_st_async(unsigned addr, float v, unsigned bar) {
    asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.b32 [%0], %1, [%2];"
                 ::"r"(addr), "r"(__float_as_uint(v)), "r"(bar) : "memory");
}
__device__ __forceinline__ void attn_st_async2(unsigned addr, float x, float y, unsigned bar) {
    asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.v2.b32 [%0], {%1, %2}, [%3];"
                 ::"r"(addr), "r"(__float_as_uint(x)), "r"(__float_as_uint(y)), "r"(bar) : "memory");
}
// The receiver's barrier: one arrival (this thread's, with the bytes it will be sent), then the
// fence that makes the initialisation visible to the cluster before any peer sends.
__device__ __forceinline__ void attn_bar_init(unsigned bar, unsigned tx) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;\n"
                 "{ .reg .b64 st; mbarrier.arrive.expect_tx.shared::cta.b64 st, [%0], %1; }\n"
                 "fence.mbarrier_init.release.cluster;" ::"r"(bar), "r"(tx) : "memory");
}
__device__ __forceinline__ void attn_bar_wait(unsigned bar) {
    unsigned done;
    do {
        asm volatile("{ .reg .pred p;\n"
                     "mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 p, [%1], 0;\n"
                     "selp.u32 %0, 1, 0, p; }" : "=r"(done) : "r"(bar) : "memory");
    } while (!done);
}
// The chunk's (max, sum) pairs of every head to every receiver.
template <int NG>
__device__ __forceinline__ void attn_push_ml(const float* mx, const float* sm, int G, const AttnPush& ps) {
    for (int t = threadIdx.x; t < 16 * NG; t += blockDim.x) {
        const int j = t / NG, g = t % NG;
        if (j < ps.W && g < G)
            attn_st_async2(attn_mapa(ps.ml, j) + 8u * (ps.c * NG + g), mx[g], sm[g], attn_mapa(ps.bar, j));
    }
}
#endif

// Per head: the max of the chunk's nt scores into mx, exp(score - max) into sc (zeros past nt,
// so the tensor-core value sum may take whole 16-key steps), their sum into sm.  Fixed trees.
template <int NG>
__device__ __forceinline__ void attn_softmax(float (*sc)[SCSTR], float* mx, float* sm, int nt, int G) {
    int lane = threadIdx.x % WARP, w = threadIdx.x / WARP, nw = blockDim.x / WARP;
    for (int g = w; g < G; g += nw) {   // one warp per head; lanes take keys lane, lane + WARP, ...
        float mm = NEG_INF;
        for (int t = lane; t < nt; t += WARP) mm = fmaxf(mm, sc[g][t]);
        for (int m = WARP / 2; m > 0; m >>= 1) mm = fmaxf(mm, SHFL_XOR(mm, m));
        float l = 0.f;
        for (int t = lane; t < ATTN_CHUNK; t += WARP) {
            float e = t < nt ? expf(sc[g][t] - mm) : 0.f;
            sc[g][t] = e;
            l += e;
        }
        l = warp_sum(l);
        if (lane == 0) { mx[g] = mm; sm[g] = l; }
    }
    __syncthreads();
}

#ifdef ATTN_MMA
// q as its bf16 value (the scale is applied to the scores), rows of KSTR for ldmatrix-free
// conflict-free B loads; heads past G are never read (their B operands are zeros).
#define ATTN_QS(HD, NG) __shared__ __align__(16) bf16_t qs[NG][KSTR(HD)]
template <int HD>
__device__ __forceinline__ void attn_put_q(bf16_t (*qs)[KSTR(HD)], int g, int d, bf16_t v, float) { qs[g][d] = v; }

__device__ __forceinline__ void attn_ldsm_x4(unsigned (&a)[4], const bf16_t* p) {
    unsigned s = (unsigned)__cvta_generic_to_shared(p);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(a[0]), "=r"(a[1]), "=r"(a[2]), "=r"(a[3]) : "r"(s));
}
__device__ __forceinline__ void attn_ldsm_x4_trans(unsigned (&a)[4], const bf16_t* p) {
    unsigned s = (unsigned)__cvta_generic_to_shared(p);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(a[0]), "=r"(a[1]), "=r"(a[2]), "=r"(a[3]) : "r"(s));
}
__device__ __forceinline__ void attn_mma(float (&c)[4], const unsigned (&a)[4], unsigned b0, unsigned b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
                 "{%8,%9}, {%0,%1,%2,%3};"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
__device__ __forceinline__ unsigned attn_pack_bf16(float lo, float hi) {   // round to nearest even
    unsigned r;
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
}

// Scores: warp w < 4 takes keys 16w..16w+15 (A = the K rows, ldmatrix), B = q^T (columns =
// heads, zeros past G), HD / 16 chained MMAs in dimension order, then x scale.  Rows past nt
// hold whatever the tile held; only their own score rows see them, and the softmax drops them.
template <int HD, int NG>
__device__ __forceinline__ void attn_scores(const bf16_t* ks, bf16_t (*qs)[KSTR(HD)], float (*sc)[SCSTR],
                                            float* mx, float* sm, int nt, int G, float scale) {
    static_assert(ATTN_THREADS / WARP >= ATTN_CHUNK / 16, "a warp per 16 keys");
    const int lane = threadIdx.x % WARP, w = threadIdx.x / WARP;
    const int n = lane >> 2, k2 = 2 * (lane & 3);
    if (w < ATTN_CHUNK / 16 && 16 * w < nt) {
        const bf16_t* arow = ks + (16 * w + (lane & 15)) * KSTR(HD) + (lane >> 4) * 8;
        float c[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
        for (int d0 = 0; d0 < HD; d0 += 16) {
            unsigned a[4];
            attn_ldsm_x4(a, arow + d0);
            const unsigned b0 = n < G ? *(const unsigned*)&qs[n][d0 + k2] : 0u;
            const unsigned b1 = n < G ? *(const unsigned*)&qs[n][d0 + k2 + 8] : 0u;
            attn_mma(c, a, b0, b1);
        }
        const int t = 16 * w + n;
        if (k2 < G) { sc[k2][t] = c[0] * scale; sc[k2][t + 8] = c[2] * scale; }
        if (k2 + 1 < G) { sc[k2 + 1][t] = c[1] * scale; sc[k2 + 1][t + 8] = c[3] * scale; }
    }
    __syncthreads();
    attn_softmax<NG>(sc, mx, sm, nt, G);
}

// Un-normalised output of the chunk: warp w < HD / 16 takes dimensions 16w..16w+15 (A = V^T,
// ldmatrix.trans), B = p (columns = heads, rounded to bf16, zeros past G and past nt), chained
// MMAs over the keys in key order.  V rows past nt are zeros in the tile (attn_load_tile).
// Lane (n, k2) of warp w (< HD / 16) ends with o[0] = dimension d = 16 w + n of head k2, o[1] = d of
// head k2 + 1, o[2] and o[3] = d + 8 of the same.
template <int HD>
__device__ __forceinline__ void attn_pv_sum(const bf16_t* vs, float (*sc)[SCSTR], int nt, int G, float (&o)[4]) {
    const int lane = threadIdx.x % WARP, w = threadIdx.x / WARP;
    const int n = lane >> 2, k2 = 2 * (lane & 3);
    const bf16_t* arow = vs + ((lane & 7) + (lane >> 4) * 8) * KSTR(HD) + 16 * w + ((lane >> 3) & 1) * 8;
    for (int t0 = 0; t0 < nt; t0 += 16) {
        unsigned a[4];
        attn_ldsm_x4_trans(a, arow + t0 * KSTR(HD));
        const unsigned b0 = n < G ? attn_pack_bf16(sc[n][t0 + k2], sc[n][t0 + k2 + 1]) : 0u;
        const unsigned b1 = n < G ? attn_pack_bf16(sc[n][t0 + k2 + 8], sc[n][t0 + k2 + 9]) : 0u;
        attn_mma(o, a, b0, b1);
    }
}
template <int HD, int NG>
__device__ __forceinline__ void attn_pv(const bf16_t* vs, float (*sc)[SCSTR], int nt, int G, float* part_acc,
                                        long row_head0, int n_chunks, int c) {
    static_assert(ATTN_THREADS / WARP >= HD / 16, "a warp per 16 dimensions");
    const int lane = threadIdx.x % WARP, w = threadIdx.x / WARP;
    if (w >= HD / 16) return;
    const int n = lane >> 2, k2 = 2 * (lane & 3);
    float o[4] = {0.f, 0.f, 0.f, 0.f};
    attn_pv_sum<HD>(vs, sc, nt, G, o);
    const int d = 16 * w + n;
    if (k2 < G) {
        float* p = part_acc + ((row_head0 + k2) * n_chunks + c) * HD;
        p[d] = o[0];
        p[d + 8] = o[2];
    }
    if (k2 + 1 < G) {
        float* p = part_acc + ((row_head0 + k2 + 1) * n_chunks + c) * HD;
        p[d] = o[1];
        p[d + 8] = o[3];
    }
}
#ifdef ATTN_PUSH
// attn_pv's value sum, its outputs pushed to their receivers (AttnPush) instead of stored.
template <int HD, int NG>
__device__ __forceinline__ void attn_pv_push(const bf16_t* vs, float (*sc)[SCSTR], int nt, int G, const AttnPush& ps) {
    const int lane = threadIdx.x % WARP, w = threadIdx.x / WARP;
    if (w >= HD / 16) return;
    const int n = lane >> 2, k2 = 2 * (lane & 3);
    float o[4] = {0.f, 0.f, 0.f, 0.f};
    attn_pv_sum<HD>(vs, sc, nt, G, o);
#pragma unroll
    for (int h = 0; h < 2; h++) {   // head k2 + h: dimensions d = 16 w + n (o[h]) and d + 8 (o[h + 2]), group q
        const int g = k2 + h, q = g * (HD / 16) + w;
        if (g < G) {
            const int j = q % ps.W, t = q / ps.W;
            const unsigned a = attn_mapa(ps.acc, j) + 4u * (ps.c * ps.str + t * 16 + n), b = attn_mapa(ps.bar, j);
            attn_st_async(a, o[h], b);
            attn_st_async(a + 32u, o[h + 2], b);
        }
    }
}
#endif
#else
#define ATTN_QS(HD, NG) __shared__ __align__(16) float qs[NG][HD]
template <int HD>
__device__ __forceinline__ void attn_put_q(float (*qs)[HD], int g, int d, bf16_t v, float scale) {
    qs[g][d] = bf2f(v) * scale;
}

// Scores of the chunk's nt keys for G heads into sc (q already scaled).  Thread t computes
// key t's dot products with every head's query, sequentially over the dimensions (about 1.4
// instructions per multiply-add).  Every order is fixed by the key's place in its chunk,
// never by the number of rows.
template <int HD, int NG>
__device__ __forceinline__ void attn_scores(const bf16_t* ks, float (*qs)[HD], float (*sc)[SCSTR],
                                            float* mx, float* sm, int nt, int G, float) {
    for (int t = threadIdx.x; t < nt; t += blockDim.x) {
        float s[NG];
#pragma unroll
        for (int g = 0; g < NG; g++) s[g] = 0.f;
#pragma unroll 4
        for (int d0 = 0; d0 < HD; d0 += 8) {
            uint4 kv = *(const uint4*)&ks[t * KSTR(HD) + d0];
            float k[8] = {bf2f(kv.x & 0xffff), bf2f(kv.x >> 16), bf2f(kv.y & 0xffff), bf2f(kv.y >> 16),
                          bf2f(kv.z & 0xffff), bf2f(kv.z >> 16), bf2f(kv.w & 0xffff), bf2f(kv.w >> 16)};
#pragma unroll
            for (int g = 0; g < NG; g++) {
                float4 qa = *(const float4*)&qs[g][d0], qb = *(const float4*)&qs[g][d0 + 4];
                s[g] = __fmaf_rn(qa.x, k[0], s[g]); s[g] = __fmaf_rn(qa.y, k[1], s[g]);
                s[g] = __fmaf_rn(qa.z, k[2], s[g]); s[g] = __fmaf_rn(qa.w, k[3], s[g]);
                s[g] = __fmaf_rn(qb.x, k[4], s[g]); s[g] = __fmaf_rn(qb.y, k[5], s[g]);
                s[g] = __fmaf_rn(qb.z, k[6], s[g]); s[g] = __fmaf_rn(qb.w, k[7], s[g]);
            }
        }
#pragma unroll
        for (int g = 0; g < NG; g++) if (g < G) sc[g][t] = s[g];
    }
    __syncthreads();
    attn_softmax<NG>(sc, mx, sm, nt, G);
}

// Un-normalised output of the chunk: thread i takes dimensions 2i and 2i + 1 of
// every head (one load of the value pair serves all G heads), summing the keys in
// key order with fused multiply-adds.
template <int HD, int NG>
__device__ __forceinline__ void attn_pv_sum(const bf16_t* vs, float (*sc)[SCSTR], int nt, int i, float (&a0)[NG],
                                            float (&a1)[NG]) {
#pragma unroll
    for (int g = 0; g < NG; g++) a0[g] = a1[g] = 0.f;
#pragma unroll 4
    for (int t = 0; t < nt; t++) {
        unsigned v = *(const unsigned*)&vs[t * KSTR(HD) + 2 * i];
        float v0 = bf2f(v & 0xffff), v1 = bf2f(v >> 16);
#pragma unroll
        for (int g = 0; g < NG; g++) {
            float pr = sc[g][t];
            a0[g] = __fmaf_rn(pr, v0, a0[g]);
            a1[g] = __fmaf_rn(pr, v1, a1[g]);
        }
    }
}
template <int HD, int NG>
__device__ __forceinline__ void attn_pv(const bf16_t* vs, float (*sc)[SCSTR], int nt, int G, float* part_acc,
                                        long row_head0, int n_chunks, int c) {
    for (int i = threadIdx.x; i < HD / 2; i += blockDim.x) {
        float a0[NG], a1[NG];
        attn_pv_sum<HD, NG>(vs, sc, nt, i, a0, a1);
#pragma unroll
        for (int g = 0; g < NG; g++)
            if (g < G) {
                float* o = part_acc + ((row_head0 + g) * n_chunks + c) * HD + 2 * i;
                o[0] = a0[g];
                o[1] = a1[g];
            }
    }
}
#ifdef ATTN_PUSH
template <int HD, int NG>
__device__ __forceinline__ void attn_pv_push(const bf16_t* vs, float (*sc)[SCSTR], int nt, int G, const AttnPush& ps) {
    for (int i = threadIdx.x; i < HD / 2; i += blockDim.x) {
        float a0[NG], a1[NG];
        attn_pv_sum<HD, NG>(vs, sc, nt, i, a0, a1);
#pragma unroll
        for (int g = 0; g < NG; g++)
            if (g < G) {   // outputs g HD + 2i and + 1: group q, place 2i % 16 in it
                const int q = (g * HD + 2 * i) / 16, j = q % ps.W, t = q / ps.W;
                attn_st_async2(attn_mapa(ps.acc, j) + 4u * (ps.c * ps.str + t * 16 + (2 * i) % 16), a0[g], a1[g],
                               attn_mapa(ps.bar, j));
            }
    }
}
#endif
#endif

// The chunk's first n_keys cached keys and values into shared memory (rows padded by 16
// bytes), and zeros into the value rows from n_valid on (a value sum over whole 16-key steps
// must not meet NaN garbage there): asynchronous copies on sm_80+, K and V in two commit
// groups so that the scores can start once K has landed (attn_wait_k) while V is still on
// its way (attn_wait_v).  Elsewhere plain loads (then both waits are only the block barrier).
#if !defined(__HIPCC__) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800 && !defined(PTI_ATTN_NO_ASYNC)
#define ATTN_ASYNC 1
__device__ __forceinline__ void cp_async16(void* dst, const void* src) {
    unsigned d = (unsigned)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(d), "l"(src) : "memory");
}
#endif
// The chunk's first n_keys cached keys into the K tile (one commit group on sm_80+).
template <int HD>
__device__ __forceinline__ void attn_load_k(bf16_t* ks, const bf16_t* kc, long kv0, int n_keys) {
    const uint4* k4 = (const uint4*)(kc + kv0);
    constexpr int N4 = ATTN_CHUNK * HD / 8;   // 16-byte words per tile
    int n4 = n_keys * HD / 8;
#pragma unroll
    for (int j = 0; j < N4 / ATTN_THREADS; j++) {
        int i = threadIdx.x + j * ATTN_THREADS;
#ifdef ATTN_ASYNC
        if (i < n4) cp_async16((uint4*)ks + i + i / (HD / 8), k4 + i);
#else
        if (i < n4) ((uint4*)ks)[i + i / (HD / 8)] = k4[i];
#endif
    }
#ifdef ATTN_ASYNC
    asm volatile("cp.async.commit_group;" ::: "memory");
#endif
}
// The chunk's first n_keys cached values into the V tile (a second commit group), zeros from
// row n_valid on.
template <int HD>
__device__ __forceinline__ void attn_load_v(bf16_t* vs, const bf16_t* vc, long kv0, int n_keys, int n_valid) {
    const uint4* v4 = (const uint4*)(vc + kv0);
    constexpr int N4 = ATTN_CHUNK * HD / 8;
    int n4 = n_keys * HD / 8;
#pragma unroll
    for (int j = 0; j < N4 / ATTN_THREADS; j++) {
        int i = threadIdx.x + j * ATTN_THREADS;
#ifdef ATTN_ASYNC
        if (i < n4) cp_async16((uint4*)vs + i + i / (HD / 8), v4 + i);
#else
        if (i < n4) ((uint4*)vs)[i + i / (HD / 8)] = v4[i];
#endif
    }
#ifdef ATTN_ASYNC
    asm volatile("cp.async.commit_group;" ::: "memory");
#endif
    for (int i = n_valid * HD / 8 + threadIdx.x; i < N4; i += ATTN_THREADS)
        ((uint4*)vs)[i + i / (HD / 8)] = make_uint4(0, 0, 0, 0);
}
template <int HD>
__device__ __forceinline__ void attn_load_tile(bf16_t* ks, bf16_t* vs, const bf16_t* kc, const bf16_t* vc, long kv0,
                                               int n_keys, int n_valid) {
    attn_load_k<HD>(ks, kc, kv0, n_keys);
    attn_load_v<HD>(vs, vc, kv0, n_keys, n_valid);
}
__device__ __forceinline__ void attn_wait_k() {
#ifdef ATTN_ASYNC
    asm volatile("cp.async.wait_group 1;" ::: "memory");
#endif
    __syncthreads();
}
// pending: the next chunk's keys were requested after this chunk's (attn_rope_chunk) and may
// still be on their way.
__device__ __forceinline__ void attn_wait_v(bool pending = false) {
#ifdef ATTN_ASYNC
    if (pending) asm volatile("cp.async.wait_group 1;" ::: "memory");
    else asm volatile("cp.async.wait_group 0;" ::: "memory");
#endif
    __syncthreads();
}

// Attention, step 1: one block per (chunk, kv head, row).  The block scores the
// row's G = H / Hk query heads against the chunk's keys (positions <= the row's
// own: causal among the pass's new rows too, since their keys are already in
// the cache) and writes the chunk's max, sum of exp and un-normalised output.
template <int HD>
__device__ void attn_combine_heads(const float* part_acc, const float* part_ml, int m, int h0, int G, int nc,
                                   AttnOut out, int H, int n_chunks, float* scratch);

// counters != 0 (the fused form): the last block of a (row, kv head) to finish,
// found with an atomic counter, combines the chunks itself, in chunk order, and
// resets the counter for the next pass.
template <int HD, int NG>
__device__ void attn_partial(const bf16_t* q, const bf16_t* kc, const bf16_t* vc, const int* pos,
                             const int* slot, float* part_acc, float* part_ml, int H, int Hk, int ctx1,
                             int n_chunks, float scale, int* counters, AttnOut out) {
    PDL_ENTRY();
    __shared__ __align__(16) bf16_t ks[ATTN_CHUNK * KSTR(HD)];
    __shared__ __align__(16) bf16_t vs[ATTN_CHUNK * KSTR(HD)];
    ATTN_QS(HD, NG);
    __shared__ float sc[NG][SCSTR];
    __shared__ float mx[NG], sm[NG];
    int c = blockIdx.x, kh = blockIdx.y, m = blockIdx.z, p = pos[m];
    int G = H / Hk;
    int t0 = c * ATTN_CHUNK;
    if (p < 0 && counters && c == 0)  // a padding row: zeros out
        for (int i = threadIdx.x; i < G * HD; i += blockDim.x) out.put(m, kh * G * HD + i, 0.f);
    if (p < 0 || t0 > p) return;  // chunks past the row's position are never read by the combine
    int nt = min(ATTN_CHUNK, p + 1 - t0);
    long kv0 = (((long)slot[m] * Hk + kh) * ctx1 + t0) * HD;
    attn_load_tile<HD>(ks, vs, kc, vc, kv0, nt, nt);
    for (int i = threadIdx.x; i < G * HD; i += blockDim.x)
        attn_put_q<HD>(qs, i / HD, i % HD, q[((long)m * H + kh * G) * HD + i], scale);
    attn_wait_k();
    attn_scores<HD, NG>(ks, qs, sc, mx, sm, nt, G, scale);
    attn_wait_v();
    attn_pv<HD, NG>(vs, sc, nt, G, part_acc, (long)m * H + kh * G, n_chunks, c);
    if (threadIdx.x < G) {
        long o = (((long)m * H + kh * G + threadIdx.x) * n_chunks + c) * 2;
        part_ml[o] = mx[threadIdx.x];
        part_ml[o + 1] = sm[threadIdx.x];
    }
    if (!counters) return;
    __shared__ int last;
    __threadfence();   // this block's partials are visible device-wide before it is counted
    __syncthreads();
    int nc = p / ATTN_CHUNK + 1;
    if (threadIdx.x == 0) {
        int done = atomicAdd(&counters[m * Hk + kh], 1);
        last = done == nc - 1;
        if (last) counters[m * Hk + kh] = 0;
    }
    __syncthreads();
    if (!last) return;
    __threadfence();
    attn_combine_heads<HD>(part_acc, part_ml, m, kh * G, G, nc, out, H, n_chunks, (float*)ks);
}

// Outputs i0..i1-1 of heads h0.. of row m (i = head offset * HD + dimension), each thread's
// chunk loop straight from L2: the combine for contexts longer than the staged forms hold.
// The arithmetic of attn_combine (the same bits).
template <int HD>
__device__ __forceinline__ void attn_combine_plain(const float* part_acc, const float* part_ml, int m, int h0,
                                                   int nc, AttnOut out, int H, int n_chunks, int i0, int i1) {
    for (int i = i0 + threadIdx.x; i < i1; i += blockDim.x) {
        int h = h0 + i / HD, d = i % HD;
        const float* ml = part_ml + ((long)m * H + h) * n_chunks * 2;
        const float* acc = part_acc + ((long)m * H + h) * n_chunks * HD;
        float gm = NEG_INF;
        for (int c = 0; c < nc; c++) gm = fmaxf(gm, __ldcg(ml + 2 * c));
        float denom = 0.f, a = 0.f;
        for (int c = 0; c < nc; c++) {
            float e = expf(__ldcg(ml + 2 * c) - gm);
            denom = __fmaf_rn(__ldcg(ml + 2 * c + 1), e, denom);
            a = __fmaf_rn(__ldcg(acc + (long)c * HD + d), e, a);
        }
        out.put(m, h * HD + d, a / denom);
    }
}

// Combine chunks 0..nc-1 of heads h0..h0+G-1 of row m, in chunk order (L2 loads:
// the partials come from other blocks).  The arithmetic of attn_combine (the same
// bits): gm = max of the chunk maxima, e_c = exp(m_c - gm), denom = sum s_c e_c,
// out = (sum acc_c e_c) / denom, sums in chunk order.  The chunk maxima and sums go
// through `scratch` (the block's K tile, no longer needed) so that each e_c is computed once and every load is in flight together.
template <int HD>
__device__ void attn_combine_heads(const float* part_acc, const float* part_ml, int m, int h0, int G, int nc,
                                   AttnOut out, int H, int n_chunks, float* scratch) {
    // the K tile (ATTN_CHUNK * HD bf16) holds 2 arrays [MAX_G][MAX_NC] of floats
    constexpr int MAX_NC = ATTN_CHUNK * HD / (4 * MAX_G);   // 256 chunks (16384 positions) at HD = 128
    float* cm = scratch;                  // [G][MAX_NC]: chunk max, then e_c
    float* cs = scratch + MAX_G * MAX_NC; // [G][MAX_NC]: chunk sum
    __shared__ float den[MAX_G];
    if (nc > MAX_NC) {   // very long contexts
        attn_combine_plain<HD>(part_acc, part_ml, m, h0, nc, out, H, n_chunks, 0, G * HD);
        return;
    }
    for (int i = threadIdx.x; i < G * nc; i += blockDim.x) {
        int g = i / nc, c = i % nc;
        const float* ml = part_ml + ((long)m * H + h0 + g) * n_chunks * 2;
        cm[g * MAX_NC + c] = __ldcg(ml + 2 * c);
        cs[g * MAX_NC + c] = __ldcg(ml + 2 * c + 1);
    }
    __syncthreads();
    for (int g = threadIdx.x / WARP; g < G; g += blockDim.x / WARP) {   // one lane per head does the chunk-order sums
        if (threadIdx.x % WARP) continue;
        float gm = NEG_INF;
        for (int c = 0; c < nc; c++) gm = fmaxf(gm, cm[g * MAX_NC + c]);
        float denom = 0.f;
        for (int c = 0; c < nc; c++) {
            float e = expf(cm[g * MAX_NC + c] - gm);
            cm[g * MAX_NC + c] = e;
            denom = __fmaf_rn(cs[g * MAX_NC + c], e, denom);
        }
        den[g] = denom;
    }
    __syncthreads();
    constexpr int PT = 4;   // outputs per thread per round, their loads interleaved
    for (int i0 = 0; i0 < G * HD; i0 += PT * blockDim.x) {
        float a[PT];
        const float* row = part_acc + (long)m * H * n_chunks * HD;   // 32-bit offsets from it: fewer registers
        int off[PT], gi[PT];
#pragma unroll
        for (int k = 0; k < PT; k++) {
            int i = i0 + k * blockDim.x + threadIdx.x;
            int ok = i < G * HD;
            gi[k] = ok ? i / HD : 0;
            off[k] = (h0 + gi[k]) * n_chunks * HD + (ok ? i % HD : 0);
            a[k] = 0.f;
        }
#pragma unroll 4
        for (int c = 0; c < nc; c++) {
#pragma unroll
            for (int k = 0; k < PT; k++) a[k] = __fmaf_rn(__ldcg(row + off[k] + c * HD), cm[gi[k] * MAX_NC + c], a[k]);
        }
#pragma unroll
        for (int k = 0; k < PT; k++) {
            int i = i0 + k * blockDim.x + threadIdx.x;
            if (i < G * HD) out.put(m, h0 * HD + i, a[k] / den[gi[k]]);
        }
    }
}

// Attention, step 2: one block per (head, row); chunks combined in chunk order.
template <int HD>
__device__ void attn_combine(const float* part_acc, const float* part_ml, const int* pos, AttnOut out,
                             int H, int n_chunks) {
    PDL_ENTRY();
    int h = blockIdx.x, m = blockIdx.y, p = pos[m];
    if (p < 0) {
        for (int d = threadIdx.x; d < HD; d += blockDim.x) out.put(m, h * HD + d, 0.f);
        return;
    }
    int nc = p / ATTN_CHUNK + 1;
    const float* ml = part_ml + ((long)m * H + h) * n_chunks * 2;
    float gm = NEG_INF;
    for (int c = 0; c < nc; c++) gm = fmaxf(gm, ml[2 * c]);
    float denom = 0.f;
    for (int c = 0; c < nc; c++) denom = __fmaf_rn(ml[2 * c + 1], expf(ml[2 * c] - gm), denom);
    const float* acc = part_acc + ((long)m * H + h) * n_chunks * HD;
    for (int d = threadIdx.x; d < HD; d += blockDim.x) {
        float a = 0.f;
#pragma unroll 4
        for (int c = 0; c < nc; c++) a = __fmaf_rn(acc[(long)c * HD + d], expf(ml[2 * c] - gm), a);
        out.put(m, h * HD + d, a / denom);
    }
}

#define INSTANTIATE_ATTN(HD, NG)                                                                        \
extern "C" __global__ void __launch_bounds__(ATTN_THREADS) attn_partial_##HD##_g##NG(const bf16_t* q,      \
        const bf16_t* kc, const bf16_t* vc, const int* pos, const int* slot, float* pa, float* pml, int H,   \
        int Hk, int ctx1, int nch, float scale) {                                                          \
    attn_partial<HD, NG>(q, kc, vc, pos, slot, pa, pml, H, Hk, ctx1, nch, scale, nullptr, AttnOut{nullptr, 0, H * HD}); } \
extern "C" __global__ void __launch_bounds__(ATTN_THREADS) attn_fused_##HD##_g##NG(const bf16_t* q,        \
        const bf16_t* kc, const bf16_t* vc, const int* pos, const int* slot, float* pa, float* pml, int H,   \
        int Hk, int ctx1, int nch, float scale, int* counters, bf16_t* out) {                              \
    attn_partial<HD, NG>(q, kc, vc, pos, slot, pa, pml, H, Hk, ctx1, nch, scale, counters, AttnOut{out, 0, H * HD}); }
#define INSTANTIATE_COMBINE(HD)                                                                         \
extern "C" __global__ void attn_combine_##HD(const float* pa, const float* pml, const int* pos,         \
        bf16_t* out, int H, int nch) { attn_combine<HD>(pa, pml, pos, AttnOut{out, 0, H * HD}, H, nch); }

INSTANTIATE_COMBINE(64)
INSTANTIATE_COMBINE(128)
#define INSTANTIATE_ATTN_G(HD) INSTANTIATE_ATTN(HD, 1) INSTANTIATE_ATTN(HD, 2) INSTANTIATE_ATTN(HD, 4) INSTANTIATE_ATTN(HD, 8)
INSTANTIATE_ATTN_G(64)
INSTANTIATE_ATTN_G(128)

// RoPE + KV write + attention in one launch (qkv straight from the matmul).
// ATTN_THREADS threads a block.  Rows of one sequence are P consecutive rows with
// consecutive positions, so the sequence's first new position is p0 = p - m % P.
// Keys/values of positions before p0 come from the cache; those of this pass are
// computed here from qkv (the same rounding for every block that needs them), and
// the block whose chunk holds the row's own position writes that position's K and
// V into the cache for later passes.
// Two ways to combine the chunks, the same bits (the host picks: gpu_ops.attention_cluster):
//  - attn_rope, grid (chunks, kv heads, rows): a block per chunk; the last block of a (row,
//    kv head) to finish, found with an atomic counter, combines (attn_combine_heads).
//  - attn_rope_clusters (sm_90 thread-block clusters), grid (cl, kv heads, rows) in clusters of
//    (cl, 1, 1): block r takes chunks r, r + cl, ...; after one cluster barrier every block with
//    a chunk combines a slice of the outputs (attn_combine_slice).  No counter, no fence, no one
//    block doing the whole combine at the end: that tail was about half of the launch at one
//    sequence (docs/perf.md, session 12).
// early != 0 (set by the host only inside a captured pass): the first chunk's cached rows are
// requested before griddepcontrol.wait, so they travel while the QKV matmul ends.  Safe there:
// positions before p0 and the pass's inputs pos / slot were written by earlier graph launches,
// which end before this one starts.  (Not in eager passes: there a chain of small kernels that
// start early could reach into the previous pass.)
#if !defined(__HIPCC__) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define ATTN_CLUSTER 1
__device__ __forceinline__ void cluster_arrive() { asm volatile("barrier.cluster.arrive.release.aligned;" ::: "memory"); }
__device__ __forceinline__ void cluster_wait() { asm volatile("barrier.cluster.wait.acquire.aligned;" ::: "memory"); }
// A cluster-scope fence, then an arrive without release: the form the shared-memory combine was
// measured with (docs/perf.md, session 16).  It saves nothing over cluster_arrive: the fence
// compiles to the same GPU-wide memory barrier, with an L1 invalidate besides.
__device__ __forceinline__ void cluster_arrive_fenced() {
    asm volatile("fence.acq_rel.cluster;\nbarrier.cluster.arrive.relaxed.aligned;" ::: "memory");
}
// Without ordering: a block's last reads of its peers' shared memory are complete (their values
// are used) before it arrives, and that is all its peers wait for before they exit.
__device__ __forceinline__ void cluster_arrive_relaxed() { asm volatile("barrier.cluster.arrive.relaxed.aligned;" ::: "memory"); }
#endif

// From the chunk maxima cm and sums cs ([G][nc] each), a warp per head: the chunk weights
// e_c = exp(m_c - max_c m_c) into cm, and the head's denominator sum_c s_c e_c, in chunk order, into den.
__device__ __forceinline__ void attn_chunk_weights(float* cm, const float* cs, int G, int nc, float* den) {
    const int lane = threadIdx.x % WARP;
    for (int gg = threadIdx.x / WARP; gg < G; gg += blockDim.x / WARP) {
        float gm = NEG_INF;
        for (int c = lane; c < nc; c += WARP) gm = fmaxf(gm, cm[gg * nc + c]);
        for (int o = WARP / 2; o > 0; o >>= 1) gm = fmaxf(gm, SHFL_XOR(gm, o));
        for (int c = lane; c < nc; c += WARP) cm[gg * nc + c] = expf(cm[gg * nc + c] - gm);
        __syncwarp();
        if (lane == 0) {   // the sum in chunk order
            float denom = 0.f;
            for (int c = 0; c < nc; c++) denom = __fmaf_rn(cs[gg * nc + c], cm[gg * nc + c], denom);
            den[gg] = denom;
        }
    }
}

// Outputs [r * per / W, (r + 1) * per / W) of heads h0..h0+G-1 of row m (per = G * HD), combined
// over chunks 0..nc-1 with attn_combine_heads' arithmetic (the same bits).  The chunk maxima and
// sums pass through `scratch` (the block's K tile, no longer needed), one warp per head; each
// thread's first ATTN_PF partial outputs are requested before them, so one L2 round trip
// brings nearly everything.
#ifdef ATTN_CLUSTER
#define ATTN_PF 16
template <int HD>
__device__ void attn_combine_slice(const float* part_acc, const float* part_ml, int m, int h0, int G, int nc,
                                   AttnOut out, int H, int n_chunks, int r, int W, float* scratch) {
    constexpr int SCRATCH = ATTN_CHUNK * KSTR(HD) / 2;   // floats in the bf16 K tile
    __shared__ float den[MAX_G];
    const int per = G * HD, i0 = r * per / W, i1 = (r + 1) * per / W;
    const float* row = part_acc + (long)m * H * n_chunks * HD;
    if (2 * G * nc > SCRATCH) {   // very long contexts
        attn_combine_plain<HD>(part_acc, part_ml, m, h0, nc, out, H, n_chunks, i0, i1);
        return;
    }
    float* cm = scratch;            // [G][nc]: chunk max, then e_c
    float* cs = scratch + G * nc;   // [G][nc]: chunk sum
    const int i = i0 + threadIdx.x;
    for (int ib = i; ib < i1 || ib == i; ib += blockDim.x) {   // every thread takes the first round
        const bool act = ib < i1;
        const int g = act ? ib / HD : 0;
        const float* acc = row + (long)(h0 + g) * n_chunks * HD + (act ? ib - g * HD : 0);
        float pre[ATTN_PF];
#pragma unroll
        for (int c = 0; c < ATTN_PF; c++) pre[c] = act && c < nc ? __ldcg(acc + (long)c * HD) : 0.f;
        if (ib == i) {   // the maxima and sums, once
            for (int k = threadIdx.x; k < G * nc; k += blockDim.x) {
                int gg = k / nc, c = k % nc;
                float2 v = __ldcg((const float2*)(part_ml + (((long)m * H + h0 + gg) * n_chunks + c) * 2));
                cm[k] = v.x;
                cs[k] = v.y;
            }
            __syncthreads();
            attn_chunk_weights(cm, cs, G, nc, den);
            __syncthreads();
        }
        if (!act) break;
        float a = 0.f;
#pragma unroll
        for (int c = 0; c < ATTN_PF; c++)
            if (c < nc) a = __fmaf_rn(pre[c], cm[g * nc + c], a);
        for (int c = ATTN_PF; c < nc; c++) a = __fmaf_rn(__ldcg(acc + (long)c * HD), cm[g * nc + c], a);
        out.put(m, h0 * HD + ib, a / den[g]);
    }
}

// The partials of chunk c live in the shared memory of the cluster's block c % cl, slot c / cl
// (sacc [slots][NG * HD], sml [slots][NG]: attn_rope_clusters), read from here through
// distributed shared memory.  (The grid's x is the cluster's, so block r is the cluster's rank r.)
__device__ __forceinline__ float attn_ld_peer(unsigned addr, int rank) {
    unsigned a;
    float v;
    asm("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(a) : "r"(addr), "r"(rank));
    asm volatile("ld.shared::cluster.f32 %0, [%1];" : "=f"(v) : "r"(a) : "memory");
    return v;
}

// attn_combine_slice with the partials read from the cluster's shared memory instead of L2 (no
// L2 round trip for the partials' stores before the barrier, none for their loads after it):
// the same arithmetic in the same order, so the same bits.
template <int HD, int NG>
__device__ void attn_combine_dsm(const float* sacc, const float2* sml, int cl, int nc, int m, int h0, int G,
                                 AttnOut out, int H, int r, int W, float* scratch) {
    __shared__ float den[MAX_G];
    const int per = G * HD, i0 = r * per / W, i1 = (r + 1) * per / W;
    const unsigned acc0 = (unsigned)__cvta_generic_to_shared(sacc), ml0 = (unsigned)__cvta_generic_to_shared(sml);
    float* cm = scratch;            // [G][nc]: chunk max, then e_c (nc <= 4 slots x 16: it fits)
    float* cs = scratch + G * nc;   // [G][nc]: chunk sum
    const int i = i0 + threadIdx.x;
    for (int ib = i; ib < i1 || ib == i; ib += blockDim.x) {   // every thread takes the first round
        const bool act = ib < i1;
        const int g = act ? ib / HD : 0;
        // chunk c: block c % cl, slot c / cl, counted along (cl is a run-time value: no divisions)
        const unsigned e = acc0 + 4u * (act ? ib : 0);   // element ib = g * HD + d of a slot
        constexpr unsigned SLOT = 4u * NG * HD;
        float pre[ATTN_PF];
        int own = 0;
        unsigned at = e;
#pragma unroll
        for (int c = 0; c < ATTN_PF; c++) {
            pre[c] = act && c < nc ? attn_ld_peer(at, own) : 0.f;
            own = own + 1 == cl ? 0 : own + 1;
            at = own == 0 ? at + SLOT : at;
        }
        if (ib == i) {   // the maxima and sums, once
            for (int k = threadIdx.x; k < G * nc; k += blockDim.x) {   // (at most 512: one round)
                int gg = k / nc, c = k % nc;
                const unsigned a = ml0 + 8u * ((c / cl) * NG + gg);
                cm[k] = attn_ld_peer(a, c % cl);
                cs[k] = attn_ld_peer(a + 4u, c % cl);
            }
            __syncthreads();
            attn_chunk_weights(cm, cs, G, nc, den);
            __syncthreads();
        }
        if (!act) break;
        float a = 0.f;
#pragma unroll
        for (int c = 0; c < ATTN_PF; c++)
            if (c < nc) a = __fmaf_rn(pre[c], cm[g * nc + c], a);
        for (int c = ATTN_PF; c < nc; c++) {
            a = __fmaf_rn(attn_ld_peer(at, own), cm[g * nc + c], a);
            own = own + 1 == cl ? 0 : own + 1;
            at = own == 0 ? at + SLOT : at;
        }
        out.put(m, h0 * HD + ib, a / den[g]);
    }
}
#endif

// One chunk c of row m (position p) and KV head kh: the chunk's keys and values into the tiles
// (cached ones from kc / vc, this pass's from qkv, rotated), the row's query heads into qs when
// with_q, the row's own K and V into the cache when the chunk holds position p, then the chunk's
// max, sum of exp and un-normalised output into the partials.  wait: griddepcontrol.wait once
// the cached rows are requested (early launches).  loaded: the chunk's cached rows were requested
// by the chunk before.  c_next >= 0 (a block of several chunks): chunk c_next's cached keys are
// requested once this chunk's scores are done, its values once this chunk's value sum is, so
// that they travel while this chunk is computed.  SM and sacc / sml (attn_rope_cls_*): the chunk's
// partials into this block's shared memory (G x HD outputs, G (max, sum) pairs) instead of
// part_acc / part_ml.  (SM false: the code of the other kernels, untouched by that form.)
template <int HD, int NG, bool SM = false, typename T, typename QS>
__device__ __forceinline__ void attn_rope_chunk(const T* qkv, const int* slot, const float* cos_t, const float* sin_t,
                                                bf16_t* kc, bf16_t* vc, float* part_acc, float* part_ml, bf16_t* ks,
                                                bf16_t* vs, QS qs, float (*sc)[SCSTR], float* mx, float* sm, int H,
                                                int Hk, int ctx1, int n_chunks, float scale, int P, int neox, int m,
                                                int kh, int p, int c, bool with_q, bool wait, bool loaded,
                                                int c_next, float* sacc = nullptr, float2* sml = nullptr,
                                                const AttnPush* push = nullptr) {
    const int half = HD / 2, G = H / Hk, t0 = c * ATTN_CHUNK;
    const int nt = min(ATTN_CHUNK, p + 1 - t0), p0 = p - m % P;
    const int n_old = max(0, min(nt, p0 - t0));   // positions of this chunk already in the cache
    const long row_len = (long)(H + 2 * Hk) * HD;
    const long kv0 = (((long)slot[m] * Hk + kh) * ctx1 + t0) * HD;
    if (!loaded) attn_load_tile<HD>(ks, vs, kc, vc, kv0, n_old, nt);   // in flight during the RoPE work below
    if (wait) PDL_WAIT();
    // this pass's keys (rotated) and values, from qkv rows m - (p - t)
    for (int i = threadIdx.x; i < (nt - n_old) * half; i += blockDim.x) {
        int t = t0 + n_old + i / half, j = i % half;
        int ia = neox ? j : 2 * j, ib = neox ? j + half : 2 * j + 1;
        long src = (long)(m - (p - t)) * row_len + (long)(H + kh) * HD;
        float ra, rb;
        rope_pair(ld(qkv, src + ia), ld(qkv, src + ib), cos_t[(long)t * half + j], sin_t[(long)t * half + j], ra, rb);
        ks[(t - t0) * KSTR(HD) + ia] = f2bf(ra);
        ks[(t - t0) * KSTR(HD) + ib] = f2bf(rb);
        long vsrc = (long)(m - (p - t)) * row_len + (long)(H + Hk + kh) * HD;
        vs[(t - t0) * KSTR(HD) + ia] = f2bf(ld(qkv, vsrc + ia));
        vs[(t - t0) * KSTR(HD) + ib] = f2bf(ld(qkv, vsrc + ib));
    }
    // the row's query heads, rotated and rounded to bf16 as the separate RoPE kernel stores q
    if (with_q)
        for (int i = threadIdx.x; i < G * half; i += blockDim.x) {
            int g = i / half, j = i % half;
            int ia = neox ? j : 2 * j, ib = neox ? j + half : 2 * j + 1;
            long src = (long)m * row_len + (long)(kh * G + g) * HD;
            float ra, rb;
            rope_pair(ld(qkv, src + ia), ld(qkv, src + ib), cos_t[(long)p * half + j], sin_t[(long)p * half + j], ra, rb);
            attn_put_q<HD>(qs, g, ia, f2bf(ra), scale);
            attn_put_q<HD>(qs, g, ib, f2bf(rb), scale);
        }
    attn_wait_k();
    if (c == p / ATTN_CHUNK)   // this row's own position, for later passes
        for (int d = threadIdx.x; d < HD; d += blockDim.x) {
            kc[kv0 + (long)(p - t0) * HD + d] = ks[(p - t0) * KSTR(HD) + d];
            vc[kv0 + (long)(p - t0) * HD + d] = vs[(p - t0) * KSTR(HD) + d];
        }
    attn_scores<HD, NG>(ks, qs, sc, mx, sm, nt, G, scale);   // ends with a barrier: the K tile is free
    int nt2 = 0, n_old2 = 0;
    long kv2 = 0;
    if (c_next >= 0) {
        const int t2 = c_next * ATTN_CHUNK;
        nt2 = min(ATTN_CHUNK, p + 1 - t2);
        n_old2 = max(0, min(nt2, p0 - t2));
        kv2 = kv0 + (long)(t2 - t0) * HD;
        attn_load_k<HD>(ks, kc, kv2, n_old2);
    }
    attn_wait_v(c_next >= 0);
#ifdef ATTN_PUSH
    if (SM && push) {
        // the cluster barrier that publishes the receivers' mbarriers (attn_rope_push), long since passed as a rule
        asm volatile("barrier.cluster.wait.acquire.aligned;" ::: "memory");
        attn_pv_push<HD, NG>(vs, sc, nt, G, *push);
        attn_push_ml<NG>(mx, sm, G, *push);
    } else
#endif
    if (SM && sacc) {
        attn_pv<HD, NG>(vs, sc, nt, G, sacc, 0, 1, 0);
        if (threadIdx.x < G) sml[threadIdx.x] = make_float2(mx[threadIdx.x], sm[threadIdx.x]);
    } else {
        attn_pv<HD, NG>(vs, sc, nt, G, part_acc, (long)m * H + kh * G, n_chunks, c);
        if (threadIdx.x < G) {
            long o = (((long)m * H + kh * G + threadIdx.x) * n_chunks + c) * 2;
            part_ml[o] = mx[threadIdx.x];
            part_ml[o + 1] = sm[threadIdx.x];
        }
    }
    if (c_next >= 0) {
        __syncthreads();   // every warp is done with the V tile
        attn_load_v<HD>(vs, vc, kv2, n_old2, nt2);
    }
}

#define ATTN_ROPE_SMEM(HD, NG)                                  \
    __shared__ __align__(16) bf16_t ks[ATTN_CHUNK * KSTR(HD)];  \
    __shared__ __align__(16) bf16_t vs[ATTN_CHUNK * KSTR(HD)];  \
    ATTN_QS(HD, NG);                                            \
    __shared__ float sc[NG][SCSTR];                             \
    __shared__ float mx[NG], sm[NG]

// The counter form: grid (chunks, kv heads, rows).
template <int HD, int NG, typename T>
__device__ void attn_rope(const T* qkv, const int* pos, const int* slot, const float* cos_t, const float* sin_t,
                          bf16_t* kc, bf16_t* vc, float* part_acc, float* part_ml, int* counters, AttnOut out,
                          int H, int Hk, int ctx1, int n_chunks, float scale, int P, int neox, int early) {
    PDL_TRIGGER();
    ATTN_ROPE_SMEM(HD, NG);
    __shared__ int last;
    const int c = blockIdx.x, kh = blockIdx.y, m = blockIdx.z, G = H / Hk;
    if (!early) PDL_WAIT();
    const int p = pos[m];
    if (p < 0 || c * ATTN_CHUNK > p) {
        if (early) PDL_WAIT();
        if (p < 0 && c == 0)   // a padding row: zeros out
            for (int i = threadIdx.x; i < G * HD; i += blockDim.x) out.put(m, kh * G * HD + i, 0.f);
        return;   // chunks past the row's position are never read by the combine
    }
    attn_rope_chunk<HD, NG>(qkv, slot, cos_t, sin_t, kc, vc, part_acc, part_ml, ks, vs, qs, sc, mx, sm, H, Hk, ctx1,
                            n_chunks, scale, P, neox, m, kh, p, c, true, early, false, -1);
    __threadfence();   // this block's partials are visible device-wide before it is counted
    __syncthreads();
    const int nc = p / ATTN_CHUNK + 1;
    if (threadIdx.x == 0) {
        int done = atomicAdd(&counters[m * Hk + kh], 1);
        last = done == nc - 1;
        if (last) counters[m * Hk + kh] = 0;
    }
    __syncthreads();
    if (!last) return;
    __threadfence();
    attn_combine_heads<HD>(part_acc, part_ml, m, kh * G, G, nc, out, H, n_chunks, (float*)ks);
}

#ifdef ATTN_CLUSTER
// The cluster form: grid (cl, kv heads, rows) in clusters of (cl, 1, 1); block r takes chunks
// r, r + cl, ..., then every block with a chunk combines a slice of the outputs.  SMEM
// (attn_rope_cls_*, which the host launches where a block takes several chunks: cl below the
// grid's chunks): a row whose blocks take several chunks each, within ATTN_SLOTS, keeps the
// partials in the blocks' shared memory and combines them through distributed shared memory
// (attn_combine_dsm; a second, relaxed cluster barrier keeps every block until its peers have read
// it).  The same arithmetic, so the same bits.  Its own instantiation, so that the launches of one
// chunk a block keep the plain kernel, code and shared memory: in one kernel the shared-memory form
// cost them 0.2-0.5% (docs/perf.md, session 16).
template <int HD, int NG, typename T, bool SMEM>
__device__ void attn_rope_clusters(const T* qkv, const int* pos, const int* slot, const float* cos_t,
                                   const float* sin_t, bf16_t* kc, bf16_t* vc, float* part_acc, float* part_ml,
                                   AttnOut out, int H, int Hk, int ctx1, int n_chunks, float scale, int P, int neox,
                                   int early, int cl) {
    PDL_TRIGGER();
    ATTN_ROPE_SMEM(HD, NG);
    const int r = blockIdx.x, kh = blockIdx.y, m = blockIdx.z, G = H / Hk;
    if (!early) PDL_WAIT();
    const int p = pos[m];
    if (p < 0 || r * ATTN_CHUNK > p) {
        if (early) PDL_WAIT();
        if (p < 0 && r == 0)   // a padding row: zeros out
            for (int i = threadIdx.x; i < G * HD; i += blockDim.x) out.put(m, kh * G * HD + i, 0.f);
        cluster_arrive();   // the blocks with chunks wait for the whole cluster
        return;
    }
    const int nc = p / ATTN_CHUNK + 1;
    constexpr int SLOTS = ATTN_SLOTS(HD, NG);
    __shared__ __align__(16) float sacc[SLOTS][NG * HD];   // (SMEM only: unused elsewhere, so not allocated)
    __shared__ float2 sml[SLOTS][NG];
    const bool dsm = SMEM && nc > cl && nc <= SLOTS * cl;   // the same for the whole cluster (one row and head)
    for (int c = r, j = 0; c < nc; c += cl, ++j) {
        if (c != r) __syncthreads();   // the previous chunk is done with the tiles and scores
        attn_rope_chunk<HD, NG, SMEM>(qkv, slot, cos_t, sin_t, kc, vc, part_acc, part_ml, ks, vs, qs, sc, mx, sm, H,
                                      Hk, ctx1, n_chunks, scale, P, neox, m, kh, p, c, c == r, early && c == r,
                                      c != r, c + cl < nc ? c + cl : -1, dsm ? sacc[j] : nullptr,
                                      dsm ? sml[j] : nullptr);
    }
    if (!dsm) {
        cluster_arrive();   // every chunk's partials are written (release / acquire at cluster scope)
        cluster_wait();
        attn_combine_slice<HD>(part_acc, part_ml, m, kh * G, G, nc, out, H, n_chunks, r, min(nc, cl), (float*)ks);
        return;
    }
    cluster_arrive_fenced();   // every chunk's partials are in the blocks' shared memory
    cluster_wait();
    attn_combine_dsm<HD, NG>(&sacc[0][0], &sml[0][0], cl, nc, m, kh * G, G, out, H, r, min(nc, cl), (float*)ks);
    cluster_arrive_relaxed();   // the other blocks have read this block's partials: it may exit
    cluster_wait();
}
#endif

#ifdef ATTN_CLUSTER
// The push form (attn_rope_clp_*, launched where every block has one chunk at most: cl >= the
// grid's chunks): the chunk's partials are pushed to the W = min(nc, G HD / 16) blocks that combine
// them (AttnPush) as soon as its value sum is done, and a receiver waits on its own mbarrier only
// before it combines: no GPU-wide memory fence, no L2 round trip, no reads of peers' shared memory
// (one sequence: 5.3 -> 4.6 us a launch; docs/perf.md, session 17).  The one cluster barrier after
// the partials only keeps every block alive until all receivers have their bytes.  The arithmetic
// of attn_combine_slice, in chunk order (the same bits); only which block computes which output
// differs.
template <int HD, int NG, typename T>
__device__ void attn_rope_push(const T* qkv, const int* pos, const int* slot, const float* cos_t,
                               const float* sin_t, bf16_t* kc, bf16_t* vc, float* part_acc, float* part_ml,
                               AttnOut out, int H, int Hk, int ctx1, int n_chunks, float scale, int P, int neox,
                               int early, int cl) {
    PDL_TRIGGER();
    ATTN_ROPE_SMEM(HD, NG);
    // a receiver holds nc x str <= G HD + 16 (nc - 1) floats (nc <= 16), and nc (max, sum) pairs per head
    __shared__ __align__(16) float racc[NG * HD + 16 * 15];   // [chunk][str]
    __shared__ __align__(8) float2 rml[16][NG];              // [chunk][head]
    __shared__ __align__(8) unsigned long long rbar;
    __shared__ float den[MAX_G];
    const int r = blockIdx.x, kh = blockIdx.y, m = blockIdx.z, G = H / Hk;
    if (!early) PDL_WAIT();
    const int p = pos[m];
    const int nc = p < 0 ? 0 : p / ATTN_CHUNK + 1;
    if (nc > cl) __trap();   // the host's rule; the buffers above hold one chunk a block
    const int Q = G * HD / 16, W = min(nc, Q), str = W ? (Q + W - 1) / W * 16 : 0;
    const AttnPush ps = {(unsigned)__cvta_generic_to_shared(racc), (unsigned)__cvta_generic_to_shared(rml),
                         (unsigned)__cvta_generic_to_shared(&rbar), W, str, r};
    const int own = r < W ? (Q - r + W - 1) / W : 0;   // groups of 16 outputs this block combines
    if (own && threadIdx.x == 0) attn_bar_init(ps.bar, nc * (64u * own + 8u * G));   // the bytes it will be sent
    // Two cluster barriers: the first publishes the receivers' mbarriers before any peer sends; every
    // block arrives at the second once all it will be sent has landed (a receiver) or at once (the
    // rest), and waits at it before exiting, so that no block exits with its pushes in flight.
    cluster_arrive_relaxed();   // (after the fence)
    if (p < 0 || r >= nc) {
        if (early) PDL_WAIT();
        if (p < 0 && r == 0)   // a padding row: zeros out
            for (int i = threadIdx.x; i < G * HD; i += blockDim.x) out.put(m, kh * G * HD + i, 0.f);
        cluster_wait();
        cluster_arrive_relaxed();
        return;
    }
    attn_rope_chunk<HD, NG, true>(qkv, slot, cos_t, sin_t, kc, vc, part_acc, part_ml, ks, vs, qs, sc, mx, sm, H, Hk,
                                  ctx1, n_chunks, scale, P, neox, m, kh, p, r, true, early, false, -1, nullptr,
                                  nullptr, &ps);   // (its pushes wait for the first barrier)
    if (!own) {
        cluster_arrive_relaxed();
        cluster_wait();
        return;
    }
    attn_bar_wait(ps.bar);   // every chunk's slice has landed here
    cluster_arrive_relaxed();
    __syncthreads();         // every warp is done with the V tile
    float* cm = (float*)vs;       // [G][nc]: chunk max, then e_c
    float* cs = cm + G * nc;      // [G][nc]: chunk sum
    for (int k = threadIdx.x; k < G * nc; k += blockDim.x) {
        const int gg = k / nc, c = k % nc;
        cm[k] = rml[c][gg].x;
        cs[k] = rml[c][gg].y;
    }
    __syncthreads();
    attn_chunk_weights(cm, cs, G, nc, den);
    __syncthreads();
    for (int e = threadIdx.x; e < own * 16; e += blockDim.x) {   // attn_combine_slice's arithmetic
        const int i = (r + (e >> 4) * W) * 16 + (e & 15), g = i / HD;
        float a = 0.f;
        for (int c = 0; c < nc; c++) a = __fmaf_rn(racc[c * str + e], cm[g * nc + c], a);
        out.put(m, kh * G * HD + i, a / den[g]);
    }
    cluster_wait();
}
#endif

// The tensor-core path at 4 blocks per SM: 64 registers instead of 72 (3 blocks per SM).  The
// scalar path would spill there.
#ifdef ATTN_MMA
#define ATTN_ROPE_MINB 4
#else
#define ATTN_ROPE_MINB 1
#endif
// attn_rope_cl_*, attn_rope_cls_*: the cluster form (sm_90+; elsewhere the host never launches them, and
// they only exit).
// the output rows, and their tiles for the matmul after where ta is given (AttnOut)
#define ATTN_OUT(HD) AttnOut{out, h16, H * HD, ta, tb, na, tnr}
#ifdef ATTN_CLUSTER
#define ATTN_ROPE_CLUSTERS(HD, ...) attn_rope_clusters<HD, __VA_ARGS__>(qkv, pos, slot, c, s, kc, vc, pa, pml, ATTN_OUT(HD), \
                                                                    H, Hk, ctx1, nch, scale, P, neox, early, cl)
#define ATTN_ROPE_PUSH(HD, NG, T) attn_rope_push<HD, NG, T>(qkv, pos, slot, c, s, kc, vc, pa, pml, ATTN_OUT(HD), H, Hk, \
                                                           ctx1, nch, scale, P, neox, early, cl)
#else
#define ATTN_ROPE_CLUSTERS(HD, ...)
#define ATTN_ROPE_PUSH(HD, NG, T)
#endif
#define INSTANTIATE_ATTN_ROPE(HD, NG, T, SUF)                                                           \
extern "C" __global__ void __launch_bounds__(ATTN_THREADS, ATTN_ROPE_MINB) attn_rope_##HD##_g##NG##_##SUF(const T* qkv, \
        const int* pos, const int* slot, const float* c, const float* s, bf16_t* kc, bf16_t* vc, float* pa, \
        float* pml, int* counters, bf16_t* out, int H, int Hk, int ctx1, int nch, float scale, int P,       \
        int neox, int early, int h16, bf16_t* ta, bf16_t* tb, int na, int tnr) {                  \
    attn_rope<HD, NG, T>(qkv, pos, slot, c, s, kc, vc, pa, pml, counters, ATTN_OUT(HD), H, Hk, ctx1, nch, \
                         scale, P, neox, early); }                                                         \
extern "C" __global__ void __launch_bounds__(ATTN_THREADS, ATTN_ROPE_MINB) attn_rope_cl_##HD##_g##NG##_##SUF(      \
        const T* qkv, const int* pos, const int* slot, const float* c, const float* s, bf16_t* kc, bf16_t* vc, \
        float* pa, float* pml, bf16_t* out, int H, int Hk, int ctx1, int nch, float scale, int P, int neox,   \
        int early, int cl, int h16, bf16_t* ta, bf16_t* tb, int na, int tnr) {                    \
    ATTN_ROPE_CLUSTERS(HD, NG, T, false); }                                                                \
extern "C" __global__ void __launch_bounds__(ATTN_THREADS, ATTN_ROPE_MINB) attn_rope_cls_##HD##_g##NG##_##SUF(     \
        const T* qkv, const int* pos, const int* slot, const float* c, const float* s, bf16_t* kc, bf16_t* vc, \
        float* pa, float* pml, bf16_t* out, int H, int Hk, int ctx1, int nch, float scale, int P, int neox,   \
        int early, int cl, int h16, bf16_t* ta, bf16_t* tb, int na, int tnr) {                    \
    ATTN_ROPE_CLUSTERS(HD, NG, T, true); }                                                                 \
extern "C" __global__ void __launch_bounds__(ATTN_THREADS, ATTN_ROPE_MINB) attn_rope_clp_##HD##_g##NG##_##SUF( \
        const T* qkv, const int* pos, const int* slot, const float* c, const float* s, bf16_t* kc, bf16_t* vc, \
        float* pa, float* pml, bf16_t* out, int H, int Hk, int ctx1, int nch, float scale, int P, int neox,   \
        int early, int cl, int h16, bf16_t* ta, bf16_t* tb, int na, int tnr) {                    \
    ATTN_ROPE_PUSH(HD, NG, T); }
#define INSTANTIATE_ATTN_ROPE_G(HD, T, SUF) INSTANTIATE_ATTN_ROPE(HD, 1, T, SUF) INSTANTIATE_ATTN_ROPE(HD, 2, T, SUF) \
    INSTANTIATE_ATTN_ROPE(HD, 4, T, SUF) INSTANTIATE_ATTN_ROPE(HD, 8, T, SUF)
INSTANTIATE_ATTN_ROPE_G(64, bf16_t, bf16)
INSTANTIATE_ATTN_ROPE_G(128, bf16_t, bf16)
INSTANTIATE_ATTN_ROPE_G(64, float, f32)
INSTANTIATE_ATTN_ROPE_G(128, float, f32)

// The pass's first and last steps.  embed_norm: with tokens, x[m] = float32 of row tokens[m] of
// the embedding table (Ea for the first n_a rows, twin A's; Eb for the rest; a token outside
// [0, vocab) gives a NaN row, so it cannot pass unnoticed); without, x is read.  With g (ga for
// the first n_a rows, gb after), the first layer's norm input, as a residual-writing matmul
// leaves it for the next (kernels/pti_kernel.hip, PtiArgs): u[m] = bf16(x[m] * g) (h16: as
// pti_kernel.hip's h16, the f16 of that value times 2^-H16_SHIFT) and p[m][j] = the sum of x^2
// over columns 16j..16j+15, in column order.  One launch for both: the pass's first two steps
// were two dependent launches (docs/perf.md, session 20).  grid: rows, 256 threads, a thread per
// group of 16 columns.
extern "C" __global__ void __launch_bounds__(256) embed_norm(const bf16_t* __restrict__ Ea,
        const bf16_t* __restrict__ Eb, const int* __restrict__ tokens, int n_a, int vocab, int d,
        float* __restrict__ x, const float* __restrict__ ga, const float* __restrict__ gb,
        bf16_t* __restrict__ u, float* __restrict__ p, int h16) {
    PDL_ENTRY();
    int m = blockIdx.x, ng = (d + 15) / 16;
    const bf16_t* __restrict__ e = Ea;
    bool ok = true;
    if (tokens) {
        int t = tokens[m];
        ok = t >= 0 && t < vocab;
        e = (m < n_a ? Ea : Eb) + (long)(ok ? t : 0) * d;
    }
    const float* __restrict__ g = m < n_a ? ga : gb;
    float* __restrict__ xm = x + (long)m * d;
    for (int j = threadIdx.x; j < ng; j += blockDim.x) {
        int i0 = 16 * j, n = min(16, d - i0);
        float v[16];
#pragma unroll
        for (int k = 0; k < 16; k++)   // every load first: one round trip a group
            if (k < n) v[k] = !tokens ? xm[i0 + k] : ok ? bf2f(e[i0 + k]) : __int_as_float(0x7fc00000);
        if (tokens) {
#pragma unroll
            for (int k = 0; k < 16; k++)
                if (k < n) xm[i0 + k] = v[k];
        }
        if (!g) continue;
        float s = 0.f;
#pragma unroll
        for (int k = 0; k < 16; k++) {
            if (k >= n) break;
            bf16_t b = f2bf(__fmul_rn(v[k], g[i0 + k]));
            u[(long)m * d + i0 + k] = h16 ? f2h16(__fmul_rn(bf2f(b), 1.f / (1 << H16_SHIFT))) : b;
            s = __fmaf_rn(v[k], v[k], s);
        }
        p[(long)m * ng + j] = s;
    }
}

// a beats b: NaN above everything, then the larger value, then the lower index (torch.argmax)
__device__ __forceinline__ bool argmax_beats(float a, int ia, float b, int ib) {
    bool na = a != a, nb = b != b;
    if (na || nb) return na && (!nb || ia < ib);
    return a > b || (a == b && ia < ib);
}

// ids[m] = argmax of float32 logits row m (V wide).  feed (int32 [3, M]: tokens, positions,
// slots of a pass of one row per sequence; null for none): becomes the next pass's inputs,
// each row's pick at its position + 1 (padding rows, position -1, stay padding).  Then the
// next pass needs nothing from the host (gpu_model.py, GpuModel.start_next).  host (int32
// [ring, M] in pinned host memory, its device address; null for none): the picks also go to row
// state[0] of it, which the launch then advances, so the host reads each pass's picks from their
// own row with no copy between passes (the copy and its gaps: docs/perf.md, session 20).
// A row is split over gridDim.x blocks of ARGMAX_CHUNK elements (one block a row read the whole
// row from one SM: docs/perf.md, session 20); each block leaves its best in state, and the row's
// last block to finish picks among them.  state: int32 [2 + M + 2 M gridDim.x], zero before the
// first launch and left so by each: the ring's row, rows done, each row's blocks done, each
// block's best (value bits, index).
// grid: (ceil(V / ARGMAX_CHUNK), rows), ARGMAX_THREADS threads.
#define ARGMAX_THREADS 256
#define ARGMAX_PER_THREAD 8
#define ARGMAX_CHUNK (ARGMAX_THREADS * ARGMAX_PER_THREAD)
__device__ __forceinline__ void argmax_warp(float& best, int& bi) {
    for (int o = WARP / 2; o > 0; o >>= 1) {
        float ov = SHFL_XOR(best, o);
        int oi = SHFL_XOR(bi, o);
        if (argmax_beats(ov, oi, best, bi)) { best = ov; bi = oi; }
    }
}
extern "C" __global__ void __launch_bounds__(ARGMAX_THREADS) argmax_feed(const float* __restrict__ logits,
        int V, int M, int* __restrict__ ids, int* feed, int* __restrict__ host, int ring, int* state) {
    PDL_ENTRY();
    __shared__ float sv[ARGMAX_THREADS / WARP];
    __shared__ int si[ARGMAX_THREADS / WARP];
    __shared__ int last;
    int m = blockIdx.y, nb = gridDim.x;
    int slot = host ? state[0] % ring : 0;   // read before this block counts itself done
    int* __restrict__ row_done = state + 2;
    int* part = state + 2 + M + 2 * m * nb;
    const float* __restrict__ row = logits + (long)m * V;
    int i0 = blockIdx.x * ARGMAX_CHUNK + threadIdx.x;
    float v[ARGMAX_PER_THREAD];
#pragma unroll
    for (int r = 0; r < ARGMAX_PER_THREAD; r++) {   // every load in flight at once
        int i = i0 + r * ARGMAX_THREADS;
        v[r] = i < V ? row[i] : NEG_INF;
    }
    float best = NEG_INF;
    int bi = 0x7fffffff;
#pragma unroll
    for (int r = 0; r < ARGMAX_PER_THREAD; r++) {
        int i = i0 + r * ARGMAX_THREADS;
        if (i < V && argmax_beats(v[r], i, best, bi)) { best = v[r]; bi = i; }
    }
    argmax_warp(best, bi);
    int lane = threadIdx.x % WARP, w = threadIdx.x / WARP;
    if (lane == 0) { sv[w] = best; si[w] = bi; }
    __syncthreads();
    if (threadIdx.x == 0) {
        for (int k = 1; k < ARGMAX_THREADS / WARP; k++)
            if (argmax_beats(sv[k], si[k], best, bi)) { best = sv[k]; bi = si[k]; }
        part[2 * blockIdx.x] = __float_as_int(best);
        part[2 * blockIdx.x + 1] = bi;
        __threadfence();   // the best before the count, for the row's last block
        last = atomicAdd(&row_done[m], 1) == nb - 1;
    }
    __syncthreads();
    if (!last || w != 0) return;
    // the row's last block: its first warp picks among the blocks' bests (any order: the pick
    // is the same, argmax_beats being a total order)
    best = NEG_INF;
    bi = 0x7fffffff;
    for (int k = lane; k < nb; k += WARP) {
        float pv = __int_as_float(((volatile int*)part)[2 * k]);
        int pi = ((volatile int*)part)[2 * k + 1];
        if (argmax_beats(pv, pi, best, bi)) { best = pv; bi = pi; }
    }
    argmax_warp(best, bi);
    if (lane != 0) return;
    row_done[m] = 0;
    if (bi == 0x7fffffff) bi = 0;   // V == 0 cannot happen; keep the id in range anyway
    ids[m] = bi;
    if (feed) {
        feed[m] = bi;
        int p = feed[M + m];
        if (p >= 0) feed[M + m] = p + 1;
    }
    if (host) {
        host[(long)slot * M + m] = bi;
        if (atomicAdd(&state[1], 1) == M - 1) {   // every block of every row has read state[0]
            state[1] = 0;
            state[0] = (state[0] + 1) % ring;
        }
    }
}

// Streaming read of n 16-byte words: the bandwidth denominator of `pti bench`.
extern "C" __global__ void stream_read(const uint4* p, long n, unsigned* sink) {
    PDL_ENTRY();
    unsigned acc = 0;
    long stride = (long)gridDim.x * blockDim.x;
    long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
    for (; i + 3 * stride < n; i += 4 * stride) {
        uint4 a = p[i], b = p[i + stride], c = p[i + 2 * stride], d = p[i + 3 * stride];
        acc ^= a.x ^ a.y ^ a.z ^ a.w ^ b.x ^ b.y ^ b.z ^ b.w ^ c.x ^ c.y ^ c.z ^ c.w ^ d.x ^ d.y ^ d.z ^ d.w;
    }
    for (; i < n; i += stride) { uint4 a = p[i]; acc ^= a.x ^ a.y ^ a.z ^ a.w; }
    if (acc == 0x9e3779b9u) sink[0] = acc;  // keeps the loads; almost never taken
}
