// The wgmma forward's block shape and shared memory, named.
//
// One block per multiprocessor, working through items of FwdBlock::ROWS query rows of one
// (batch, head) (the work-item counter is in sm90_forward_producer.cuh; the host's grid is
// Family::forward_grid). Warp specialised (flash-attention 3's structure): the first WGS
// warpgroups consume (warpgroup wg owns rows 64 wg.., warp w rows 16 w..); the last one,
// the producer warpgroup, alone streams Q tiles (two buffers) and K/V tiles (FWD_STAGES
// shared-memory stages, counted over the block's whole run), so that the next item's Q
// and first K/V tiles load while the consumers finish the last one (a block start - Q and
// the first K/V tile from memory, 4 us at d = 128, and the next block's launch, 1.4 us -
// cost 5-7% of an n = 4096 forward).
//
// Two instantiations, by consumer warpgroups WGS (64 rows each, plus the producer):
// FBM / 64 (`attn_fwd`) and FBM_NARROW / 64 (`attn_fwd_128`, 128-row tiles for compact
// launches whose segments are not a multiple of FBM rows: Family::forward_q_tile_for).
// Above d = 128 only `attn_fwd_128` is compiled (FWD_Q_ROWS = FBM_NARROW): O takes D / 2
// registers per consumer thread, 128 at d = 256, and Q stays in shared memory.
// Separate kernels rather than a run-time tile: one measured 6% slower on dense rows, and
// a block of 128 rows is 384 threads, not 512 with one idle warpgroup, so its consumers
// get the registers to hold Q.

// v's head dim DV may differ from q's and k's D (MLA's 192 / 128): V tiles, O and the
// output are DV wide. Such pairs run above d = 128 only, where K and V of a stage are
// handed over apart (FWD_SPLIT_KV), and V's tiles are TMA boxes of 64 columns.
static_assert(DV == D || (FWD_SPLIT_KV && DV % 64 == 0), "v's head dim apart from q's needs split stages and 64-column blocks");

