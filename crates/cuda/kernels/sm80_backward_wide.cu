// The backward of the mma.sync family above d = 128 (192, 256): warps split D.
//
// Why another structure: the backward of sm80_backward.cu gives each of 4 warps 16 key
// rows, and a warp holds their dK and dV rows over all of D: 2 x 16 x D f32 over 32 lanes =
// D registers per thread, beside S^T and dP^T (16 keys x 64 queries each: 32 + 32). That is
// 192 at d = 128, and 256 at d = 192 - more than a thread has (255) before any operand.
// Here BWD_DIM_SLICES = 2: 8 warps per 64-key block, warp w taking key group kg = w mod 4
// (16 keys) and slice sl = w / 4 of D (DS = D / 2 columns):
// * S^T and dP^T (64 keys x 64 queries) are split 4 x 2 the same way, warp w computing its
//   16 keys over query columns 32 sl .. (QW = 32): 16 + 16 registers, no product computed
//   twice. A warp's dK, dV need P^T and dS^T of its keys over all 64 queries, half of which
//   the other warp of its key group computed, so both go through shared memory (16-bit, 8 KB
//   each: BWD_P_TILES = 1 beside the dS^T tile);
// * dV += P^T dO and dK += dS^T Q for its 16 keys x DS columns: 2 x 16 x DS / 32 = D / 2
//   registers (128 at d = 256, 96 at d = 192);
// * dQ += dS K for query rows 16 kg .. x DS columns, reduced into dq per 16 columns.
// Live values the structure needs at its peak: dK, dV (D / 2) + S^T, dP^T (32) + K, V
// fragments of two k-steps (16) + one B fragment (4): 180 at d = 256 (ptxas, sm_90: 251
// registers and no spills, the rest addresses and operands loaded ahead).

#if BWD_DIM_SLICES > 1
#define DS (D / BWD_DIM_SLICES)   // columns of a warp's slice of dK, dQ
#define DSV (DV / BWD_DIM_SLICES) // columns of a warp's slice of dV
#define QW (BM / BWD_DIM_SLICES)  // query columns of a warp's S^T, dP^T
#define KG (BN / 16)              // key groups of 16 rows (warps per slice)
static_assert(WB_WGS == 1 && QB == BM && BWD_STAGES == 2 && WB_DS_BUFFERS == 1 && BWD_P_TILES == 1 &&
                  WB_DQ_BUFFERS == 0,
              "one key tile, 64-query visits, double-buffered stages, one dS^T and one P^T tile");
static_assert(BWD_THREADS == 32 * KG * BWD_DIM_SLICES, "backward block threads differ from the host's");
static_assert(DS % 16 == 0 && DSV % 16 == 0 && QW % 16 == 0, "a warp's slices are whole 16-column MMA blocks");
// Shared memory: K and V of the block's key tile, two query stages, dS^T, P^T.
static_assert((BN * (D + DV) + BWD_STAGES * QueryStage<BM>::SIZE + (WB_DS_BUFFERS + BWD_P_TILES) * BN * BM) * 2 ==
                  BWD_SMEM_BYTES,
              "backward shared memory differs from the host's");

