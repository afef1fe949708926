// The wgmma forward's producer warpgroup: claims the block's work items and streams their
// Q and K/V tiles into the stages of FwdSmem.
//
// A tile whose rows are evenly spaced (every tile of a plain launch; the tiles of a
// compact dilated branch inside one segment, rows a dilation apart) is copied by the TMA
// unit: one thread issues FBN / KV_BOX boxes per 64 columns of K and of V, no per-row
// address work. Other tiles (a segment's end, holes at a ring chunk's edge) are gathered
// with cp.async by all 128 producer threads, which wait for their copies and meet at a named barrier before one of
// them arrives. (With all threads of a two-warpgroup block copying and one barrier per
// tile, the copies and the barrier cost 60% of the time; producers copying by cp.async
// still halved the speed at d = 128.)

// Forward work items are claimed from the call's counter p.work[0], in the order blocks of
// a grid of items would start (blocks that finish first take the next: the hardware's own
// order and balance). The last block to find no item left (p.work[1] counts them) zeroes
// both for the call's next launch, which its stream orders after this one. The counters
// are the call's, not the module's: two calls of one module on two streams would
// otherwise take items from each other and leave rows unwritten.
#define LOOKAHEAD 4  // the next item is claimed this many K/V tiles before an item's last

// Does forward item `item` visit no key tile?
__device__ __forceinline__ bool item_is_empty(const Params& p, unsigned item, unsigned tiles) {
    const Coords c = coords_of(p, item, tiles, true);
    const int prow = plan_row(p, c.b, c.tile);
    return plan_end<FBN>(p, prow, key_limit(p, c.b)) == p.plan_ptr[prow];
}
// The leader claims the block's item u into slot(u) and looks up its plan there: the key
// tiles, the key limit, and the key tiles each consumer warpgroup computes (none if it has
// no query row in the launch, as in the last tile of a launch whose rows are not a
// multiple of B::ROWS; under a causal mask, not the tiles past its last row, up to two at
// the block's diagonal). It does so LOOKAHEAD tiles before it has issued the last item's
// K/V, so that the atomic and the dependent plan loads are not between the consumers'
// items; once every consumer has read the slot's last item.
template <int WGS>
__device__ __forceinline__ void fwd_claim(const Params& p, const FwdSmem& sm, int u, unsigned tiles, unsigned items) {
    typedef FwdBlock<WGS> B;
    if (u >= 2) mbar_wait(sm.slot_free(u), ((u - 2) >> 1) & 1);
    // An item without key tiles changes nothing in a merging launch (its rows keep what they
    // hold): the leader takes the next one instead of handing it to the consumers. (Most
    // items of a compact launch over short documents are holes only; FwdBlock::COMPACT_LOADS
    // says where.)
    unsigned item = atomicAdd(&p.work[0], 1u);
    while (B::COMPACT_LOADS && p.accumulate && item < items && item_is_empty(p, item, tiles))
        item = atomicAdd(&p.work[0], 1u);
    volatile int* sl = sm.slot(u);
    sl[0] = (int)item;
    if (item >= items) return;
    const Coords c = coords_of(p, item, tiles, true);
    const int q0 = c.tile * B::ROWS, klimit = key_limit(p, c.b);
    const int prow = plan_row(p, c.b, c.tile), kbeg = p.plan_ptr[prow], n = plan_end<FBN>(p, prow, klimit) - kbeg;
    sl[1] = kbeg;
    sl[2] = n;
    sl[3] = klimit;
    for (int w = 0; w < WGS; ++w) {
        int nw = q0 + 64 * w < p.nq ? n : 0;
        if (p.causal) {
            const int qlast = min(q0 + 64 * (w + 1), p.nq) - 1;
            while (nw > 0 && keys_after(p, p.plan_idx[kbeg + nw - 1] * FBN, qlast)) --nw;
        }
        sl[4 + w] = nw;
    }
    sl[7] = p.compact ? offset_code(p, c.h) : 0;
}

