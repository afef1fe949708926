// The tensor memory accelerator (sm_90): tensor maps, box copies into shared memory and
// reductions out of it, and which tiles are boxes (evenly spaced rows) at all.

// Tensor maps (CUtensorMap, encoded by the host: src/tma.rs) of the K and V tensors, as
// 5-d tensors (head dim, heads, phase, step, batch) with row = step * R + phase, where R is
// the launch's row stride (the dilation of a compact branch, else 1), read in boxes of
// 64 x 1 x 1 x ROWS x 1 with the 128-byte swizzle: ROWS rows R apart (BN; the forward's K
// and V: KV_BOX), straight into one column block of the `swz_blocks` layout. Steps cover rows below (rows / R) * R; past them the
// box reads zeros. A kernel parameter (__grid_constant__: the TMA unit reads it there).
struct __align__(64) TensorMap {
    unsigned long long opaque[16];
};
struct TensorPair {  // the two tensors a launch streams: K, V (forward); Q, dO (backward)
    TensorMap a, b;
};
// Row `row` in the view's coordinates: row = step * R + phase. Taken once per tile: the
// boxes of a tile share the phase, and box r starts 64 r steps further (a division per
// box put two integer divisions per box on the producer's path to the next TMA).
struct ViewRow {
    int phase, step;
};
__device__ __forceinline__ ViewRow view_row(int row, int R) { return {row % R, row / R}; }
// One TMA box: rows v, v + R, ... (the map's box rows; v's step plus `steps`) of head h, batch b,
// head dims c0..c0+63, into `dst` (1024-aligned).
__device__ __forceinline__ void tma_box(u16* dst, const TensorMap* map, int c0, int h, ViewRow v, int steps, int b,
                                        u32 bar) {
    asm volatile(
        "cp.async.bulk.tensor.5d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4, %5, "
        "%6}], [%7];\n" ::"r"((u32)__cvta_generic_to_shared(dst)),
        "l"(map), "r"(c0), "r"(h), "r"(v.phase), "r"(v.step + steps), "r"(b), "r"(bar)
        : "memory");
}

// Add a box of f32 values from shared memory into global memory (the TMA's reduction: no
// per-element atomics), as tma_box with the roles swapped; 32 columns (128 bytes) per box.
__device__ __forceinline__ void tma_reduce_add(const TensorMap* map, const float* src, int c0, int h, int row0, int R,
                                               int b) {
    asm volatile(
        "cp.reduce.async.bulk.tensor.5d.global.shared::cta.add.tile.bulk_group [%0, {%1, %2, %3, %4, %5}], [%6];\n" ::"l"(
            map),
        "r"(c0), "r"(h), "r"(row0 % R), "r"(row0 / R), "r"(b), "r"((u32)__cvta_generic_to_shared(src))
        : "memory");
}
__device__ __forceinline__ void bulk_commit() { asm volatile("cp.async.bulk.commit_group;\n" ::: "memory"); }
// This thread's bulk copies, all but the N most recent groups, have finished reading shared
// memory (.read) or completed.
template <int N>
__device__ __forceinline__ void bulk_wait_read() {
    asm volatile("cp.async.bulk.wait_group.read %0;\n" ::"n"(N) : "memory");
}

// Are a compact tile's ROWS rows R apart, all inside the TMA view (so that its parts are
// TMA boxes)? It must lie in one segment without holes (first and
// last row valid and (ROWS-1) R apart) and below the view's last full step.
template <int ROWS>
__device__ __forceinline__ bool ends_are_box(const Params& p, const Axis& a, const TileEnds& e) {
    const int R = p.dil_rate;
    return e.row0 >= 0 && e.last >= 0 && e.last - e.row0 == (ROWS - 1) * R && e.last < (a.rows / R) * R;
}
// Does launch index tile k0.. map to TMA boxes (first row row0)? Always for plain launches
// (rows = indices; rows past the tensor read as the zeros a hole needs); compact tiles as
// ends_are_box.
template <int ROWS = BN>
__device__ __forceinline__ bool tile_is_box(const Params& p, const Axis& a, int k0, int h, int& row0) {
    if (!p.compact) {
        row0 = k0;
        return true;
    }
    const TileEnds e = compact_tile_ends<ROWS>(p, a, k0, offset_code(p, h));
    row0 = e.row0;
    return ends_are_box<ROWS>(p, a, e);
}

// Can a query tile of the forward come by TMA boxes (first row row0)? As tile_is_box, and
// also a compact tile whose kept rows are a prefix of one segment's, the rest holes (a
// short segment, a document's end): a box of ROWS rows R apart from row0 holds those rows
// and, in the holes' places, other rows or zeros (past the view). The holes' rows are never
// stored, and a query row's scores are its own, so what they hold does not matter; the
// kept rows must lie inside the view (below its last full step). A tile of such holes only
// (a 64-row part of a 128-row item past its segment's kept rows) reads from row 0.
template <int ROWS>
__device__ __forceinline__ bool query_tile_is_box(const Params& p, const Axis& a, int q0, int h, int& row0) {
    if (!p.compact) {
        row0 = q0;
        return true;
    }
    const int code = offset_code(p, h);
    const TileEnds e = compact_tile_ends<ROWS>(p, a, q0, code);
    row0 = e.row0;
    if (ends_are_box<ROWS>(p, a, e)) return true;
    if (e.s0 != e.s1) return false;
    // Segment s0 keeps positions start + t R for t < kept; those of the axis's rows are
    // t < end (and t >= the first whose row is >= 0). The tile holds t0 .. t0 + ROWS - 1.
    const int R = p.dil_rate, start = seg_first(p, e.s0) + seg_offset(p, code, e.s0);
    const int kept = (max(seg_first(p, e.s0 + 1) - start, 0) + R - 1) / R;
    const int end = min(kept, (max(a.offset + a.rows - start, 0) + R - 1) / R);
    const int t0 = q0 + a.cbase - e.s0 * p.dil_per_seg;
    if (t0 >= end) {  // holes only
        row0 = 0;
        return true;
    }
    // Holes before the axis's first row (a ring chunk starting inside the tile): gathered.
    return e.row0 >= 0 && start + (min(t0 + ROWS, end) - 1) * R - a.offset < (a.rows / R) * R;
}

// One block per multiprocessor, working through items of FBM query rows of one