// One block per 64 key rows, visiting the query tiles of the transposed plan; per (key
// tile, query tile) the products of sm80_backward.cu, split as above.
extern "C" __global__ void __launch_bounds__(BWD_THREADS) attn_bwd(const Params p) {
    extern __shared__ __align__(128) u16 smem[];
    u16* sK = smem;
    u16* sV = sK + BN * D;
    u16* sStage = sV + BN * DV;
    u16* sS = sStage + BWD_STAGES * QueryStage<BM>::SIZE;  // dS^T of the current pair, [BN][BM]
    u16* sP = sS + BN * BM;                                 // P^T of the current pair, [BN][BM]
    const Coords bc = block_coords(p, false);  // causal: the first key tiles are the heaviest
    const int kt = bc.tile, h = bc.h, b = bc.b;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int kg = warp % KG, sl = warp / KG;
    const int k0 = kt * BN, kw = k0 + kg * 16;  // the block's and the warp's first key
    const int klimit = key_limit(p, b);
    const int prow = plan_row(p, b, kt), qbeg = p.plan_ptr[prow];
    const int qend = keys_past_limit(p, k0, klimit) ? qbeg : p.plan_ptr[prow + 1];  // all keys padded: zeros

    int krow[2], kpos[2], kseg[2];
    #pragma unroll
    for (int r = 0; r < 2; ++r) {
        krow[r] = row_of(p, k_axis(p), kw + g + 8 * r, h);
        kseg[r] = seg_of(p, k_axis(p), kw + g + 8 * r);
        kpos[r] = pos_of(k_axis(p), krow[r]);
    }
    float dk[DS / 8][4], dv[DSV / 8][4];
    #pragma unroll
    for (int i = 0; i < DS / 8; ++i)
        #pragma unroll
        for (int e = 0; e < 4; ++e) dk[i][e] = 0.f;
    #pragma unroll
    for (int i = 0; i < DSV / 8; ++i)
        #pragma unroll
        for (int e = 0; e < 4; ++e) dv[i][e] = 0.f;

    // Issue the loads of query tile `it` into its stage.
    auto fetch = [&](int it) {
        const int q0 = p.plan_idx[it] * BM;
        const QueryStage<BM> qs{sStage + ((it - qbeg) & 1) * QueryStage<BM>::SIZE};
        load_tile<BM, BWD_THREADS>(qs.q(), p.q, p, q_axis(p), b, h, q0);
        load_tile<BM, BWD_THREADS, false, DV>(qs.o(), p.dout, p, q_axis(p), b, h, q0);
        if (threadIdx.x < BM) stage_query_row(p, b, h, q0, threadIdx.x, qs);
    };
    load_tile<BN, BWD_THREADS>(sK, p.k, p, k_axis(p), b, h, k0);
    load_tile<BN, BWD_THREADS, false, DV>(sV, p.v, p, k_axis(p), b, h, k0);
    if (qbeg < qend) fetch(qbeg);
    cp_commit();
    for (int it = qbeg; it < qend; ++it) {
        const int q0 = p.plan_idx[it] * BM;
        const QueryStage<BM> qs{sStage + ((it - qbeg) & 1) * QueryStage<BM>::SIZE};
        cp_wait<0>();     // query tile `it` (and K, V) landed for this thread
        __syncthreads();  // for everyone, and every warp is done with tile it - 1 (and sS, sP)
        if (it + 1 < qend) fetch(it + 1);
        cp_commit();
        // S^T = K Q^T (over D) and dP^T = V dO^T (over DV): the warp's 16 keys x query
        // columns QW sl ..
        float s[QW / 8][4], dp[QW / 8][4];
        #pragma unroll
        for (int nb = 0; nb < QW / 8; ++nb)
            #pragma unroll
            for (int e = 0; e < 4; ++e) s[nb][e] = dp[nb][e] = 0.f;
        #pragma unroll
        for (int kk = 0; kk < (D > DV ? D : DV) / 16; kk += 2) {
            const bool on_k = kk < D / 16, on_v = kk < DV / 16;  // compile-time once unrolled
            u32 ka[4], kb[4], va[4], vb[4];
            if (on_k) {
                frag_a(ka, sK, kg * 16, kk, lane);
                frag_a(kb, sK, kg * 16, kk + 1, lane);
            }
            if (on_v) {
                frag_a<DV>(va, sV, kg * 16, kk, lane);
                frag_a<DV>(vb, sV, kg * 16, kk + 1, lane);
            }
            #pragma unroll
            for (int nb = 0; nb < QW / 8; ++nb) {
                u32 bf[4];
                if (on_k) {
                    frag_b_rows(bf, qs.q(), sl * (QW / 8) + nb, kk, lane);
                    mma(s[nb], ka, bf[0], bf[1]);
                    mma(s[nb], kb, bf[2], bf[3]);
                }
                if (on_v) {
                    frag_b_rows<DV>(bf, qs.o(), sl * (QW / 8) + nb, kk, lane);
                    mma(dp[nb], va, bf[0], bf[1]);
                    mma(dp[nb], vb, bf[2], bf[3]);
                }
            }
        }
        // Masked pairs get s = -inf, so P = 2^-inf = 0 (and dS = 0) below.
        const bool full = (plan_marked(p, it) && marked_tile_full(p, b, q0, BM, k0, klimit)) ||
                          tile_full(p, b, h, q0, BM, k0, klimit);
        mask_scores_t(p, b, h, mask_kind(p, full), klimit, s, kw + g, kpos, kseg, q0 + sl * QW, qs.pos() + sl * QW, t);
        probs_t(p, s, qs.lse2() + sl * QW, t);
        dscores_t(p, dp, s, qs.delta() + sl * QW, t);
        // P^T and dS^T (16-bit) into sP, sS: register j of 16-query block kk holds key row
        // 16 kg + g + 8 (j & 1), query columns QW sl + 16 kk + 8 (j >> 1) + 2t, +1 (the A
        // fragment layout, which the ldmatrix reads below give back).
        #pragma unroll
        for (int kk = 0; kk < QW / 16; ++kk) {
            const u32 pj[4] = {pack2(s[2 * kk][0], s[2 * kk][1]), pack2(s[2 * kk][2], s[2 * kk][3]),
                               pack2(s[2 * kk + 1][0], s[2 * kk + 1][1]), pack2(s[2 * kk + 1][2], s[2 * kk + 1][3])};
            const u32 dj[4] = {pack2(dp[2 * kk][0], dp[2 * kk][1]), pack2(dp[2 * kk][2], dp[2 * kk][3]),
                               pack2(dp[2 * kk + 1][0], dp[2 * kk + 1][1]),
                               pack2(dp[2 * kk + 1][2], dp[2 * kk + 1][3])};
            #pragma unroll
            for (int j = 0; j < 4; ++j) {
                const int at = swz_s(kg * 16 + g + 8 * (j & 1), sl * (QW / 8) + 2 * kk + (j >> 1)) + 2 * t;
                *reinterpret_cast<u32*>(sP + at) = pj[j];
                *reinterpret_cast<u32*>(sS + at) = dj[j];
            }
        }
        __syncthreads();  // every warp's P^T and dS^T columns are in sP, sS
        // dV += P^T dO, dK += dS^T Q: the warp's 16 keys x columns DSV sl .. (dV), DS sl ..
        // (dK), over all 64 queries (A: P^T, dS^T rows of its keys; B: dO, Q by
        // ldmatrix.trans).
        #pragma unroll
        for (int kk = 0; kk < BM / 16; ++kk) {
            u32 pa[4], da[4];
            ldsm4(pa, sP + swz_s(kg * 16 + (lane & 15), 2 * kk + (lane >> 4)));
            ldsm4(da, sS + swz_s(kg * 16 + (lane & 15), 2 * kk + (lane >> 4)));
            #pragma unroll
            for (int cb = 0; cb < (DS > DSV ? DS : DSV) / 8; cb += 2) {
                u32 bf[4];
                if (cb < DSV / 8) {
                    frag_b_cols<DV>(bf, qs.o(), kk, sl * (DSV / 8) + cb, lane);
                    mma(dv[cb], pa, bf[0], bf[1]);
                    mma(dv[cb + 1], pa, bf[2], bf[3]);
                }
                if (cb < DS / 8) {
                    frag_b_cols(bf, qs.q(), kk, sl * (DS / 8) + cb, lane);
                    mma(dk[cb], da, bf[0], bf[1]);
                    mma(dk[cb + 1], da, bf[2], bf[3]);
                }
            }
        }
        // dQ rows 16 kg .. + 15 of the query tile, columns DS sl ..: A = dS (queries x keys)
        // by ldmatrix.trans of sS, B = K (keys x dims), reduced into dq per 16 columns.
        {
            u32 sa[BN / 16][4];
            #pragma unroll
            for (int kk = 0; kk < BN / 16; ++kk)
                ldsm4t(sa[kk], sS + swz_s(kk * 16 + (lane & 7) + (lane >> 4) * 8, 2 * kg + ((lane >> 3) & 1)));
            float* qrow[2];
            #pragma unroll
            for (int r = 0; r < 2; ++r) {
                const int row = qs.row()[kg * 16 + g + 8 * r];
                qrow[r] = row >= 0 ? p.dq + (((size_t)b * p.q_rows + row) * p.heads + h) * DM + sl * DS + 2 * t : nullptr;
            }
            #pragma unroll
            for (int cb = 0; cb < DS / 8; cb += 2) {
                float c0[4] = {0.f, 0.f, 0.f, 0.f}, c1[4] = {0.f, 0.f, 0.f, 0.f};
                #pragma unroll
                for (int kk = 0; kk < BN / 16; ++kk) {
                    u32 bf[4];
                    frag_b_cols(bf, sK, kk, sl * (DS / 8) + cb, lane);
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
    store_dkdv(p, b, h, dk, dv, krow, sl, t);
}
#undef DS
#undef DSV
#undef QW
#undef KG
#endif
