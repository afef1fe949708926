// The wgmma backward's block shape, shared memory, products and query walk.
//
// Flash-attention 2's backward on warpgroup MMAs: a block owns WB_KEYS key rows, 64 per
// consumer warpgroup (warp w of a warpgroup: keys 16 w..), and visits the query tiles (QB
// rows: WB_QSUB plan tiles of 64) of its key tiles' plan rows. Per visited query tile,
// each consumer warpgroup:
//   S^T = K Q^T, dP^T = V dO^T      64 keys x QB queries, A and B from shared memory;
//   mask, P^T, dS^T                 the mma.sync kernel's per-warp steps (same layout);
//   dV += P^T dO                    QB / 16 wgmma, A (P^T) from registers, B transposed;
// then, with both warpgroups' dS^T in shared memory, warpgroup w computes 64 x 64 of dQ over
// all of the block's keys, and its dK:
//   dQ = dS K                       dS^T as an M-major A operand, K as an N-major B,
//                                   staged in shared memory as f32 and added into dq by
//                                   TMA reductions (per-element red.global.add cost 30%);
//                                   d = 128: columns 64 w.. of the 64 rows; d = 64: rows
//                                   64 w.. of the 128, every column;
//   dK += dS^T Q                    QB / 16 wgmma, A (dS^T) from registers, issued after dQ
//                                   so that it runs while dQ is staged (2-5% faster), as
//                                   flash-attention 3 orders them.
// Per FLOP, the L2 traffic of a visit (the Q / dO tiles it loads, the dQ tile it adds) falls
// with both the keys and the queries it covers; it is what bounds the d = 64 backward (83.6%
// of L2 throughput with one-warpgroup 64 x 64 visits). So d = 64 visits 128 queries x 128
// keys, flash-attention 3's tile at that head dimension (forward + backward 6-9% faster
// than three one-warpgroup blocks per SM), and d = 128 64 x 128 (its registers hold no
// more). A third, producer warpgroup fills the query stages.
// Compiled where the wgmma family runs the backward (OWN_BACKWARD: d = 64, 128); the
// backward of d = 192, 256 is the mma family's kernel (Family::backward_family).
#if OWN_BACKWARD
#define WB_QSUB (QB / BM)  // plan tiles (64 query rows) per visited query tile
#define QNB (QB / 8)       // 8-query column blocks of a warpgroup's S^T
#define WB_KEYS (BN * WB_WGS)
#define WB_CONSUMERS (128 * WB_WGS)
// Registers: 128 * 24 + 256 * 240 = 64512 (setmaxnreg). The consumers need 240 to keep
// dK's operand and the dQ accumulator live while dK runs (with 232 ptxas serialises every
// wgmma at d = 128); the producer's 24 spill 88 bytes, which costs little: it waits for
// free stages most of the time (22% of the d = 64 backward's stall samples), and the
// consumers spill nothing.
#define WB_PRODUCER_REGS 24
#define WB_CONSUMER_REGS 240
static_assert(WB_CONSUMERS + WG_PRODUCERS == BWD_THREADS, "backward block threads differ from the host's");
static_assert(DV == D, "the wgmma family runs equal head dims of q and v (the host routes others to mma)");
static_assert(D * QB == 64 * 64 * WB_WGS, "warpgroup w computes a 64 x 64 block of the tile's dQ");
static_assert(WB_DS_BUFFERS == 2, "the warpgroups alternate two dS^T tiles");
static_assert(WB_DQ_BUFFERS == 1 || WB_DQ_BUFFERS == 2, "one or two dQ staging tiles");

