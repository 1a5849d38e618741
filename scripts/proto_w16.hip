// PROTOTYPE (session 15, docs/perf.md items 8-9; removed after commit, kept in history): NW warps a row group (warp w takes blocks w mod NW, the CTA sums its
// warps in warp order: another order than the 8-warp kernels', so other bits), one row group a
// CTA, the unpipelined loop, bf16 out, no epilogue extras, one twin; nb % (NW U) == 0.
template <int TIN, int MT, int U, int NW, bool FULL = false>
__device__ __forceinline__ void pti_w(const PtiArgs& a) {
    extern __shared__ __align__(16) unsigned char pti_smem[];
    float* red = (float*)pti_smem;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, unit = blockIdx.x;
    pti_pdl_trigger();
    const PtiCvt k = pti_cvt_masks<TIN>((unsigned)a.vec_ok >> 31);
    float acc[MT * 4];
#pragma unroll
    for (int i = 0; i < MT * 4; ++i) acc[i] = 0.f;
    const uint4* qp = a.q[0] + ((pti_u64)unit * a.nb + warp) * 32 + lane;
    const unsigned* sp = a.s[0] + ((pti_u64)unit * a.nb + warp) * 8 + (lane >> 2);
    const uint4* xp[MT];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
        const int row = mt * 8 + (lane >> 2);
        xp[mt] = (const uint4*)(a.x[0] + (row < a.M[0] ? (pti_u64)row * a.ldx : 0) + warp * 32 + 8 * (lane & 3));
    }
    pti_pdl_wait();
    for (int b0 = 0; b0 < a.nb; b0 += NW * U) {
        uint4 wv[U][1][1], xv[U][1][MT];
        unsigned sv[U][1][1];
#pragma unroll
        for (int u = 0; u < U; ++u) {
            wv[u][0][0] = pti_ld_stream(qp + u * NW * 32);
            sv[u][0][0] = __ldg(sp + u * NW * 8);
#pragma unroll
            for (int mt = 0; mt < MT; ++mt) xv[u][0][mt] = __ldg(xp[mt] + u * NW * 4);
        }
#pragma unroll
        for (int u = 0; u < U; ++u) pti_block<TIN, 1, 1, MT>(wv[u], sv[u], xv[u], acc, k);
        qp += NW * U * 32;
        sp += NW * U * 8;
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) xp[mt] += NW * U * 4;
    }
    if (FULL) {   // the policy's finish (runtime epilogue branches, two barriers a slot group)
        pti_finish<TIN, 1, 1, 1, MT, false>(a, unit, warp, lane, acc, red);
        return;
    }
#pragma unroll
    for (int s = 0; s < MT; ++s)
        *(float4*)&red[(warp * 4 + s) * 128 + lane * 4] = make_float4(acc[s * 4], acc[s * 4 + 1], acc[s * 4 + 2], acc[s * 4 + 3]);
    __syncthreads();
    for (int idx = threadIdx.x; idx < MT * 128; idx += NW * 32) {
        const int sl = idx >> 7, l = (idx >> 2) & 31, c = idx & 3;
        float v = red[idx];
#pragma unroll
        for (int w = 1; w < NW; ++w) v += red[w * 512 + idx];
        const int col = (l >> 2) + (c >= 2 ? 8 : 0);
        const int n = unit * 16 + col;
        const int m = sl * 8 + 2 * (l & 3) + (c & 1);
        if (n < a.N && m < a.M[0]) pti_store<TIN, 1>(a.y[0], (pti_u64)m * a.ldy + n, v);
    }
}

#define PTI_W(NAME, MT, U, NW, MINB, FULL)                                                            \
    extern "C" __global__ void __launch_bounds__(32 * NW, MINB) NAME(                            \
        const uint4* qa, const unsigned* sa, const uint4* qb, const unsigned* sb,              \
        const unsigned short* xa, const unsigned short* xb, void* ya, void* yb, int Ma,        \
        int Mb, int N, int K, int nb, int ldx, int ldy, int vec_ok,                            \
        const float* pina, const float* pinb, int ng, float eps, const float* inva,            \
        const float* invb, unsigned short* uoa, unsigned short* uob, float* poa, float* pob,   \
        const float* ga, const float* gb, float* ioa, float* iob, int n_inv) {                 \
        const PtiArgs a = {{qa, qb}, {sa, sb}, {xa, xb}, {ya, yb}, {Ma, Mb},                   \
                           N, K, nb, ldx, ldy, vec_ok, {pina, pinb}, ng, eps, {inva, invb},    \
                           {uoa, uob}, {poa, pob}, {ga, gb}, {ioa, iob}, n_inv};               \
        pti_w<0, MT, U, NW, FULL>(a);                                                          \
    }
PTI_W(w16_m1_u2_b2, 1, 2, 16, 2, false)
PTI_W(w16_m1_u1_b3, 1, 1, 16, 3, false)
PTI_W(w16_m2_u1_b2, 2, 1, 16, 2, false)
PTI_W(w8_m1_u2_b5, 1, 2, 8, 5, false)
PTI_W(w8_m2_u1_b4, 2, 1, 8, 4, false)
PTI_W(w8_m1_u4_b3, 1, 4, 8, 3, false)
PTI_W(w8f_m1_u2_b5, 1, 2, 8, 5, true)
PTI_W(w8f_m2_u1_b4, 2, 1, 8, 4, true)
PTI_W(w8f_m1_u4_b3, 1, 4, 8, 3, true)
