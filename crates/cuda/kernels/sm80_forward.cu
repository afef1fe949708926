// The forward of the mma.sync family (any sm_80+ device; flash-attention 2's structure).
// Block layout: FBM = 128 query rows, 4 warps of two m16 row tiles (WM) up to d = 128, so
// every K / V fragment read from shared memory feeds two tensor-core products. (8 warps of
// one row tile each, with Q in registers and no spills, measured 20% slower at d = 128 on
// H100: twice the shared-memory traffic per flop.) Above d = 128 a warp's O of two tiles
// would not fit its registers (2 x D / 2 = 256 at d = 256), so there 8 warps hold one tile
// each (WM and the threads come from the family table: Family::forward_warp_tiles).
// Q fragments live in registers for the whole key loop where they fit (d = 64); at
// d = 128, O and S already take 192 registers and Q is re-read from shared memory per tile.
#define QREGS (D == 64)
// Fragment prefetch distance: ldmatrix results are requested PF fragments before the mma
// that consumes them, so the shared-memory latency hides behind tensor-core work. (2 at
// d = 128, where O and S take 192 registers; at d = 96, 192, 256, 4 spills less than 2 or
// as little: ptxas, sm_90.)
#define PF (D == 128 ? 2 : 4)
#define NKF ((D / 32) * (BN / 8))   // K fragments per tile (x4: 8 keys x 32 dims)
#define NVF ((BN / 16) * (DV / 16))  // V fragments per tile (x4.trans: 16 keys x 16 dims)
static_assert(FBM == FWD_THREADS / 32 * WM * 16, "a block's warps cover its query tile");
static_assert(FBN == BN, "the mma forward's key tiles are plan tiles");
// Shared memory: the Q tile, then FWD_STAGES = 2 stages of K (BN x D) and V (BN x DV) (the
// loop alternates them by tile parity), as the host sizes it.
static_assert(FWD_STAGES == 2, "K/V tiles are double-buffered");
#define KV_STAGE (BN * (D + DV))  // u16 elements of one stage
static_assert((FBM * D + FWD_STAGES * KV_STAGE) * 2 == FWD_SMEM_BYTES, "forward shared memory differs from the host's");