// The block's shared memory, in order from its base (1 KB-aligned: sm_90 places dynamic
// shared memory at 0x400, and the kernel checks it, since the host requests no slack):
//   k, v     the block's WB_KEYS key rows of K and V (swz_blocks layout);
//   stages   BWD_STAGES query stages (QueryStage<QB>: Q, dO, per-row lse2, delta, ...);
//   ds       WB_DS_BUFFERS dS^T tiles, [WB_KEYS][QB], swz_blocks. The warpgroups alternate
//            two, so that a tile's dS^T stores need not wait for the other warpgroup's dQ
//            MMA of the last tile to have read its buffer: that MMA read the other one, and
//            the one this tile writes was read by the dQ MMAs of tile it - 2, which both
//            warpgroups waited for before the barrier of tile it - 1 (2-3% faster);
//   dq       WB_DQ_BUFFERS f32 [QB][D] staging tiles of the dQ reductions: d = 128 double-
//            buffers them, so that a tile's reductions have a whole tile's time to read
//            theirs; d = 64 has room for one only, which the last tile's reductions have read
//            by the time this tile's dS^T is stored;
//   barriers full and empty per stage: full(st) completes with the producer's 128 arrivals
//            (those of threads that copy a row's lse2 and delta by cp.async once the copies
//            land) plus the TMA's bytes, empty(st) with every consumer thread's;
//   visits   per stage, its query tile (-1: the walk is over) and the `vis` bits of
//            next_query_tile, written by the producer before it arrives on full, so that
//            the consumers do not walk the plan (global loads at the top of every tile)
//            themselves (1-5% faster).
struct BwdSmem {
    using Stage = QueryStage<QB>;
    static constexpr int KV = WB_KEYS * D, DS = WB_KEYS * QB, DQ = QB * D;  // elements
    // Byte offsets of the regions from the base, each region starting where the one before
    // ends, so that no two overlap: a plain store into a live mbarrier (the visits lie
    // next to the barriers) is undefined, and corrupts its phase or its pending count.
    static constexpr int V_AT = 2 * KV, STAGES_AT = V_AT + 2 * KV, DS_AT = STAGES_AT + 2 * BWD_STAGES * Stage::SIZE,
                         DQ_AT = DS_AT + 2 * WB_DS_BUFFERS * DS, BARS_AT = DQ_AT + 4 * WB_DQ_BUFFERS * DQ,
                         VISITS_AT = BARS_AT + 8 * 2 * BWD_STAGES, BYTES = VISITS_AT + 8 * BWD_STAGES;
    u16* k;
    u16* v;
    u16* stages;
    u16* ds;
    float* dq;
    u32 bars;      // shared-memory address of the first mbarrier
    int2* visits;

    __device__ Stage stage(int st) const { return Stage{stages + st * Stage::SIZE}; }
    __device__ u16* ds_tile(int it) const { return ds + (it % WB_DS_BUFFERS) * DS; }
    __device__ float* dq_tile(int it) const { return dq + (it % WB_DQ_BUFFERS) * DQ; }
    __device__ u32 full(int st) const { return bars + 8 * st; }
    __device__ u32 empty(int st) const { return bars + 8 * (BWD_STAGES + st); }
};
static_assert(BwdSmem::BYTES == BWD_SMEM_BYTES, "backward shared memory differs from the host's");
static_assert(BwdSmem::BARS_AT % 8 == 0 && BwdSmem::VISITS_AT % 8 == 0, "mbarriers and visits are 8-byte aligned");

__device__ __forceinline__ BwdSmem bwd_smem(u16* raw) {
    char* const base = reinterpret_cast<char*>(raw);
    BwdSmem s;
    s.k = raw;
    s.v = reinterpret_cast<u16*>(base + BwdSmem::V_AT);
    s.stages = reinterpret_cast<u16*>(base + BwdSmem::STAGES_AT);
    s.ds = reinterpret_cast<u16*>(base + BwdSmem::DS_AT);
    s.dq = reinterpret_cast<float*>(base + BwdSmem::DQ_AT);
    s.bars = (u32)__cvta_generic_to_shared(base + BwdSmem::BARS_AT);
    s.visits = reinterpret_cast<int2*>(base + BwdSmem::VISITS_AT);
    return s;
}