// Item u's Q tile into q_tile(u): by TMA where each of its 64-row parts is evenly spaced
// (as a K/V tile; with FwdBlock::COMPACT_LOADS also where its kept rows are, holes
// following: query_tile_is_box), else gathered (with every Q tile gathered by the
// producers, per-row address work while the consumers compute, the consumers waited
// 8.6 us for each item's Q at d = 128; 0.5 us by TMA). Every producer thread arrives on
// q_full(u).
template <int WGS>
__device__ __forceinline__ void fwd_load_q(const Params& p, const FwdSmem& sm, const TensorMap& q_map, int u,
                                           const Coords& c, bool leader, int R) {
    typedef FwdBlock<WGS> B;
    const int q0 = c.tile * B::ROWS;
    int qrow[B::ROWS / 64];
    bool box = true;
    #pragma unroll
    for (int r = 0; r < B::ROWS / 64; ++r)
        box = box && (B::COMPACT_LOADS ? query_tile_is_box<64>(p, q_axis(p), q0 + 64 * r, c.h, qrow[r])
                                       : tile_is_box(p, q_axis(p), q0 + 64 * r, c.h, qrow[r]));
    if (box) {
        if (leader) {
            mbar_expect_tx(sm.q_full(u), B::ROWS * D * 2);
            #pragma unroll
            for (int r = 0; r < B::ROWS / 64; ++r) {
                const ViewRow v = view_row(qrow[r], R);
                #pragma unroll
                for (int cb = 0; cb < D / 64; ++cb)
                    tma_box(sm.q_tile(u) + cb * B::ROWS * 64 + r * 64 * 64, &q_map, cb * 64, c.h, v, 0, c.b,
                            sm.q_full(u));
            }
        }
        mbar_arrive(sm.q_full(u));
    } else {
        load_tile<B::ROWS, WG_PRODUCERS, true>(sm.q_tile(u), p.q, p, q_axis(p), c.b, c.h, q0);
        mbar_arrive_cp_async(sm.q_full(u));
    }
}

// The producer warpgroup's whole run: per item, its Q tile, then its K/V tiles into the
// stages as the consumers free them, claiming the next item LOOKAHEAD tiles before the
// last. After the last item, the slot that says "no item" ends the consumers' loop.
// The TMA boxes of one K or V tile of W columns (D for K, DV for V) into `dst`, a stage's
// part, on mbarrier `bar`: W / 64 column blocks of FBN / KV_BOX boxes of KV_BOX rows.
template <int W>
__device__ __forceinline__ void tile_boxes(u16* dst, const TensorMap& map, int kvh, const ViewRow& v, int b, u32 bar) {
    #pragma unroll
    for (int cb = 0; cb < W / 64; ++cb)
        #pragma unroll
        for (int r = 0; r < FBN / KV_BOX; ++r)
            tma_box(dst + cb * FBN * 64 + r * KV_BOX * 64, &map, cb * 64, kvh, v, KV_BOX * r, b, bar);
}

