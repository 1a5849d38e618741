// A probe (scripts/wgmma_probe.py), compiled after kernels/pti_kernel.hip for sm_90a: y = x W^T for one
// Q8 model, bf16 activations, with wgmma (Hopper's warpgroup MMA) instead of mma.sync, keeping the
// policy kernels' per-element order (pti_kernel.hip, "Batch invariance"): for each slice w = b mod 8
// of the blocks, acc = fma(scale, block_dot, acc) in block order, block_dot two chained k16 MMAs with
// the same k permutation; then the slices summed in slice order (here across the 8 CTAs of a cluster).
//
// Why wgmma: at 32 and 64 rows the mma.sync kernels are bound by the L1/TEX pipeline (each warp loads
// every activation fragment for its 16 weight rows; docs/perf.md session 21).  wgmma reads the
// activations (its B operand) from shared memory itself, once a warpgroup of 64 weight rows, and the
// CTA's threads fill that tile once for all its warpgroups.
//
// Layout of one block's activation tile in shared memory (B, K-major, no swizzle): core matrices of
// 8 rows x 16 bytes (8 k slots), core (c, n8) at c * 128 + n8 * 512; k slots of the MMA h (0, 1) are
// cores 2h, 2h+1.  Slot 2t+e of MMA h <- column 8t + 4h + e, slot 8+2t+e <- 8t + 4h + 2 + e: the
// permutation the weights' repack gives the A fragments (pti_block: MMA 0 takes each lane's columns
// 8t..8t+3, MMA 1 8t+4..8t+7).  So a thread holding columns 8t..8t+7 of a row writes its 4 words w
// (columns 8t+2w, 8t+2w+1) to core w, word t.
#if defined(PTI_CUDA) && defined(__CUDA_ARCH_FEAT_SM90_ALL)

// pti_wg_desc, pti_wg_mma, pti_wg_scale, pti_wg_block, pti_wg_bar_wait, pti_wg_bulk: kernels/pti_kernel.hip's
// (the backend's Hopper kernel took this probe's helpers; session 22's forms now start a block with the
// lean form's first MMA, which writes D, instead of zeroing it: their registers changed, their bits not).

