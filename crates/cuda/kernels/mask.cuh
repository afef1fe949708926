// Masks: which (query, key) pairs a launch lets through, from global positions. The
// element rule (allowed / visible) mirrors the reference's patterns plus causality and
// padding; tile_full proves a whole tile visible; mask_kind picks per (warp, tile) between
// no mask, the interval mask (patterns where a query sees one interval of keys), the
// compact launches' interval mask (a query sees an interval of its segment) and the
// generic bit mask; mask_scores (forward) and mask_scores_t (backward, transposed) apply it to a
// warp's scores. A new GPU pattern's element rule goes in `allowed`.

#if TABLE
// PATTERN_TABLE: a pattern materialised on the host (crates/cuda/src/mask_table.rs).
// block_mask holds, per (pattern head, query tile, key tile) of TABLE_TILE positions, an
// i32 entry (0: no pair, 1: every pair, c >= 2: partial tile c - 2), padded to 8 bytes,
// then TABLE_TILE 64-bit words per partial tile (one per query row, bit j for key j);
// bs_mask_blocks is the tiles per side.
__device__ __forceinline__ bool table_allowed(const Params& p, int h, int i, int j) {
    const int t = p.bs_mask_blocks;
    const int* entries = reinterpret_cast<const int*>(p.block_mask);
    const int c = __ldg(entries + ((size_t)(p.head_base + h) * t + i / TABLE_TILE) * t + j / TABLE_TILE);
    if (c < 2) return c == 1;
    const size_t entry_bytes = ((size_t)p.pattern_heads * t * t * 4 + 7) & ~(size_t)7;
    const unsigned long long* words = reinterpret_cast<const unsigned long long*>(p.block_mask + entry_bytes);
    return (__ldg(words + (size_t)(c - 2) * TABLE_TILE + i % TABLE_TILE) >> (j % TABLE_TILE)) & 1ull;
}
// Does head h's table keep every pair of every table tile under query positions qf..ql
// and key positions kf..kl (entries 1)? Then tile_full needs no element test.
__device__ __forceinline__ bool table_full(const Params& p, int h, int qf, int ql, int kf, int kl) {
    const int t = p.bs_mask_blocks;
    const int* head = reinterpret_cast<const int*>(p.block_mask) + (size_t)(p.head_base + h) * t * t;
    for (int a = qf / TABLE_TILE; a <= ql / TABLE_TILE; ++a)
        for (int c = kf / TABLE_TILE; c <= kl / TABLE_TILE; ++c)
            if (__ldg(head + (size_t)a * t + c) != 1) return false;
    return true;
}
#endif

#define CUT_MAX 0x7fffffff
// An inclusive interval of positions; empty when lo > hi.
struct Span {
    int lo, hi;
};

// A nested union's piece (crates/cuda/src/union_pieces.rs): the hole of position pos of
// launch head h is pos's segment of width W in the last earlier branch whose lattice holds
// it, W from the table (0: no hole). A row keeps the keys on one side of its hole
// (hole_side): HOLE_BELOW, keys k <= (W ? start - 1 : q); HOLE_ABOVE, keys
// k >= (W ? start + W : q + 1). The holes are symmetric (k lies in q's hole iff q lies in
// k's), so the backward cuts key k's queries by k's own hole: HOLE_BELOW,
// q >= (W ? start + W : k); HOLE_ABOVE, q <= (W ? start - 1 : k - 1).
// Only a module compiled with HOLES runs pieces: elsewhere holes(p) is false at compile time
// and every cut below compiles away.
__device__ __forceinline__ bool holes(const Params& p) { return HOLES && p.hole_side != 0; }
__device__ __forceinline__ int hole_width(const Params& p, int h, int pos) {
    const int* t = reinterpret_cast<const int*>(p.block_mask + p.hole_table);
    return __ldg(t + (size_t)(p.head_base + h) * p.hole_units + pos / p.hole_unit);
}
// Forward: the interval [lo, hi] of key positions that query qpos keeps (hole_side set).
__device__ __forceinline__ Span hole_keys(const Params& p, int h, int qpos) {
    const int w = hole_width(p, h, qpos), start = qpos - (w ? qpos % w : 0);
    return p.hole_side == HOLE_BELOW ? Span{0, w ? start - 1 : qpos} : Span{w ? start + w : qpos + 1, CUT_MAX - 1};
}
// Backward: the interval of query positions that keep key kpos (hole_side set).
__device__ __forceinline__ Span hole_queries(const Params& p, int h, int kpos) {
    const int w = hole_width(p, h, kpos), start = kpos - (w ? kpos % w : 0);
    return p.hole_side == HOLE_BELOW ? Span{w ? start + w : kpos, CUT_MAX - 1} : Span{0, w ? start - 1 : kpos - 1};
}
// Does a piece's row at qpos keep key kpos (true without holes)?
__device__ __forceinline__ bool hole_keeps(const Params& p, int h, int qpos, int kpos) {
    if (!holes(p)) return true;
    const Span s = hole_keys(p, h, qpos);
    return kpos >= s.lo && kpos <= s.hi;
}

