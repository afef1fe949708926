// The wgmma forward: its consumer warpgroups and the two kernels (layout and producer in
// sm90_forward_layout.cuh and sm90_forward_producer.cuh).
//
// Per tile j a consumer overlaps the two MMAs with the softmax (intra-warpgroup pipelining):
//   issue S(j+1) = Q K(j+1)^T;  issue O += P(j) V(j);
//   wait for S(j+1) -> mask + softmax -> P(j+1)   (tensor cores busy with P(j) V(j));
//   wait for P(j) V(j) -> release tile j's stage -> rescale O by the new maxima.
// There is no block-wide barrier after the start, so the consumer warpgroups drift freely
// and their MMAs and softmax interleave on the SM.

// P fragments are handed from the softmax to the next O += P V through a move in asm: the
// wgmma reading P(j) may still run while P(j+1) is computed, so the two must not share a
// register, and the compiler cannot merge values across an asm statement.
template <int N>
__device__ __forceinline__ void hand_over(u32 (&dst)[N][4], const u32 (&src)[N][4]) {
    #pragma unroll
    for (int k = 0; k < N; ++k)
        #pragma unroll
        for (int i = 0; i < 4; ++i) asm volatile("mov.b32 %0, %1;" : "=r"(dst[k][i]) : "r"(src[k][i]));
}