#define FWD_WGS (FBM / 64)
#define FWD_HELD (DV / 2 + 3 * FBN / 4)  // a two-warpgroup consumer's O, S and P registers (FwdBlock)
template <int WGS>
struct FwdBlock {
    static constexpr int ROWS = 64 * WGS, CONSUMERS = 128 * WGS, THREADS = CONSUMERS + WG_PRODUCERS;
    static_assert(WGS <= 3, "an item's slot (8 ints) holds 4 + WGS + 1");
    // Registers move from the producer warpgroup (which needs few) to the consumers: the
    // block's threads would get 65536 / THREADS each (128 for 512), below what a consumer
    // holds (O, S, P; Q too where it is in registers) without spilling. Three consumer
    // warpgroups: 128 * 56 + 384 * 152 = 65536 over 64-key tiles (d = 128), 128 * 32 +
    // 384 * 160 = 65536 over 128-key tiles (d = 64: S 64, P 32, O 32; with 152, ptxas
    // serialises every wgmma); two: 128 * 120 + 256 * 192 = 64512. ptxas allocates each side
    // of a setmaxnreg to its own count. (The producer spills: about 100 bytes at d = 128
    // around the item claim and the cp.async gather of a Q tile's rows, once per item; more
    // with 32 registers, in the cp.async gather of tiles that are not TMA boxes.)
    // Above d = 128 (two warpgroups) a consumer holds O (DV / 2 registers), S (FBN / 2) and
    // P (FBN / 4): FWD_HELD. Up to 180 of those (d = 192 over 80-key tiles: 156; MLA's 192 /
    // 128 over 128 keys: 160; d = 256 over 64 keys: 176), 128 * 72 + 256 * 216 = 64512:
    // the consumers spill nothing at 216, every spill is the producer's (item set-up,
    // cp.async gather), and a producer of 72 spills less than one of 40 (d = 256 over 64
    // keys: 200 B against 344 B; d = 192: 8 B against 104 B), which made the dense forward
    // 7-8% faster at d = 192 and 2-5% at d = 256. d = 256 over 80-key tiles holds 188: its
    // consumers spill at 216 (38 local loads and stores) and 224 (5), not at 232, so it
    // takes 128 * 40 + 256 * 232.
    static constexpr int PRODUCER_REGS = WGS == 3 ? (FBN == 128 ? 32 : 56) : (D > 128 ? (FWD_HELD > 180 ? 40 : 72) : 120),
                         CONSUMER_REGS = WGS == 3 ? (FBN == 128 ? 160 : 152) : (D > 128 ? (FWD_HELD > 180 ? 232 : 216) : 192);
    // S = Q K^T reads Q from shared memory with three consumer warpgroups (Q in registers,
    // 16 or 32 per thread, does not fit next to O, S and P: at d = 64 ptxas serialises every
    // wgmma even with 160) and from registers with two (192 registers). With 64-key tiles,
    // d = 64 held Q in registers, 5-7% faster than from shared memory; 128-key tiles gained
    // 14-17% more. Above d = 128 Q (D / 4 registers) does not fit next to O. The Q tile is
    // in the wgmma operand layout either way.
    static constexpr bool Q_SMEM = WGS == 3 || D > 128;
    // The kernel that runs the compact launches whose segments keep a number of rows that
    // is not a multiple of 192 (LongNet's; Family::forward_q_tile_for) compiles their
    // interval mask (MASK_COMPACT) and, up to d = 128, the producer's paths for them: the
    // empty-item skip of fwd_claim and the query boxes of query_tile_is_box. Elsewhere the
    // mask's registers would make the 192-row kernel's consumers spill, and those paths
    // the producer's few registers (twice the bytes at d = 256, on the path of every K/V
    // tile); the generic mask and gathered query tiles are exact there too.
    static constexpr bool COMPACT_MASK = WGS == FBM_NARROW / 64, COMPACT_LOADS = COMPACT_MASK && D <= 128;
};
static_assert(FwdBlock<FWD_WGS>::THREADS == FWD_THREADS, "attn_fwd block threads differ from the host's");
static_assert(FwdBlock<FBM_NARROW / 64>::THREADS == FWD_THREADS_NARROW, "attn_fwd_128 threads differ from the host's");

// The block's shared memory, in order from a 1 KB-aligned base (the swizzle of the wgmma
// operands is a function of address bits; the host adds 1 KB of slack to round up into):
//   q        FWD_Q_BUFS Q tiles of FWD_Q_ROWS rows (item u uses q_tile(u)), wgmma operand
//            layout;
//   kv       FWD_STAGES stages of K then V, FBN rows each (tile j of the block's run uses
//            stage(j));
//   barriers 8-byte mbarriers: full and empty per stage (FWD_SPLIT_KV: for K, then
//            v_full and k_empty for V and K), then q_full, q_empty, slot_free per item
//            slot;
//   slots    per Q tile, the item's 8 ints: number, first plan entry, key tiles, key
//            limit, each consumer warpgroup's key tiles (WGS <= 3), the head's dilation
//            offset_code (written by the producer's leader);
//   keys     per stage, its tile's first key (launch index), then its stage_hint.
// mbarriers: full(j) completes when tile j has landed (one arrival plus the TMA's bytes),
// empty(j) when every consumer thread is done with it. With FWD_SPLIT_KV (two stages,
// above d = 128: Family::forward_split_kv) full(j) counts K alone and v_full(j) V, and
// k_empty(j) completes once every consumer has S(j) and tile j's key and hint, so that
// K(j + 2) loads while P(j) V(j) runs; empty(j) then frees V. q_full(u) when item u's slot is
// written and its Q tile has landed, q_empty(u) when every consumer is past the item's
// last S, slot_free(u) when every consumer has read the slot.
struct FwdSmem {
    static constexpr int Q_TILE = FWD_Q_ROWS * D, STAGE = FBN * (D + DV);  // u16 elements: K, then V
    // mbarriers: 2 per stage (4 with FWD_SPLIT_KV), 3 per item slot.
    static constexpr int BARRIER_BYTES = 8 * ((FWD_SPLIT_KV ? 4 : 2) * FWD_STAGES + 3 * 2), SLOT_INTS = 8;
    static constexpr int BYTES = (FWD_Q_BUFS * Q_TILE + FWD_STAGES * STAGE) * 2 + BARRIER_BYTES +
                                 2 * SLOT_INTS * 4 + 2 * FWD_STAGES * 4;
    u16* q;
    u16* kv;
    u32 bars;             // shared-memory address of the first mbarrier
    volatile int* slots;  // two item slots, then the stages' keys and segments