// Does query position i see key position j (both global, valid)? Mirrors the reference's
// patterns plus causality and padding (klimit = min(key length, seq_len)).
__device__ __forceinline__ bool allowed(const Params& p, int h, int i, int j, int klimit) {
    if (j >= klimit) return false;
    if (p.causal && j > i) return false;
    if (p.pattern == PATTERN_WINDOW) return j >= i - p.win_left && j <= i + p.win_right;
    if (p.pattern == PATTERN_BLOCK_SPARSE) {
        if (i < p.bs_global || j < p.bs_global) return true;
        int a = i / p.bs_block, b = j / p.bs_block, d = abs(a - b);
        if (p.bs_radius >= 0 && d <= p.bs_radius) return true;
        if (p.bs_stride > 0 && d % p.bs_stride == 0) return true;
        return p.block_mask != 0 && p.block_mask[a * p.bs_mask_blocks + b] != 0;
    }
    if (p.pattern == PATTERN_DILATED) {
        int w = p.dil_segment, s = i / w;
        if (j / w != s) return false;
        int o = dil_offset(p, h, s);
        return (i - s * w) % p.dil_rate == o && (j - s * w) % p.dil_rate == o && hole_keeps(p, h, i, j);
    }
#ifdef RINGDIL_EXPR
    // A pattern file's mask expression, compiled into this module (expr_source.rs).
    if (p.pattern == PATTERN_EXPR) return expr_allowed(p, h, i, j);
#endif
#if TABLE
    if (p.pattern == PATTERN_TABLE) return table_allowed(p, h, i, j);
#endif
    return true;
}
// The key side of tile_full in a compact launch: the key tile's segment if its keys are all
// rows of that one segment (no hole) before the padding limit, else -1; always -1 in a
// union's piece, whose rows' holes cut inside a segment.
__device__ __forceinline__ int compact_key_seg(const Params& p, const TileEnds& e, int klimit) {
    return !holes(p) && e.s0 == e.s1 && e.row0 >= 0 && e.last >= 0 && pos_of(k_axis(p), e.last) < klimit ? e.s0
                                                                                                         : -1;
}
// tile_full in a compact launch from its key side (compact_key_seg): the queries
// q0..q0+qn-1 lie in the key tile's segment, and (causal) at or after its last key k1
// (same segment: compact order is position order).
__device__ __forceinline__ bool compact_tile_full(const Params& p, int kseg, int q0, int qn, int k1) {
    const Axis qa = q_axis(p);
    return kseg >= 0 && seg_of(p, qa, q0) == kseg && seg_of(p, qa, q0 + qn - 1) == kseg &&
           (!p.causal || k1 + p.k_cbase <= q0 + qa.cbase);
}
// compact_tile_full from a key side that also says whether a whole block of queries is known
// to lie in the key tile's segment: hint = 2 kseg + 1 if so, 2 kseg if the warp's queries
// decide (two divisions), -1 for no key segment. The wgmma forward's producer takes the
// block's query segment once per item (compact_item_seg) and compares it per key tile, so
// that a consumer warp, between its S and its softmax, divides only where a block straddles
// two segments.
__device__ __forceinline__ bool compact_hint_full(const Params& p, int hint, int q0, int qn, int k1) {
    if (hint < 0) return false;
    if (!(hint & 1)) return compact_tile_full(p, hint >> 1, q0, qn, k1);
    return !p.causal || k1 + p.k_cbase <= q0 + p.q_cbase;
}
// The compact segment holding every query index of q0..q0+rows-1 inside the launch, or -1
// where they straddle two. Indices past the launch (the last block of a launch whose rows
// are no multiple of the block's) have no row and are never stored, so they do not count:
// counting them would mask every key tile of that block per element, and in a causal
// launch that block is the one with the most key tiles.
__device__ __forceinline__ int compact_item_seg(const Params& p, int q0, int rows) {
    const Axis qa = q_axis(p);
    const int s = seg_of(p, qa, q0);
    return seg_of(p, qa, min(q0 + rows, qa.n) - 1) == s ? s : -1;
}