// A consumer warpgroup's whole run: per item, the key tiles of its plan (those this
// warpgroup computes: the rest of the item's stages are waited for and released), then
// the item's rows of the output.
template <int WGS>
__device__ __forceinline__ void fwd_consumer(const Params& p, const FwdSmem& sm, unsigned tiles, unsigned items) {
    typedef FwdBlock<WGS> B;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int wg = warp_uniform(warp >> 2);

    // P(j) is read by the wgmma of P(j) V(j) until its wait. Where the registers hold a
    // second set (64-key tiles, d = 128), P(j+1) is packed into pn right after its softmax,
    // while P(j) V(j) runs, and moved into pa after the wait; packing it after the wait was
    // 2-5% slower there. 128-key tiles (d = 64) leave
    // no room for it (S 64, P 32, O 32 of the consumers' 160 registers; ptxas serialises
    // every wgmma with a second set): P(j+1) stays in S's f32 registers until the wait and
    // is packed into pa then (flash-attention 3's order). At d = 256 O's 128 registers leave
    // no room for it either; at d = 192 (O 96) an 80-key tile's second set (20) fits.
    constexpr bool EARLY_PACK = FBN < 2 * BN && D <= 192;
    float o[1][DV / 8][4], s[1][FNKB][4], m[1][2], l[1][2], alpha[1][2];
    u32 pa[1][FBN / 16][4], pn[1][FBN / 16][4];  // pn: EARLY_PACK only
    u32 qf[B::Q_SMEM ? 1 : D / 16][4];
    // Tile j's K/V are in shared memory and visible to the tensor cores
    // (the copies were made through the generic proxy, wgmma reads through the async one).
    auto acquire = [&](int j) {
        mbar_wait(sm.full(j), ((unsigned)j / FWD_STAGES) & 1);
        fence_async_smem();
    };
    // FWD_SPLIT_KV: tile j's V has landed; K(j) is released once its S, key and hint
    // have been read (release_k), V(j) by empty(j).
    auto acquire_v = [&](int j) {
        if constexpr (FWD_SPLIT_KV) {
            mbar_wait(sm.v_full(j), ((unsigned)j / FWD_STAGES) & 1);
            fence_async_smem();
        }
    };
    auto release_k = [&](int j) {
        if constexpr (FWD_SPLIT_KV) mbar_arrive(sm.k_empty(j));
    };
    for (int u = 0, j0 = 0;; ++u) {
        mbar_wait(sm.q_full(u), (u >> 1) & 1);
        const volatile int* sl = sm.slot(u);
        const unsigned item = (unsigned)sl[0];
        if (item >= items) break;
        const Coords c = coords_of(p, item, tiles, true);
        const int h = c.h, b = c.b, q0 = c.tile * B::ROWS, wq0 = q0 + warp * 16;
        const int n = sl[2], klimit = sl[3];
        // The key tiles this warpgroup computes (see the producer); the stages of the others
        // are waited for and released, not computed: the other warpgroups get the tensor
        // cores.
        const int nw = sl[4 + wg];
        mbar_arrive(sm.slot_free(u));
        m[0][0] = m[0][1] = NEG_INF;
        l[0][0] = l[0][1] = 0.f;
        #pragma unroll
        for (int i = 0; i < DV / 8; ++i) o[0][i][0] = o[0][i][1] = o[0][i][2] = o[0][i][3] = 0.f;
        // A of S: this warpgroup's rows of the Q tile (Q_SMEM) or this warp's Q fragments.
        const u16* qs = sm.q_tile(u) + wg * 64 * 64;
        // tile_full, with the key side the producer took once per tile (stage_hint): a
        // compact launch's key segment and whether the item's queries all lie in it, or a
        // plain launch's plan mark. (The warp's query segments, where needed, are taken per
        // tile rather than once per item: two registers live across the loop cost the dense
        // launches 1-4%.)
        auto full_tile = [&](int j, int k0) {
            const int hint = sm.stage_hint(j);
            return p.compact ? compact_hint_full(p, hint, wq0, 16, k0 + FBN - 1)
                             : (hint > 0 && marked_tile_full<FBN>(p, b, wq0, 16, k0, klimit)) ||
                                   tile_full<FBN>(p, b, h, wq0, 16, k0, klimit);
        };
        // Mask + softmax of the complete S of tile j (of the block's run), in place, and
        // alpha; did a row maximum grow?
        auto softmax_tile = [&](int j) {
            const int k0 = sm.stage_key(j);
            const int kind = mask_kind<B::COMPACT_MASK>(p, full_tile(j, k0));
            mask_scores<1, FNKB, B::COMPACT_MASK>(p, b, h, kind, klimit, s, wq0 + g, k0, t);
            return softmax_step<1, FNKB>(p, s, m, l, alpha);
        };
        auto issue_s = [&](int j) {  // S = Q K(j)^T, committed as one group
            fence_acc(s[0]);
            wg_fence();
            if constexpr (B::Q_SMEM)
                issue_scores<B::ROWS>(s[0], qs, sm.stage(j));
            else
                issue_scores(s[0], qf, sm.stage(j));
            wg_commit();
        };
        auto issue_o = [&](int j) {  // O += P(j) V(j), committed as one group
            acquire_v(j);
            fence_acc(o[0]);
            wg_fence();
            issue_pv<FBN, DV>(o[0], pa[0], sm.stage(j) + FBN * D);
            wg_commit();
        };

        const int jw = j0 + nw, jn = j0 + n;  // this warpgroup's computed tiles end at jw, the item's at jn
        if (nw > 0) {
            acquire(j0);  // its proxy fence also covers Q (copied by cp.async, read by wgmma)
            if constexpr (!B::Q_SMEM)
                #pragma unroll
                for (int k = 0; k < D / 16; ++k)
                    ldsm4(qf[k], sm.q_tile(u) + swz_blocks<B::ROWS>(warp * 16 + (lane & 15), k * 2 + (lane >> 4)));
            issue_s(j0);
            wg_wait<0>();
            fence_acc(s[0]);
            softmax_tile(j0);
            release_k(j0);
            pack_p<1, FNKB>(pa, s);
        }
        // Q in registers: the tile is free once loaded.
        if (!B::Q_SMEM || nw == 0) mbar_arrive(sm.q_empty(u));
        for (int j = j0; j + 1 < jw; ++j) {
            acquire(j + 1);
            issue_s(j + 1);
            issue_o(j);
            wg_wait<1>();  // S(j+1) is done; P(j) V(j) may still run
            fence_acc(s[0]);
            const bool grew = softmax_tile(j + 1);
            release_k(j + 1);
            if constexpr (EARLY_PACK) pack_p<1, FNKB>(pn, s);
            wg_wait<0>();
            fence_acc(o[0]);
            mbar_arrive(sm.empty(j));
            if (grew) rescale<1>(o, alpha);
            if constexpr (EARLY_PACK) {
                hand_over(pa[0], pn[0]);
            } else {
                fence_acc(s[0]);  // no packing into pa before the wait: P(j) V(j) reads it
                pack_p<1, FNKB>(pa, s);
            }
        }
        if (B::Q_SMEM && nw > 0) mbar_arrive(sm.q_empty(u));  // every S of the item is done
        if (nw > 0) {
            issue_o(jw - 1);
            wg_wait<0>();
            fence_acc(o[0]);
            mbar_arrive(sm.empty(jw - 1));
        }
        for (int j = jw; j < jn; ++j) {  // the stages this warpgroup skips
            acquire(j);
            release_k(j);
            acquire_v(j);
            mbar_arrive(sm.empty(j));
        }
        // Rows that saw no key merge as the identity: in an accumulating launch they keep
        // what they hold, so only a launch that writes its rows stores them.
        if (q0 + 64 * wg < p.nq && (nw > 0 || !p.accumulate)) store_forward<1>(p, b, h, o, m, l, wq0 + g, t);
        j0 += n;
    }
}