    __device__ u16* q_tile(int u) const { return q + (FWD_Q_BUFS == 2 ? u & 1 : 0) * Q_TILE; }
    __device__ u16* stage(int j) const { return kv + ((unsigned)j % FWD_STAGES) * STAGE; }
    __device__ u32 full(int j) const { return bars + 8 * ((unsigned)j % FWD_STAGES); }
    __device__ u32 empty(int j) const { return bars + 8 * (FWD_STAGES + (unsigned)j % FWD_STAGES); }
    __device__ u32 v_full(int j) const { return bars + 8 * (2 * FWD_STAGES + (unsigned)j % FWD_STAGES); }
    __device__ u32 k_empty(int j) const { return bars + 8 * (3 * FWD_STAGES + (unsigned)j % FWD_STAGES); }
    __device__ u32 q_full(int u) const { return slot_bars() + 8 * (u & 1); }
    __device__ u32 q_empty(int u) const { return slot_bars() + 16 + 8 * (u & 1); }
    __device__ u32 slot_free(int u) const { return slot_bars() + 32 + 8 * (u & 1); }
    __device__ u32 slot_bars() const { return bars + (FWD_SPLIT_KV ? 32 : 16) * FWD_STAGES; }
    __device__ volatile int* slot(int u) const { return slots + SLOT_INTS * (u & 1); }
    // The consumers' mask needs tile j's first key: next to its stage, so that they do not
    // load the plan per tile (a global load per tile measured 1-2% slower at d = 128).
    __device__ volatile int& stage_key(int j) const { return slots[2 * SLOT_INTS + (unsigned)j % FWD_STAGES]; }
    // The key side of tile j's tile_full, written with stage_key so that the consumers'
    // per-tile mask decision needs no index arithmetic: in a compact launch its keys'
    // segment where they all lie in one, without a hole, inside the padding limit, and
    // whether the item's queries all lie in it too (compact_hint_full's hint); in a plain
    // one 1 where the plan marks the tile full (plan_marked); else -1.
    __device__ volatile int& stage_hint(int j) const {
        return slots[2 * SLOT_INTS + FWD_STAGES + (unsigned)j % FWD_STAGES];
    }
};
static_assert(FwdSmem::BYTES + 1024 == FWD_SMEM_BYTES, "forward shared memory differs from the host's");
static_assert(FWD_Q_BUFS == 1 || FWD_Q_BUFS == 2, "one or two Q buffers");

// The layout over the block's dynamic shared memory.
__device__ __forceinline__ FwdSmem fwd_smem(u16* raw) {
    FwdSmem s;
    s.q = raw + ((1024 - ((u32)__cvta_generic_to_shared(raw) & 1023)) & 1023) / 2;
    s.kv = s.q + FWD_Q_BUFS * FwdSmem::Q_TILE;
    s.bars = (u32)__cvta_generic_to_shared(s.kv + FWD_STAGES * FwdSmem::STAGE);
    s.slots = reinterpret_cast<volatile int*>(raw) +
              (s.bars + FwdSmem::BARRIER_BYTES - (u32)__cvta_generic_to_shared(raw)) / 4;
    return s;
}