// The element mask with per-row precomputed positions (-1: no row) and compact segments.
// In compact mode every valid index pair of one segment is a kept pair of the branch, so
// only segment, causality and padding remain: no division per element.
__device__ __forceinline__ bool visible(const Params& p, int h, int qpos, int qseg, int kpos, int kseg, int klimit) {
    if (qpos < 0 || kpos < 0) return false;
    if (p.compact)
        return qseg == kseg && kpos < klimit && (!p.causal || kpos <= qpos) && hole_keeps(p, h, qpos, kpos);
    return allowed(p, h, qpos, kpos, klimit);
}

// A tile (query indices q0..q0+qn-1, keys k0..k0+KROWS-1) that needs no per-element mask:
// every key is a valid row visible to every query (query holes are never stored).
template <int KROWS = BN>
__device__ __forceinline__ bool tile_full(const Params& p, int b, int h, int q0, int qn, int k0, int klimit) {
    const Axis qa = q_axis(p), ka = k_axis(p);
    const int k1 = k0 + KROWS - 1;
    if (p.compact) {
        // One segment for the whole tile, no key hole (within a segment rows grow with the
        // index and the valid ones are an interval: the first and last key decide), inside
        // the padding, the queries in it and below the diagonal.
        const TileEnds e = compact_tile_ends<KROWS>(p, ka, k0, offset_code(p, h));
        return compact_tile_full(p, compact_key_seg(p, e, klimit), q0, qn, k1);
    }
    const int klast = ka.offset + k1 * ka.stride, qfirst = qa.offset + q0 * qa.stride;
#if TABLE
    // A table tile of entries 1 only: the span of the positions (a superset of a strided
    // axis's rows) decides, with the launch's bounds, padding and causality as for dense.
    if (p.pattern == PATTERN_TABLE)
        return k1 < p.nk && klast < klimit && (!p.causal || klast <= qfirst) &&
               table_full(p, h, qfirst, qa.offset + (min(q0 + qn, p.nq) - 1) * qa.stride, ka.offset + k0 * ka.stride,
                          klast);
#endif
    return p.pattern == PATTERN_DENSE && k1 < p.nk && klast < klimit && (!p.causal || klast <= qfirst) &&
           docs_cover(p, b, qfirst, qa.offset + (min(q0 + qn, p.nq) - 1) * qa.stride, ka.offset + k0 * ka.stride, klast);
}
// Plan entry `it` is marked full (plan_full): the host proved every pair of the plan tile
// pair's position spans allowed by the pattern and causality, for every head of the launch.
__device__ __forceinline__ bool plan_marked(const Params& p, int it) { return p.plan_full != 0 && p.plan_full[it]; }
// A warp's part (queries q0..q0+qn-1, keys k0..k0+KROWS-1) of a tile the plan marks full
// needs no per-element mask when what the host cannot know holds too: every key inside
// the launch and before the padding limit, and (packed sequences) one document for all.
template <int KROWS = BN>
__device__ __forceinline__ bool marked_tile_full(const Params& p, int b, int q0, int qn, int k0, int klimit) {
    const Axis qa = q_axis(p), ka = k_axis(p);
    const int k1 = k0 + KROWS - 1, klast = ka.offset + k1 * ka.stride;
    return k1 < p.nk && klast < klimit &&
           docs_cover(p, b, qa.offset + q0 * qa.stride, qa.offset + (min(q0 + qn, p.nq) - 1) * qa.stride,
                      ka.offset + k0 * ka.stride, klast);
}
// How a (warp, key tile) pair is masked: MASK_NONE when tile_full proves every pair visible;
// MASK_INTERVAL when every query row sees one interval of key positions (interval_pattern),
// so the mask is two integer compares per element against bounds taken once per row (see
// key_span, query_span); MASK_COMPACT in a compact launch, the same compares against the
// interval of the row's segment (compact_key_indices, compact_query_span); MASK_GENERIC
// otherwise (`visible`, evaluated in a rolled loop into
// a bit mask, so that the pattern code is not unrolled into every element).
#define MASK_NONE 0
#define MASK_INTERVAL 1
#define MASK_GENERIC 2
#define MASK_COMPACT 3
#ifndef FAST_MASK
#define FAST_MASK 1
#endif
// Patterns whose rule lets query position i see one interval of key positions, on a plain
// (not compact) launch whose positions are affine in the launch index: dense; a window
// [i - left, i + right]; a dilated branch of dilation 1 (every position kept: i's segment);
// a block-sparse band without global tokens, stride or user mask (the blocks within the
// radius of i's block). Causality, key padding and documents cut an interval to an interval.
__device__ __forceinline__ bool interval_pattern(const Params& p) {
    if (p.compact || holes(p)) return false;
    if (p.pattern == PATTERN_DENSE || p.pattern == PATTERN_WINDOW) return true;
    if (p.pattern == PATTERN_DILATED) return p.dil_rate == 1;
    return p.pattern == PATTERN_BLOCK_SPARSE && p.bs_radius >= 0 && p.bs_global == 0 && p.bs_stride == 0 &&
           p.block_mask == 0;
}
// (COMPACT false: for a kernel that compact launches do not run, which then compiles no
// MASK_COMPACT path: see mask_scores.)
template <bool COMPACT = true>
__device__ __forceinline__ int mask_kind(const Params& p, bool full) {
    if (full) return MASK_NONE;
    if (FAST_MASK && COMPACT && p.compact) return MASK_COMPACT;
    return (FAST_MASK && interval_pattern(p)) ? MASK_INTERVAL : MASK_GENERIC;
}
// The positions an interval pattern's rule alone (before causality, padding and documents)
// pairs with position `pos` (>= 0): `before` and `after` are a window's reach below and
// above pos. The rules are symmetric (i sees j iff j's interval holds i) except a window's,
// whose reaches swap: the forward asks for the keys of a query (left, right), the backward
// for the queries of a key (right, left). Bounds stay in [0, CUT_MAX - 1].
__device__ __forceinline__ Span rule_span(const Params& p, int pos, int before, int after) {
    if (p.pattern == PATTERN_WINDOW) return {max(pos - before, 0), pos + min(after, CUT_MAX - 1 - pos)};
    if (p.pattern == PATTERN_DILATED) {
        const int s0 = pos - pos % p.dil_segment;
        return {s0, s0 + min(p.dil_segment - 1, CUT_MAX - 1 - s0)};
    }
    if (p.pattern == PATTERN_BLOCK_SPARSE) {
        const long long a = pos / p.bs_block, r = p.bs_radius, bl = p.bs_block;
        return {(int)(max(a - r, 0ll) * bl), (int)min((a + r + 1) * bl - 1, (long long)CUT_MAX - 1)};
    }
    return {0, CUT_MAX - 1};
}
// MASK_INTERVAL, forward: the key positions the query at global position qpos (-1: none,
// nothing visible) sees in batch row b: the rule's interval cut to keys at or before qpos
// (causal) and to qpos's document. A key index past the launch or past the padding limit
// has position CUT_MAX (key_cut), above every interval.
__device__ __forceinline__ Span key_span(const Params& p, int b, int qpos) {
    if (qpos < 0) return {1, 0};
    const Span r = rule_span(p, qpos, p.win_left, p.win_right);
    const DocSpan d = doc_span(p, b, qpos);
    return {max(r.lo, d.lo), min(min(r.hi, p.causal ? qpos : CUT_MAX - 1), d.hi)};
}
// MASK_INTERVAL, backward: the query positions that see the key whose cut is kcut (key_cut;
// CUT_MAX: no key, nothing): the rule's interval with the window's reaches swapped, cut to
// queries at or after the key (causal) and to the key's document (one document holds both).
// Its lower end is >= 0, so a missing query (position -1) falls outside.
__device__ __forceinline__ Span query_span(const Params& p, int b, int kcut) {
    if (kcut == CUT_MAX) return {1, 0};
    const Span r = rule_span(p, kcut, p.win_right, p.win_left);
    const DocSpan d = doc_span(p, b, kcut);
    return {max(max(r.lo, p.causal ? kcut : 0), d.lo), min(r.hi, d.hi)};
}
// The global position of key launch index kc, or CUT_MAX for no key (index past the
// launch, position past the padding limit `klimit`).
__device__ __forceinline__ int key_cut(const Params& p, int kc, int klimit) {
    if (kc >= p.nk) return CUT_MAX;
    const int pos = p.k_offset + kc * p.k_stride;
    return pos < klimit ? pos : CUT_MAX;
}

