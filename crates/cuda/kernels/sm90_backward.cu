// The wgmma backward (sm_90a): its producer warpgroup, its consumer warpgroups and the
// kernel (block shape, shared memory, products and query walk in sm90_backward_layout.cuh).

// Compiled where the wgmma family runs the backward (OWN_BACKWARD: d = 64, 128); the
// backward of d = 192, 256 is the mma family's kernel (Family::backward_family).
#if OWN_BACKWARD
// The producer warpgroup: every visit's fill, in order, starting while the consumers load
// K and V (a block's start waits for one round trip to memory, not two in a row). Query
// tile `qt` goes into the stage of visit `it` once every consumer is done with the
// stage's previous tile: the TMA's boxes (one thread) or a cp.async gather, waited for,
// and the per-query rows (thread ft, row ft). After the last visit, one more stage
// carries only the end of the walk.
__device__ __forceinline__ void bwd_producer(const Params& p, const BwdSmem& sm, const TensorPair& maps, int kb, int h,
                                             int b, int klimit) {
    const int R = p.compact ? p.dil_rate : 1;
    const unsigned ft = threadIdx.x - WB_CONSUMERS;
    QueryWalk walk = query_walk(p, kb, b, klimit);
    for (int it = 0;; ++it) {
        u32 vis;
        const int qt = next_query_tile(p, walk, vis), q0 = qt * QB, st = it % BWD_STAGES;
        const BwdSmem::Stage qs = sm.stage(st);
        if (it >= BWD_STAGES) mbar_wait(sm.empty(st), (it / BWD_STAGES - 1) & 1);
        if (ft == 0) sm.visits[st] = make_int2(qt, (int)vis);
        if (qt < 0) {
            mbar_arrive(sm.full(st));
            break;
        }
        int row0[WB_QSUB];
        bool box = true;
        #pragma unroll
        for (int r = 0; r < WB_QSUB; ++r) box = box && tile_is_box(p, q_axis(p), q0 + BM * r, h, row0[r]);
        if (!box) {
            load_tile<QB, WG_PRODUCERS, true>(qs.q(), p.q, p, q_axis(p), b, h, q0);
            load_tile<QB, WG_PRODUCERS, true>(qs.o(), p.dout, p, q_axis(p), b, h, q0);
            cp_commit();
            cp_wait<0>();
            fence_async_smem();
        }
        const bool copies = ft < QB && stage_query_row(p, b, h, q0, ft, qs);
        if (box && ft == 0) {
            mbar_expect_tx(sm.full(st), 2 * QB * D * 2);
            #pragma unroll
            for (int r = 0; r < WB_QSUB; ++r) {
                const ViewRow v = view_row(row0[r], R);
                #pragma unroll
                for (int cb = 0; cb < D / 64; ++cb) {
                    const int at = cb * QB * 64 + r * BM * 64;
                    tma_box(qs.q() + at, &maps.a, cb * 64, h, v, 0, b, sm.full(st));
                    tma_box(qs.o() + at, &maps.b, cb * 64, h, v, 0, b, sm.full(st));
                }
            }
        }
        // This thread's arrival: once its lse2 / delta copies have landed, if it made any.
        if (copies)
            mbar_arrive_cp_async(sm.full(st));
        else
            mbar_arrive(sm.full(st));
    }
}