// One block: FBM query rows (launch indices) of one (batch, head), visiting only the key
// tiles of its plan row, online softmax in the log2 domain. K/V tiles are double-buffered:
// tile j+1 is fetched (cp.async) while tile j is computed, one barrier per tile.
extern "C" __global__ void __launch_bounds__(FWD_THREADS) attn_fwd(const Params p) {
    extern __shared__ __align__(128) u16 smem[];
    u16* sQ = smem;
    u16* sKV = sQ + FBM * D;  // stage s: K at sKV + s * KV_STAGE, V right after it
    // Heaviest tiles first: under a causal mask the last query tiles visit the most keys.
    const Coords bc = block_coords(p, true);
    const int qt = bc.tile, h = bc.h, b = bc.b;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int q0 = qt * FBM, wq0 = q0 + warp * WM * 16;  // first index of the block / warp
    // The warp's indices inside the launch (at least one: a warp wholly past it stores
    // nothing). Indices past the launch have no row and are never stored, so they must not
    // keep a tile from being full: counted, they would put the last block of a compact
    // launch, straddling the next (absent) segment, under the per-element mask on every key
    // tile.
    const int wrows = max(1, min(WM * 16, p.nq - wq0));
    const int klimit = key_limit(p, b);
    const int prow = plan_row(p, b, qt), kbeg = p.plan_ptr[prow], kend = plan_end(p, prow, klimit);

    float o[WM][DV / 8][4];
    #pragma unroll
    for (int mt = 0; mt < WM; ++mt)
        #pragma unroll
        for (int i = 0; i < DV / 8; ++i) o[mt][i][0] = o[mt][i][1] = o[mt][i][2] = o[mt][i][3] = 0.f;
    float m[WM][2], l[WM][2];
    #pragma unroll
    for (int mt = 0; mt < WM; ++mt) m[mt][0] = m[mt][1] = NEG_INF, l[mt][0] = l[mt][1] = 0.f;
#if QREGS
    u32 qf[WM][D / 16][4];
#endif

    load_tile<FBM, FWD_THREADS>(sQ, p.q, p, q_axis(p), b, h, q0);
    if (kbeg < kend) {
        load_tile<BN, FWD_THREADS>(sKV, p.k, p, k_axis(p), b, h, p.plan_idx[kbeg] * BN);
        load_tile<BN, FWD_THREADS, false, DV>(sKV + BN * D, p.v, p, k_axis(p), b, h, p.plan_idx[kbeg] * BN);
    }
    cp_commit();

    for (int it = kbeg; it < kend; ++it) {
        const int k0 = p.plan_idx[it] * BN;
        const u16* sK = sKV + ((it - kbeg) & 1) * KV_STAGE;
        const u16* sV = sK + BN * D;
        cp_wait<0>();     // this thread's copies of tile `it` (and Q) have landed
        __syncthreads();  // everyone's have, and every warp is done with tile it - 1
        if (it + 1 < kend) {  // into the stage tile it - 1 used
            u16* nK = sKV + ((it + 1 - kbeg) & 1) * KV_STAGE;
            load_tile<BN, FWD_THREADS>(nK, p.k, p, k_axis(p), b, h, p.plan_idx[it + 1] * BN);
            load_tile<BN, FWD_THREADS, false, DV>(nK + BN * D, p.v, p, k_axis(p), b, h, p.plan_idx[it + 1] * BN);
        }
        cp_commit();
#if QREGS
        if (it == kbeg)
            #pragma unroll
            for (int mt = 0; mt < WM; ++mt)
                #pragma unroll
                for (int kk = 0; kk < D / 16; ++kk) frag_a(qf[mt][kk], sQ, (warp * WM + mt) * 16, kk, lane);
#endif

        // S = Q K^T. Fragment f covers keys 8*(f mod BN/8).., dims 32*(f div BN/8)..
        float s[WM][NKB][4];
        #pragma unroll
        for (int mt = 0; mt < WM; ++mt)
            #pragma unroll
            for (int nb = 0; nb < NKB; ++nb) s[mt][nb][0] = s[mt][nb][1] = s[mt][nb][2] = s[mt][nb][3] = 0.f;
        {
            u32 kf[NKF][4];
            #pragma unroll
            for (int f = 0; f < PF; ++f) frag_b_rows(kf[f], sK, f % NKB, (f / NKB) * 2, lane);
#if !QREGS
            u32 qa[D / 32][WM][2][4];
            #pragma unroll
            for (int mt = 0; mt < WM; ++mt) {
                frag_a(qa[0][mt][0], sQ, (warp * WM + mt) * 16, 0, lane);
                frag_a(qa[0][mt][1], sQ, (warp * WM + mt) * 16, 1, lane);
            }
#endif
            #pragma unroll
            for (int f = 0; f < NKF; ++f) {
                const int nb = f % NKB, k2 = f / NKB;
                if (f + PF < NKF) frag_b_rows(kf[f + PF], sK, (f + PF) % NKB, ((f + PF) / NKB) * 2, lane);
#if QREGS
                #pragma unroll
                for (int mt = 0; mt < WM; ++mt) {
                    mma(s[mt][nb], qf[mt][2 * k2], kf[f][0], kf[f][1]);
                    mma(s[mt][nb], qf[mt][2 * k2 + 1], kf[f][2], kf[f][3]);
                }
#else
                if (nb == 0 && k2 + 1 < D / 32)  // the next 32 dims of Q, one slice ahead
                    #pragma unroll
                    for (int mt = 0; mt < WM; ++mt) {
                        frag_a(qa[k2 + 1][mt][0], sQ, (warp * WM + mt) * 16, 2 * k2 + 2, lane);
                        frag_a(qa[k2 + 1][mt][1], sQ, (warp * WM + mt) * 16, 2 * k2 + 3, lane);
                    }
                #pragma unroll
                for (int mt = 0; mt < WM; ++mt) {
                    mma(s[mt][nb], qa[k2][mt][0], kf[f][0], kf[f][1]);
                    mma(s[mt][nb], qa[k2][mt][1], kf[f][2], kf[f][3]);
                }
#endif
            }
        }

        // Mask, only where this warp's rows x the tile are not provably all visible.
        const bool full = (plan_marked(p, it) && marked_tile_full(p, b, wq0, wrows, k0, klimit)) ||
                          tile_full(p, b, h, wq0, wrows, k0, klimit);
        mask_scores<WM>(p, b, h, mask_kind(p, full), klimit, s, wq0 + g, k0, t);
        float alpha[WM][2];
        if (softmax_step<WM>(p, s, m, l, alpha)) rescale<WM>(o, alpha);

        // O += P V. Fragment f covers keys 16*(f div DV/16).., dims 16*(f mod DV/16)..
        {
            u32 pa[WM][BN / 16][4];
            pack_p<WM>(pa, s);
            u32 vf[NVF][4];
            #pragma unroll
            for (int f = 0; f < PF; ++f) frag_b_cols<DV>(vf[f], sV, f / (DV / 16), 2 * (f % (DV / 16)), lane);
            #pragma unroll
            for (int f = 0; f < NVF; ++f) {
                const int kk = f / (DV / 16), cb = 2 * (f % (DV / 16));
                if (f + PF < NVF)
                    frag_b_cols<DV>(vf[f + PF], sV, (f + PF) / (DV / 16), 2 * ((f + PF) % (DV / 16)), lane);
                #pragma unroll
                for (int mt = 0; mt < WM; ++mt) {
                    mma(o[mt][cb], pa[mt][kk], vf[f][0], vf[f][1]);
                    mma(o[mt][cb + 1], pa[mt][kk], vf[f][2], vf[f][3]);
                }
            }
        }
    }
    cp_wait<0>();
    store_forward<WM>(p, b, h, o, m, l, wq0 + g, t);
}
#undef KV_STAGE