// MASK_COMPACT. In a compact launch every pair of kept positions of one segment is a pair
// of the branch, so what a query sees is an interval of its segment, cut by causality, the
// padding limit, the key axis's rows (a ring chunk) and the query's document. The forward
// turns it into an interval of key launch indices (compact_key_indices), the backward
// compares query positions (compact_query_span): either way two compares per element
// against bounds taken once per row, where the generic mask finds every key's row and
// segment (two divisions and two table loads per key).
//
// Forward: the key launch indices that the query at launch index qc sees. Its segment s
// keeps positions base + t r (t = 0, 1, ..., base = the segment's first position plus the
// head's offset) at launch indices first + t (first = s m - k_cbase), and a kept position
// lies in the position interval [lo, hi] iff its t lies in [ceil((lo - base) / r),
// floor((hi - base) / r)]. Positions below hi lie before the segment's end, so the interval
// holds no hole; causality is t_k <= t_q within a segment (one offset for both). A union's
// piece cuts the positions to the side of the row's hole it keeps (hole_keys).
__device__ __forceinline__ Span compact_key_indices(const Params& p, int b, int h, int qc, int klimit) {
    const Axis qa = q_axis(p);
    const int qpos = pos_of(qa, row_of(p, qa, qc, h));
    if (qpos < 0) return {1, 0};
    const int s = seg_of(p, qa, qc), base = seg_first(p, s) + dil_offset(p, h, s);
    const DocSpan d = doc_span(p, b, qpos);
    const Span x = holes(p) ? hole_keys(p, h, qpos) : Span{0, CUT_MAX - 1};
    const int lo = max(max(base, p.k_offset), max(d.lo, x.lo));
    const int hi = min(min(seg_first(p, s + 1), klimit) - 1, min(min(p.k_offset + p.k_rows - 1, d.hi), x.hi));
    if (hi < lo) return {1, 0};
    const int r = p.dil_rate, first = s * p.dil_per_seg - p.k_cbase;
    const int last = first + (hi - base) / r;
    return {first + (lo - base + r - 1) / r,
            min(p.causal ? min(last, qc + p.q_cbase - p.k_cbase) : last, p.nk - 1)};
}
// Backward: the query positions that see the kept key at position kpos (segment kseg; -1:
// no key) of launch head h, none past the padding limit; in a union's piece, on the kept
// side of the key's hole. A missing query (position -1) falls outside, as the lower end is
// >= 0.
__device__ __forceinline__ Span compact_query_span(const Params& p, int b, int h, int kpos, int kseg, int klimit) {
    if (kpos < 0 || kpos >= klimit) return {1, 0};
    const DocSpan d = doc_span(p, b, kpos);
    const Span x = holes(p) ? hole_queries(p, h, kpos) : Span{0, CUT_MAX - 1};
    const int lo = max(max(seg_first(p, kseg), p.causal ? kpos : 0), max(d.lo, x.lo));
    return {lo, min(min(seg_first(p, kseg + 1) - 1, d.hi), x.hi)};
}
// Launch index of row r (0: +0, 1: +8) of m16 tile mt of a warp whose first row (with the
// lane's g = lane / 4 added) is `qbase`.
__device__ __forceinline__ int row_idx(int qbase, int mt, int r) { return qbase + mt * 16 + 8 * r; }