template <int WGS>
__device__ __forceinline__ void attn_fwd_body(const Params& p, const TensorPair& maps, const TensorMap& q_map) {
    typedef FwdBlock<WGS> B;
    extern __shared__ __align__(1024) u16 smem_wg[];
    const FwdSmem sm = fwd_smem(smem_wg);
    const unsigned tiles = (p.nq + B::ROWS - 1) / B::ROWS, items = tiles * p.head_count * p.batch;
    if (threadIdx.x == 0) {
        for (int s = 0; s < FWD_STAGES; ++s) {
            mbar_init(sm.full(s), 1);
            mbar_init(sm.empty(s), B::CONSUMERS);
            if (FWD_SPLIT_KV) {
                mbar_init(sm.v_full(s), 1);
                mbar_init(sm.k_empty(s), B::CONSUMERS);
            }
        }
        for (int u = 0; u < 2; ++u) {
            mbar_init(sm.q_full(u), WG_PRODUCERS + 1);  // each producer's Q copies, and the slot
            mbar_init(sm.q_empty(u), B::CONSUMERS);
            mbar_init(sm.slot_free(u), B::CONSUMERS);
        }
    }
    __syncthreads();
    if (threadIdx.x >= B::CONSUMERS) {
        setmaxnreg_dec<B::PRODUCER_REGS>();
        fwd_producer<WGS>(p, sm, maps, q_map, tiles, items);
    } else {
        setmaxnreg_inc<B::CONSUMER_REGS>();
        fwd_consumer<WGS>(p, sm, tiles, items);
    }
}
#if FWD_Q_ROWS == FBM  // up to d = 128 (sm90_forward_layout.cuh)
extern "C" __global__ void __launch_bounds__(FwdBlock<FWD_WGS>::THREADS, 1)
    attn_fwd(const Params p, const __grid_constant__ TensorPair maps, const __grid_constant__ TensorMap q_map) {
    attn_fwd_body<FWD_WGS>(p, maps, q_map);
}
#endif
extern "C" __global__ void __launch_bounds__(FwdBlock<FBM_NARROW / 64>::THREADS, 1)
    attn_fwd_128(const Params p, const __grid_constant__ TensorPair maps, const __grid_constant__ TensorMap q_map) {
    attn_fwd_body<FBM_NARROW / 64>(p, maps, q_map);
}