template <int WGS>
__device__ __forceinline__ void fwd_producer(const Params& p, const FwdSmem& sm, const TensorPair& maps,
                                             const TensorMap& q_map, unsigned tiles, unsigned items) {
    typedef FwdBlock<WGS> B;
    const bool leader = threadIdx.x == B::CONSUMERS;
    const Axis ka = k_axis(p);
    const int R = p.compact ? p.dil_rate : 1;
    if (leader) fwd_claim<WGS>(p, sm, 0, tiles, items);
    for (int u = 0, j0 = 0;; ++u) {
        bar_sync<1, WG_PRODUCERS>();  // slot(u) is written
        // Q buffer u & 1 is free: every consumer is past item u - 2's last S (or holds its Q
        // in registers), so every consumer has waited for that item's phase of q_full(u).
        // Only then may this item's arrivals, the end-of-run slot's included, complete the
        // buffer's next phase: a consumer waits by phase parity, and two phases completed
        // before it waits look like none (it would wait forever). Without this wait the
        // end-of-run slot completed its phase at once: with few key tiles per item (a sparse
        // mask) and Q in registers (released as soon as loaded), a consumer still finishing
        // item u - 1 missed item u's phase and hung.
        if (u >= 2) mbar_wait(sm.q_empty(u), ((u - 2) >> 1) & 1);
        if (leader) mbar_arrive(sm.q_full(u));  // for the consumers too
        const unsigned item = (unsigned)sm.slot(u)[0];
        if (item >= items) {
            mbar_arrive(sm.q_full(u));
            if (leader && atomicAdd(&p.work[1], 1u) == gridDim.x - 1) {
                p.work[0] = 0;
                p.work[1] = 0;
            }
            break;
        }
        const Coords c = coords_of(p, item, tiles, true);
        const int kbeg = sm.slot(u)[1], n = sm.slot(u)[2], kvh = c.h / p.kv_group;  // the item's K/V head
        // One Q buffer (d = 256): item u - 1's S are all done before its Q is overwritten.
        if (FWD_Q_BUFS == 1 && u >= 1 && n > 0) mbar_wait(sm.q_empty(u - 1), ((u - 1) >> 1) & 1);
        if (n > 0)
            fwd_load_q<WGS>(p, sm, q_map, u, c, leader, R);
        else
            mbar_arrive(sm.q_full(u));
        const int claim_at = j0 + max(n - LOOKAHEAD, 0);
        const int qseg = p.compact ? compact_item_seg(p, c.tile * B::ROWS, B::ROWS) : -1;
        if (leader && n == 0) fwd_claim<WGS>(p, sm, u + 1, tiles, items);
        // Every K/V tile of a plain launch is a box, issued by the leader: the other
        // producer warps wait at the next item's barrier rather than poll the stages'
        // mbarriers with it. Its own warp stays with it: bar.sync is warp-aligned.
        if (!p.compact && threadIdx.x - B::CONSUMERS >= 32) {
            j0 += n;
            continue;
        }
        for (int j = j0; j < j0 + n; ++j) {
            if (leader && j == claim_at) fwd_claim<WGS>(p, sm, u + 1, tiles, items);
            // Its previous tile's K (FWD_SPLIT_KV) or whole stage is free.
            if (j >= FWD_STAGES) mbar_wait(FWD_SPLIT_KV ? sm.k_empty(j) : sm.empty(j), (j / FWD_STAGES - 1) & 1);
            const int k0 = p.plan_idx[kbeg + j - j0] * FBN;
            int row0 = k0, hint;
            bool box = true;
            if (p.compact) {  // the head's offset code and the key limit from the item's slot
                const TileEnds e = compact_tile_ends<FBN>(p, ka, k0, sm.slot(u)[7]);
                row0 = e.row0;
                box = ends_are_box<FBN>(p, ka, e);
                const int kseg = compact_key_seg(p, e, sm.slot(u)[3]);
                hint = kseg < 0 ? -1 : 2 * kseg + (kseg == qseg);  // compact_hint_full
            } else {
                hint = plan_marked(p, kbeg + j - j0) ? 1 : -1;
            }
            if (box) {
                if (!leader) continue;
                sm.stage_key(j) = k0;
                sm.stage_hint(j) = hint;
                const ViewRow v = view_row(row0, R);
                if constexpr (FWD_SPLIT_KV) {  // K's boxes, then V's
                    mbar_expect_bytes(sm.full(j), FBN * D * 2);
                    tile_boxes<D>(sm.stage(j), maps.a, kvh, v, c.b, sm.full(j));
                    if (j >= FWD_STAGES) mbar_wait(sm.empty(j), (j / FWD_STAGES - 1) & 1);  // V's part is free
                    mbar_expect_bytes(sm.v_full(j), FBN * DV * 2);
                    tile_boxes<DV>(sm.stage(j) + FBN * D, maps.b, kvh, v, c.b, sm.v_full(j));
                } else {
                    mbar_expect_bytes(sm.full(j), 2 * FBN * D * 2);
                    #pragma unroll
                    for (int cb = 0; cb < D / 64; ++cb)
                        #pragma unroll
                        for (int r = 0; r < FBN / KV_BOX; ++r) {
                            u16* dst = sm.stage(j) + cb * FBN * 64 + r * KV_BOX * 64;
                            tma_box(dst, &maps.a, cb * 64, kvh, v, KV_BOX * r, c.b, sm.full(j));
                            tma_box(dst + FBN * D, &maps.b, cb * 64, kvh, v, KV_BOX * r, c.b, sm.full(j));
                        }
                }
            } else {
                if (FWD_SPLIT_KV && j >= FWD_STAGES) mbar_wait(sm.empty(j), (j / FWD_STAGES - 1) & 1);  // V's part too
                load_tile<FBN, WG_PRODUCERS, true>(sm.stage(j), p.k, p, ka, c.b, c.h, k0);
                load_tile<FBN, WG_PRODUCERS, true, DV>(sm.stage(j) + FBN * D, p.v, p, ka, c.b, c.h, k0);
                cp_wait<0>();
                fence_async_smem();
                bar_sync<1, WG_PRODUCERS>();  // producers only
                if (leader) {
                    sm.stage_key(j) = k0;
                    sm.stage_hint(j) = hint;
                    mbar_arrive(sm.full(j));
                    if (FWD_SPLIT_KV) mbar_arrive(sm.v_full(j));
                }
            }
        }
        j0 += n;
    }
    cp_wait<0>();
}
