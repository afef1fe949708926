// Online softmax in the log2 domain: the forward's running maxima, sums and the rescale
// of O, P packed as 16-bit MMA operands; the backward's P^T from the saved LSE and
// dS^T = P^T o (dP^T - delta). One warp's register fragments (the mma.m16n8k16 layout,
// which is also the wgmma accumulator layout of a warp), shared by both families.

// One online-softmax step in the log2 domain: the running maxima m and sums l absorb the
// tile's masked scores s, which become P = 2^(s*scale*log2e - m). alpha is the factor the
// output accumulated so far must be scaled by; the return value says whether any row of the
// warp has a new maximum (otherwise alpha = 1 everywhere and the rescale is skipped).
// max(c*s) = c*max(s) for c > 0: one multiply per row.
template <int WMT, int NK = NKB>
__device__ __forceinline__ bool softmax_step(const Params& p, float (&s)[WMT][NK][4], float (&m)[WMT][2],
                                             float (&l)[WMT][2], float (&alpha)[WMT][2]) {
    bool grew = false;
    #pragma unroll
    for (int mt = 0; mt < WMT; ++mt)
        #pragma unroll
        for (int r = 0; r < 2; ++r) {
            float mx = NEG_INF;
            #pragma unroll
            for (int nb = 0; nb < NK; ++nb) mx = fmaxf(mx, fmaxf(s[mt][nb][2 * r], s[mt][nb][2 * r + 1]));
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffff, mx, 1));
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffff, mx, 2));
            const float mnew = fmaxf(m[mt][r], mx * p.scale_log2);
            const float base = mnew == NEG_INF ? 0.f : mnew;  // a row with no key yet: no NaN
            alpha[mt][r] = mnew == m[mt][r] ? 1.f : ex2(m[mt][r] - base);
            grew |= mnew != m[mt][r];
            m[mt][r] = mnew;
            float sum = 0.f;
            #pragma unroll
            for (int nb = 0; nb < NK; ++nb)
                #pragma unroll
                for (int e = 0; e < 2; ++e) {
                    const float pe = ex2(fmaf(s[mt][nb][2 * r + e], p.scale_log2, -base));
                    s[mt][nb][2 * r + e] = pe;
                    sum += pe;
                }
            l[mt][r] = l[mt][r] * alpha[mt][r] + sum;
        }
    return __any_sync(0xffffffff, grew);
}

template <int WMT>
__device__ __forceinline__ void rescale(float (&o)[WMT][DV / 8][4], const float (&alpha)[WMT][2]) {
    #pragma unroll
    for (int mt = 0; mt < WMT; ++mt)
        #pragma unroll
        for (int i = 0; i < DV / 8; ++i) {
            o[mt][i][0] *= alpha[mt][0];
            o[mt][i][1] *= alpha[mt][0];
            o[mt][i][2] *= alpha[mt][1];
            o[mt][i][3] *= alpha[mt][1];
        }
}

// P (f32 accumulators of S) as 16-bit A fragments of O += P V: the accumulators of two
// 8-key blocks are the A fragment of one 16-key step, for mma.m16n8k16 and for wgmma alike.
template <int WMT, int NK = NKB>
__device__ __forceinline__ void pack_p(u32 (&pa)[WMT][NK / 2][4], const float (&s)[WMT][NK][4]) {
    #pragma unroll
    for (int mt = 0; mt < WMT; ++mt)
        #pragma unroll
        for (int kk = 0; kk < NK / 2; ++kk) {
            pa[mt][kk][0] = pack2(s[mt][2 * kk][0], s[mt][2 * kk][1]);
            pa[mt][kk][1] = pack2(s[mt][2 * kk][2], s[mt][2 * kk][3]);
            pa[mt][kk][2] = pack2(s[mt][2 * kk + 1][0], s[mt][2 * kk + 1][1]);
            pa[mt][kk][3] = pack2(s[mt][2 * kk + 1][2], s[mt][2 * kk + 1][3]);
        }
}
template <int NB, class F>
__device__ __forceinline__ void each_column_t(int t, F f) {
    #pragma unroll
    for (int nb = 0; nb < NB; ++nb)
        #pragma unroll
        for (int e = 0; e < 2; ++e) f(nb * 8 + 2 * t + e, nb, e);
}
// s <- P^T = 2^(s*scale*log2e - lse2), with the query tile's lse2 (sL) per column.
template <int NB>
__device__ __forceinline__ void probs_t(const Params& p, float (&s)[NB][4], const float* sL, int t) {
    each_column_t<NB>(t, [&](int qc, int nb, int e) {
        const float l2 = sL[qc];
        #pragma unroll
        for (int r = 0; r < 2; ++r) s[nb][2 * r + e] = ex2(fmaf(s[nb][2 * r + e], p.scale_log2, -l2));
    });
}
// dp <- c dS^T = P^T o (c dP^T - c' delta), with P^T from probs_t and the query tile's
// delta (sD) per column. c = scale sigma_call: the softmax scale times the pattern's
// output scale sigma where the call applies it (p.out_scale; 1 where it defers it, and for
// most patterns, crate::output_scale). c' = c p.delta_scale = c / sigma: delta is
// rowsum(dout o out) over the finished, scaled output, sigma times O's own. Both factors
// are taken here, once per element in the FMA that subtracts delta, so that dQ = (c dS) K
// and dK = (c dS)^T Q need no multiply per element of their own. (Separate from probs_t:
// the wgmma backward computes P^T while the tensor cores still compute dP^T.)
template <int NB>
__device__ __forceinline__ void dscores_t(const Params& p, float (&dp)[NB][4], const float (&s)[NB][4], const float* sD,
                                          int t) {
    const float c = p.scale * p.out_scale, cd = c * p.delta_scale;
    each_column_t<NB>(t, [&](int qc, int nb, int e) {
        const float dl = sD[qc] * cd;
        #pragma unroll
        for (int r = 0; r < 2; ++r) dp[nb][2 * r + e] = s[nb][2 * r + e] * fmaf(dp[nb][2 * r + e], c, -dl);
    });
}

// One query stage of the backward (double-buffered in both kernels): the ROWS-row query
// tile's Q and dO, then per query row its lse2, delta, global position (-1: none) and
// tensor row (-1: none). SIZE is its size in u16 units, a multiple of 512 (1 KB).
// (A view of one base pointer: the parts are fixed offsets from it, which the loads and