// S^T (or dP^T) = A B^T with A = 64 key rows (from `sA`, inside the block's WB_KEYS-row
// tile), B = the query tile's QB rows, both K-major over the head dimension.
__device__ __forceinline__ void issue_scores_t(float (&s)[QNB][4], const u16* sA, const u16* sB) {
    const Desc da = smem_desc(sA, 16, 1024), db = smem_desc(sB, 16, 1024);
    #pragma unroll
    for (int k = 0; k < D / 16; ++k) {
        const Desc a = desc_step(da, (k >> 2) * WB_KEYS * 64 + (k & 3) * 16);
        const Desc b = desc_step(db, (k >> 2) * QB * 64 + (k & 3) * 16);
#if QB == 64
        wgmma_ss_n64<0, 0>(s, a, b, k > 0);
#else
        wgmma_ss_n128(s, a, b, k > 0);
#endif
    }
}
// 64 x 64 of dQ = dS K over the block's keys: A = 64 query columns of dS^T stored
// [key][query] (`sS`, M-major: queries contiguous), B = 64 columns of K (`sK`, N-major), 16
// keys per step.
__device__ __forceinline__ void issue_dq(float (&c)[8][4], const u16* sS, const u16* sK) {
    const Desc da = smem_desc(sS, WB_KEYS * 128, 1024);
    const Desc db = smem_desc(sK, WB_KEYS * 128, 1024);
    #pragma unroll
    for (int k = 0; k < WB_KEYS / 16; ++k)
        wgmma_ss_n64<1, 1>(c, desc_step(da, k * 16 * 64), desc_step(db, k * 16 * 64), k > 0);
}

// The query tiles a block visits: the union of its warpgroups' key tiles' plan rows (each
// ascending), merged on the fly, in visits of WB_QSUB consecutive plan tiles. A key tile
// past the launch, or whose keys are all past the padding limit, visits nothing (its dK,
// dV are zeros).
struct QueryWalk {
    int pos[WB_WGS], end[WB_WGS];
};
__device__ __forceinline__ QueryWalk query_walk(const Params& p, int kb, int b, int klimit) {
    QueryWalk w;
    const int tiles = (p.nk + BN - 1) / BN;
    #pragma unroll
    for (int i = 0; i < WB_WGS; ++i) {
        const int kt = kb * WB_WGS + i;
        const bool live = kt < tiles && !keys_past_limit(p, kt * BN, klimit);
        w.pos[i] = live ? p.plan_ptr[plan_row(p, b, kt)] : 0;
        w.end[i] = live ? p.plan_ptr[plan_row(p, b, kt) + 1] : 0;
    }
    return w;
}
// Does the walk visit no query tile at all?
__device__ __forceinline__ bool walk_is_empty(const QueryWalk& w) {
    bool empty = true;
    #pragma unroll
    for (int i = 0; i < WB_WGS; ++i) empty = empty && w.pos[i] == w.end[i];
    return empty;
}
// The next visited query tile (QB rows; -1: none left). Bit WB_QSUB i + j of `vis`:
// warpgroup i's key tile visits plan tile j of it (its other plan tiles are masked: a
// plan row lists every tile with a visible pair); bit VIS_FULL + WB_QSUB i + j: and the
// plan marks that tile full.
#define VIS_FULL 16
static_assert(WB_QSUB * WB_WGS <= VIS_FULL, "the visit bits and their full marks fit 32 bits");
__device__ __forceinline__ int next_query_tile(const Params& p, QueryWalk& w, u32& vis) {
    int q = CUT_MAX;
    #pragma unroll
    for (int i = 0; i < WB_WGS; ++i)
        if (w.pos[i] < w.end[i]) q = min(q, p.plan_idx[w.pos[i]] / WB_QSUB);
    vis = 0;
    #pragma unroll
    for (int i = 0; i < WB_WGS; ++i)
        #pragma unroll
        for (int j = 0; j < WB_QSUB; ++j)
            if (w.pos[i] < w.end[i] && p.plan_idx[w.pos[i]] / WB_QSUB == q) {
                const int bit = WB_QSUB * i + p.plan_idx[w.pos[i]] % WB_QSUB;
                vis |= (1u | (u32)plan_marked(p, w.pos[i]) << VIS_FULL) << bit;
                ++w.pos[i];
            }
    return q == CUT_MAX ? -1 : q;
}

#endif  // OWN_BACKWARD