// The cluster's ordered sum and the store.  This CTA (rank sl of C) takes ND / C elements i of every
// thread's column and adds the 8 slices' partial sums in slice order (v = p0; v += p1; ...: pti_finish's
// order); slice r's sums are set r / C of rank r % C, element i of thread tid at pbase + 4 ((set ND + i) T
// + tid).  D layout (per warp as mma.sync's C): element i is weight row 16 (warp % 4) + g + 8 ((i >> 1) & 1),
// activation row 8 (i >> 2) + 2 t + (i & 1).  The first cluster barrier publishes every rank's sums, the
// second keeps them until the last reader is done.
template <int TOUT>
__device__ __forceinline__ void pti_wg_store_elem(void* y, int i, int lane, int rg, int M, int N, int ldy, float v) {
    const int g = lane >> 2, t = lane & 3;
    const int n = rg * 16 + g + ((i & 2) ? 8 : 0), m = 8 * (i >> 2) + 2 * t + (i & 1);
    if (m < M && n < N) pti_store<0, TOUT>(y, (pti_u64)m * ldy + n, v);
}
template <int TOUT, int ND, int T, int C>
__device__ __forceinline__ void pti_wg_cluster_out(unsigned pbase, int sl, int rg, void* y, int M, int N, int ldy) {
    const int tid = threadIdx.x, lane = tid & 31;
    asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;" ::: "memory");
    // A chunk's loads first, then its adds in slice order: a load, add, load chain waited out each load's
    // latency (64 in a row for ND / C = 8) at the end of every CTA.  Chunks of at most 8 elements (64
    // values: the long form's c1 spilled with all 32 at once).
    constexpr int NE = ND / C, CH = NE < 8 ? NE : 8;
#pragma unroll
    for (int i0 = 0; i0 < NE; i0 += CH) {
        float pv[CH][8];
#pragma unroll
        for (int ii = 0; ii < CH; ++ii) {
            const int i = sl * NE + i0 + ii;
#pragma unroll
            for (int r = 0; r < 8; ++r) {
                const unsigned a = pbase + 4u * (((r / C) * ND + i) * T + tid);
                if (C == 1) {
                    asm volatile("ld.shared.f32 %0, [%1];" : "=f"(pv[ii][r]) : "r"(a) : "memory");
                } else {
                    unsigned ra;
                    asm("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(ra) : "r"(a), "r"(r % C));
                    asm volatile("ld.shared::cluster.f32 %0, [%1];" : "=f"(pv[ii][r]) : "r"(ra) : "memory");
                }
            }
        }
#pragma unroll
        for (int ii = 0; ii < CH; ++ii) {
            float v = pv[ii][0];
#pragma unroll
            for (int r = 1; r < 8; ++r) v = __fadd_rn(v, pv[ii][r]);
            asm volatile("" ::"f"(v));   // every load used before the relaxed arrive below, stored or not
            pti_wg_store_elem<TOUT>(y, sl * NE + i0 + ii, lane, rg, M, N, ldy, v);
        }
    }
    // Keeps each rank's sums until every reader is done with them: a reader's loads have returned (its
    // stores use them) before its arrive, so no release is needed, and a release would wait for the
    // output stores (ncu's membar stalls, session 26).
    asm volatile("barrier.cluster.arrive.relaxed.aligned;\nbarrier.cluster.wait.aligned;" ::: "memory");
}

// MT tiles of 8 activation rows (NR = 8 MT, the wgmma's N), U blocks a step, WG warpgroups a CTA (64
// weight rows each, sharing the activation tiles).  A cluster of 8 CTAs computes one unit of 64 WG
// rows: CTA r the slice r (blocks b = r mod 8); each writes its slice sums to its shared memory, and
// after a cluster barrier CTA r adds an eighth of the elements over the 8 CTAs, in slice order.
// K a multiple of 256 U, rows a multiple of 64 WG, activations 16-byte aligned with ldx a multiple of 8
// (the probe's cases).
template <int TOUT, int MT, int U, int WG>
__device__ __forceinline__ void pti_wg_mm(const uint4* __restrict__ q, const unsigned* __restrict__ s,
                                          const unsigned short* __restrict__ x, void* y, int M, int N, int K,
                                          int nb, int ldx, int ldy) {
    constexpr int NR = 8 * MT, ND = NR / 2, T = 128 * WG;
    constexpr int STAGE = NR * 64;                       // bytes of one block's tile
    constexpr int XP = (NR * 4 * U + T - 1) / T;         // 16-byte activation pieces a thread, a step
    extern __shared__ __align__(128) unsigned char pti_smem[];
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int sl = blockIdx.x & 7, unit = blockIdx.x >> 3;   // the slice (= the CTA's rank in its cluster)
    const int rg = unit * 4 * WG + warp;                 // this warp's row group (16 rows)
    float* part = (float*)(pti_smem + 2 * U * STAGE);    // [ND][T]: this slice's sums
    const unsigned sbase = (unsigned)__cvta_generic_to_shared(pti_smem);
    const PtiCvt k = pti_cvt_masks<0>(0u);
    pti_pdl_trigger();
    pti_pdl_wait();
    const int nsteps = nb / 8 / U;
    const uint4* qw = q + (pti_u64)rg * nb * 32 + lane;
    const unsigned* sw = s + (pti_u64)rg * nb * 8 + (lane >> 2);

    uint4 xr[XP];
    auto load_x = [&](int j) {
#pragma unroll
        for (int p = 0; p < XP; ++p) {
            const int i = tid + p * T;
            xr[p] = make_uint4(0, 0, 0, 0);
            if (i < NR * 4 * U) {
                const int u = i / (NR * 4), row = (i / 4) % NR, t = i & 3;
                const int b = sl + 8 * (j * U + u);
                if (row < M) xr[p] = __ldg((const uint4*)(x + (pti_u64)row * ldx + b * 32 + 8 * t));
            }
        }
    };
    auto store_x = [&](int buf) {
#pragma unroll
        for (int p = 0; p < XP; ++p) {
            const int i = tid + p * T;
            if (i < NR * 4 * U) {
                const int u = i / (NR * 4), row = (i / 4) % NR, t = i & 3;
                unsigned* st = (unsigned*)(pti_smem + (buf * U + u) * STAGE + (row >> 3) * 512 + (row & 7) * 16) + t;
                st[0] = xr[p].x;
                st[32] = xr[p].y;
                st[64] = xr[p].z;
                st[96] = xr[p].w;
            }
        }
        asm volatile("fence.proxy.async.shared::cta;" ::: "memory");   // st.shared -> wgmma's reads
    };
    uint4 wc[U], wn[U];
    unsigned sc[U], sn[U];
    auto load_w = [&](int j, uint4* wv, unsigned* sv) {
#pragma unroll
        for (int u = 0; u < U; ++u) {
            const int b = sl + 8 * (j * U + u);
            wv[u] = pti_ld_stream(qw + b * 32);
            sv[u] = __ldg(sw + b * 8);
        }
    };

    float acc[ND];
#pragma unroll
    for (int i = 0; i < ND; ++i) acc[i] = 0.f;
    load_x(0);
    load_w(0, wc, sc);
    store_x(0);
    __syncthreads();
    for (int st = 0; st < nsteps; ++st) {
        const bool more = st + 1 < nsteps;
        if (more) {
            load_x(st + 1);
            load_w(st + 1, wn, sn);
        }
#pragma unroll
        for (int u = 0; u < U; ++u) {
            pti_wg_block<NR>(acc, wc[u], pti_wg_desc(sbase + ((st & 1) * U + u) * STAGE),
                             pti_wg_desc(sbase + ((st & 1) * U + u) * STAGE + 256), sc[u], k);
        }
        if (more) store_x((st + 1) & 1);
        __syncthreads();
#pragma unroll
        for (int u = 0; u < U; ++u) {
            wc[u] = wn[u];
            sc[u] = sn[u];
        }
    }
#pragma unroll
    for (int i = 0; i < ND; ++i) part[i * T + tid] = acc[i];
    pti_wg_cluster_out<TOUT, ND, T, 8>((unsigned)__cvta_generic_to_shared(part), sl, rg, y, M, N, ldy);
}

// The same with an S-stage ring in shared memory filled by cp.async (weights 16 bytes a lane, scales,
// and the activations 4 bytes at a time into the permuted tile), so that the loads in flight hold no
// registers: stage j + S - 1 is requested while stage j is computed.
__device__ __forceinline__ void pti_cp16(unsigned dst, const void* src) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(dst), "l"(src) : "memory");
}
__device__ __forceinline__ void pti_cp4(unsigned dst, const void* src, bool ok) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;" ::"r"(dst), "l"(src), "r"(ok ? 4 : 0) : "memory");
}
template <int TOUT, int MT, int U, int WG, int S>
__device__ __forceinline__ void pti_wg2_mm(const uint4* __restrict__ q, const unsigned* __restrict__ s,
                                           const unsigned short* __restrict__ x, void* y, int M, int N, int K,
                                           int nb, int ldx, int ldy) {
    constexpr int NR = 8 * MT, ND = NR / 2, T = 128 * WG, W = 4 * WG;
    constexpr int TILE = NR * 64;                        // bytes of one block's activation tile
    constexpr int WB = 512 + 32;                         // one warp's block: weights, then its 8 scales
    constexpr int STAGE = U * (TILE + W * WB);
    extern __shared__ __align__(128) unsigned char pti_smem[];
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int sl = blockIdx.x & 7, unit = blockIdx.x >> 3;
    const int rg = unit * W + warp;
    float* part = (float*)(pti_smem + S * STAGE);
    const unsigned sbase = (unsigned)__cvta_generic_to_shared(pti_smem);
    const PtiCvt k = pti_cvt_masks<0>(0u);
    pti_pdl_trigger();
    pti_pdl_wait();
    const int nsteps = nb / 8 / U;
    const uint4* qw = q + (pti_u64)rg * nb * 32 + lane;
    const unsigned* sw = s + (pti_u64)rg * nb * 8;

    auto issue = [&](int j) {   // stage j's copies into slot j % S (an empty group past the end)
        if (j < nsteps) {
            const unsigned st = sbase + (j % S) * STAGE;
#pragma unroll
            for (int u = 0; u < U; ++u) {
                const int b = sl + 8 * (j * U + u);
                const unsigned wdst = st + U * TILE + (u * W + warp) * WB;
                pti_cp16(wdst + 16 * lane, qw + b * 32);
                if (lane < 2) pti_cp16(wdst + 512 + 16 * lane, sw + b * 8 + 4 * lane);
                // activations: NR rows x 16 words; word c of row r: columns 32 b + 2c, +1 -> core (c & 3),
                // word c >> 2 of that core's row
                for (int i = tid; i < NR * 16; i += T) {
                    const int row = i >> 4, c = i & 15;
                    const bool ok = row < M;
                    const unsigned dst = st + u * TILE + (row >> 3) * 512 + (c & 3) * 128 + (row & 7) * 16 + (c >> 2) * 4;
                    pti_cp4(dst, x + (ok ? (pti_u64)row * ldx : 0) + b * 32 + 2 * c, ok);
                }
            }
        }
        asm volatile("cp.async.commit_group;" ::: "memory");
    };

    float acc[ND];
#pragma unroll
    for (int i = 0; i < ND; ++i) acc[i] = 0.f;
#pragma unroll
    for (int j = 0; j < S - 1; ++j) issue(j);
    for (int j = 0; j < nsteps; ++j) {
        asm volatile("cp.async.wait_group %0;" ::"n"(S - 2) : "memory");
        asm volatile("fence.proxy.async.shared::cta;" ::: "memory");   // cp.async's writes -> wgmma's reads
        __syncthreads();
        issue(j + S - 1);   // into the slot computed at j - 1, which every warp has left
        const unsigned st = sbase + (j % S) * STAGE;
#pragma unroll
        for (int u = 0; u < U; ++u) {
            const unsigned char* wp = pti_smem + (j % S) * STAGE + U * TILE + (u * W + warp) * WB;
            const uint4 w = *(const uint4*)(wp + 16 * lane);
            const unsigned sc = *(const unsigned*)(wp + 512 + 4 * (lane >> 2));
            pti_wg_block<NR>(acc, w, pti_wg_desc(st + u * TILE), pti_wg_desc(st + u * TILE + 256), sc, k);
        }
    }
#pragma unroll
    for (int i = 0; i < ND; ++i) part[i * T + tid] = acc[i];
    pti_wg_cluster_out<TOUT, ND, T, 8>((unsigned)__cvta_generic_to_shared(part), sl, rg, y, M, N, ldy);
}

// A probe kernel: BOUNDS the parenthesized launch bounds, its body one of the forms' functions (the variadic
// argument, template arguments and all).
#define PTI_WG_KERNEL(NAME, BOUNDS, ...)                                                           \
    extern "C" __global__ void __launch_bounds__ BOUNDS NAME(                                      \
        const uint4* q, const unsigned* s, const unsigned short* x, void* y, int M, int N, int K,  \
        int nb, int ldx, int ldy) {                                                                \
        __VA_ARGS__(q, s, x, y, M, N, K, nb, ldx, ldy);                                            \
    }
