// The backward of the mma.sync family (any sm_80+ device; flash-attention 2's structure)
// up to d = 128, where a warp holds its 16 keys' dK and dV rows over all of D (D registers
// per thread). Above, D is split between warps: sm80_backward_wide.cu.

// Swizzled element offset of 16-byte chunk `ch` of row `r` in the [BN][BM] dS^T tile
// (8 chunks per row; conflict-free stores of the C fragments and ldmatrix.trans reads).
__device__ __forceinline__ int swz_s(int r, int ch) { return r * BM + ((ch ^ (r & 7)) << 3); }

#if BWD_DIM_SLICES == 1
// Shared memory: K and V of the block's key tile, BWD_STAGES = 2 query stages (the loop
// alternates them by tile parity) and one dS^T tile, as the host sizes it.
static_assert(WB_WGS == 1 && QB == BM && BWD_STAGES == 2 && WB_DS_BUFFERS == 1 && WB_DQ_BUFFERS == 0 &&
                  BWD_P_TILES == 0,
              "one key tile, 64-query visits, double-buffered stages, one dS^T tile");
static_assert((2 * BN * D + BWD_STAGES * QueryStage<BM>::SIZE + WB_DS_BUFFERS * BN * BM) * 2 == BWD_SMEM_BYTES,
              "backward shared memory differs from the host's");
static_assert(BWD_THREADS == NTHREADS, "backward block threads differ from the host's");
static_assert(DV == D, "v's head dim differs from q's only above d = 128 (sm80_backward_wide.cu)");