// A consumer warpgroup: K and V of its 64 keys, then per visit S^T, dP^T, dV, its dS^T
// rows, its 64 x 64 block of dQ (reduced into dq) and dK; at the end its dK, dV rows.
__device__ __forceinline__ void bwd_consumer(const Params& p, const BwdSmem& sm, const TensorMap& dq_map, int kb, int h,
                                             int b, int klimit) {
    const int wg = warp_uniform(threadIdx.x >> 7), warp = (threadIdx.x >> 5) & 3, lane = threadIdx.x & 31, g = lane >> 2,
              t = lane & 3;
    const bool leader = (threadIdx.x & 127) == 0;  // issues its warpgroup's TMA operations
    const int kw = (kb * WB_WGS + wg) * BN;        // this warpgroup's first key (launch index)
    const int R = p.compact ? p.dil_rate : 1;
    load_tile<WB_KEYS, WB_CONSUMERS, true>(sm.k, p.k, p, k_axis(p), b, h, kb * WB_KEYS);
    load_tile<WB_KEYS, WB_CONSUMERS, true>(sm.v, p.v, p, k_axis(p), b, h, kb * WB_KEYS);
    cp_commit();
    float dk[D / 8][4], dv[D / 8][4];
    #pragma unroll
    for (int i = 0; i < D / 8; ++i)
        #pragma unroll
        for (int e = 0; e < 4; ++e) dk[i][e] = dv[i][e] = 0.f;
    cp_wait<0>();
    fence_async_smem();
    bar_sync<1, WB_CONSUMERS>();  // K and V are in shared memory, visible to the tensor cores
    // This warpgroup's 64 x 64 block of dQ: rows 64 w.. of the query tile (d = 64), or its
    // columns 64 w.. (d = 128). A and B operands of its MMA, the block's first row in the
    // tile and first column in dq.
    const int dq_row = WB_QSUB > 1 ? 64 * wg : 0, dq_col = WB_QSUB > 1 ? 0 : 64 * wg;
    const u16* const sKdq = sm.k + (dq_col / 64) * WB_KEYS * 64;
    bool reduced = false;  // the last tile's dQ went out as TMA reductions
    for (int it = 0;; ++it) {
        const int st = it % BWD_STAGES;
        const BwdSmem::Stage qs = sm.stage(st);
        if (it > 0) {
            // Two buffers: the staging this tile's dQ reductions will use (tile it - 2's)
            // has been read. The last tile's reductions may still read the other one;
            // where that tile added its dQ element by element, none may be left.
            if (WB_DQ_BUFFERS == 2 && leader) {
                if (reduced)
                    bulk_wait_read<1>();
                else
                    bulk_wait_read<0>();
            }
            mbar_arrive(sm.empty((it - 1) % BWD_STAGES));
        }
        mbar_wait(sm.full(st), (it / BWD_STAGES) & 1);
        const int2 visit = sm.visits[st];
        if (visit.x < 0) break;
        const int q0 = visit.x * QB;
        // The plan tiles of this query tile that this warpgroup's keys visit (none: it
        // only helps with dQ).
        const u32 halves = ((u32)visit.y >> (WB_QSUB * wg)) & ((1u << WB_QSUB) - 1);
        const bool marked = (((u32)visit.y >> (VIS_FULL + WB_QSUB * wg)) & ((1u << WB_QSUB) - 1)) == (1u << WB_QSUB) - 1;
        const bool mine = halves != 0;

        // This warp's dS^T rows (keys 64 wg + 16 warp + g + 8 (j & 1)) into its dS^T tile, for dQ:
        // zeros where the warpgroup's keys do not visit the tile.
        float s[QNB][4], dp[QNB][4];
        u32 da[QB / 16][4];
        if (mine) {
            // S^T and dP^T as two MMA groups, so that P^T (which needs S^T only) is
            // computed while the tensor cores compute dP^T.
            fence_acc(s);
            fence_acc(dp);
            wg_fence();
            issue_scores_t(s, sm.k + wg * BN * 64, qs.q());
            wg_commit();
            issue_scores_t(dp, sm.v + wg * BN * 64, qs.o());
            wg_commit();
            // This thread's key rows' positions and segments, recomputed per tile (cheap)
            // rather than held in registers across the loop.
            int kpos[2], kseg[2];
            #pragma unroll
            for (int r = 0; r < 2; ++r) {
                kseg[r] = seg_of(p, k_axis(p), kw + warp * 16 + g + 8 * r);
                kpos[r] = pos_of(k_axis(p), row_of(p, k_axis(p), kw + warp * 16 + g + 8 * r, h));
            }
            wg_wait<1>();  // S^T is done; dP^T may still run
            fence_acc(s);
            const bool full =
                (marked && marked_tile_full(p, b, q0, QB, kw, klimit)) || tile_full(p, b, h, q0, QB, kw, klimit);
            mask_scores_t(p, b, h, mask_kind(p, full), klimit, s, kw + warp * 16 + g, kpos, kseg, q0, qs.pos(), t);
            if (WB_QSUB > 1 && halves != (1u << WB_QSUB) - 1) {
                // A plan tile outside this warpgroup's plan row: every pair is masked.
                #pragma unroll
                for (int nb = 0; nb < QNB; ++nb)
                    #pragma unroll
                    for (int e = 0; e < 4; ++e)
                        if (!((halves >> (nb / NKB)) & 1)) s[nb][e] = NEG_INF;
            }
            probs_t(p, s, qs.lse2(), t);
            wg_wait<0>();  // dP^T is done
            fence_acc(dp);
            dscores_t(p, dp, s, qs.delta(), t);
            pack_p<WB_QSUB>(reinterpret_cast<u32(&)[WB_QSUB][BN / 16][4]>(da),
                            reinterpret_cast<float(&)[WB_QSUB][NKB][4]>(dp));
            u32 pa[QB / 16][4];
            pack_p<WB_QSUB>(reinterpret_cast<u32(&)[WB_QSUB][BN / 16][4]>(pa),
                            reinterpret_cast<float(&)[WB_QSUB][NKB][4]>(s));
            fence_acc(dv);
            wg_fence();
            issue_pv<QB>(dv, pa, qs.o());
            wg_commit();
        } else {
            #pragma unroll
            for (int kk = 0; kk < QB / 16; ++kk)
                #pragma unroll
                for (int j = 0; j < 4; ++j) da[kk][j] = 0;
        }
        u16* const sSt = sm.ds_tile(it);  // this tile's dS^T
        // Per 16 query columns, the warp's 16 x 16 block as four 8 x 8 matrices in one
        // stmatrix: matrix j is da[..][j] (rows 8 (j & 1).., columns 8 (j >> 1)..), and lane
        // L gives the address of row L & 7 of matrix L >> 3.
        const int st_row = wg * BN + warp * 16 + ((lane >> 3) & 1) * 8 + (lane & 7);
        #pragma unroll
        for (int kk = 0; kk < QB / 16; ++kk)
            stmatrix_x4(sSt + swz_blocks<WB_KEYS>(st_row, 2 * kk + (lane >> 4)), da[kk]);
        // One buffer: the last tile's reductions have read it (long since; the barrier orders
        // this wait before every thread's staging below).
        if (WB_DQ_BUFFERS == 1 && leader && it > 0) bulk_wait_read<0>();
        fence_async_smem();
        bar_sync<1, WB_CONSUMERS>();  // every warpgroup's dS^T rows are in sSt
        // dQ rows of an evenly spaced query tile go out as TMA reductions of boxes staged
        // in shared memory; other tiles (a compact tile with holes) reduce element by element.
        int qrow0;
        const bool box = tile_is_box(p, q_axis(p), q0 + dq_row, h, qrow0);
        float c[8][4];
        fence_acc(c);
        fence_acc(dk);
        wg_fence();
        issue_dq(c, sSt + (dq_row / 64) * WB_KEYS * 64, sKdq);
        wg_commit();
        if (mine) {
            issue_pv<QB>(dk, da, qs.q());
            wg_commit();
            wg_wait<1>();  // dV and dQ are done; dK runs while dQ is staged
        } else {
            wg_wait<0>();
        }
        fence_acc(c);
        if (box) {
            // 64 rows x 64 columns as two [64][32] f32 blocks with the 128-byte swizzle (16-byte
            // chunk k of row y at chunk k ^ (y & 7)). A float2 store runs in two phases of 16
            // lanes, rows g = 0..3 (4..7) with 4 lanes each. Column block i covers chunks
            // 2 (i & 3) and 2 (i & 3) + 1, which rows g and g ^ 1 swizzle onto the same two
            // banks' quads: a 2-way conflict on every store. Lanes of odd g store block i ^ 2
            // in step i instead (chunk bit 2 flipped), so each phase's four rows hit four
            // distinct chunk pairs; every lane still stores each of its blocks once.
            float* stage_f = sm.dq_tile(it) + wg * 64 * 64;
            const bool odd = g & 1;
            const int swz = g ^ (odd ? 4 : 0);  // row & 7 (= g), and the odd rows' flip of chunk bit 2
            #pragma unroll
            for (int i = 0; i < 8; ++i)
                #pragma unroll
                for (int r = 0; r < 2; ++r) {
                    const int row = warp * 16 + g + 8 * r, chunk = 2 * (i & 3) + (t >> 1);
                    const float x = odd ? c[i ^ 2][2 * r] : c[i][2 * r], y = odd ? c[i ^ 2][2 * r + 1] : c[i][2 * r + 1];
                    *reinterpret_cast<float2*>(stage_f + (i >> 2) * 64 * 32 + row * 32 + ((chunk ^ swz) << 2) +
                                               2 * (t & 1)) = make_float2(x, y);
                }
            fence_async_smem();
            if (wg == 0)  // the warpgroup's staging is complete
                bar_sync<2, 128>();
            else
                bar_sync<3, 128>();
            if (leader) {
                // Boxes of 32 columns that dq has (at d = 96, the tile's last 32 are zeros
                // past its rows: not reduced; DM == D folds the tests away).
                if (DM == D || dq_col < DM) tma_reduce_add(&dq_map, stage_f, dq_col, h, qrow0, R, b);
                if (DM == D || dq_col + 32 < DM)
                    tma_reduce_add(&dq_map, stage_f + 64 * 32, dq_col + 32, h, qrow0, R, b);
                bulk_commit();
            }
        } else {
            #pragma unroll
            for (int r = 0; r < 2; ++r) {
                const int row = qs.row()[dq_row + warp * 16 + g + 8 * r];
                if (row < 0) continue;
                float* dst = p.dq + (((size_t)b * p.q_rows + row) * p.heads + h) * DM + dq_col + 2 * t;
                #pragma unroll
                for (int i = 0; i < 8; ++i)
                    if (DM == D || dq_col + i * 8 < DM) red_add2(dst + i * 8, c[i][2 * r], c[i][2 * r + 1]);
            }
        }
        reduced = box;
        wg_wait<0>();  // dK is done with the stage's Q and with da
        fence_acc(dv);
        fence_acc(dk);
    }
    // The reductions must have read their staging before the block's shared memory goes;
    // their writes complete with the grid.
    if (leader) bulk_wait_read<0>();
    int krow[2];
    #pragma unroll
    for (int r = 0; r < 2; ++r) krow[r] = row_of(p, k_axis(p), kw + warp * 16 + g + 8 * r, h);
    store_dkdv(p, b, h, dk, dv, krow, 0, t);
}