#define PTI_WG2(NAME, TOUT, MT, U, WG, S) PTI_WG_KERNEL(NAME, (128 * WG), pti_wg2_mm<TOUT, MT, U, WG, S>)
#define PTI_WG2_ALL(TAG, TOUT)                              \
    PTI_WG2(pti_wg_##TAG##_m2_u2_w1_s4, TOUT, 2, 2, 1, 4)   \
    PTI_WG2(pti_wg_##TAG##_m2_u4_w1_s4, TOUT, 2, 4, 1, 4)   \
    PTI_WG2(pti_wg_##TAG##_m2_u2_w2_s4, TOUT, 2, 2, 2, 4)   \
    PTI_WG2(pti_wg_##TAG##_m4_u2_w1_s4, TOUT, 4, 2, 1, 4)   \
    PTI_WG2(pti_wg_##TAG##_m4_u2_w2_s4, TOUT, 4, 2, 2, 4)   \
    PTI_WG2(pti_wg_##TAG##_m4_u4_w1_s3, TOUT, 4, 4, 1, 3)   \
    PTI_WG2(pti_wg_##TAG##_m8_u1_w1_s6, TOUT, 8, 1, 1, 6)   \
    PTI_WG2(pti_wg_##TAG##_m8_u2_w1_s4, TOUT, 8, 2, 1, 4)   \
    PTI_WG2(pti_wg_##TAG##_m8_u2_w2_s3, TOUT, 8, 2, 2, 3)   \
    PTI_WG2(pti_wg_##TAG##_m8_u1_w2_s4, TOUT, 8, 1, 2, 4)
PTI_WG2_ALL(bf16_f32, 0)
PTI_WG2_ALL(bf16_out, 1)

#define PTI_WG(NAME, TOUT, MT, U, WG) PTI_WG_KERNEL(NAME, (128 * WG), pti_wg_mm<TOUT, MT, U, WG>)
#define PTI_WG_ALL(TAG, TOUT)                            \
    PTI_WG(pti_wg_##TAG##_m2_u4_w1, TOUT, 2, 4, 1)       \
    PTI_WG(pti_wg_##TAG##_m2_u2_w1, TOUT, 2, 2, 1)       \
    PTI_WG(pti_wg_##TAG##_m2_u2_w2, TOUT, 2, 2, 2)       \
    PTI_WG(pti_wg_##TAG##_m2_u4_w2, TOUT, 2, 4, 2)       \
    PTI_WG(pti_wg_##TAG##_m4_u4_w1, TOUT, 4, 4, 1)       \
    PTI_WG(pti_wg_##TAG##_m4_u2_w1, TOUT, 4, 2, 1)       \
    PTI_WG(pti_wg_##TAG##_m4_u2_w2, TOUT, 4, 2, 2)       \
    PTI_WG(pti_wg_##TAG##_m4_u4_w2, TOUT, 4, 4, 2)       \
    PTI_WG(pti_wg_##TAG##_m8_u1_w1, TOUT, 8, 1, 1)       \
    PTI_WG(pti_wg_##TAG##_m8_u2_w1, TOUT, 8, 2, 1)       \
    PTI_WG(pti_wg_##TAG##_m8_u1_w2, TOUT, 8, 1, 2)       \
    PTI_WG(pti_wg_##TAG##_m8_u2_w2, TOUT, 8, 2, 2)
PTI_WG_ALL(bf16_f32, 0)
PTI_WG_ALL(bf16_out, 1)

// The lean form (session 23): the first MMA of a block writes D ("=f", no zeroing), rows past M read row
// M - 1 (no branches; those outputs are not stored), per-thread pointers fixed before the loop, the
// activation tiles of PB blocks a phase in a ring of 3 phases (one barrier a phase: a phase's buffer is
// refilled two phases after its wgmmas, which every warpgroup has waited for before the barrier between),
// each thread moving one half row of one block at a time (two 16-byte loads, four 8-byte stores), the
// weights DW blocks ahead in registers (and PF blocks ahead into L2), and the wgmmas of G blocks issued together (G sets of D) before
// one wait.  (Leaving a block's wgmmas in flight while the next block's weights are converted, wait_group
// 1, is what ptxas cannot do with A in registers: it serializes them, C7513, docs/perf.md sessions 22-24.)
// One half row of a block's activation tile (two 16-byte pieces a, b) into shared memory: word w of both
// pieces -> core w.
__device__ __forceinline__ void pti_wg_store_half(unsigned at, const uint4& a, const uint4& b) {
    asm volatile("st.shared.v2.b32 [%0], {%1, %2};" ::"r"(at), "r"(a.x), "r"(b.x) : "memory");
    asm volatile("st.shared.v2.b32 [%0], {%1, %2};" ::"r"(at + 128), "r"(a.y), "r"(b.y) : "memory");
    asm volatile("st.shared.v2.b32 [%0], {%1, %2};" ::"r"(at + 256), "r"(a.z), "r"(b.z) : "memory");
    asm volatile("st.shared.v2.b32 [%0], {%1, %2};" ::"r"(at + 384), "r"(a.w), "r"(b.w) : "memory");
}


// The long forms' block sequence: a CTA of rank sl (of C) takes slices sl, sl + C, ... (SPC of them, nblk
// blocks each, block b of slice r is file block r + 8 b); sequence j -> the file's block, without a division
// (SPC - 1 compares).
template <int SPC>
__device__ __forceinline__ int pti_wg_seq_block(int j, int nblk, int sl, int C) {
    int b = sl;
#pragma unroll
    for (int z = 1; z < SPC; ++z)
        if (j >= nblk) {
            j -= nblk;
            b += C;
        }
    return b + 8 * j;
}
// A slice done: park its partial sums at pq (element i of thread tid at pq[i T + tid]), restart at zero.
template <int ND, int T>
__device__ __forceinline__ void pti_wg_park(float* pq, float* acc, int tid) {
#pragma unroll
    for (int i = 0; i < ND; ++i) {
        pq[i * T + tid] = acc[i];
        acc[i] = 0.f;
    }
}

template <int TOUT, int MT, int WG, int PB, int DW, int G, int PF>
__device__ __forceinline__ void pti_wg3_mm(const uint4* __restrict__ q, const unsigned* __restrict__ s,
                                           const unsigned short* __restrict__ x, void* y, int M, int N, int K,
                                           int nb, int ldx, int ldy) {
    constexpr int NR = 8 * MT, ND = NR / 2, T = 128 * WG;
    constexpr int STAGE = NR * 64, PHASE = PB * STAGE;
    constexpr int BPI = T / (2 * NR);                    // blocks one round of half rows covers
    constexpr int IP = PB / BPI;                         // half rows a thread moves, a phase
    static_assert(T % (2 * NR) == 0 && PB % BPI == 0 && PB % DW == 0 && PB % G == 0, "probe shape");
    extern __shared__ __align__(128) unsigned char pti_smem[];
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int sl = blockIdx.x & 7, unit = blockIdx.x >> 3;
    const int rg = unit * 4 * WG + warp;
    const unsigned sbase = (unsigned)__cvta_generic_to_shared(pti_smem);
    const PtiCvt k = pti_cvt_masks<0>(0u);
    pti_pdl_trigger();
    pti_pdl_wait();
    const int nblk = nb / 8, nph = nblk / PB;            // this slice's blocks (a multiple of PB here)
    // this thread's half row: activation row xrow, columns 16 h .. 16 h + 15 of the slice's blocks bt + BPI i
    const int h = tid & 1, xrow = (tid >> 1) % NR, bt = tid / (2 * NR);
    const uint4* xg = (const uint4*)(x + (pti_u64)min(xrow, M - 1) * ldx + (sl + 8 * bt) * 32 + 16 * h);
    const unsigned xs = sbase + bt * STAGE + (xrow >> 3) * 512 + (xrow & 7) * 16 + 8 * h;
    const uint4* qw = q + ((pti_u64)rg * nb + sl) * 32 + lane;     // slice block j at qw + 256 j
    const unsigned* sw = s + ((pti_u64)rg * nb + sl) * 8 + (lane >> 2);
    uint4 wr[DW];
    unsigned sr[DW];
#pragma unroll
    for (int i = 0; i < DW; ++i) {
        wr[i] = pti_ld_stream(qw + 256 * i);
        sr[i] = __ldg(sw + 64 * i);
    }
#pragma unroll
    for (int i = 0; i < IP; ++i) pti_wg_store_half(xs + i * BPI * STAGE, __ldg(xg + 32 * BPI * i), __ldg(xg + 32 * BPI * i + 1));
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    __syncthreads();

    float acc[ND];
#pragma unroll
    for (int i = 0; i < ND; ++i) acc[i] = 0.f;
    for (int ph = 0; ph < nph; ++ph) {
        const unsigned tiles = sbase + (ph % 3) * PHASE;
        const bool next = ph + 1 < nph;
        const uint4* xn = xg + 32 * (ph + 1) * PB;
        const unsigned xsn = xs + ((ph + 1) % 3) * PHASE;
        uint4 xa, xb;
#pragma unroll
        for (int u0 = 0; u0 < PB; u0 += G) {
            unsigned a[G][8], sc[G];
#pragma unroll
            for (int e = 0; e < G; ++e) {
                const int u = u0 + e, j = ph * PB + u;
                if (next && u >= 1 && u <= IP) pti_wg_store_half(xsn + (u - 1) * BPI * STAGE, xa, xb);
                if (next && u < IP) {
                    xa = __ldg(xn + 32 * BPI * u);
                    xb = __ldg(xn + 32 * BPI * u + 1);
                }
                const uint4 w = wr[u % DW];
                sc[e] = sr[u % DW];
                const int jn = min(j + DW, nblk - 1);
                wr[u % DW] = pti_ld_stream(qw + 256 * jn);
                sr[u % DW] = __ldg(sw + 64 * jn);
                if (PF > 0 && (lane & 7) == 0)   // the block PF ahead into L2: bytes in flight without registers
                    asm volatile("prefetch.global.L2 [%0];" ::"l"(qw + 256 * min(j + PF, nblk - 1)));
                // A of MMA 0: g01 h01 g23 h23, of MMA 1: g45 h45 g67 h67 (see pti_wg_mm)
                pti_cvt4<0, false>(w.x, a[e][0], a[e][2], k);
                pti_cvt4<0, false>(w.y, a[e][4], a[e][6], k);
                pti_cvt4<0, false>(w.z, a[e][1], a[e][3], k);
                pti_cvt4<0, false>(w.w, a[e][5], a[e][7], k);
            }
            float d[G][ND];
            asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
#pragma unroll
            for (int e = 0; e < G; ++e) {
                const unsigned tile = tiles + (u0 + e) * STAGE;
                pti_wg_mma<NR, true>(d[e], a[e][0], a[e][1], a[e][2], a[e][3], pti_wg_desc(tile));
                pti_wg_mma<NR, false>(d[e], a[e][4], a[e][5], a[e][6], a[e][7], pti_wg_desc(tile + 256));
            }
            asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
            asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
#pragma unroll
            for (int e = 0; e < G; ++e) pti_wg_scale<ND>(acc, d[e], sc[e]);
        }
        if (next) {
            if (IP == PB) pti_wg_store_half(xsn + (IP - 1) * BPI * STAGE, xa, xb);
            asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
        }
        __syncthreads();
    }
    __syncthreads();   // every warpgroup's wgmmas done: the partial sums may reuse the tiles
    float* part = (float*)pti_smem;
#pragma unroll
    for (int i = 0; i < ND; ++i) part[i * T + tid] = acc[i];
    pti_wg_cluster_out<TOUT, ND, T, 8>(sbase, sl, rg, y, M, N, ldy);
}

#define PTI_WG3(NAME, TOUT, MT, WG, PB, DW, G, PF, OCC) PTI_WG_KERNEL(NAME, (128 * WG, OCC), pti_wg3_mm<TOUT, MT, WG, PB, DW, G, PF>)
#define PTI_WG3_ALL(TAG, TOUT) \
    PTI_WG3(pti_wg_##TAG##_m2_w2_b8_d4_g1_f0_o2, TOUT, 2, 2, 8, 4, 1, 0, 2) \
    PTI_WG3(pti_wg_##TAG##_m2_w2_b8_d8_g2_f0_o1, TOUT, 2, 2, 8, 8, 2, 0, 1) \
    PTI_WG3(pti_wg_##TAG##_m2_w2_b8_d4_g1_f16_o2, TOUT, 2, 2, 8, 4, 1, 16, 2) \
    PTI_WG3(pti_wg_##TAG##_m4_w1_b4_d4_g1_f0_o3, TOUT, 4, 1, 4, 4, 1, 0, 3) \
    PTI_WG3(pti_wg_##TAG##_m4_w2_b8_d4_g1_f0_o2, TOUT, 4, 2, 8, 4, 1, 0, 2) \
    PTI_WG3(pti_wg_##TAG##_m4_w2_b8_d4_g2_f0_o1, TOUT, 4, 2, 8, 4, 2, 0, 1) \
    PTI_WG3(pti_wg_##TAG##_m4_w2_b8_d8_g1_f0_o1, TOUT, 4, 2, 8, 8, 1, 0, 1) \
    PTI_WG3(pti_wg_##TAG##_m4_w1_b4_d4_g1_f16_o3, TOUT, 4, 1, 4, 4, 1, 16, 3) \
    PTI_WG3(pti_wg_##TAG##_m4_w2_b8_d4_g2_f16_o1, TOUT, 4, 2, 8, 4, 2, 16, 1) \
    PTI_WG3(pti_wg_##TAG##_m8_w1_b4_d2_g1_f0_o2, TOUT, 8, 1, 4, 2, 1, 0, 2) \
    PTI_WG3(pti_wg_##TAG##_m8_w1_b4_d4_g1_f0_o2, TOUT, 8, 1, 4, 4, 1, 0, 2) \
    PTI_WG3(pti_wg_##TAG##_m8_w1_b8_d8_g1_f0_o2, TOUT, 8, 1, 8, 8, 1, 0, 2) \
    PTI_WG3(pti_wg_##TAG##_m8_w1_b4_d4_g2_f0_o2, TOUT, 8, 1, 4, 4, 2, 0, 2) \
    PTI_WG3(pti_wg_##TAG##_m8_w2_b4_d2_g1_f0_o2, TOUT, 8, 2, 4, 2, 1, 0, 2) \
    PTI_WG3(pti_wg_##TAG##_m8_w2_b4_d4_g1_f0_o1, TOUT, 8, 2, 4, 4, 1, 0, 1) \
    PTI_WG3(pti_wg_##TAG##_m8_w2_b4_d2_g2_f0_o1, TOUT, 8, 2, 4, 2, 2, 0, 1) \
    PTI_WG3(pti_wg_##TAG##_m8_w1_b4_d2_g1_f8_o2, TOUT, 8, 1, 4, 2, 1, 8, 2) \
    PTI_WG3(pti_wg_##TAG##_m8_w1_b4_d2_g1_f16_o2, TOUT, 8, 1, 4, 2, 1, 16, 2) \
    PTI_WG3(pti_wg_##TAG##_m8_w1_b4_d4_g2_f16_o2, TOUT, 8, 1, 4, 4, 2, 16, 2) \
    PTI_WG3(pti_wg_##TAG##_m8_w2_b4_d2_g2_f16_o1, TOUT, 8, 2, 4, 2, 2, 16, 1)
PTI_WG3_ALL(bf16_f32, 0)
PTI_WG3_ALL(bf16_out, 1)

// The long form (session 24): the lean form's loop, but each CTA takes SPC slices one after the other
// (slices r, r + C, ... for rank r of a cluster of C = 8 / SPC), keeping each slice's partial sums in its
// own shared memory until the cluster adds all 8 in slice order.  ncu of the lean form (docs/perf.md,
// sessions 22-24): with one slice a CTA (16 blocks at K = 4096), the prologue and the cluster epilogue
// took 39% of the samples, and clusters of 8 left a second wave (30 active clusters).  Weights and
// activation tiles run on across the slices' seam (one block sequence of SPC x nb / 8 blocks).
template <int TOUT, int MT, int WG, int PB, int DW, int SPC>
__device__ __forceinline__ void pti_wg4_mm(const uint4* __restrict__ q, const unsigned* __restrict__ s,
                                           const unsigned short* __restrict__ x, void* y, int M, int N, int K,
                                           int nb, int ldx, int ldy) {
    constexpr int NR = 8 * MT, ND = NR / 2, T = 128 * WG, C = 8 / SPC;
    constexpr int STAGE = NR * 64, PHASE = PB * STAGE;
    constexpr int BPI = T / (2 * NR);                    // blocks one round of half rows covers
    constexpr int IP = PB / BPI;                         // half rows a thread moves, a phase
    static_assert(T % (2 * NR) == 0 && PB % BPI == 0 && PB % DW == 0 && ND % C == 0, "probe shape");
    extern __shared__ __align__(128) unsigned char pti_smem[];
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int sl = blockIdx.x % C, unit = blockIdx.x / C;
    const int rg = unit * 4 * WG + warp;
    const unsigned sbase = (unsigned)__cvta_generic_to_shared(pti_smem);
    float* part = (float*)(pti_smem + 3 * PHASE);        // SPC sets of ND x T partial sums
    const PtiCvt k = pti_cvt_masks<0>(0u);
    pti_pdl_trigger();
    pti_pdl_wait();
    const int nblk = nb / 8, nph = nblk / PB, nseq = SPC * nblk;   // this CTA's block sequence
    auto block_of = [&](int j) { return pti_wg_seq_block<SPC>(j, nblk, sl, C); };
    const int h = tid & 1, xrow = (tid >> 1) % NR, bt = tid / (2 * NR);
    const unsigned short* xt = x + (pti_u64)min(xrow, M - 1) * ldx + 8 * bt * 32 + 16 * h;
    auto x_at = [&](int j) { return (const uint4*)(xt + block_of(j) * 32); };   // phase start j
    const unsigned xs = sbase + bt * STAGE + (xrow >> 3) * 512 + (xrow & 7) * 16 + 8 * h;
    const uint4* qw = q + (pti_u64)rg * nb * 32 + lane;          // block b at qw + 32 b
    const unsigned* sw = s + (pti_u64)rg * nb * 8 + (lane >> 2);   // its scales at sw + 8 b
    uint4 wr[DW];
    unsigned sr[DW];
#pragma unroll
    for (int i = 0; i < DW; ++i) {
        wr[i] = pti_ld_stream(qw + 32 * block_of(i));
        sr[i] = __ldg(sw + 8 * block_of(i));
    }
    {
        const uint4* x0 = x_at(0);
#pragma unroll
        for (int i = 0; i < IP; ++i) pti_wg_store_half(xs + i * BPI * STAGE, __ldg(x0 + 32 * BPI * i), __ldg(x0 + 32 * BPI * i + 1));
    }
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    __syncthreads();

    float acc[ND];
#pragma unroll
    for (int i = 0; i < ND; ++i) acc[i] = 0.f;
    for (int ph = 0; ph < SPC * nph; ++ph) {
        const unsigned tiles = sbase + (ph % 3) * PHASE;
        const bool next = ph + 1 < SPC * nph;
        const uint4* xn = x_at(min(ph + 1, SPC * nph - 1) * PB);
        const unsigned xsn = xs + ((ph + 1) % 3) * PHASE;
        uint4 xa, xb;
#pragma unroll
        for (int u = 0; u < PB; ++u) {
            const int j = ph * PB + u;
            if (next && u >= 1 && u <= IP) pti_wg_store_half(xsn + (u - 1) * BPI * STAGE, xa, xb);
            if (next && u < IP) {
                xa = __ldg(xn + 32 * BPI * u);
                xb = __ldg(xn + 32 * BPI * u + 1);
            }
            const uint4 w = wr[u % DW];
            const unsigned sc = sr[u % DW];
            const int bn = block_of(min(j + DW, nseq - 1));
            wr[u % DW] = pti_ld_stream(qw + 32 * bn);
            sr[u % DW] = __ldg(sw + 8 * bn);
            const unsigned tile = tiles + u * STAGE;
            pti_wg_block<NR>(acc, w, pti_wg_desc(tile), pti_wg_desc(tile + 256), sc, k);
        }
        if (next) {
            if (IP == PB) pti_wg_store_half(xsn + (IP - 1) * BPI * STAGE, xa, xb);
            asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
        }
        if (ph % nph == nph - 1) {   // a slice done: park its partial sums, start the next slice at zero
            pti_wg_park<ND, T>(part + (ph / nph) * ND * T, acc, tid);
        }
        __syncthreads();
    }
    pti_wg_cluster_out<TOUT, ND, T, C>(sbase + 3 * PHASE, sl, rg, y, M, N, ldy);
}

#define PTI_WG4(NAME, TOUT, MT, WG, PB, DW, OCC, C) PTI_WG_KERNEL(NAME, (128 * WG, OCC), pti_wg4_mm<TOUT, MT, WG, PB, DW, 8 / C>)
#define PTI_WG4_ALL(TAG, TOUT) \
    PTI_WG4(pti_wg_##TAG##_m8_w2_b4_d2_o2_c4, TOUT, 8, 2, 4, 2, 2, 4) \
    PTI_WG4(pti_wg_##TAG##_m8_w1_b4_d2_o2_c4, TOUT, 8, 1, 4, 2, 2, 4) \
    PTI_WG4(pti_wg_##TAG##_m8_w1_b4_d4_o2_c4, TOUT, 8, 1, 4, 4, 2, 4) \
    PTI_WG4(pti_wg_##TAG##_m8_w1_b4_d2_o2_c2, TOUT, 8, 1, 4, 2, 2, 2) \
    PTI_WG4(pti_wg_##TAG##_m8_w1_b4_d4_o2_c2, TOUT, 8, 1, 4, 4, 2, 2) \
    PTI_WG4(pti_wg_##TAG##_m8_w1_b2_d2_o1_c1, TOUT, 8, 1, 2, 2, 1, 1) \
    PTI_WG4(pti_wg_##TAG##_m4_w2_b8_d4_o2_c4, TOUT, 4, 2, 8, 4, 2, 4) \
    PTI_WG4(pti_wg_##TAG##_m4_w2_b8_d4_o2_c2, TOUT, 4, 2, 8, 4, 2, 2)
PTI_WG4_ALL(bf16_f32, 0)
PTI_WG4_ALL(bf16_out, 1)

// The ring form (session 25): weights and scales reach shared memory by bulk copies (cp.async.bulk, the copy
// engine) into an S-stage ring, so that the bytes in flight cost no registers (ncu of the lean form: 40-47%
// of its stalls were weights loaded d = 2 blocks earlier); each warp reads its block's 512 bytes from there.
// No producer warp: a ring stage is one phase of the activation ring, so the barrier that ends phase j also
// frees stage j's slot, and thread 0 refills it with stage j + S right there (a 5th warp a scheduler would
// cap the registers at 96).  Needs the probe's second weight layout (wgmma_probe.py: ring_layout): for unit
// u (R = 4 WG row groups) and cluster rank r, the CTA's sequence of SPC slices (r, r + C, ...) x nb / 8
// blocks, each block [R row groups][512 bytes], and the scales the same way ([R][8 words] a block); a stage
// is PB blocks (PB x R x 512 bytes of weights, then PB x R x 32 of scales).  Shared memory: S mbarriers
// (128 bytes), the activation ring (3 phases), the weight ring; the partial sums reuse the rings (SPC = 1)
// or follow them.  C = 1 (one CTA takes a unit's 8 slices in slice order) keeps one running sum instead and
// needs no cluster; LATE stores the next phase's activation pieces at the phase's end (IP = 1 only).
__device__ __forceinline__ void pti_wg_bar_init(unsigned bar, unsigned count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(count) : "memory");
}
__device__ __forceinline__ void pti_wg_bar_expect(unsigned bar, unsigned tx) {
    asm volatile("{ .reg .b64 st; mbarrier.arrive.expect_tx.shared::cta.b64 st, [%0], %1; }" ::"r"(bar), "r"(tx) : "memory");
}

template <int TOUT, int MT, int WG, int PB, int S, int SPC, int LATE, int XB, int EB, int IL>
__device__ __forceinline__ void pti_wg5_mm(const uint4* __restrict__ q, const unsigned* __restrict__ s,
                                           const unsigned short* __restrict__ x, void* y, int M, int N, int K,
                                           int nb, int ldx, int ldy) {
    constexpr int NR = 8 * MT, ND = NR / 2, T = 128 * WG, C = 8 / SPC, R = 4 * WG;
    constexpr int STAGE = NR * 64, PHASE = PB * STAGE;
    constexpr int WB = R * 512, SB = R * 32, WSTAGE = PB * (WB + SB);   // a block's weights, scales; a stage
    constexpr int RSTAGE = WSTAGE + (XB ? PHASE : 0);    // a ring slot: XB adds the phase's activation tiles
    constexpr int RINGS = XB ? S * RSTAGE : 3 * PHASE + S * WSTAGE;   // the partial sums' place, past 128 B
    constexpr int BPI = T / (2 * NR);                    // blocks one round of half rows covers
    constexpr int IP = (PB + BPI - 1) / BPI;             // half rows a thread moves, a phase
    static_assert(T % (2 * NR) == 0 && ND % C == 0 && S <= 8 && IP <= PB && (!LATE || IP == 1) && !(XB && LATE) && (!EB || XB) && (!IL || XB),
                  "probe shape");
    extern __shared__ __align__(128) unsigned char pti_smem[];
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int sl = blockIdx.x % C, unit = blockIdx.x / C;
    const unsigned sbase = (unsigned)__cvta_generic_to_shared(pti_smem);
    const unsigned full = sbase, empty = sbase + 64;      // stage slot i's barriers at + 8 i (EB: empty)
    const unsigned abase = sbase + 128, wbase = abase + (XB ? 0 : 3 * PHASE);
    const int nblk = nb / 8, nseq = SPC * nblk, nst = nseq / PB;
    const char* qc = (const char*)q + (pti_u64)blockIdx.x * nseq * WB;   // this CTA's blocks
    const char* scs = (const char*)s + (pti_u64)blockIdx.x * nseq * SB;
    // XB: x is the activation tiles already in the tile layout, [C ranks][nst phases][PHASE bytes] (wgmma_probe.py:
    // x_tiles), as the kernel producing the activations would write them.
    const char* xc = (const char*)x + (pti_u64)sl * nst * PHASE;
    auto block_of = [&](int j) { return pti_wg_seq_block<SPC>(j, nblk, sl, C); };
    // stage i into slot st = i % S (thread 0): what = 1 the weights and scales (and the barrier's byte
    // count, the tiles' included), 2 the activation tiles (XB), 3 both
    auto fill = [&](int i, int st, int what) {
        const unsigned slot = wbase + st * RSTAGE, bar = full + 8 * st;
        if ((what & 1) && IL) {   // IL: [unit][file block][R row groups][512 B], scales [unit][block][R][32 B]
            pti_wg_bar_expect(bar, RSTAGE);
#pragma unroll
            for (int u = 0; u < PB; ++u) {
                const pti_u64 b = (pti_u64)unit * nb + block_of(i * PB + u);
                pti_wg_bulk(slot + u * WB, (const char*)q + b * WB, WB, bar);
                pti_wg_bulk(slot + PB * WB + u * SB, (const char*)s + b * SB, SB, bar);
            }
        } else if (what & 1) {
            pti_wg_bar_expect(bar, RSTAGE);
            pti_wg_bulk(slot, qc + (pti_u64)i * PB * WB, PB * WB, bar);
            pti_wg_bulk(slot + PB * WB, scs + (pti_u64)i * PB * SB, PB * SB, bar);
        }
        if (XB && (what & 2)) pti_wg_bulk(slot + WSTAGE, xc + (pti_u64)i * PHASE, PHASE, bar);
    };
    if (tid == 0) {
        for (int i = 0; i < S; ++i) pti_wg_bar_init(full + 8 * i, 1);
        if (EB)
            for (int i = 0; i < S; ++i) pti_wg_bar_init(empty + 8 * i, R);
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
        for (int i = 0; i < min(S, nst); ++i) fill(i, i, XB ? 1 : 3);   // the weights need not wait for the previous kernel
    }
    __syncthreads();
    pti_pdl_trigger();
    const int rg = unit * R + warp;
    const PtiCvt k = pti_cvt_masks<0>(0u);
    pti_pdl_wait();
    if (XB && tid == 0)   // the activations must (the barrier already expects their bytes)
        for (int i = 0; i < min(S, nst); ++i) fill(i, i, 2);
    const int h = tid & 1, xrow = (tid >> 1) % NR, bt = tid / (2 * NR);
    const unsigned short* xt = x + (pti_u64)min(xrow, M - 1) * ldx + 8 * bt * 32 + 16 * h;
    auto x_at = [&](int j) { return (const uint4*)(xt + block_of(j) * 32); };   // phase start j
    const unsigned xs = abase + bt * STAGE + (xrow >> 3) * 512 + (xrow & 7) * 16 + 8 * h;
    if (!XB) {
        const uint4* x0 = x_at(0);
#pragma unroll
        for (int i = 0; i < IP; ++i)
            if (bt + BPI * i < PB) pti_wg_store_half(xs + i * BPI * STAGE, __ldg(x0 + 32 * BPI * i), __ldg(x0 + 32 * BPI * i + 1));
        asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
        __syncthreads();
    }

    float acc[ND];
#pragma unroll
    for (int i = 0; i < ND; ++i) acc[i] = 0.f;
    // The loop's indices advance by adds and compares (ph % S, ph % 3, the slice, the next phase's file
    // block): divisions and pti_wg_seq_block's compares were a third of its instructions (SASS, session 25).
    const int nphs = nblk / PB;                             // phases a slice
    const unsigned long long desc0 = pti_wg_desc(abase);    // tile descriptors by offsets from it
    int st = 0, t3 = 0, left = nphs, slice = 0;             // ph % S, ph % 3, phases left in the slice, ph / nphs
    unsigned parity = 0;                                    // (ph / S) & 1
    int nxb = block_of(min(PB, nseq - 1));                  // the file block that starts phase ph + 1
    for (int ph = 0; ph < nst; ++ph) {
        const unsigned tiles = XB ? st * RSTAGE + WSTAGE : (unsigned)t3 * PHASE;   // from abase
        const int t3n = t3 == 2 ? 0 : t3 + 1;
        const bool next = ph + 1 < nst;
        const uint4* xn = (const uint4*)(xt + nxb * 32);
        const unsigned xsn = xs + t3n * PHASE;
        const unsigned wq = wbase + st * RSTAGE + warp * 512 + lane * 16;
        const unsigned ws = wbase + st * RSTAGE + PB * WB + warp * 32 + (lane >> 2) * 4;
        uint4 xa, xb, wn;
        unsigned sn;
        pti_wg_bar_wait(full + 8 * st, parity);
        asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];" : "=r"(wn.x), "=r"(wn.y), "=r"(wn.z), "=r"(wn.w) : "r"(wq) : "memory");
        asm volatile("ld.shared.u32 %0, [%1];" : "=r"(sn) : "r"(ws) : "memory");
#pragma unroll
        for (int u = 0; u < PB; ++u) {
            if (!XB && next && !LATE && u >= 1 && u <= IP && bt + BPI * (u - 1) < PB) pti_wg_store_half(xsn + (u - 1) * BPI * STAGE, xa, xb);
            if (!XB && next && u < IP && bt + BPI * u < PB) {
                xa = __ldg(xn + 32 * BPI * u);
                xb = __ldg(xn + 32 * BPI * u + 1);
            }
            const uint4 w = wn;
            const unsigned sc = sn;
            if (u + 1 < PB) {
                asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];" : "=r"(wn.x), "=r"(wn.y), "=r"(wn.z), "=r"(wn.w)
                             : "r"(wq + (u + 1) * WB) : "memory");
                asm volatile("ld.shared.u32 %0, [%1];" : "=r"(sn) : "r"(ws + (u + 1) * SB) : "memory");
            }
            const unsigned long long desc = desc0 + ((tiles + u * STAGE) >> 4);   // no carry: < 256 KB
            pti_wg_block<NR>(acc, w, desc, desc + (256 >> 4), sc, k);
        }
        if (!XB && next) {
            if ((LATE || IP == PB) && bt + BPI * (IP - 1) < PB) pti_wg_store_half(xsn + (IP - 1) * BPI * STAGE, xa, xb);
            asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
        }
        if (SPC > 1 && --left == 0) {   // a slice done
            left = nphs;
            float* pq = (float*)(pti_smem + 128 + RINGS);
            if (C == 1) {   // slices in order: v = p0, v += p1, ... (pti_wg_cluster_out's order), each thread its own
#pragma unroll
                for (int i = 0; i < ND; ++i) {
                    pq[i * T + tid] = slice == 0 ? acc[i] : __fadd_rn(pq[i * T + tid], acc[i]);
                    acc[i] = 0.f;
                }
            } else {   // park its sums, restart at zero
                pti_wg_park<ND, T>(pq + slice * ND * T, acc, tid);
            }
            ++slice;
        }
        if (EB) {   // each warp frees the slot on its own; thread 0 waits for all R before refilling it
            __syncwarp();
            if (lane == 0) asm volatile("{ .reg .b64 st; mbarrier.arrive.shared::cta.b64 st, [%0]; }" ::"r"(empty + 8 * st) : "memory");
            if (tid == 0 && ph + S < nst) {
                pti_wg_bar_wait(empty + 8 * st, parity);
                fill(ph + S, st, 3);
            }
        } else {
            __syncthreads();   // every warp is past stage ph's words and phase ph's tiles
            if (tid == 0 && ph + S < nst) fill(ph + S, st, 3);
        }
        t3 = t3n;
        if (++st == S) {
            st = 0;
            parity ^= 1u;
        }
        nxb += 8 * PB;   // the next block of the slice, or the next slice's first (r + 8 nblk -> r + C)
        if (nxb >= 8 * nblk) nxb -= 8 * nblk - C;
    }
    if (SPC == 1) {   // every consumer's wgmmas and every copy are done: the sums reuse the rings
        if (EB) __syncthreads();
        float* part = (float*)(pti_smem + 128);
#pragma unroll
        for (int i = 0; i < ND; ++i) part[i * T + tid] = acc[i];
    }
    if (C == 1) {   // one CTA took all 8 slices: its running sums are the outputs
        const float* pq = (const float*)(pti_smem + 128 + RINGS);
#pragma unroll
        for (int i = 0; i < ND; ++i) pti_wg_store_elem<TOUT>(y, i, lane, rg, M, N, ldy, pq[i * T + tid]);
        return;
    }
    pti_wg_cluster_out<TOUT, ND, T, C>(abase + (SPC == 1 ? 0 : RINGS), sl, rg, y, M, N, ldy);
}

#define PTI_WG5(NAME, TOUT, MT, WG, PB, S, OCC, C, L, X, E, I) \
    PTI_WG_KERNEL(NAME, (128 * WG, OCC), pti_wg5_mm<TOUT, MT, WG, PB, S, 8 / C, L, X, E, I>)
#define PTI_WG5_ALL(TAG, TOUT) \
    PTI_WG5(pti_wg_##TAG##_m8_w4_b4_r4_o1_c8, TOUT, 8, 4, 4, 4, 1, 8, 0, 0, 0, 0) \
    PTI_WG5(pti_wg_##TAG##_m8_w4_b4_r3_o1_c8, TOUT, 8, 4, 4, 3, 1, 8, 0, 0, 0, 0) \
    PTI_WG5(pti_wg_##TAG##_m8_w4_b2_r6_o1_c8, TOUT, 8, 4, 2, 6, 1, 8, 0, 0, 0, 0) \
    PTI_WG5(pti_wg_##TAG##_m8_w4_b2_r8_o1_c8, TOUT, 8, 4, 2, 8, 1, 8, 0, 0, 0, 0) \
    PTI_WG5(pti_wg_##TAG##_m8_w2_b2_r6_o2_c8, TOUT, 8, 2, 2, 6, 2, 8, 0, 0, 0, 0) \
    PTI_WG5(pti_wg_##TAG##_m8_w2_b4_r3_o2_c8, TOUT, 8, 2, 4, 3, 2, 8, 0, 0, 0, 0) \
    PTI_WG5(pti_wg_##TAG##_m8_w4_b2_r4_o1_c4, TOUT, 8, 4, 2, 4, 1, 4, 0, 0, 0, 0) \
    PTI_WG5(pti_wg_##TAG##_m4_w4_b4_r4_o1_c8, TOUT, 4, 4, 4, 4, 1, 8, 0, 0, 0, 0) \
    PTI_WG5(pti_wg_##TAG##_m4_w4_b2_r8_o1_c8, TOUT, 4, 4, 2, 8, 1, 8, 0, 0, 0, 0) \
    PTI_WG5(pti_wg_##TAG##_m4_w2_b4_r4_o2_c8, TOUT, 4, 2, 4, 4, 2, 8, 0, 0, 0, 0) \
    PTI_WG5(pti_wg_##TAG##_m8_w4_b2_r4_o1_c1, TOUT, 8, 4, 2, 4, 1, 1, 0, 0, 0, 0) \
    PTI_WG5(pti_wg_##TAG##_m8_w4_b4_r3_o1_c1, TOUT, 8, 4, 4, 3, 1, 1, 0, 0, 0, 0) \
    PTI_WG5(pti_wg_##TAG##_m8_w2_b2_r6_o2_c1, TOUT, 8, 2, 2, 6, 2, 1, 0, 0, 0, 0) \
    PTI_WG5(pti_wg_##TAG##_m8_w1_b2_r3_o4_c1, TOUT, 8, 1, 2, 3, 4, 1, 0, 0, 0, 0) \
    PTI_WG5(pti_wg_##TAG##_m4_w4_b4_r4_o1_c1, TOUT, 4, 4, 4, 4, 1, 1, 0, 0, 0, 0) \
    PTI_WG5(pti_wg_##TAG##_m4_w2_b4_r4_o2_c1, TOUT, 4, 2, 4, 4, 2, 1, 0, 0, 0, 0) \
    PTI_WG5(pti_wg_##TAG##_m4_w1_b2_r4_o4_c1, TOUT, 4, 1, 2, 4, 4, 1, 0, 0, 0, 0) \
    PTI_WG5(pti_wg_##TAG##_m8_w2_b2_r4_o2_c1, TOUT, 8, 2, 2, 4, 2, 1, 0, 0, 0, 0) \
    PTI_WG5(pti_wg_##TAG##_m4_w2_b2_r8_o2_c1, TOUT, 4, 2, 2, 8, 2, 1, 0, 0, 0, 0) \
    PTI_WG5(pti_wg_##TAG##_m4_w2_b2_r4_o3_c1, TOUT, 4, 2, 2, 4, 3, 1, 0, 0, 0, 0) \
    PTI_WG5(pti_wg_##TAG##_m4_w2_b4_r4_o2_c1_l1, TOUT, 4, 2, 4, 4, 2, 1, 1, 0, 0, 0) \
    PTI_WG5(pti_wg_##TAG##_m8_w2_b2_r4_o2_c1_l1, TOUT, 8, 2, 2, 4, 2, 1, 1, 0, 0, 0) \
    PTI_WG5(pti_wg_##TAG##_m8_w2_b2_r6_o2_c1_l1, TOUT, 8, 2, 2, 6, 2, 1, 1, 0, 0, 0) \
    PTI_WG5(pti_wg_##TAG##_m4_w2_b4_r4_o2_c8_l1, TOUT, 4, 2, 4, 4, 2, 8, 1, 0, 0, 0) \
    PTI_WG5(pti_wg_##TAG##_m8_w4_b2_r4_o1_c4_l1, TOUT, 8, 4, 2, 4, 1, 4, 1, 0, 0, 0) \
    PTI_WG5(pti_wg_##TAG##_m4_w2_b4_r3_o2_c1_x1, TOUT, 4, 2, 4, 3, 2, 1, 0, 1, 0, 0) \
    PTI_WG5(pti_wg_##TAG##_m4_w2_b2_r6_o2_c1_x1, TOUT, 4, 2, 2, 6, 2, 1, 0, 1, 0, 0) \
    PTI_WG5(pti_wg_##TAG##_m8_w2_b2_r4_o2_c1_x1, TOUT, 8, 2, 2, 4, 2, 1, 0, 1, 0, 0) \
    PTI_WG5(pti_wg_##TAG##_m4_w2_b4_r4_o2_c8_x1, TOUT, 4, 2, 4, 4, 2, 8, 0, 1, 0, 0) \
    PTI_WG5(pti_wg_##TAG##_m8_w4_b2_r3_o1_c4_x1, TOUT, 8, 4, 2, 3, 1, 4, 0, 1, 0, 0) \
    PTI_WG5(pti_wg_##TAG##_m4_w2_b2_r4_o2_c8_x1, TOUT, 4, 2, 2, 4, 2, 8, 0, 1, 0, 0) \
    PTI_WG5(pti_wg_##TAG##_m4_w2_b4_r3_o2_c4_x1, TOUT, 4, 2, 4, 3, 2, 4, 0, 1, 0, 0) \
    PTI_WG5(pti_wg_##TAG##_m4_w1_b2_r4_o4_c4_x1, TOUT, 4, 1, 2, 4, 4, 4, 0, 1, 0, 0) \
    PTI_WG5(pti_wg_##TAG##_m4_w1_b4_r3_o4_c8_x1, TOUT, 4, 1, 4, 3, 4, 8, 0, 1, 0, 0) \
    PTI_WG5(pti_wg_##TAG##_m8_w2_b2_r4_o2_c8_x1, TOUT, 8, 2, 2, 4, 2, 8, 0, 1, 0, 0) \
    PTI_WG5(pti_wg_##TAG##_m4_w2_b2_r4_o3_c8_x1, TOUT, 4, 2, 2, 4, 3, 8, 0, 1, 0, 0) \
    PTI_WG5(pti_wg_##TAG##_m8_w1_b2_r3_o3_c4_x1, TOUT, 8, 1, 2, 3, 3, 4, 0, 1, 0, 0) \
    PTI_WG5(pti_wg_##TAG##_m8_w4_b2_r3_o1_c8_x1, TOUT, 8, 4, 2, 3, 1, 8, 0, 1, 0, 0) \
    PTI_WG5(pti_wg_##TAG##_m4_w2_b4_r3_o2_c1_x1_e1, TOUT, 4, 2, 4, 3, 2, 1, 0, 1, 1, 0) \
    PTI_WG5(pti_wg_##TAG##_m8_w2_b2_r4_o2_c1_x1_e1, TOUT, 8, 2, 2, 4, 2, 1, 0, 1, 1, 0) \
    PTI_WG5(pti_wg_##TAG##_m4_w2_b4_r3_o2_c4_x1_e1, TOUT, 4, 2, 4, 3, 2, 4, 0, 1, 1, 0) \
    PTI_WG5(pti_wg_##TAG##_m4_w2_b2_r4_o3_c8_x1_e1, TOUT, 4, 2, 2, 4, 3, 8, 0, 1, 1, 0) \
    PTI_WG5(pti_wg_##TAG##_m4_w1_b4_r3_o4_c8_x1_e1, TOUT, 4, 1, 4, 3, 4, 8, 0, 1, 1, 0) \
    PTI_WG5(pti_wg_##TAG##_m8_w4_b2_r3_o1_c4_x1_e1, TOUT, 8, 4, 2, 3, 1, 4, 0, 1, 1, 0) \
    PTI_WG5(pti_wg_##TAG##_m8_w2_b2_r4_o2_c8_x1_e1, TOUT, 8, 2, 2, 4, 2, 8, 0, 1, 1, 0) \
    PTI_WG5(pti_wg_##TAG##_m8_w1_b2_r3_o3_c4_x1_e1, TOUT, 8, 1, 2, 3, 3, 4, 0, 1, 1, 0) \
    PTI_WG5(pti_wg_##TAG##_m4_w2_b4_r3_o2_c1_x1_i1, TOUT, 4, 2, 4, 3, 2, 1, 0, 1, 0, 1) \
    PTI_WG5(pti_wg_##TAG##_m8_w2_b2_r4_o2_c1_x1_i1, TOUT, 8, 2, 2, 4, 2, 1, 0, 1, 0, 1) \
    PTI_WG5(pti_wg_##TAG##_m4_w2_b4_r3_o2_c4_x1_i1, TOUT, 4, 2, 4, 3, 2, 4, 0, 1, 0, 1) \
    PTI_WG5(pti_wg_##TAG##_m4_w2_b2_r4_o3_c8_x1_i1, TOUT, 4, 2, 2, 4, 3, 8, 0, 1, 0, 1) \
    PTI_WG5(pti_wg_##TAG##_m4_w1_b4_r3_o4_c8_x1_i1, TOUT, 4, 1, 4, 3, 4, 8, 0, 1, 0, 1) \
    PTI_WG5(pti_wg_##TAG##_m8_w4_b2_r3_o1_c4_x1_i1, TOUT, 8, 4, 2, 3, 1, 4, 0, 1, 0, 1) \
    PTI_WG5(pti_wg_##TAG##_m8_w1_b2_r3_o3_c4_x1_i1, TOUT, 8, 1, 2, 3, 3, 4, 0, 1, 0, 1)
PTI_WG5_ALL(bf16_f32, 0)
PTI_WG5_ALL(bf16_out, 1)

#endif