// -inf for the scores whose key lies outside its row's interval: key column i = 8 nb + 2t + e
// of the tile is key(i) (a position, CUT_MAX for none, or a launch index), row (mt, r) sees
// ks[mt][r].
template <int WMT, int NK, typename KeyPos>
__device__ __forceinline__ void hide_outside(float (&s)[WMT][NK][4], const Span (&ks)[WMT][2], int t, KeyPos key) {
    #pragma unroll
    for (int nb = 0; nb < NK; ++nb)
        #pragma unroll
        for (int e = 0; e < 2; ++e) {
            const int kpos = key(nb * 8 + 2 * t + e);
            #pragma unroll
            for (int mt = 0; mt < WMT; ++mt)
                #pragma unroll
                for (int r = 0; r < 2; ++r)
                    if (kpos < ks[mt][r].lo || kpos > ks[mt][r].hi) s[mt][nb][2 * r + e] = NEG_INF;
        }
}
// -inf for the scores whose visibility bit is clear. Forward: bit 2 nb + e of vis[mt][r] is
// key column 8 nb + 2t + e of row (mt, r); backward (transposed): bit 2 nb + e of vis[r] is
// query column 8 nb + 2t + e of key row r.
template <int WMT, int NK>
__device__ __forceinline__ void hide_scores(float (&s)[WMT][NK][4], const u32 (&vis)[WMT][2]) {
    #pragma unroll
    for (int nb = 0; nb < NK; ++nb)
        #pragma unroll
        for (int e = 0; e < 2; ++e)
            #pragma unroll
            for (int mt = 0; mt < WMT; ++mt)
                #pragma unroll
                for (int r = 0; r < 2; ++r)
                    if (!((vis[mt][r] >> (2 * nb + e)) & 1u)) s[mt][nb][2 * r + e] = NEG_INF;
}
template <int NB>
__device__ __forceinline__ void hide_scores_t(float (&s)[NB][4], const u32 (&vis)[2]) {
    #pragma unroll
    for (int nb = 0; nb < NB; ++nb)
        #pragma unroll
        for (int e = 0; e < 2; ++e)
            #pragma unroll
            for (int r = 0; r < 2; ++r)
                if (!((vis[r] >> (2 * nb + e)) & 1u)) s[nb][2 * r + e] = NEG_INF;
}