// One block per SM: two consumer warpgroups of up to 240 registers and the producer.
extern "C" __global__ void __launch_bounds__(BWD_THREADS, 1)
    attn_bwd(const Params p, const __grid_constant__ TensorPair maps, const __grid_constant__ TensorMap dq_map) {
    extern __shared__ __align__(1024) u16 smem_wb[];
    // The swizzled operands need a 1024-byte aligned base. Dynamic shared memory starts
    // there on sm_90 (0x400, after the 1 KB the system reserves), and the host requests no
    // slack to round up into: checked.
    if (threadIdx.x == 0 && ((u32)__cvta_generic_to_shared(smem_wb) & 1023)) __trap();
    const BwdSmem sm = bwd_smem(smem_wb);
    const Coords bc = block_coords(p, false);  // causal: the first key tiles are the heaviest
    const int klimit = key_limit(p, bc.b);
    // A block whose keys visit no query tile adds nothing to dQ, and zeros to dK, dV where
    // the launch adds them: it has nothing to do. (A ring step's launch between a query
    // piece and the keys of other documents is nearly all such blocks.)
    if (bwd_adds_kv(p) && walk_is_empty(query_walk(p, bc.tile, bc.b, klimit))) return;
    if (threadIdx.x == 0)
        for (int st = 0; st < BWD_STAGES; ++st) {
            mbar_init(sm.full(st), WG_PRODUCERS);
            mbar_init(sm.empty(st), WB_CONSUMERS);
        }
    __syncthreads();  // the barriers are ready
    if (threadIdx.x >= WB_CONSUMERS) {
        setmaxnreg_dec<WB_PRODUCER_REGS>();
        bwd_producer(p, sm, maps, bc.tile, bc.h, bc.b, klimit);
    } else {
        setmaxnreg_inc<WB_CONSUMER_REGS>();
        bwd_consumer(p, sm, dq_map, bc.tile, bc.h, bc.b, klimit);
    }
}
#endif  // OWN_BACKWARD