// The backward (flash-attention 2 structure): one block per 64 key rows (4 warps of 16
// keys), visiting the query tiles of the transposed plan. Per (key tile, query tile),
// with S^T = K Q^T (keys as rows), computed once:
//   P^T = exp(S^T - lse), dV += P^T dO, dS^T = P^T o (V dO^T - delta), dK += scale dS^T Q,
//   dQ += scale dS K (dS^T through shared memory; f32 reductions into dq, which the host
//   zeroes before the first launch of a call).
extern "C" __global__ void __launch_bounds__(NTHREADS) attn_bwd(const Params p) {
    extern __shared__ __align__(128) u16 smem[];
    // Query-side tiles are double-buffered: stage s holds Q, dO and the per-query lse2,
    // delta, global position (-1: none) and tensor row (-1: none) of one query tile.
    u16* sK = smem;
    u16* sV = sK + BN * D;
    u16* sStage = sV + BN * D;
    u16* sS = sStage + BWD_STAGES * QueryStage<BM>::SIZE;  // dS^T of the current pair, [BN][BM]
    const Coords bc = block_coords(p, false);  // causal: the first key tiles are the heaviest
    const int kt = bc.tile, h = bc.h, b = bc.b;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int k0 = kt * BN;
    const int klimit = key_limit(p, b);
    const int prow = plan_row(p, b, kt), qbeg = p.plan_ptr[prow];
    const int qend = keys_past_limit(p, k0, klimit) ? qbeg : p.plan_ptr[prow + 1];  // all keys padded: zeros

    int krow[2], kpos[2], kseg[2];
    #pragma unroll
    for (int r = 0; r < 2; ++r) {
        krow[r] = row_of(p, k_axis(p), k0 + warp * 16 + g + 8 * r, h);
        kseg[r] = seg_of(p, k_axis(p), k0 + warp * 16 + g + 8 * r);
        kpos[r] = pos_of(k_axis(p), krow[r]);
    }
    float dk[D / 8][4], dv[D / 8][4];
    #pragma unroll
    for (int i = 0; i < D / 8; ++i)
        #pragma unroll
        for (int e = 0; e < 4; ++e) dk[i][e] = dv[i][e] = 0.f;

    // Issue the loads of query tile `it` into its stage.
    auto fetch = [&](int it) {
        const int q0 = p.plan_idx[it] * BM;
        const QueryStage<BM> qs{sStage + ((it - qbeg) & 1) * QueryStage<BM>::SIZE};
        load_tile(qs.q(), p.q, p, q_axis(p), b, h, q0);
        load_tile(qs.o(), p.dout, p, q_axis(p), b, h, q0);
        if (threadIdx.x < BM) stage_query_row(p, b, h, q0, threadIdx.x, qs);
    };
    load_tile(sK, p.k, p, k_axis(p), b, h, k0);
    load_tile(sV, p.v, p, k_axis(p), b, h, k0);
    if (qbeg < qend) fetch(qbeg);
    cp_commit();
    for (int it = qbeg; it < qend; ++it) {
        const int q0 = p.plan_idx[it] * BM;
        const QueryStage<BM> qs{sStage + ((it - qbeg) & 1) * QueryStage<BM>::SIZE};
        cp_wait<0>();     // query tile `it` (and K, V) landed for this thread
        __syncthreads();  // for everyone, and every warp is done with tile it - 1 (and sS)
        if (it + 1 < qend) fetch(it + 1);
        cp_commit();
        float s[BM / 8][4], dp[BM / 8][4];
        #pragma unroll
        for (int nb = 0; nb < BM / 8; ++nb)
            #pragma unroll
            for (int e = 0; e < 4; ++e) s[nb][e] = dp[nb][e] = 0.f;
        #pragma unroll
        for (int kk = 0; kk < D / 16; kk += 2) {
            u32 ka[4], kb[4], va[4], vb[4];
            frag_a(ka, sK, warp * 16, kk, lane);
            frag_a(kb, sK, warp * 16, kk + 1, lane);
            frag_a(va, sV, warp * 16, kk, lane);
            frag_a(vb, sV, warp * 16, kk + 1, lane);
            #pragma unroll
            for (int nb = 0; nb < BM / 8; ++nb) {
                u32 bf[4];
                frag_b_rows(bf, qs.q(), nb, kk, lane);
                mma(s[nb], ka, bf[0], bf[1]);
                mma(s[nb], kb, bf[2], bf[3]);
                frag_b_rows(bf, qs.o(), nb, kk, lane);
                mma(dp[nb], va, bf[0], bf[1]);
                mma(dp[nb], vb, bf[2], bf[3]);
            }
        }
        // Masked pairs get s = -inf, so P = 2^-inf = 0 (and dS = 0) below.
        const bool full = (plan_marked(p, it) && marked_tile_full(p, b, q0, BM, k0, klimit)) ||
                          tile_full(p, b, h, q0, BM, k0, klimit);
        mask_scores_t(p, b, h, mask_kind(p, full), klimit, s, k0 + warp * 16 + g, kpos, kseg, q0, qs.pos(), t);
        probs_t(p, s, qs.lse2(), t);
        dscores_t(p, dp, s, qs.delta(), t);
        // dS^T (16-bit) as the A operand of dK and, through sS, of dQ: register
        // da[kk][j] holds key row warp*16 + g + 8 (j & 1), query columns
        // 16 kk + 8 (j >> 1) + 2t, +1.
        u32 da[BM / 16][4];
        #pragma unroll
        for (int kk = 0; kk < BM / 16; ++kk) {
            da[kk][0] = pack2(dp[2 * kk][0], dp[2 * kk][1]);
            da[kk][1] = pack2(dp[2 * kk][2], dp[2 * kk][3]);
            da[kk][2] = pack2(dp[2 * kk + 1][0], dp[2 * kk + 1][1]);
            da[kk][3] = pack2(dp[2 * kk + 1][2], dp[2 * kk + 1][3]);
            #pragma unroll
            for (int j = 0; j < 4; ++j)
                *reinterpret_cast<u32*>(sS + swz_s(warp * 16 + g + 8 * (j & 1), 2 * kk + (j >> 1)) + 2 * t) = da[kk][j];
        }
        #pragma unroll
        for (int kk = 0; kk < BM / 16; ++kk) {
            u32 pa[4] = {pack2(s[2 * kk][0], s[2 * kk][1]), pack2(s[2 * kk][2], s[2 * kk][3]),
                         pack2(s[2 * kk + 1][0], s[2 * kk + 1][1]), pack2(s[2 * kk + 1][2], s[2 * kk + 1][3])};
            #pragma unroll
            for (int cb = 0; cb < D / 8; cb += 2) {
                u32 bf[4];
                frag_b_cols(bf, qs.o(), kk, cb, lane);
                mma(dv[cb], pa, bf[0], bf[1]);
                mma(dv[cb + 1], pa, bf[2], bf[3]);
                frag_b_cols(bf, qs.q(), kk, cb, lane);
                mma(dk[cb], da[kk], bf[0], bf[1]);
                mma(dk[cb + 1], da[kk], bf[2], bf[3]);
            }
        }
        __syncthreads();  // every warp's dS^T rows are in sS
        // dQ rows warp*16 .. +15 of the query tile: A = dS (queries x keys) by
        // ldmatrix.trans of sS, B = K (keys x dims), reduced into dq per 16 columns.
        {
            u32 sa[BN / 16][4];
            #pragma unroll
            for (int kk = 0; kk < BN / 16; ++kk)
                ldsm4t(sa[kk], sS + swz_s(kk * 16 + (lane & 7) + (lane >> 4) * 8, 2 * warp + ((lane >> 3) & 1)));
            float* qrow[2];
            #pragma unroll
            for (int r = 0; r < 2; ++r) {
                const int row = qs.row()[warp * 16 + g + 8 * r];
                qrow[r] = row >= 0 ? p.dq + (((size_t)b * p.q_rows + row) * p.heads + h) * DM + 2 * t : nullptr;
            }
            #pragma unroll
            for (int cb = 0; cb < D / 8; cb += 2) {
                float c0[4] = {0.f, 0.f, 0.f, 0.f}, c1[4] = {0.f, 0.f, 0.f, 0.f};
                #pragma unroll
                for (int kk = 0; kk < BN / 16; ++kk) {
                    u32 bf[4];
                    frag_b_cols(bf, sK, kk, cb, lane);
                    mma(c0, sa[kk], bf[0], bf[1]);
                    mma(c1, sa[kk], bf[2], bf[3]);
                }
                #pragma unroll
                for (int r = 0; r < 2; ++r)
                    if (qrow[r]) {
                        red_add2(qrow[r] + cb * 8, c0[2 * r], c0[2 * r + 1]);
                        red_add2(qrow[r] + cb * 8 + 8, c1[2 * r], c1[2 * r + 1]);
                    }
            }
        }
    }
    cp_wait<0>();
    store_dkdv(p, b, h, dk, dv, krow, 0, t);
}
#endif
