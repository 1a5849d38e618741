// PROTOTYPE (session 15): the 8-warp plain kernel with pieces of pti_finish added (bit 0: the scaled
// check and scaling, bit 1: the barrier after the last slot group, bit 2: the residual branch and tail).
template <int TIN, int MT, int U, int PIECES>
__device__ __forceinline__ void pti_ep(const PtiArgs& a) {
    extern __shared__ __align__(16) unsigned char pti_smem[];
    float* red = (float*)pti_smem;
    float* inv_s = red + 4096;
    float* res_s = inv_s + 128;
    constexpr int NW = 8;
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
    const bool scaled = (PIECES & 1) && (a.pin[0] != nullptr || a.inv[0] != nullptr);
    const bool residual = (PIECES & 4) && a.po[0] != nullptr;
    if (scaled) {
        if (a.inv[0]) {
            for (int rr = threadIdx.x; rr < a.M[0]; rr += 256) inv_s[rr] = a.inv[0][rr];
        } else {
            pti_inv_from_pin(a, inv_s, a.M[0], warp, lane);
        }
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
        if (residual) {
            float nx = 0.f;
            if (n < a.N && m < a.M[0]) {
                float* xq = (float*)a.y[0] + (pti_u64)m * a.ldy + n;
                nx = __fadd_rn(*xq, pti_bf16_to_f32(pti_f32_to_bf16(v)));
                *xq = nx;
                a.uo[0][(pti_u64)m * a.ldy + n] = pti_f32_to_bf16(__fmul_rn(nx, a.g[0][n]));
            }
            res_s[(sl * 8 + (m - sl * 8)) * 16 + col] = nx;
        } else if (n < a.N && m < a.M[0]) {
            if (scaled) v = __fmul_rn(v, inv_s[m]);
            pti_store<TIN, 1>(a.y[0], (pti_u64)m * a.ldy + n, v);
        }
    }
    if (PIECES & 2) __syncthreads();
    if (residual)
        for (int t = threadIdx.x; t < MT * 8; t += 256) {
            const int ml = t & 7, sl = t >> 3, m = sl * 8 + ml;
            if (m < a.M[0] && unit < a.ng) {
                const float* e = res_s + (sl * 8 + ml) * 16;
                float p = 0.f;
#pragma unroll
                for (int i = 0; i < 16; ++i) p = __fmaf_rn(e[i], e[i], p);
                a.po[0][(pti_u64)m * a.ng + unit] = p;
            }
        }
}

#define PTI_EP(NAME, MT, U, MINB, PIECES)                                                       \
    extern "C" __global__ void __launch_bounds__(256, MINB) NAME(                                \
        const uint4* qa, const unsigned* sa, const uint4* qb, const unsigned* sb,              \
        const unsigned short* xa, const unsigned short* xb, void* ya, void* yb, int Ma,        \
        int Mb, int N, int K, int nb, int ldx, int ldy, int vec_ok,                            \
        const float* pina, const float* pinb, int ng, float eps, const float* inva,            \
        const float* invb, unsigned short* uoa, unsigned short* uob, float* poa, float* pob,   \
        const float* ga, const float* gb, float* ioa, float* iob, int n_inv) {                 \
        const PtiArgs a = {{qa, qb}, {sa, sb}, {xa, xb}, {ya, yb}, {Ma, Mb},                   \
                           N, K, nb, ldx, ldy, vec_ok, {pina, pinb}, ng, eps, {inva, invb},    \
                           {uoa, uob}, {poa, pob}, {ga, gb}, {ioa, iob}, n_inv};               \
        pti_ep<0, MT, U, PIECES>(a);                                                           \
    }
PTI_EP(ep0_m1_u2, 1, 2, 5, 0)
PTI_EP(ep1_m1_u2, 1, 2, 5, 1)
PTI_EP(ep2_m1_u2, 1, 2, 5, 2)
PTI_EP(ep4_m1_u2, 1, 2, 5, 4)
PTI_EP(ep7_m1_u2, 1, 2, 5, 7)
PTI_EP(ep0_m2_u1, 2, 1, 4, 0)
PTI_EP(ep7_m2_u1, 2, 1, 4, 7)