#ifdef RINGDIL_EXPR
// MASK_GENERIC for a mask expression (forward; rows and columns as mask_scores): the
// mask's query side once per row (expr_row), its key side once per key column
// (expr_col), per element only the part reading both (expr_pair; expr_source.rs,
// "Split"), with padding, causality and documents as in `visible`. A missing row or key
// evaluates its side at position 0 (defined, and never used).
template <int WMT, int NK>
__device__ __forceinline__ void mask_expr_scores(const Params& p, int b, int h, int klimit, float (&s)[WMT][NK][4],
                                                 int qbase, int k0, int t) {
    int qpos[WMT][2];
    DocSpan qdoc[WMT][2];
    ExprRow qx[WMT][2];
    u32 vis[WMT][2];
    #pragma unroll
    for (int mt = 0; mt < WMT; ++mt)
        #pragma unroll
        for (int r = 0; r < 2; ++r) {
            qpos[mt][r] = pos_of(q_axis(p), row_of(p, q_axis(p), row_idx(qbase, mt, r), h));
            qdoc[mt][r] = doc_span(p, b, qpos[mt][r]);
            qx[mt][r] = expr_row(p, h, max(qpos[mt][r], 0));
            vis[mt][r] = 0;
        }
    #pragma unroll 1
    for (int col = 0; col < 2 * NK; ++col) {
        const int kpos = pos_of(k_axis(p), row_of(p, k_axis(p), k0 + (col >> 1) * 8 + 2 * t + (col & 1), h));
        const bool key = kpos >= 0 && kpos < klimit;
        const ExprCol ky = expr_col(p, h, max(kpos, 0));
        #pragma unroll
        for (int mt = 0; mt < WMT; ++mt)
            #pragma unroll
            for (int r = 0; r < 2; ++r)
                vis[mt][r] |= (u32)(key && qpos[mt][r] >= 0 && (!p.causal || kpos <= qpos[mt][r]) &&
                                    in_doc(kpos, qdoc[mt][r]) && expr_pair(qx[mt][r], ky))
                              << col;
    }
    hide_scores<WMT, NK>(s, vis);
}
// The backward's (mask_scores_t: key rows kpos[r], query columns from sP): the key side
// once per key row, the query side once per query column.
template <int NB>
__device__ __forceinline__ void mask_expr_scores_t(const Params& p, int b, int h, int klimit, float (&s)[NB][4],
                                                   const int (&kpos)[2], const int* sP, int t) {
    ExprCol ky[2];
    bool key[2];
    u32 vis[2] = {0, 0};
    #pragma unroll
    for (int r = 0; r < 2; ++r) {
        key[r] = kpos[r] >= 0 && kpos[r] < klimit;
        ky[r] = expr_col(p, h, max(kpos[r], 0));
    }
    #pragma unroll 1
    for (int col = 0; col < 2 * NB; ++col) {
        const int qp = sP[(col >> 1) * 8 + 2 * t + (col & 1)];
        const DocSpan d = doc_span(p, b, qp);
        const ExprRow qx = expr_row(p, h, max(qp, 0));
        #pragma unroll
        for (int r = 0; r < 2; ++r)
            vis[r] |= (u32)(key[r] && qp >= 0 && (!p.causal || kpos[r] <= qp) && in_doc(kpos[r], d) &&
                            expr_pair(qx, ky[r]))
                      << col;
    }
    hide_scores_t<NB>(s, vis);
}
#endif

