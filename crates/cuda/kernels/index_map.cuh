// Index mapping: where a launch index lives. A launch's query and key sides are Axis
// values; in a compact (dilated-branch) launch, index c is the global compact index
// c + cbase, i.e. kept position t of segment s (row_of). The padding limit and the ends
// of compact tiles are here too; docs/gpu-patterns.md ("Dilated attention") has the math.

// First position of compact segment s: s w, or (a launch over packed documents, whose
// segments restart at each document's start and end at its end) the segment table's
// entry. Segment s ends where s + 1 starts, so seg_first(p, s + 1) is its end (the table
// has one entry past the last segment).
__device__ __forceinline__ int seg_first(const Params& p, int s) {
    return p.seg_start ? __ldg(p.seg_start + s) : s * p.dil_segment;
}

// A dilated branch's offsets for launch head h, as one int: the offset itself (>= 0) where
// the rule gives every segment the same (OFFSET_HEAD_MOD, _HEAD_BLOCK, _FIXED: o(h), from
// the head's index in the whole pattern, head_base + h), else -(global head + 1): the head's
// row of the offset table (OFFSET_TABLE, o(h, s)). Computed once per head; seg_offset
// resolves it per segment.
__device__ __forceinline__ int offset_code(const Params& p, int h) {
    const int g = p.head_base + h;
    if (p.dil_rule == OFFSET_HEAD_MOD) return g % p.dil_rate;
    if (p.dil_rule == OFFSET_HEAD_BLOCK) return g / ((p.pattern_heads + p.dil_rate - 1) / p.dil_rate);
    if (p.dil_rule == OFFSET_TABLE) return -(g + 1);
    return p.dil_fixed;
}
// The offset in segment s of the head whose offset_code is `code`. A segment past the table
// (the index of a hole past the launch) reads 0: its rows are rejected by the caller.
__device__ __forceinline__ int seg_offset(const Params& p, int code, int s) {
    if (code >= 0) return code;
    if (s < 0 || s >= p.dil_segments) return 0;
    return __ldg(reinterpret_cast<const int*>(p.block_mask) + (size_t)(-code - 1) * p.dil_segments + s);
}
// o(h, s) of launch head h.
__device__ __forceinline__ int dil_offset(const Params& p, int h, int s) { return seg_offset(p, offset_code(p, h), s); }

// One side of a launch: `n` launch indices over `rows` tensor rows; row i sits at global
// position offset + i * stride; in compact mode launch index c is global compact index
// c + cbase. The side's tensors have `heads` heads, and query head h reads their head
// h / group: the query side's are the query heads (group 1), the key side's the K/V heads
// of grouped-query attention (group = heads / kv_heads).
struct Axis {
    int n, rows, offset, stride, cbase, heads, group;
};
__device__ __forceinline__ Axis q_axis(const Params& p) {
    return {p.nq, p.q_rows, p.q_offset, p.q_stride, p.q_cbase, p.heads, 1};
}
__device__ __forceinline__ Axis k_axis(const Params& p) {
    return {p.nk, p.k_rows, p.k_offset, p.k_stride, p.k_cbase, p.kv_heads, p.kv_group};
}

// Tensor row of launch index c on axis a, or -1. In compact mode (contiguous axes) global
// compact index G = c + cbase is kept position t = G mod m of segment s = G div m
// (m = dil_per_seg): position seg_first(s) + o(h, s) + t*r, a hole (-1) past the segment's
// end or outside the axis's rows (a ring chunk that starts or ends inside a segment).
// Segments shorter than w (a document's tail, a short document) keep fewer than m
// positions: the rest of their m indices are holes.
__device__ __forceinline__ int row_of(const Params& p, const Axis& a, int c, int h) {
    if (c >= a.n) return -1;
    if (!p.compact) return c;
    const int g = c + a.cbase, s = g / p.dil_per_seg, t = g - s * p.dil_per_seg;
    const int pos = seg_first(p, s) + dil_offset(p, h, s) + t * p.dil_rate;
    const int row = pos - a.offset;
    return pos < seg_first(p, s + 1) && row >= 0 && row < a.rows ? row : -1;
}

// Global position of tensor row `row` (-1 stays -1).
__device__ __forceinline__ int pos_of(const Axis& a, int row) { return row >= 0 ? a.offset + row * a.stride : -1; }
// Compact segment of launch index c on axis a (0 outside compact mode).
__device__ __forceinline__ int seg_of(const Params& p, const Axis& a, int c) {
    return p.compact ? (c + a.cbase) / p.dil_per_seg : 0;
}

// The ends of a compact launch's index tile c0..c0+ROWS-1 on axis a: the rows of its first
// and last index (row_of's, -1 for a hole or an index past the launch, and the last -1 as
// well where offsets per segment leave the rows between uneven) and their compact
// segments. `code` is the head's offset_code. One integer division while the
// tile stays in one segment, against row_of's one per index plus dil_offset's: the wgmma
// forward's producer evaluates this per K/V tile, on the path that keeps the stages filled,
// and hands the key side of tile_full to the consumers (with the divisions on both paths
// a LongNet branch cost twice a dense launch of the same work).
struct TileEnds {
    int row0, last, s0, s1;
};
template <int ROWS>
__device__ __forceinline__ TileEnds compact_tile_ends(const Params& p, const Axis& a, int c0, int code) {
    const int m = p.dil_per_seg, g0 = c0 + a.cbase, s0 = g0 / m, t0 = g0 - s0 * m;
    int s1 = s0, t1 = t0 + ROWS - 1;
    if (t1 >= m) {
        s1 = (g0 + ROWS - 1) / m;
        t1 = g0 + ROWS - 1 - s1 * m;
    }
    // (An index past the launch may name a segment past a segment table: not read.)
    auto row = [&](int c, int s, int t) {
        if (c >= a.n) return -1;
        const int pos = seg_first(p, s) + seg_offset(p, code, s) + t * p.dil_rate, r = pos - a.offset;
        return pos < seg_first(p, s + 1) && r >= 0 && r < a.rows ? r : -1;
    };
    // With offsets per segment (code < 0) a tile over three or more segments can have ends
    // ROWS - 1 steps apart while its inner rows are not (uneven jumps that sum to even
    // ones): its last row reads as -1, so it is gathered row by row and masked. One or two
    // segments, and a per-head offset (every jump alike), are told by the ends alone. So
    // are segments of a table: with a per-head offset o, the ends are
    // sum(len_s) - (s1 - s0) m r + (ROWS - 1) r apart, and as no segment is longer than
    // m r, that is (ROWS - 1) r only where every segment the tile leaves is m r long, which
    // makes every step r and leaves no hole.
    const int last = code < 0 && s1 > s0 + 1 ? -1 : row(c0 + ROWS - 1, s1, t1);
    return {row(c0, s0, t0), last, s0, s1};
}
__device__ __forceinline__ int key_limit(const Params& p, int b) {
    return p.key_len ? min(p.key_len[b], p.seq_len) : p.seq_len;
}
