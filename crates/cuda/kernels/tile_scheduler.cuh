// The order of work: which (tile, head, batch) a block or work item takes, in what order,
// and which key tiles of its plan row it visits (plan_end, keys_after). The host's tile
// plan (crates/cuda/src/plan.rs) lists, per row tile, the column tiles that can hold an
// allowed pair; the kernels walk only those.

// The order in which blocks start. Grids are (tiles, heads, batch). Under a causal mask the
// tiles' work differs (the last query tiles, the first key tiles visit the most), so the
// linear block index walks tiles slowest, heaviest first (`heavy_last`: the heaviest tile
// is the last index), and the lightest fill the end of the grid (longest job first) - within
// groups of LPT_GROUP (head, batch) pairs taken one group after the other. Walking tiles
// slowest across every pair at once put the blocks running together on every head: their
// Q / dO / dq (backward) or K / V (forward) did not fit in L2 (at d = 64, n = 4096, causal:
// 52% L2 hit rate, 7.4 GB of DRAM traffic per backward), and the time depended on how the
// blocks happened to drift. In groups of 8 pairs, blocks running together share at most
// about 16 heads' tiles: causal forward + backward 7-17% faster at n = 4096, 4% at d = 64,
// n = 16384. The last group's light tiles still end
// the grid. Otherwise tiles vary fastest, so that blocks running together share their
// heads' K / V in L2.
#ifndef LPT_ORDER
#define LPT_ORDER 1
#endif
#define LPT_GROUP 8
struct Coords {
    int tile, h, b;
};
// Coordinates of work item `lin` (in start order) of tiles x heads x batch, the heads being
// the launch's (head_first .. head_first + head_count of the tensors': a launch may serve
// some heads only, as a head-group branch does).
__device__ __forceinline__ Coords coords_of(const Params& p, unsigned lin, unsigned tiles, bool heavy_last) {
    const unsigned heads = p.head_count, hb = heads * p.batch;  // (head, batch) pairs, head fastest
    unsigned tile, pair;
    if (!LPT_ORDER || !p.causal) {
        tile = lin % tiles;
        pair = lin / tiles;
    } else {
        const unsigned per = LPT_GROUP * tiles, group = lin / per, first = group * LPT_GROUP;
        const unsigned size = min((unsigned)LPT_GROUP, hb - first), r = lin - group * per;  // the last may be short
        tile = r / size;
        pair = first + r % size;
    }
    return {heavy_last ? (int)(tiles - 1 - tile) : (int)tile, p.head_first + (int)(pair % heads), (int)(pair / heads)};
}
// A block's coordinates in a grid of (tiles, launch heads, batch) blocks.
__device__ __forceinline__ Coords block_coords(const Params& p, bool heavy_last) {
    if (!LPT_ORDER || !p.causal)
        return {heavy_last ? (int)(gridDim.x - 1 - blockIdx.x) : (int)blockIdx.x, p.head_first + (int)blockIdx.y,
                (int)blockIdx.z};
    return coords_of(p, blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z), gridDim.x, heavy_last);
}

// Are all keys of the tile starting at launch index k0 past the padding limit? Positions
// grow with the index, so the tile's first possible position decides. The plan is per
// (row tile), shared by the batch; padding is per batch row, so it is skipped here.
__device__ __forceinline__ bool keys_past_limit(const Params& p, int k0, int klimit) {
    const Axis ka = k_axis(p);
    const int first = p.compact ? max(seg_first(p, seg_of(p, ka, k0)), ka.offset) : ka.offset + k0 * ka.stride;
    return first >= klimit;
}
// A block's key tiles (of KROWS keys): plan row `row` (plan_row), without the tail past the
// padding limit (plan rows are ascending; padding is per batch row, and a plan may serve
// every batch row).
template <int KROWS = BN>
__device__ __forceinline__ int plan_end(const Params& p, int row, int klimit) {
    const int kbeg = p.plan_ptr[row];
    int kend = p.plan_ptr[row + 1];
    while (kend > kbeg && keys_past_limit(p, p.plan_idx[kend - 1] * KROWS, klimit)) --kend;
    return kend;
}

// Do the keys from launch index k0 on come after every query up to launch index qlast (so
// that a causal mask hides them all)? Positions (and compact indices, which order positions
// across segments too) grow with the launch index: the first key and the last query decide.
__device__ __forceinline__ bool keys_after(const Params& p, int k0, int qlast) {
    const Axis qa = q_axis(p), ka = k_axis(p);
    return p.compact ? k0 + ka.cbase > qlast + qa.cbase : ka.offset + k0 * ka.stride > qa.offset + qlast * qa.stride;
}