// Mask a warp's scores s[mt][nb][e] (rows row_idx(qbase, mt, e / 2), keys k0 + 8 nb + 2t +
// e % 2; NK 8-key column blocks) to -inf where not visible: nothing for MASK_NONE.
template <int WMT, int NK = NKB, bool COMPACT = true>
__device__ __forceinline__ void mask_scores(const Params& p, int b, int h, int kind, int klimit,
                                            float (&s)[WMT][NK][4], int qbase, int k0, int t) {
    // Without COMPACT (a kernel that compact launches do not run) the interval mask of
    // compact launches is not compiled; the generic mask is exact for them too.
    if (!COMPACT && kind == MASK_COMPACT) kind = MASK_GENERIC;
    if (kind == MASK_INTERVAL) {
        Span ks[WMT][2];
        #pragma unroll
        for (int mt = 0; mt < WMT; ++mt)
            #pragma unroll
            for (int r = 0; r < 2; ++r) {
                const int qc = row_idx(qbase, mt, r);
                ks[mt][r] = key_span(p, b, qc < p.nq ? p.q_offset + qc * p.q_stride : -1);
            }
        hide_outside<WMT, NK>(s, ks, t, [&](int i) { return key_cut(p, k0 + i, klimit); });
    } else if (COMPACT && kind == MASK_COMPACT) {
        Span ks[WMT][2];
        #pragma unroll
        for (int mt = 0; mt < WMT; ++mt)
            #pragma unroll
            for (int r = 0; r < 2; ++r) ks[mt][r] = compact_key_indices(p, b, h, row_idx(qbase, mt, r), klimit);
        hide_outside<WMT, NK>(s, ks, t, [&](int i) { return k0 + i; });
#ifdef RINGDIL_EXPR
    } else if (kind == MASK_GENERIC && p.pattern == PATTERN_EXPR) {
        mask_expr_scores<WMT, NK>(p, b, h, klimit, s, qbase, k0, t);
#endif
    } else if (kind == MASK_GENERIC) {
        // Bit (2 nb + e) of vis[mt][r]: key column nb*8 + 2t + e is visible to row (mt, r)
        // (NK <= 16: 32 bits).
        static_assert(NK <= 16, "a thread's key columns fit the 32-bit mask");
        int qpos[WMT][2], qseg[WMT][2];
        DocSpan qdoc[WMT][2];
        u32 vis[WMT][2];
        #pragma unroll
        for (int mt = 0; mt < WMT; ++mt)
            #pragma unroll
            for (int r = 0; r < 2; ++r) {
                const int qc = row_idx(qbase, mt, r);
                qpos[mt][r] = pos_of(q_axis(p), row_of(p, q_axis(p), qc, h));
                qseg[mt][r] = seg_of(p, q_axis(p), qc);
                qdoc[mt][r] = doc_span(p, b, qpos[mt][r]);
                vis[mt][r] = 0;
            }
        #pragma unroll 1
        for (int col = 0; col < 2 * NK; ++col) {
            const int kc = k0 + (col >> 1) * 8 + 2 * t + (col & 1);
            const int kpos = pos_of(k_axis(p), row_of(p, k_axis(p), kc, h)), kseg = seg_of(p, k_axis(p), kc);
            #pragma unroll
            for (int mt = 0; mt < WMT; ++mt)
                #pragma unroll
                for (int r = 0; r < 2; ++r)
                    vis[mt][r] |=
                        (u32)(visible(p, h, qpos[mt][r], qseg[mt][r], kpos, kseg, klimit) && in_doc(kpos, qdoc[mt][r]))
                        << col;
        }
        hide_scores<WMT, NK>(s, vis);
    }
}
// The backward's per-warp steps, shared by both backward kernels. A warp holds the
// transposed scores s[nb][e] of key rows kidx + 8 (e / 2) (launch indices; kidx includes
// the lane's g) and query columns q0 + 8 nb + 2t + e % 2, NB blocks of 8 (a query tile of
// 8 NB rows); sP holds the query tile's global positions (-1: none). Masked pairs get -inf.
template <int NB>
__device__ __forceinline__ void mask_scores_t(const Params& p, int b, int h, int kind, int klimit, float (&s)[NB][4],
                                              int kidx, const int (&kpos)[2], const int (&kseg)[2], int q0,
                                              const int* sP, int t) {
    if (kind == MASK_INTERVAL || kind == MASK_COMPACT) {
        Span qs[2];
        #pragma unroll
        for (int r = 0; r < 2; ++r)
            qs[r] = kind == MASK_COMPACT ? compact_query_span(p, b, h, kpos[r], kseg[r], klimit)
                                         : query_span(p, b, key_cut(p, kidx + 8 * r, klimit));
        #pragma unroll
        for (int nb = 0; nb < NB; ++nb)
            #pragma unroll
            for (int e = 0; e < 2; ++e) {
                const int qp = sP[nb * 8 + 2 * t + e];
                #pragma unroll
                for (int r = 0; r < 2; ++r)
                    if (qp < qs[r].lo || qp > qs[r].hi) s[nb][2 * r + e] = NEG_INF;
            }
#ifdef RINGDIL_EXPR
    } else if (kind == MASK_GENERIC && p.pattern == PATTERN_EXPR) {
        mask_expr_scores_t<NB>(p, b, h, klimit, s, kpos, sP, t);
#endif
    } else if (kind == MASK_GENERIC) {
        // Bit (2 nb + e) of vis[r]: query column nb*8 + 2t + e is visible to key row r.
        static_assert(2 * NB <= 32, "one bit per column of the thread");
        u32 vis[2] = {0, 0};
        #pragma unroll 1
        for (int col = 0; col < 2 * NB; ++col) {
            const int qc = (col >> 1) * 8 + 2 * t + (col & 1);
            const int qp = sP[qc], qs = seg_of(p, q_axis(p), q0 + qc);
            const DocSpan d = doc_span(p, b, qp);
            #pragma unroll
            for (int r = 0; r < 2; ++r)
                vis[r] |= (u32)(visible(p, h, qp, qs, kpos[r], kseg[r], klimit) && in_doc(kpos[r], d)) << col;
        }
        hide_scores_t<NB>(s, vis);
    }
}

// f(qc, nb, e) for each query column qc = 8 nb + 2t + e of a warp's transposed scores
