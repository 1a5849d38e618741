// PROTOTYPE (session 15, not committed): activations staged once per CTA in shared memory,
// one CTA per SM of GR groups of 8 warps looping over row groups; weights through registers
// as in pti_mm_tc (pti_block: the same per-element arithmetic, warp w takes blocks w mod 8,
// the group sums its warps in warp order): bf16 out, no epilogue extras, one twin.
__device__ __forceinline__ void pti_group_bar(int id) { asm volatile("bar.sync %0, 256;" ::"r"(id) : "memory"); }

template <int TIN, int MT, int U, int GR>
__device__ __forceinline__ void pti_px(const PtiArgs& a) {
    extern __shared__ __align__(16) unsigned char pti_smem[];
    const int tid = threadIdx.x, g = tid >> 8, lt = tid & 255, warp = lt >> 5, lane = lt & 31;
    const int xs = a.K + 32;   // halves per shared row: 64 bytes of pad, so that two rows' lanes miss each other's banks
    unsigned short* xsm = (unsigned short*)pti_smem;
    float* red = (float*)(pti_smem + (pti_u64)MT * 8 * xs * 2) + g * 4224;
    pti_pdl_trigger();
    pti_pdl_wait();
    const int segs = a.K / 8;
    for (int i = tid; i < MT * 8 * segs; i += 256 * GR) {
        const int row = i / segs, sg = i - row * segs;
        uint4 v = make_uint4(0, 0, 0, 0);
        if (row < a.M[0]) v = __ldg((const uint4*)(a.x[0] + (pti_u64)row * a.ldx + sg * 8));
        *(uint4*)(xsm + row * xs + sg * 8) = v;
    }
    __syncthreads();
    const PtiCvt k = pti_cvt_masks<TIN>((unsigned)a.vec_ok >> 31);
    const int n_rg = (a.N + 15) / 16;
    const unsigned short* xp = xsm + (lane >> 2) * xs + warp * 32 + 8 * (lane & 3);
    for (int unit = blockIdx.x * GR + g; unit < n_rg; unit += gridDim.x * GR) {
        float acc[MT * 4];
#pragma unroll
        for (int i = 0; i < MT * 4; ++i) acc[i] = 0.f;
        const uint4* qp = a.q[0] + ((pti_u64)unit * a.nb + warp) * 32 + lane;
        const unsigned* sp = a.s[0] + ((pti_u64)unit * a.nb + warp) * 8 + (lane >> 2);
        for (int b0 = 0; b0 < a.nb; b0 += 8 * U) {   // the host asks nb % (8 U) == 0
            uint4 wv[U][1][1];
            unsigned sv[U][1][1];
#pragma unroll
            for (int u = 0; u < U; ++u) {
                wv[u][0][0] = pti_ld_stream(qp + u * 8 * 32);
                sv[u][0][0] = __ldg(sp + u * 8 * 8);
            }
#pragma unroll
            for (int u = 0; u < U; ++u) {
                uint4 xv[1][MT];
#pragma unroll
                for (int mt = 0; mt < MT; ++mt) xv[0][mt] = *(const uint4*)(xp + mt * 8 * xs + (b0 + 8 * u) * 32);
                pti_block<TIN, 1, 1, MT>(wv[u], sv[u], xv, acc, k);
            }
            qp += 8 * U * 32;
            sp += 8 * U * 8;
        }
        constexpr int S = MT;
#pragma unroll
        for (int s0 = 0; s0 < S; s0 += 4) {
#pragma unroll
            for (int s = s0; s < s0 + 4 && s < S; ++s)
                *(float4*)&red[(warp * 4 + s - s0) * 128 + lane * 4] =
                    make_float4(acc[s * 4], acc[s * 4 + 1], acc[s * 4 + 2], acc[s * 4 + 3]);
            pti_group_bar(1 + g);
            const int nslot = S - s0 < 4 ? S - s0 : 4;
            for (int idx = lt; idx < nslot * 128; idx += 256) {
                const int sl = idx >> 7, l = (idx >> 2) & 31, c = idx & 3;
                float v = red[idx];
#pragma unroll
                for (int w = 1; w < 8; ++w) v += red[w * 512 + idx];
                const int mt = s0 + sl;
                const int col = (l >> 2) + (c >= 2 ? 8 : 0);
                const int n = unit * 16 + col;
                const int m = mt * 8 + 2 * (l & 3) + (c & 1);
                if (n < a.N && m < a.M[0]) pti_store<TIN, 1>(a.y[0], (pti_u64)m * a.ldy + n, v);
            }
            pti_group_bar(1 + g);
        }
    }
}

#define PTI_PX(NAME, MT, U, GR)                                                                 \
    extern "C" __global__ void __launch_bounds__(256 * GR, 1) NAME(                              \
        const uint4* qa, const unsigned* sa, const uint4* qb, const unsigned* sb,              \
        const unsigned short* xa, const unsigned short* xb, void* ya, void* yb, int Ma,        \
        int Mb, int N, int K, int nb, int ldx, int ldy, int vec_ok,                            \
        const float* pina, const float* pinb, int ng, float eps, const float* inva,            \
        const float* invb, unsigned short* uoa, unsigned short* uob, float* poa, float* pob,   \
        const float* ga, const float* gb, float* ioa, float* iob, int n_inv) {                 \
        const PtiArgs a = {{qa, qb}, {sa, sb}, {xa, xb}, {ya, yb}, {Ma, Mb},                   \
                           N, K, nb, ldx, ldy, vec_ok, {pina, pinb}, ng, eps, {inva, invb},    \
                           {uoa, uob}, {poa, pob}, {ga, gb}, {ioa, iob}, n_inv};               \
        pti_px<0, MT, U, GR>(a);                                                               \
    }
PTI_PX(px_m2_u2_g4, 2, 2, 4)
PTI_PX(px_m2_u4_g4, 2, 4, 4)
PTI_PX(px_m2_u8_g2, 2, 8, 2)
PTI_PX(px_m2_u4_g3, 2, 4, 3)
