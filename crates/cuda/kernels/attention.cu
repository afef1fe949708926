// ringdil GPU kernels: masked / dilated flash attention (forward, backward) and the
// online-softmax merge. Compiled at run time by NVRTC, once per (architecture, element
// type, head dimension), with
//   -DHEAD_DIM=64|128   the head dimension (a compile-time constant: register tiles)
//   -DIS_F16=0|1        bf16 (0) or f16 (1) inputs; accumulation is always f32.
//   -DWGMMA=0|1         the kernel family: mma.sync (any sm_80+) or wgmma + TMA (sm_90a).
// No CUDA header is included: bf16/f16 values are carried as raw 16-bit words and
// converted with PTX `cvt`, so NVRTC needs no include path.
//
// Layouts (the reference crate's): q, k, v, d_out, out, dq, dk, dv are
// [batch, rows, heads, HEAD_DIM]; lse and delta are [batch, heads, rows].
// The design is described in docs/gpu.md.

#ifndef HEAD_DIM
#error "HEAD_DIM must be defined"
#endif
#ifndef IS_F16
#error "IS_F16 must be defined"
#endif

#if IS_F16
#define DT "f16"
#else
#define DT "bf16"
#endif

typedef unsigned short u16;
typedef unsigned int u32;

#define D HEAD_DIM
#define CH (D / 8)      // 16-byte chunks per row
#define BM 64           // query rows per block (16 per warp)
#define BN 64           // key rows per tile
#define NTHREADS 128
#define NEG_INF (__int_as_float(0xff800000))
#define POS_INF (__int_as_float(0x7f800000))
#define LOG2E 1.4426950408889634f
#define LN2 0.6931471805599453f

// Must match `Params` in src/launch.rs field for field.
struct Params {
    const u16* q;
    const u16* k;
    const u16* v;
    float* out;
    float* lse;
    const u16* dout;
    const float* delta;
    const float* lse2;         // backward: lse * log2(e), +inf for lse = -inf (bwd_delta)
    float* dq;
    float* dk;
    float* dv;
    const int* key_len;        // per batch row, null: no padding
    const int* plan_ptr;       // CSR of the tile plan: row tile -> visited column tiles
    const int* plan_idx;
    const unsigned char* block_mask;  // block-sparse user mask, bs_mask_blocks^2, or null
    int batch, heads;
    int nq, nk;                // launch index space (compact rows for a dilated branch)
    int q_rows, k_rows;        // physical rows of the q / k tensors
    int q_offset, k_offset;    // global position of physical row 0 (see Axis)
    int seq_len;               // global sequence length the pattern is defined on
    int causal;
    int pattern;               // 0 dense, 1 sliding window, 2 block sparse, 3 dilated branch
    int win_left, win_right;
    int bs_block, bs_radius, bs_stride, bs_global, bs_mask_blocks;
    int dil_segment, dil_rate, dil_rule, dil_fixed;
    int compact;               // 1: index c -> row of the dilated branch (see row_of)
    int dil_per_seg;           // ceil(dil_segment / dil_rate)
    int q_stride, k_stride;    // row i is at global position offset + i * stride
    int q_cbase, k_cbase;      // compact: global compact index of launch index 0
    int accumulate;            // forward: merge into out/lse; backward: add into dq/dk/dv
    float scale;
    float scale_log2;          // scale * log2(e)
};

// ---------------------------------------------------------------- small helpers

__device__ __forceinline__ float to_f32(u16 x) {
#if IS_F16
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(x));
    return f;
#else
    return __uint_as_float(((u32)x) << 16);
#endif
}

// 2^x, one MUFU instruction (flushes subnormal results to 0; 2^-inf = 0). exp2f without
// fast-math adds a subnormal range fix-up around it on every softmax element.
__device__ __forceinline__ float ex2(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}

// Two f32 -> one register of two 16-bit values, `lo` in the low half (round to nearest).
__device__ __forceinline__ u32 pack2(float lo, float hi) {
    u32 r;
    asm("cvt.rn." DT "x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
}

// Swizzled element offset of 16-byte chunk `ch` of row `r` in a [rows][D] tile: the chunk
// index is XOR-ed with r mod 8 so that ldmatrix's 8 row addresses hit 8 different banks.
__device__ __forceinline__ int swz(int r, int ch) { return r * D + ((ch ^ (r & 7)) << 3); }

// The wgmma operand layout ("128-byte swizzle", see the wgmma forward): a tile of ROWS rows is stored
// as D / 64 column blocks of ROWS x 64 elements (128-byte rows); in each block the 16-byte
// chunk c of row r sits at chunk c ^ (r mod 8), the XOR the tensor core's address unit
// undoes. Blocks start at multiples of 1024 bytes (8 rows: one swizzle period), as the
// descriptors below require. At D = 64 this is the layout `swz` gives.
template <int ROWS>
__device__ __forceinline__ int swz_blocks(int r, int ch) {
    return (ch >> 3) * ROWS * 64 + r * 64 + (((ch & 7) ^ (r & 7)) << 3);
}

__device__ __forceinline__ void cp_async16(u16* smem, const u16* gmem, bool valid) {
    u32 s = (u32)__cvta_generic_to_shared(smem);
    int n = valid ? 16 : 0;  // 0 bytes read: the 16 bytes are zero-filled
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(gmem), "r"(n));
}
// 4 bytes, no zero fill: a row's lse2 / delta into its query stage.
__device__ __forceinline__ void cp_async4(float* smem, const float* gmem) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"((u32)__cvta_generic_to_shared(smem)), "l"(gmem));
}
__device__ __forceinline__ void cp_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N)); }

__device__ __forceinline__ void ldsm4(u32* r, const u16* p) {
    u32 s = (u32)__cvta_generic_to_shared(p);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(s));
}
__device__ __forceinline__ void ldsm4t(u32* r, const u16* p) {
    u32 s = (u32)__cvta_generic_to_shared(p);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(s));
}

// c[16x8] += a[16x16] * b[16x8], f32 accumulate. Not volatile: registers only, so the
// compiler may schedule it freely around the (volatile, ordered) shared-memory loads.
__device__ __forceinline__ void mma(float* c, const u32* a, u32 b0, u32 b1) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32." DT "." DT ".f32 "
                 "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// A fragment (16 rows from r0, k-step kk) of a swizzled row-major tile.
__device__ __forceinline__ void frag_a(u32* a, const u16* tile, int r0, int kk, int lane) {
    ldsm4(a, tile + swz(r0 + (lane & 15), kk * 2 + (lane >> 4)));
}
// B fragments for n-block `nb` (8 rows of `tile` as columns n) and k-steps kk, kk+1:
// b[0], b[1] for kk; b[2], b[3] for kk + 1. (B = tile^T: S = Q K^T.)
__device__ __forceinline__ void frag_b_rows(u32* b, const u16* tile, int nb, int kk, int lane) {
    ldsm4(b, tile + swz(nb * 8 + (lane & 7), kk * 2 + (lane >> 3)));
}
// B fragments for k-step kk (16 rows of `tile` as k) and column blocks cb, cb+1 (8 columns
// each): b[0], b[1] for cb; b[2], b[3] for cb + 1. (B = tile: O = P V.)
__device__ __forceinline__ void frag_b_cols(u32* b, const u16* tile, int kk, int cb, int lane) {
    ldsm4t(b, tile + swz(kk * 16 + (lane & 7) + ((lane >> 3) & 1) * 8, cb + (lane >> 4)));
}

// ---------------------------------------------------------------- the mask

__device__ __forceinline__ int dil_offset(const Params& p, int h) {
    if (p.dil_rule == 0) return h % p.dil_rate;                                   // head mod r
    if (p.dil_rule == 1) return h / ((p.heads + p.dil_rate - 1) / p.dil_rate);    // head block
    return p.dil_fixed;
}

// One side of a launch: `n` launch indices over `rows` tensor rows; row i sits at global
// position offset + i * stride; in compact mode launch index c is global compact index
// c + cbase.
struct Axis {
    int n, rows, offset, stride, cbase;
};
__device__ __forceinline__ Axis q_axis(const Params& p) { return {p.nq, p.q_rows, p.q_offset, p.q_stride, p.q_cbase}; }
__device__ __forceinline__ Axis k_axis(const Params& p) { return {p.nk, p.k_rows, p.k_offset, p.k_stride, p.k_cbase}; }

// Tensor row of launch index c on axis a, or -1. In compact mode (contiguous axes) global
// compact index G = c + cbase is kept position t = G mod m of segment s = G div m
// (m = dil_per_seg): position s*w + o(h) + t*r, a hole (-1) past the segment's end or
// outside the axis's rows (a ring chunk that starts or ends inside a segment).
__device__ __forceinline__ int row_of(const Params& p, const Axis& a, int c, int h) {
    if (c >= a.n) return -1;
    if (!p.compact) return c;
    const int g = c + a.cbase, s = g / p.dil_per_seg, t = g - s * p.dil_per_seg;
    const int pos = s * p.dil_segment + dil_offset(p, h) + t * p.dil_rate;
    const int row = pos - a.offset;
    return pos < (s + 1) * p.dil_segment && row >= 0 && row < a.rows ? row : -1;
}

// Global position of tensor row `row` (-1 stays -1).
__device__ __forceinline__ int pos_of(const Axis& a, int row) { return row >= 0 ? a.offset + row * a.stride : -1; }

// Does query position i see key position j (both global, valid)? Mirrors the reference's
// patterns plus causality and padding (klimit = min(key length, seq_len)).
__device__ __forceinline__ bool allowed(const Params& p, int h, int i, int j, int klimit) {
    if (j >= klimit) return false;
    if (p.causal && j > i) return false;
    if (p.pattern == 1) return j >= i - p.win_left && j <= i + p.win_right;
    if (p.pattern == 2) {
        if (i < p.bs_global || j < p.bs_global) return true;
        int a = i / p.bs_block, b = j / p.bs_block, d = abs(a - b);
        if (p.bs_radius >= 0 && d <= p.bs_radius) return true;
        if (p.bs_stride > 0 && d % p.bs_stride == 0) return true;
        return p.block_mask != 0 && p.block_mask[a * p.bs_mask_blocks + b] != 0;
    }
    if (p.pattern == 3) {
        int w = p.dil_segment, s = i / w;
        if (j / w != s) return false;
        int o = dil_offset(p, h);
        return (i - s * w) % p.dil_rate == o && (j - s * w) % p.dil_rate == o;
    }
    return true;
}

// Compact segment of launch index c on axis a (0 outside compact mode).
__device__ __forceinline__ int seg_of(const Params& p, const Axis& a, int c) {
    return p.compact ? (c + a.cbase) / p.dil_per_seg : 0;
}

// The ends of a compact launch's index tile c0..c0+ROWS-1 on axis a: the rows of its first
// and last index (row_of's, -1 for a hole or an index past the launch) and their compact
// segments. `o` is the head's offset, dil_offset(p, h). One integer division while the
// tile stays in one segment, against row_of's one per index plus dil_offset's: the wgmma
// forward's producer evaluates this per K/V tile, on the path that keeps the stages filled,
// and hands the key side of tile_full to the consumers (with the divisions on both paths
// a LongNet branch cost twice a dense launch of the same work: v25 in
// docs/benchmarks/gpu-bench.md).
struct TileEnds {
    int row0, last, s0, s1;
};
template <int ROWS>
__device__ __forceinline__ TileEnds compact_tile_ends(const Params& p, const Axis& a, int c0, int o) {
    const int m = p.dil_per_seg, g0 = c0 + a.cbase, s0 = g0 / m, t0 = g0 - s0 * m;
    int s1 = s0, t1 = t0 + ROWS - 1;
    if (t1 >= m) {
        s1 = (g0 + ROWS - 1) / m;
        t1 = g0 + ROWS - 1 - s1 * m;
    }
    auto row = [&](int c, int s, int t) {
        const int pos = s * p.dil_segment + o + t * p.dil_rate, r = pos - a.offset;
        return c < a.n && pos < (s + 1) * p.dil_segment && r >= 0 && r < a.rows ? r : -1;
    };
    return {row(c0, s0, t0), row(c0 + ROWS - 1, s1, t1), s0, s1};
}
// The key side of tile_full in a compact launch: the key tile's segment if its keys are all
// rows of that one segment (no hole) before the padding limit, else -1.
__device__ __forceinline__ int compact_key_seg(const Params& p, const TileEnds& e, int klimit) {
    return e.s0 == e.s1 && e.row0 >= 0 && e.last >= 0 && pos_of(k_axis(p), e.last) < klimit ? e.s0 : -1;
}
// tile_full in a compact launch from its key side (compact_key_seg): the queries
// q0..q0+qn-1 lie in the key tile's segment, and (causal) at or after its last key k1
// (same segment: compact order is position order).
__device__ __forceinline__ bool compact_tile_full(const Params& p, int kseg, int q0, int qn, int k1) {
    const Axis qa = q_axis(p);
    return kseg >= 0 && seg_of(p, qa, q0) == kseg && seg_of(p, qa, q0 + qn - 1) == kseg &&
           (!p.causal || k1 + p.k_cbase <= q0 + qa.cbase);
}

// The element mask with per-row precomputed positions (-1: no row) and compact segments.
// In compact mode every valid index pair of one segment is a kept pair of the branch, so
// only segment, causality and padding remain: no division per element.
__device__ __forceinline__ bool visible(const Params& p, int h, int qpos, int qseg, int kpos, int kseg, int klimit) {
    if (qpos < 0 || kpos < 0) return false;
    if (p.compact) return qseg == kseg && kpos < klimit && (!p.causal || kpos <= qpos);
    return allowed(p, h, qpos, kpos, klimit);
}

// A tile (query indices q0..q0+qn-1, keys k0..k0+KROWS-1) that needs no per-element mask:
// every key is a valid row visible to every query (query holes are never stored).
template <int KROWS = BN>
__device__ __forceinline__ bool tile_full(const Params& p, int h, int q0, int qn, int k0, int klimit) {
    const Axis qa = q_axis(p), ka = k_axis(p);
    const int k1 = k0 + KROWS - 1;
    if (p.compact) {
        // One segment for the whole tile, no key hole (within a segment rows grow with the
        // index and the valid ones are an interval: the first and last key decide), inside
        // the padding, the queries in it and below the diagonal.
        const TileEnds e = compact_tile_ends<KROWS>(p, ka, k0, dil_offset(p, h));
        return compact_tile_full(p, compact_key_seg(p, e, klimit), q0, qn, k1);
    }
    const int klast = ka.offset + k1 * ka.stride;
    return p.pattern == 0 && k1 < p.nk && klast < klimit && (!p.causal || klast <= qa.offset + q0 * qa.stride);
}

__device__ __forceinline__ int key_limit(const Params& p, int b) {
    return p.key_len ? min(p.key_len[b], p.seq_len) : p.seq_len;
}

// How a (warp, key tile) pair is masked: MASK_NONE when tile_full proves every pair visible;
// MASK_AFFINE for the common case (pattern 0 = dense, not compact: causal and / or key padding
// only), where positions are affine in the launch index and the mask is one integer compare
// per element (see key_cut, query_cut); MASK_GENERIC otherwise (`visible`, evaluated in a
// rolled loop into a bit mask, so that the pattern code is not unrolled into every element).
#define MASK_NONE 0
#define MASK_AFFINE 1
#define MASK_GENERIC 2
#ifndef FAST_MASK
#define FAST_MASK 1
#endif
__device__ __forceinline__ int mask_kind(const Params& p, bool full) {
    return full ? MASK_NONE : (FAST_MASK && !p.compact && p.pattern == 0) ? MASK_AFFINE : MASK_GENERIC;
}
#define CUT_MAX 0x7fffffff
// MASK_AFFINE: key launch index kc is visible to query launch index qc iff
// key_cut(kc) <= query_cut(qc). A key cut is the key's global position, CUT_MAX for no key
// (index past the launch or position past the padding limit); a query cut is the query's
// position under a causal mask and CUT_MAX - 1 (every key) otherwise. A query index past the
// launch is never stored (forward); the backward passes -1 for it (no key).
__device__ __forceinline__ int key_cut(const Params& p, int kc, int klimit) {
    if (kc >= p.nk) return CUT_MAX;
    const int pos = p.k_offset + kc * p.k_stride;
    return pos < klimit ? pos : CUT_MAX;
}
__device__ __forceinline__ int query_cut(const Params& p, int qc) {
    return p.causal && qc < p.nq ? p.q_offset + qc * p.q_stride : CUT_MAX - 1;
}

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
// n = 16384 (v17 in docs/benchmarks/gpu-bench.md). The last group's light tiles still end
// the grid. Otherwise tiles vary fastest, so that blocks running together share their
// heads' K / V in L2.
#ifndef LPT_ORDER
#define LPT_ORDER 1
#endif
#define LPT_GROUP 8
struct Coords {
    int tile, h, b;
};
// Coordinates of work item `lin` (in start order) of tiles x heads x batch.
__device__ __forceinline__ Coords coords_of(const Params& p, unsigned lin, unsigned tiles, bool heavy_last) {
    const unsigned heads = p.heads, hb = heads * p.batch;  // (head, batch) pairs, head fastest
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
    return {heavy_last ? (int)(tiles - 1 - tile) : (int)tile, (int)(pair % heads), (int)(pair / heads)};
}
// A block's coordinates in a grid of (tiles, heads, batch) blocks.
__device__ __forceinline__ Coords block_coords(const Params& p, bool heavy_last) {
    if (!LPT_ORDER || !p.causal)
        return {heavy_last ? (int)(gridDim.x - 1 - blockIdx.x) : (int)blockIdx.x, (int)blockIdx.y, (int)blockIdx.z};
    return coords_of(p, blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z), gridDim.x, heavy_last);
}

// Are all keys of the tile starting at launch index k0 past the padding limit? Positions
// grow with the index, so the tile's first possible position decides. The plan is per
// (row tile), shared by the batch; padding is per batch row, so it is skipped here.
__device__ __forceinline__ bool keys_past_limit(const Params& p, int k0, int klimit) {
    const Axis ka = k_axis(p);
    const int first = p.compact ? max(seg_of(p, ka, k0) * p.dil_segment, ka.offset) : ka.offset + k0 * ka.stride;
    return first >= klimit;
}

// Asynchronously copy ROWS rows (launch indices c0..) of one head into a swizzled tile;
// rows outside the range or in a hole are zero-filled (so that 0 * garbage never yields NaN).
// Each of THREADS threads (threadIdx.x mod THREADS: a warp of the block may load alone)
// copies the same 16-byte chunk of every (THREADS / CH)-th row: a fixed trip count, one
// address per row, no per-chunk division.
template <int ROWS = 64, int THREADS = NTHREADS, bool BLOCKS = false>
__device__ __forceinline__ void load_tile(u16* tile, const u16* g, const Params& p, const Axis& a, int b, int h,
                                          int c0) {
    constexpr int STEP = THREADS / CH;  // rows per pass
    static_assert(THREADS % CH == 0 && ROWS % STEP == 0, "tile rows must split evenly over the threads");
    const int tid = threadIdx.x % THREADS, r0 = tid / CH, ch = tid % CH;
    const u16* base = g + ((size_t)b * a.rows * p.heads + h) * D + ch * 8;
    #pragma unroll
    for (int i = 0; i < ROWS / STEP; ++i) {
        const int r = r0 + i * STEP;
        const int row = row_of(p, a, c0 + r, h);
        cp_async16(tile + (BLOCKS ? swz_blocks<ROWS>(r, ch) : swz(r, ch)), row >= 0 ? base + (size_t)row * p.heads * D : g, row >= 0);
    }
}

// ---------------------------------------------------------------- forward

// Two forward kernels share the per-warp steps below (mask, online softmax, epilogue) and
// the tile plans (FBM query rows per block, BN = 64 keys per tile). The host picks the
// family (both forward and backward) per device and passes -DWGMMA:
//   0: `mma.sync` (any sm_80+ device): 4 warps, 2 m16 row tiles each, fragments by ldmatrix
//      (FBM = 128).
//   1: `wgmma` (sm_90a: H100 / H200): 3 warpgroups of 64 rows (FBM = 192), asynchronous
//      warpgroup MMAs reading K and V straight from shared memory (see "forward, wgmma").
#ifndef WGMMA
#error "WGMMA must be defined"
#endif
#if WGMMA
// Consumer warpgroups (64 query rows each) per wgmma forward block: three, so that a third
// warpgroup's softmax overlaps the other two's MMAs (against two: d = 64 1.19-1.28x faster,
// where the softmax work per MMA flop is twice that of d = 128; d = 128 1.01-1.06x; v11,
// v12 in docs/benchmarks/gpu-bench.md).
#define FWD_WGS 3
#define FBM (64 * FWD_WGS)  // query rows per forward block
#else
#define FBM 128  // query rows per forward block
#endif
#define NKB (BN / 8)  // 8-key column blocks of a score tile

// Launch index of row r (0: +0, 1: +8) of m16 tile mt of a warp whose first row (with the
// lane's g = lane / 4 added) is `qbase`.
__device__ __forceinline__ int row_idx(int qbase, int mt, int r) { return qbase + mt * 16 + 8 * r; }

// Mask a warp's scores s[mt][nb][e] (rows row_idx(qbase, mt, e / 2), keys k0 + 8 nb + 2t +
// e % 2; NK 8-key column blocks) to -inf where not visible: nothing for MASK_NONE.
template <int WMT, int NK = NKB>
__device__ __forceinline__ void mask_scores(const Params& p, int h, int kind, int klimit, float (&s)[WMT][NK][4],
                                            int qbase, int k0, int t) {
    if (kind == MASK_AFFINE) {
        int qcut[WMT][2];
        #pragma unroll
        for (int mt = 0; mt < WMT; ++mt)
            #pragma unroll
            for (int r = 0; r < 2; ++r) qcut[mt][r] = query_cut(p, row_idx(qbase, mt, r));
        #pragma unroll
        for (int nb = 0; nb < NK; ++nb)
            #pragma unroll
            for (int e = 0; e < 2; ++e) {
                const int kcut = key_cut(p, k0 + nb * 8 + 2 * t + e, klimit);
                #pragma unroll
                for (int mt = 0; mt < WMT; ++mt)
                    #pragma unroll
                    for (int r = 0; r < 2; ++r)
                        if (kcut > qcut[mt][r]) s[mt][nb][2 * r + e] = NEG_INF;
            }
    } else if (kind == MASK_GENERIC) {
        // Bit (2 nb + e) of vis[mt][r]: key column nb*8 + 2t + e is visible to row (mt, r)
        // (NK <= 16: 32 bits).
        static_assert(NK <= 16, "a thread's key columns fit the 32-bit mask");
        int qpos[WMT][2], qseg[WMT][2];
        u32 vis[WMT][2];
        #pragma unroll
        for (int mt = 0; mt < WMT; ++mt)
            #pragma unroll
            for (int r = 0; r < 2; ++r) {
                const int qc = row_idx(qbase, mt, r);
                qpos[mt][r] = pos_of(q_axis(p), row_of(p, q_axis(p), qc, h));
                qseg[mt][r] = seg_of(p, q_axis(p), qc);
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
                    vis[mt][r] |= (u32)visible(p, h, qpos[mt][r], qseg[mt][r], kpos, kseg, klimit) << col;
        }
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
}

// One online-softmax step in the log2 domain: the running maxima m and sums l absorb the
// tile's masked scores s, which become P = 2^(s*scale*log2e - m). alpha is the factor the
// output accumulated so far must be scaled by; the return value says whether any row of the
// warp has a new maximum (otherwise alpha = 1 everywhere and the rescale is skipped).
// max(c*s) = c*max(s) for c > 0: one multiply per row.
template <int WMT, int NK = NKB>
__device__ __forceinline__ bool softmax_step(const Params& p, float (&s)[WMT][NK][4], float (&m)[WMT][2],
                                             float (&l)[WMT][2], float (&alpha)[WMT][2]) {
    bool grew = false;
    #pragma unroll
    for (int mt = 0; mt < WMT; ++mt)
        #pragma unroll
        for (int r = 0; r < 2; ++r) {
            float mx = NEG_INF;
            #pragma unroll
            for (int nb = 0; nb < NK; ++nb) mx = fmaxf(mx, fmaxf(s[mt][nb][2 * r], s[mt][nb][2 * r + 1]));
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffff, mx, 1));
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffff, mx, 2));
            const float mnew = fmaxf(m[mt][r], mx * p.scale_log2);
            const float base = mnew == NEG_INF ? 0.f : mnew;  // a row with no key yet: no NaN
            alpha[mt][r] = mnew == m[mt][r] ? 1.f : ex2(m[mt][r] - base);
            grew |= mnew != m[mt][r];
            m[mt][r] = mnew;
            float sum = 0.f;
            #pragma unroll
            for (int nb = 0; nb < NK; ++nb)
                #pragma unroll
                for (int e = 0; e < 2; ++e) {
                    const float pe = ex2(fmaf(s[mt][nb][2 * r + e], p.scale_log2, -base));
                    s[mt][nb][2 * r + e] = pe;
                    sum += pe;
                }
            l[mt][r] = l[mt][r] * alpha[mt][r] + sum;
        }
    return __any_sync(0xffffffff, grew);
}

template <int WMT>
__device__ __forceinline__ void rescale(float (&o)[WMT][D / 8][4], const float (&alpha)[WMT][2]) {
    #pragma unroll
    for (int mt = 0; mt < WMT; ++mt)
        #pragma unroll
        for (int i = 0; i < D / 8; ++i) {
            o[mt][i][0] *= alpha[mt][0];
            o[mt][i][1] *= alpha[mt][0];
            o[mt][i][2] *= alpha[mt][1];
            o[mt][i][3] *= alpha[mt][1];
        }
}

// P (f32 accumulators of S) as 16-bit A fragments of O += P V: the accumulators of two
// 8-key blocks are the A fragment of one 16-key step, for mma.m16n8k16 and for wgmma alike.
template <int WMT, int NK = NKB>
__device__ __forceinline__ void pack_p(u32 (&pa)[WMT][NK / 2][4], const float (&s)[WMT][NK][4]) {
    #pragma unroll
    for (int mt = 0; mt < WMT; ++mt)
        #pragma unroll
        for (int kk = 0; kk < NK / 2; ++kk) {
            pa[mt][kk][0] = pack2(s[mt][2 * kk][0], s[mt][2 * kk][1]);
            pa[mt][kk][1] = pack2(s[mt][2 * kk][2], s[mt][2 * kk][3]);
            pa[mt][kk][2] = pack2(s[mt][2 * kk + 1][0], s[mt][2 * kk + 1][1]);
            pa[mt][kk][3] = pack2(s[mt][2 * kk + 1][2], s[mt][2 * kk + 1][3]);
        }
}

// The epilogue: O / l and the LSE of each row, or, with `accumulate`, this launch's result
// merged into the partial already in out / lse (the online-softmax merge of merge_partials,
// fused): a dilated pattern's branches and a ring step's pieces build one accumulator
// without a separate merge pass over the whole output per launch. Every lane of a row's
// quad reads the old LSE before lane 0 overwrites it (one warp owns each row; __syncwarp
// orders the two).
template <int WMT>
__device__ __forceinline__ void store_forward(const Params& p, int b, int h, const float (&o)[WMT][D / 8][4],
                                              const float (&m)[WMT][2], const float (&l)[WMT][2], int qbase, int t) {
    float lold[WMT][2];
    int qrows[WMT][2];
    #pragma unroll
    for (int mt = 0; mt < WMT; ++mt)
        #pragma unroll
        for (int r = 0; r < 2; ++r) {
            qrows[mt][r] = row_of(p, q_axis(p), row_idx(qbase, mt, r), h);
            lold[mt][r] = p.accumulate && qrows[mt][r] >= 0
                              ? p.lse[((size_t)b * p.heads + h) * p.q_rows + qrows[mt][r]]
                              : NEG_INF;
        }
    __syncwarp();
    #pragma unroll
    for (int mt = 0; mt < WMT; ++mt)
        #pragma unroll
        for (int r = 0; r < 2; ++r) {
            float lr = l[mt][r];
            lr += __shfl_xor_sync(0xffffffff, lr, 1);
            lr += __shfl_xor_sync(0xffffffff, lr, 2);
            const int qrow = qrows[mt][r];
            if (qrow < 0) continue;
            const float lnew = lr > 0.f ? (m[mt][r] + log2f(lr)) * LN2 : NEG_INF;
            float* orow = p.out + (((size_t)b * p.q_rows + qrow) * p.heads + h) * D;
            float* lrow = p.lse + ((size_t)b * p.heads + h) * p.q_rows + qrow;
            if (!p.accumulate) {
                const float inv = lr > 0.f ? 1.f / lr : 0.f;
                #pragma unroll
                for (int i = 0; i < D / 8; ++i)
                    *reinterpret_cast<float2*>(orow + i * 8 + 2 * t) =
                        make_float2(o[mt][i][2 * r] * inv, o[mt][i][2 * r + 1] * inv);
                if (t == 0) *lrow = lnew;
                continue;
            }
            const float a = lold[mt][r], mx = fmaxf(a, lnew);
            if (mx == NEG_INF) continue;  // both empty: the identity already there stays
            const float ea = expf(a - mx), eb = expf(lnew - mx), sum = ea + eb;
            // Weights of the old partial and of this launch's normalised output O / l.
            const float wa = ea / sum, wb = lr > 0.f ? eb / sum / lr : 0.f;
            #pragma unroll
            for (int i = 0; i < D / 8; ++i) {
                float2* at = reinterpret_cast<float2*>(orow + i * 8 + 2 * t);
                const float2 old = *at;
                *at = make_float2(wa * old.x + wb * o[mt][i][2 * r], wa * old.y + wb * o[mt][i][2 * r + 1]);
            }
            if (t == 0) *lrow = mx + logf(sum);
        }
}

// A block's key tiles (of KROWS keys): the plan row of query tile qt, without the tail past
// the padding limit (plan rows are ascending; the plan is per row tile, shared by the
// batch, padding is per batch row).
template <int KROWS = BN>
__device__ __forceinline__ int plan_end(const Params& p, int qt, int klimit) {
    const int kbeg = p.plan_ptr[qt];
    int kend = p.plan_ptr[qt + 1];
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

#if !WGMMA
// ---------------------------------------------------------------- forward, mma.sync

// Block layout: 4 warps of two m16 row tiles (WM), so every K / V fragment read from
// shared memory feeds two tensor-core products. (8 warps of one row tile each, with Q in
// registers and no spills, measured 20% slower at d = 128 on H100: twice the shared-memory
// traffic per flop; see docs/benchmarks/gpu-bench.md, v4.)
#define WM 2      // m16 row tiles per warp
// Q fragments live in registers for the whole key loop where they fit (d = 64); at
// d = 128, O and S already take 192 registers and Q is re-read from shared memory per tile.
#define QREGS (D == 64)
// Fragment prefetch distance: ldmatrix results are requested PF fragments before the mma
// that consumes them, so the shared-memory latency hides behind tensor-core work.
#define PF (D == 128 ? 2 : 4)
#define NKF ((D / 32) * (BN / 8))   // K fragments per tile (x4: 8 keys x 32 dims)
#define NVF ((BN / 16) * (D / 16))  // V fragments per tile (x4.trans: 16 keys x 16 dims)

// One block: FBM query rows (launch indices) of one (batch, head), visiting only the key
// tiles of its plan row, online softmax in the log2 domain. K/V tiles are double-buffered:
// tile j+1 is fetched (cp.async) while tile j is computed, one barrier per tile.
extern "C" __global__ void __launch_bounds__(NTHREADS) attn_fwd(const Params p) {
    extern __shared__ __align__(128) u16 smem[];
    u16* sQ = smem;
    u16* sKV = sQ + FBM * D;  // stage s: K at sKV + 2*s*BN*D, V right after it
    // Heaviest tiles first: under a causal mask the last query tiles visit the most keys.
    const Coords bc = block_coords(p, true);
    const int qt = bc.tile, h = bc.h, b = bc.b;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int q0 = qt * FBM, wq0 = q0 + warp * WM * 16;  // first index of the block / warp
    const int klimit = key_limit(p, b);
    const int kbeg = p.plan_ptr[qt], kend = plan_end(p, qt, klimit);

    float o[WM][D / 8][4];
    #pragma unroll
    for (int mt = 0; mt < WM; ++mt)
        #pragma unroll
        for (int i = 0; i < D / 8; ++i) o[mt][i][0] = o[mt][i][1] = o[mt][i][2] = o[mt][i][3] = 0.f;
    float m[WM][2], l[WM][2];
    #pragma unroll
    for (int mt = 0; mt < WM; ++mt) m[mt][0] = m[mt][1] = NEG_INF, l[mt][0] = l[mt][1] = 0.f;
#if QREGS
    u32 qf[WM][D / 16][4];
#endif

    load_tile<FBM>(sQ, p.q, p, q_axis(p), b, h, q0);
    if (kbeg < kend) {
        load_tile(sKV, p.k, p, k_axis(p), b, h, p.plan_idx[kbeg] * BN);
        load_tile(sKV + BN * D, p.v, p, k_axis(p), b, h, p.plan_idx[kbeg] * BN);
    }
    cp_commit();

    for (int it = kbeg; it < kend; ++it) {
        const int k0 = p.plan_idx[it] * BN;
        const u16* sK = sKV + ((it - kbeg) & 1) * 2 * BN * D;
        const u16* sV = sK + BN * D;
        cp_wait<0>();     // this thread's copies of tile `it` (and Q) have landed
        __syncthreads();  // everyone's have, and every warp is done with tile it - 1
        if (it + 1 < kend) {  // into the stage tile it - 1 used
            u16* nK = sKV + ((it + 1 - kbeg) & 1) * 2 * BN * D;
            load_tile(nK, p.k, p, k_axis(p), b, h, p.plan_idx[it + 1] * BN);
            load_tile(nK + BN * D, p.v, p, k_axis(p), b, h, p.plan_idx[it + 1] * BN);
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
        mask_scores<WM>(p, h, mask_kind(p, tile_full(p, h, wq0, WM * 16, k0, klimit)), klimit, s, wq0 + g, k0, t);
        float alpha[WM][2];
        if (softmax_step<WM>(p, s, m, l, alpha)) rescale<WM>(o, alpha);

        // O += P V. Fragment f covers keys 16*(f div D/16).., dims 16*(f mod D/16)..
        {
            u32 pa[WM][BN / 16][4];
            pack_p<WM>(pa, s);
            u32 vf[NVF][4];
            #pragma unroll
            for (int f = 0; f < PF; ++f) frag_b_cols(vf[f], sV, f / (D / 16), 2 * (f % (D / 16)), lane);
            #pragma unroll
            for (int f = 0; f < NVF; ++f) {
                const int kk = f / (D / 16), cb = 2 * (f % (D / 16));
                if (f + PF < NVF) frag_b_cols(vf[f + PF], sV, (f + PF) / (D / 16), 2 * ((f + PF) % (D / 16)), lane);
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
#endif  // !WGMMA

#if WGMMA
// ---------------------------------------------------------------- forward, wgmma (sm_90a)

// Hopper's warpgroup MMA: one instruction per warpgroup (4 warps, 128 threads) multiplies
// a 64 x 16 A tile by a 16 x N B tile, asynchronously (issue, commit a group, wait for it).
// B is read by the tensor cores straight from shared memory through a 64-bit descriptor,
// so K and V never pass through registers (mma.sync needs one ldmatrix per 8x16 fragment
// and per warp: 4x the shared-memory reads of one wgmma). A comes from registers here: Q
// (loaded once) for S = Q K^T and P (the softmax of S, never stored) for O += P V.
//
// Register fragments of wgmma m64nNk16 are those of mma.m16n8k16, per warp: warp w of the
// warpgroup holds rows 16w.. of the 64; accumulator block i (8 columns) is d[i][0..3] =
// (row g, cols 8i + 2t, +1), (row g + 8, same cols). So mask_scores, softmax_step, pack_p
// and store_forward serve both kernels unchanged (with one m16 tile per warp).
#define WG_STAGES 4       // K/V stages: up to 3 tiles load while one computes
// Key rows per forward K/V tile (the host's Family::forward_key_tile, over which it plans):
// 128 at d = 64 (flash-attention 3's tile at that head dimension), 64 at d = 128. At d = 64
// a 64-key tile's MMAs (S and P V: 2 x 64 x 64 x 64 per warpgroup) are short against the
// per-tile work around them that does not scale with the keys (stage wait and release,
// the row maxima's shuffles and vote, the rescale of O, descriptors, MMA issue and wait);
// 128 keys halve it per key. At d = 128 the consumers' registers hold no more (O is 64 per
// thread there). A tile is FBN / 64 TMA boxes per tensor (64 rows each, row0 + 64 R apart).
#define FBN (D == 64 ? 2 * BN : BN)
#define FNKB (FBN / 8)  // 8-key column blocks of a forward score tile

// Descriptor of a shared-memory operand in that layout (PTX ISA, "matrix descriptor"):
// start address, "leading" and "stride" byte offsets (all >> 4), swizzle mode 1 = 128 B.
//  * K-major (B of S = Q K^T: the 16 k-values of one MMA lie in one 128-byte row): stride
//    = 1024 B from one 8-row group to the next; leading unused (1). Step k (dims 16k..)
//    starts at column block k / 4, byte 32 * (k mod 4) of the row.
//  * MN-major (B of O = P V, transposed: N = head dims contiguous): leading = bytes from
//    one 64-column block to the next (ROWS * 128), stride = 1024 B per 8 key rows. Step k
//    (keys 16k..) starts 16 rows = 2048 B further.
// Held as two 32-bit halves: the MMA loops build each operand's descriptor once and step
// only the low half (start address) by constants; the high half (stride, swizzle) is a
// constant that stays in a uniform register. Built per MMA as one 64-bit value, the address
// arithmetic and its moves to uniform registers took about 13 instructions per wgmma, 40% of
// the backward's instructions (Nsight Compute source counters, v12c).
struct Desc {
    u32 lo, hi;
};
__device__ __forceinline__ Desc smem_desc(const u16* ptr, u32 lead, u32 stride) {
    const u32 a = (u32)__cvta_generic_to_shared(ptr);
    return {((a & 0x3FFFF) >> 4) | ((lead >> 4) << 16), (stride >> 4) | (1u << 30)};
}
// The descriptor `elems` 16-bit elements (a multiple of 8) further on. A shared address
// (< 228 KB) never carries out of the 14-bit start-address field.
__device__ __forceinline__ Desc desc_step(Desc d, u32 elems) { return {d.lo + (elems >> 3), d.hi}; }

// `x` (the same in every lane) as a value the compiler knows is warp-uniform, so that
// what is computed from it (a warpgroup's operand descriptors) stays in uniform registers.
__device__ __forceinline__ int warp_uniform(int x) { return __shfl_sync(0xffffffffu, x, 0); }

__device__ __forceinline__ void wg_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wg_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void wg_wait() { asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory"); }
// Shared memory written through the generic proxy (cp.async, st.shared) becomes visible to
// the tensor cores' async proxy only after this fence (and a barrier across writers).
__device__ __forceinline__ void fence_async_smem() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }

// The compiler sees a wgmma's accumulators as written when it is issued; this empty asm
// "rewrites" them after the wait, so that no read of them is scheduled before it.
template <int N>
__device__ __forceinline__ void fence_acc(float (&a)[N][4]) {
    #pragma unroll
    for (int i = 0; i < N; ++i) asm volatile("" : "+f"(a[i][0]), "+f"(a[i][1]), "+f"(a[i][2]), "+f"(a[i][3])::"memory");
}

#define WG_ACC(x, i) "+f"(x[i][0]), "+f"(x[i][1]), "+f"(x[i][2]), "+f"(x[i][3])
#define WG_ACC8(x, i) WG_ACC(x, i), WG_ACC(x, i + 1), WG_ACC(x, i + 2), WG_ACC(x, i + 3), \
                      WG_ACC(x, i + 4), WG_ACC(x, i + 5), WG_ACC(x, i + 6), WG_ACC(x, i + 7)

// d[64 x 64] (+)= a[64 x 16] * B[16 x 64]: `acc` 0 overwrites d; TRANS: B is MN-major.
template <int TRANS>
__device__ __forceinline__ void wgmma_n64(float (&d)[8][4], const u32 (&a)[4], Desc desc, int acc) {
    asm volatile(
        "{\n.reg .pred p;\n.reg .b64 db;\nsetp.ne.b32 p, %38, 0;\nmov.b64 db, {%36, %37};\n"
        "wgmma.mma_async.sync.aligned.m64n64k16.f32." DT "." DT " "
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, "
        "{%32, %33, %34, %35}, db, p, 1, 1, %39;\n}\n"
        : WG_ACC8(d, 0)
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(desc.lo), "r"(desc.hi), "r"(acc), "n"(TRANS));
}
// d[64 x 128] (+)= a[64 x 16] * B[16 x 128]: as wgmma_n64 (O += P V at D = 128, B
// MN-major; S = Q K^T over a 128-key tile at D = 64, B K-major).
template <int TRANS>
__device__ __forceinline__ void wgmma_n128(float (&d)[16][4], const u32 (&a)[4], Desc desc, int acc) {
    asm volatile(
        "{\n.reg .pred p;\n.reg .b64 db;\nsetp.ne.b32 p, %70, 0;\nmov.b64 db, {%68, %69};\n"
        "wgmma.mma_async.sync.aligned.m64n128k16.f32." DT "." DT " "
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
        "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
        "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, "
        "{%64, %65, %66, %67}, db, p, 1, 1, %71;\n}\n"
        : WG_ACC8(d, 0), WG_ACC8(d, 8)
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(desc.lo), "r"(desc.hi), "r"(acc), "n"(TRANS));
}

// d[64 x 64] (+)= A[64 x 16] * B[16 x 64], both from shared memory; TA / TB: A is M-major
// / B is N-major (transposed).
template <int TA, int TB>
__device__ __forceinline__ void wgmma_ss_n64(float (&d)[8][4], Desc da, Desc db, int acc) {
    asm volatile(
        "{\n.reg .pred p;\n.reg .b64 da, db;\nsetp.ne.b32 p, %36, 0;\n"
        "mov.b64 da, {%32, %33};\nmov.b64 db, {%34, %35};\n"
        "wgmma.mma_async.sync.aligned.m64n64k16.f32." DT "." DT " "
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, "
        "da, db, p, 1, 1, %37, %38;\n}\n"
        : WG_ACC8(d, 0)
        : "r"(da.lo), "r"(da.hi), "r"(db.lo), "r"(db.hi), "r"(acc), "n"(TA), "n"(TB));
}

// d[64 x 128] (+)= A[64 x 16] * B[16 x 128], both from shared memory, K-major (the d = 64
// backward's S^T and dP^T over a 128-query tile).
__device__ __forceinline__ void wgmma_ss_n128(float (&d)[16][4], Desc da, Desc db, int acc) {
    asm volatile(
        "{\n.reg .pred p;\n.reg .b64 da, db;\nsetp.ne.b32 p, %68, 0;\n"
        "mov.b64 da, {%64, %65};\nmov.b64 db, {%66, %67};\n"
        "wgmma.mma_async.sync.aligned.m64n128k16.f32." DT "." DT " "
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
        "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
        "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, "
        "da, db, p, 1, 1, 0, 0;\n}\n"
        : WG_ACC8(d, 0), WG_ACC8(d, 8)
        : "r"(da.lo), "r"(da.hi), "r"(db.lo), "r"(db.hi), "r"(acc));
}

// S = Q K^T for one FBN-key tile: D / 16 steps over the head dimension, A = this warp's Q
// fragments (registers), B = the FBN key rows (shared memory, K-major).
__device__ __forceinline__ void issue_scores(float (&s)[FNKB][4], const u32 (&qf)[D / 16][4], const u16* sK) {
    const Desc dk = smem_desc(sK, 16, 1024);
    #pragma unroll
    for (int k = 0; k < D / 16; ++k) {
        const Desc desc = desc_step(dk, (k >> 2) * FBN * 64 + (k & 3) * 16);
#if FBN == 128
        wgmma_n128<0>(s, qf[k], desc, k > 0);
#else
        wgmma_n64<0>(s, qf[k], desc, k > 0);
#endif
    }
}
// The same with A from shared memory too: the warpgroup's 64 rows of the block's Q tile
// (`sQ`, inside the QROWS-row tile), K-major.
template <int QROWS>
__device__ __forceinline__ void issue_scores(float (&s)[FNKB][4], const u16* sQ, const u16* sK) {
    const Desc dq = smem_desc(sQ, 16, 1024), dk = smem_desc(sK, 16, 1024);
    #pragma unroll
    for (int k = 0; k < D / 16; ++k) {
        const Desc a = desc_step(dq, (k >> 2) * QROWS * 64 + (k & 3) * 16);
        const Desc b = desc_step(dk, (k >> 2) * FBN * 64 + (k & 3) * 16);
#if FBN == 128
        wgmma_ss_n128(s, a, b, k > 0);
#else
        wgmma_ss_n64<0, 0>(s, a, b, k > 0);
#endif
    }
}
// O += P V for one key tile: ROWS / 16 steps over the keys. In general acc += A B over the
// ROWS rows of an MN-major B tile (the head dimension contiguous), A from registers, 16
// rows per step: the backward's dV += P^T dO and dK += dS^T Q over a query tile too.
template <int ROWS = BN>
__device__ __forceinline__ void issue_pv(float (&o)[D / 8][4], const u32 (&pa)[ROWS / 16][4], const u16* sV) {
    const Desc dv = smem_desc(sV, ROWS * 128, 1024);
    #pragma unroll
    for (int k = 0; k < ROWS / 16; ++k) {
        const Desc desc = desc_step(dv, k * 16 * 64);
#if D == 128
        wgmma_n128<1>(o, pa[k], desc, 1);
#else
        wgmma_n64<1>(o, pa[k], desc, 1);
#endif
    }
}

// mbarriers (shared-memory arrival counters with a phase bit) hand the K/V stages between
// the producer warp and the consumer warpgroups without block-wide barriers.
__device__ __forceinline__ void mbar_init(u32 bar, u32 count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
__device__ __forceinline__ void mbar_arrive(u32 bar) {
    asm volatile("{\n.reg .b64 st;\nmbarrier.arrive.shared::cta.b64 st, [%0];\n}\n" ::"r"(bar) : "memory");
}
// Arrives when all of this thread's earlier cp.async have landed (counts as one of the
// barrier's expected arrivals: .noinc).
__device__ __forceinline__ void mbar_arrive_cp_async(u32 bar) {
    asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(bar) : "memory");
}
#define WG_PRODUCERS 128  // threads of the producer warpgroup
template <int N>
__device__ __forceinline__ void setmaxnreg_dec() { asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(N)); }
template <int N>
__device__ __forceinline__ void setmaxnreg_inc() { asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(N)); }

// Wait until the phase with parity `parity` of the barrier has completed.
__device__ __forceinline__ void mbar_wait(u32 bar, u32 parity) {
    u32 done;
    do {
        asm volatile(
            "{\n.reg .pred P;\nmbarrier.try_wait.parity.shared::cta.b64 P, [%1], %2;\nselp.u32 %0, 1, 0, P;\n}\n"
            : "=r"(done)
            : "r"(bar), "r"(parity)
            : "memory");
    } while (!done);
}

// Tensor maps (CUtensorMap, encoded by the host: src/tma.rs) of the K and V tensors, as
// 5-d tensors (head dim, heads, phase, step, batch) with row = step * R + phase, where R is
// the launch's row stride (the dilation of a compact branch, else 1), read in boxes of
// 64 x 1 x 1 x BN x 1 with the 128-byte swizzle: BN rows R apart, straight into one column
// block of the `swz_blocks` layout. Steps cover rows below (rows / R) * R; past them the
// box reads zeros. A kernel parameter (__grid_constant__: the TMA unit reads it there).
struct __align__(64) TensorMap {
    unsigned long long opaque[16];
};
struct TensorPair {  // the two tensors a launch streams: K, V (forward); Q, dO (backward)
    TensorMap a, b;
};

// The next phase of `bar` completes when `bytes` more have landed (plus this one arrival).
__device__ __forceinline__ void mbar_expect_bytes(u32 bar, u32 bytes) {
    asm volatile("{\n.reg .b64 st;\nmbarrier.arrive.expect_tx.shared::cta.b64 st, [%0], %1;\n}\n" ::"r"(bar),
                 "r"(bytes)
                 : "memory");
}
// The same without the arrival.
__device__ __forceinline__ void mbar_expect_tx(u32 bar, u32 bytes) {
    asm volatile("mbarrier.expect_tx.relaxed.cta.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
}
// One TMA box: rows row0, row0 + R, ... (BN of them) of head h, batch b, head dims
// c0..c0+63, into `dst` (1024-aligned).
__device__ __forceinline__ void tma_box(u16* dst, const TensorMap* map, int c0, int h, int row0, int R, int b,
                                        u32 bar) {
    asm volatile(
        "cp.async.bulk.tensor.5d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4, %5, "
        "%6}], [%7];\n" ::"r"((u32)__cvta_generic_to_shared(dst)),
        "l"(map), "r"(c0), "r"(h), "r"(row0 % R), "r"(row0 / R), "r"(b), "r"(bar)
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

// Are a compact tile's ROWS rows R apart, all inside the TMA view (so that its 64-row parts
// are TMA boxes, row0 + 64 R apart)? It must lie in one segment without holes (first and
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
    const TileEnds e = compact_tile_ends<ROWS>(p, a, k0, dil_offset(p, h));
    row0 = e.row0;
    return ends_are_box<ROWS>(p, a, e);
}

// One block per multiprocessor, working through items of FBM query rows of one
// (batch, head) (see fwd_next_item below; Family::forward_grid on the host). Warp
// specialised (flash-attention 3's structure): the first FWD_WGS warpgroups consume
// (warpgroup wg owns rows 64 wg.., warp w rows 16 w..); the last one, the producer
// warpgroup, alone streams Q tiles (two buffers) and K/V tiles (WG_STAGES shared-memory
// stages, counted over the block's whole run), so that the next item's Q and first K/V
// tiles load while the consumers finish the last one: a block start (Q and the first
// K/V tile from memory, 4 us at d = 128, and the next block's launch, 1.4 us) cost 5-7%
// of an n = 4096 forward (v21 in docs/benchmarks/gpu-bench.md). A tile whose rows are
// evenly spaced (every tile of a plain launch; the tiles of a compact dilated branch
// inside one segment, rows a dilation apart) is copied by the TMA unit: one thread issues
// D / 64 boxes per tensor, no per-row address work. Other tiles (a segment's end, holes at
// a ring chunk's edge) are gathered with cp.async by all 128 producer threads, which wait
// for their copies and meet at a named barrier before one of them arrives. K/V stage s
// has two mbarriers: full[s] completes when its tile has landed (one arrival, plus the
// TMA's bytes), empty[s] when all consumer threads are done with it; Q buffer b has
// q_full[b] (its item's slot written, its tile landed), q_empty[b] (every consumer past
// the item's last S) and slot_free[b] (every consumer has read the item's slot). No
// block-wide barrier after the start, so the consumer warpgroups drift freely and their
// MMAs and softmax interleave on the SM.
// (Measured on H100 with two consumer warpgroups: with all 256 threads copying and one
// barrier per tile, the copies and the barrier cost 60% of the time; with producers copying
// by cp.async, issuing the copies still halved the speed at d = 128. See
// docs/benchmarks/gpu-bench.md, v8.)
// Per tile j a consumer overlaps the two MMAs with the softmax (intra-warpgroup pipelining):
//   issue S(j+1) = Q K(j+1)^T;  issue O += P(j) V(j);
//   wait for S(j+1) -> mask + softmax -> P(j+1)   (tensor cores busy with P(j) V(j));
//   wait for P(j) V(j) -> release tile j's stage -> rescale O by the new maxima.
// Two instantiations, by consumer warpgroups WGS (64 rows each, plus the producer):
// FWD_WGS (`attn_fwd`, FBM-row tiles) and 2 (`attn_fwd_128`, 128-row tiles for compact
// launches whose segments are not a multiple of FBM rows; see launch.rs,
// Family::forward_q_tile_for). Separate kernels rather than a run-time tile: one measured 6%
// slower on dense rows, and a block of 128 rows is 384 threads, not 512 with one idle
// warpgroup, so its consumers get the registers to hold Q (v14 in gpu-bench.md).
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
    static constexpr int PRODUCER_REGS = WGS == 3 ? (FBN == 128 ? 32 : 56) : 120,
                         CONSUMER_REGS = WGS == 3 ? (FBN == 128 ? 160 : 152) : 192;
    // S = Q K^T reads Q from shared memory with three consumer warpgroups (Q in registers,
    // 16 or 32 per thread, does not fit next to O, S and P: at d = 64 ptxas serialises every
    // wgmma even with 160) and from registers with two (192 registers). With 64-key tiles,
    // d = 64 held Q in registers, 5-7% faster than from shared memory (v12 in
    // docs/benchmarks/gpu-bench.md); 128-key tiles gained 14-17% more (v24). The Q tile is
    // in the wgmma operand layout either way.
    static constexpr bool Q_SMEM = WGS == 3;
};

// Forward work items are claimed from a counter of the module, in the order blocks of a
// grid of items would start (blocks that finish first take the next: the hardware's own
// order and balance). The last block to find no item left resets it for the next launch,
// which the stream orders after this one (a Gpu launches on one stream; a kernel that
// faults leaves the context unusable anyway). Indexed by the instantiation (WGS - 2).
__device__ unsigned fwd_next_item[2], fwd_blocks_done[2];
#define LOOKAHEAD 4  // the next item is claimed this many K/V tiles before an item's last

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

template <int WGS>
__device__ __forceinline__ void attn_fwd_body(const Params& p, const TensorPair& maps, const TensorMap& q_map) {
    typedef FwdBlock<WGS> B;
    extern __shared__ __align__(1024) u16 smem_wg[];
    // The swizzle is a function of address bits: round the base up to 1024 bytes (the host
    // adds 1 KB to the request).
    u16* sQ = smem_wg + ((1024 - ((u32)__cvta_generic_to_shared(smem_wg) & 1023)) & 1023) / 2;
    u16* sKV = sQ + 2 * FBM * D;  // two Q tiles; stage s: K at sKV + 2*s*FBN*D, V right after it
    const u32 bars = (u32)__cvta_generic_to_shared(sKV + WG_STAGES * 2 * FBN * D);
    // K/V tiles are counted over the block's whole run (j), Q tiles by the block's items (u).
    auto full = [&](int j) { return bars + 8 * ((unsigned)j % WG_STAGES); };  // of tile j's stage
    auto empty = [&](int j) { return bars + 8 * (WG_STAGES + (unsigned)j % WG_STAGES); };
    auto q_full = [&](int u) { return bars + 16 * WG_STAGES + 8 * (u & 1); };
    auto q_empty = [&](int u) { return bars + 16 * WG_STAGES + 16 + 8 * (u & 1); };
    auto slot_free = [&](int u) { return bars + 16 * WG_STAGES + 32 + 8 * (u & 1); };  // every consumer read it
    // Item u's slot (of two): its number, first plan entry, key tiles, key limit, the key
    // tiles each consumer warpgroup computes (WGS <= 3) and, last, the head's dilation
    // offset (compact launches), written by the producer's leader.
    volatile int* slots = reinterpret_cast<volatile int*>(smem_wg) +
                          (bars + 16 * WG_STAGES + 48 - (u32)__cvta_generic_to_shared(smem_wg)) / 4;
    auto slot = [&](int u) { return slots + 8 * (u & 1); };
    // Tile j's first key (launch index), next to its stage, written by the producer's
    // leader: the consumers' mask needs it (a global load of the plan per tile measured
    // 1-2% slower at d = 128, v21 notes).
    volatile int* stage_keys = slots + 16;
    auto stage_key = [&](int j) -> volatile int& { return stage_keys[(unsigned)j % WG_STAGES]; };
    // A compact launch's tile j: its keys' segment where they all lie in one, without a
    // hole, inside the padding limit (the key side of tile_full), else -1; written with
    // stage_key, so that the consumers' per-tile mask decision needs no index arithmetic.
    auto stage_seg = [&](int j) -> volatile int& { return stage_keys[WG_STAGES + (unsigned)j % WG_STAGES]; };
    auto stage = [&](int j) { return sKV + ((unsigned)j % WG_STAGES) * 2 * FBN * D; };
    auto q_tile = [&](int u) { return sQ + (u & 1) * FBM * D; };
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const unsigned tiles = (p.nq + B::ROWS - 1) / B::ROWS, items = tiles * p.heads * p.batch;
    if (threadIdx.x == 0) {
        for (int s = 0; s < WG_STAGES; ++s) {
            mbar_init(full(s), 1);
            mbar_init(empty(s), B::CONSUMERS);
        }
        for (int u = 0; u < 2; ++u) {
            mbar_init(q_full(u), WG_PRODUCERS + 1);  // each producer's Q copies, and the slot
            mbar_init(q_empty(u), B::CONSUMERS);
            mbar_init(slot_free(u), B::CONSUMERS);
        }
    }
    __syncthreads();

    if (threadIdx.x >= B::CONSUMERS) {  // the producer warpgroup
        setmaxnreg_dec<B::PRODUCER_REGS>();
        const bool leader = threadIdx.x == B::CONSUMERS;
        const Axis ka = k_axis(p);
        const int R = p.compact ? p.dil_rate : 1;
        // The leader claims the block's item u into slot(u) and looks up its plan there: the
        // key tiles, the key limit, and the key tiles each consumer warpgroup computes (none
        // if it has no query row in the launch, as in the last tile of a launch whose rows
        // are not a multiple of B::ROWS; under a causal mask, not the tiles past its last
        // row, up to two at the block's diagonal). It does so LOOKAHEAD tiles before it has
        // issued the last item's K/V, so that the atomic and the dependent plan loads are not
        // between the consumers' items; once every consumer has read the slot's last item.
        auto claim = [&](int u) {
            if (u >= 2) mbar_wait(slot_free(u), ((u - 2) >> 1) & 1);
            const unsigned item = atomicAdd(&fwd_next_item[WGS - 2], 1u);
            volatile int* sl = slot(u);
            sl[0] = (int)item;
            if (item >= items) return;
            const Coords c = coords_of(p, item, tiles, true);
            const int q0 = c.tile * B::ROWS, klimit = key_limit(p, c.b);
            const int kbeg = p.plan_ptr[c.tile], n = plan_end<FBN>(p, c.tile, klimit) - kbeg;
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
            sl[7] = p.compact ? dil_offset(p, c.h) : 0;
        };
        if (leader) claim(0);
        for (int u = 0, j0 = 0;; ++u) {
            asm volatile("bar.sync 1, %0;\n" ::"n"(WG_PRODUCERS) : "memory");  // slot(u) is written
            if (leader) mbar_arrive(q_full(u));  // for the consumers too
            const unsigned item = (unsigned)slot(u)[0];
            if (item >= items) {
                mbar_arrive(q_full(u));
                if (leader && atomicAdd(&fwd_blocks_done[WGS - 2], 1u) == gridDim.x - 1) {
                    fwd_next_item[WGS - 2] = 0;
                    fwd_blocks_done[WGS - 2] = 0;
                }
                break;
            }
            const Coords c = coords_of(p, item, tiles, true);
            const int kbeg = slot(u)[1], n = slot(u)[2];
            // The Q tile of item u - 2 is free: every consumer is past its last S.
            if (u >= 2) mbar_wait(q_empty(u), ((u - 2) >> 1) & 1);
            if (n > 0) {
                // By TMA where each of its 64-row parts is evenly spaced (as a K/V tile), else
                // gathered: with every Q tile gathered by the producers (per-row address
                // work while the consumers compute) the consumers waited 8.6 us for each
                // item's Q at d = 128 (timeline in the v21 notes), 0.5 us by TMA.
                const int q0 = c.tile * B::ROWS;
                int qrow[B::ROWS / 64];
                bool box = true;
                #pragma unroll
                for (int r = 0; r < B::ROWS / 64; ++r) box = box && tile_is_box(p, q_axis(p), q0 + 64 * r, c.h, qrow[r]);
                if (box) {
                    if (leader) {
                        mbar_expect_tx(q_full(u), B::ROWS * D * 2);
                        #pragma unroll
                        for (int cb = 0; cb < D / 64; ++cb)
                            #pragma unroll
                            for (int r = 0; r < B::ROWS / 64; ++r)
                                tma_box(q_tile(u) + cb * B::ROWS * 64 + r * 64 * 64, &q_map, cb * 64, c.h, qrow[r], R,
                                        c.b, q_full(u));
                    }
                    mbar_arrive(q_full(u));
                } else {
                    load_tile<B::ROWS, WG_PRODUCERS, true>(q_tile(u), p.q, p, q_axis(p), c.b, c.h, q0);
                    mbar_arrive_cp_async(q_full(u));
                }
            } else {
                mbar_arrive(q_full(u));
            }
            const int claim_at = j0 + max(n - LOOKAHEAD, 0);
            if (leader && n == 0) claim(u + 1);
            // Every K/V tile of a plain launch is a box, issued by the leader: the other
            // producer warps wait at the next item's barrier rather than poll the stages'
            // mbarriers with it. Its own warp stays with it: bar.sync is warp-aligned.
            if (!p.compact && threadIdx.x - B::CONSUMERS >= 32) {
                j0 += n;
                continue;
            }
            for (int j = j0; j < j0 + n; ++j) {
                if (leader && j == claim_at) claim(u + 1);
                if (j >= WG_STAGES) mbar_wait(empty(j), (j / WG_STAGES - 1) & 1);  // its previous tile
                const int k0 = p.plan_idx[kbeg + j - j0] * FBN;
                int row0 = k0, seg = -1;
                bool box = true;
                if (p.compact) {  // the head's offset and the key limit from the item's slot
                    const TileEnds e = compact_tile_ends<FBN>(p, ka, k0, slot(u)[7]);
                    row0 = e.row0;
                    box = ends_are_box<FBN>(p, ka, e);
                    seg = compact_key_seg(p, e, slot(u)[3]);
                }
                if (box) {
                    if (!leader) continue;
                    stage_key(j) = k0;
                    stage_seg(j) = seg;
                    mbar_expect_bytes(full(j), 2 * FBN * D * 2);
                    #pragma unroll
                    for (int cb = 0; cb < D / 64; ++cb)
                        #pragma unroll
                        for (int r = 0; r < FBN / 64; ++r) {
                            u16* dst = stage(j) + cb * FBN * 64 + r * 64 * 64;
                            tma_box(dst, &maps.a, cb * 64, c.h, row0 + 64 * r * R, R, c.b, full(j));
                            tma_box(dst + FBN * D, &maps.b, cb * 64, c.h, row0 + 64 * r * R, R, c.b, full(j));
                        }
                } else {
                    load_tile<FBN, WG_PRODUCERS, true>(stage(j), p.k, p, ka, c.b, c.h, k0);
                    load_tile<FBN, WG_PRODUCERS, true>(stage(j) + FBN * D, p.v, p, ka, c.b, c.h, k0);
                    cp_wait<0>();
                    fence_async_smem();
                    asm volatile("bar.sync 1, %0;\n" ::"n"(WG_PRODUCERS) : "memory");  // producers only
                    if (leader) {
                        stage_key(j) = k0;
                        stage_seg(j) = seg;
                        mbar_arrive(full(j));
                    }
                }
            }
            j0 += n;
        }
        cp_wait<0>();
        return;
    }
    setmaxnreg_inc<B::CONSUMER_REGS>();
    const int wg = warp_uniform(warp >> 2);

    // P(j) is read by the wgmma of P(j) V(j) until its wait. Where the registers hold a
    // second set (64-key tiles, d = 128), P(j+1) is packed into pn right after its softmax,
    // while P(j) V(j) runs, and moved into pa after the wait; packing it after the wait was
    // 2-5% slower there (v24 in docs/benchmarks/gpu-bench.md). 128-key tiles (d = 64) leave
    // no room for it (S 64, P 32, O 32 of the consumers' 160 registers; ptxas serialises
    // every wgmma with a second set): P(j+1) stays in S's f32 registers until the wait and
    // is packed into pa then (flash-attention 3's order).
    constexpr bool EARLY_PACK = FBN == BN;
    float o[1][D / 8][4], s[1][FNKB][4], m[1][2], l[1][2], alpha[1][2];
    u32 pa[1][FBN / 16][4], pn[1][FBN / 16][4];  // pn: EARLY_PACK only
    u32 qf[B::Q_SMEM ? 1 : D / 16][4];
    // Tile j's K/V are in shared memory and visible to the tensor cores
    // (the copies were made through the generic proxy, wgmma reads through the async one).
    auto acquire = [&](int j) {
        mbar_wait(full(j), ((unsigned)j / WG_STAGES) & 1);
        fence_async_smem();
    };
    for (int u = 0, j0 = 0;; ++u) {
        mbar_wait(q_full(u), (u >> 1) & 1);
        const volatile int* sl = slot(u);
        const unsigned item = (unsigned)sl[0];
        if (item >= items) break;
        const Coords c = coords_of(p, item, tiles, true);
        const int h = c.h, b = c.b, q0 = c.tile * B::ROWS, wq0 = q0 + warp * 16;
        const int n = sl[2], klimit = sl[3];
        // The key tiles this warpgroup computes (see the producer); the stages of the others
        // are waited for and released, not computed: the other warpgroups get the tensor
        // cores.
        const int nw = sl[4 + wg];
        mbar_arrive(slot_free(u));
        m[0][0] = m[0][1] = NEG_INF;
        l[0][0] = l[0][1] = 0.f;
        #pragma unroll
        for (int i = 0; i < D / 8; ++i) o[0][i][0] = o[0][i][1] = o[0][i][2] = o[0][i][3] = 0.f;
        // A of S: this warpgroup's rows of the Q tile (Q_SMEM) or this warp's Q fragments.
        const u16* qs = q_tile(u) + wg * 64 * 64;
        // tile_full, in a compact launch from the key side the producer took once per tile
        // (stage_seg). (The warp's query segments are taken per tile rather than once per
        // item: two registers live across the loop cost the dense launches 1-4%, v25 notes.)
        auto full_tile = [&](int j, int k0) {
            return p.compact ? compact_tile_full(p, stage_seg(j), wq0, 16, k0 + FBN - 1)
                             : tile_full<FBN>(p, h, wq0, 16, k0, klimit);
        };
        // Mask + softmax of the complete S of tile j (of the block's run), in place, and
        // alpha; did a row maximum grow?
        auto softmax_tile = [&](int j) {
            const int k0 = stage_key(j);
            const int kind = mask_kind(p, full_tile(j, k0));
            mask_scores<1, FNKB>(p, h, kind, klimit, s, wq0 + g, k0, t);
            return softmax_step<1, FNKB>(p, s, m, l, alpha);
        };
        auto issue_s = [&](int j) {  // S = Q K(j)^T, committed as one group
            fence_acc(s[0]);
            wg_fence();
            if constexpr (B::Q_SMEM)
                issue_scores<B::ROWS>(s[0], qs, stage(j));
            else
                issue_scores(s[0], qf, stage(j));
            wg_commit();
        };
        auto issue_o = [&](int j) {  // O += P(j) V(j), committed as one group
            fence_acc(o[0]);
            wg_fence();
            issue_pv<FBN>(o[0], pa[0], stage(j) + FBN * D);
            wg_commit();
        };

        const int jw = j0 + nw, jn = j0 + n;  // this warpgroup's computed tiles end at jw, the item's at jn
        if (nw > 0) {
            acquire(j0);  // its proxy fence also covers Q (copied by cp.async, read by wgmma)
            if constexpr (!B::Q_SMEM)
                #pragma unroll
                for (int k = 0; k < D / 16; ++k)
                    ldsm4(qf[k], q_tile(u) + swz_blocks<B::ROWS>(warp * 16 + (lane & 15), k * 2 + (lane >> 4)));
            issue_s(j0);
            wg_wait<0>();
            fence_acc(s[0]);
            softmax_tile(j0);
            pack_p<1, FNKB>(pa, s);
        }
        // Q in registers: the tile is free once loaded.
        if (!B::Q_SMEM || nw == 0) mbar_arrive(q_empty(u));
        for (int j = j0; j + 1 < jw; ++j) {
            acquire(j + 1);
            issue_s(j + 1);
            issue_o(j);
            wg_wait<1>();  // S(j+1) is done; P(j) V(j) may still run
            fence_acc(s[0]);
            const bool grew = softmax_tile(j + 1);
            if constexpr (EARLY_PACK) pack_p<1, FNKB>(pn, s);
            wg_wait<0>();
            fence_acc(o[0]);
            mbar_arrive(empty(j));
            if (grew) rescale<1>(o, alpha);
            if constexpr (EARLY_PACK) {
                hand_over(pa[0], pn[0]);
            } else {
                fence_acc(s[0]);  // no packing into pa before the wait: P(j) V(j) reads it
                pack_p<1, FNKB>(pa, s);
            }
        }
        if (B::Q_SMEM && nw > 0) mbar_arrive(q_empty(u));  // every S of the item is done
        if (nw > 0) {
            issue_o(jw - 1);
            wg_wait<0>();
            fence_acc(o[0]);
            mbar_arrive(empty(jw - 1));
        }
        for (int j = jw; j < jn; ++j) {  // the stages this warpgroup skips
            acquire(j);
            mbar_arrive(empty(j));
        }
        if (q0 + 64 * wg < p.nq) store_forward<1>(p, b, h, o, m, l, wq0 + g, t);
        j0 += n;
    }
}
extern "C" __global__ void __launch_bounds__(FwdBlock<FWD_WGS>::THREADS, 1)
    attn_fwd(const Params p, const __grid_constant__ TensorPair maps, const __grid_constant__ TensorMap q_map) {
    attn_fwd_body<FWD_WGS>(p, maps, q_map);
}
extern "C" __global__ void __launch_bounds__(FwdBlock<2>::THREADS, 1)
    attn_fwd_128(const Params p, const __grid_constant__ TensorPair maps, const __grid_constant__ TensorMap q_map) {
    attn_fwd_body<2>(p, maps, q_map);
}
#endif  // WGMMA

// ---------------------------------------------------------------- merge and helpers

// The online-softmax merge of two partials (reference: Partial::merge). Writes a new
// result; never touches its inputs. One thread per output element.
extern "C" __global__ void merge_partials(const float* oa, const float* la, const float* ob, const float* lb,
                                          float* out, float* lse, int batch, int rows, int heads) {
    const size_t total = (size_t)batch * rows * heads * D;
    for (size_t e = (size_t)blockIdx.x * blockDim.x + threadIdx.x; e < total; e += (size_t)gridDim.x * blockDim.x) {
        size_t row = e / D;  // (b, i, h)
        int hh = (int)(row % heads);
        size_t bi = row / heads;
        int i = (int)(bi % rows), bb = (int)(bi / rows);
        size_t li = ((size_t)bb * heads + hh) * rows + i;
        float a = la[li], c = lb[li], mx = fmaxf(a, c);
        float wa = 0.f, wb = 0.f, L = NEG_INF;
        if (mx != NEG_INF) {
            float ea = expf(a - mx), eb = expf(c - mx), sum = ea + eb;
            L = mx + logf(sum);
            wa = ea / sum;
            wb = eb / sum;
        }
        out[e] = wa * oa[e] + wb * ob[e];
        if (e % D == 0) lse[li] = L;
    }
}

// The merge identity (out = 0, lse = -inf): what a dilated branch leaves in rows it skips.
extern "C" __global__ void fill_empty(float* out, float* lse, size_t n_out, size_t n_lse) {
    for (size_t e = (size_t)blockIdx.x * blockDim.x + threadIdx.x; e < n_out; e += (size_t)gridDim.x * blockDim.x) {
        out[e] = 0.f;
        if (e < n_lse) lse[e] = NEG_INF;
    }
}

// delta_i = sum_d dout_id * out_id (flash-attention 2's D), one thread per row, and the
// row's lse in the form the backward's P = exp2(s * scale * log2(e) - lse2) takes: lse2 =
// lse * log2(e), +inf for a row that saw no key (lse = -inf; then P = 0, never inf * 0).
// Both then reach the backward's query stages by cp.async, with no arithmetic on the way.
extern "C" __global__ void bwd_delta(const u16* dout, const float* out, const float* lse, float* delta, float* lse2,
                                     int batch, int rows, int heads) {
    const size_t total = (size_t)batch * rows * heads;
    for (size_t row = (size_t)blockIdx.x * blockDim.x + threadIdx.x; row < total;
         row += (size_t)gridDim.x * blockDim.x) {
        float acc = 0.f;
        #pragma unroll
        for (int d = 0; d < D; ++d) acc += to_f32(dout[row * D + d]) * out[row * D + d];
        int hh = (int)(row % heads);
        size_t bi = row / heads;
        int i = (int)(bi % rows), bb = (int)(bi / rows);
        const size_t at = ((size_t)bb * heads + hh) * rows + i;
        const float L = lse[at];
        delta[at] = acc;
        lse2[at] = L == NEG_INF ? POS_INF : L * LOG2E;
    }
}

// ---------------------------------------------------------------- backward

__device__ __forceinline__ void store_row(float* dst, const float* v, bool acc) {
    if (acc) {
        float2 old = *reinterpret_cast<float2*>(dst);
        *reinterpret_cast<float2*>(dst) = make_float2(old.x + v[0], old.y + v[1]);
    } else {
        *reinterpret_cast<float2*>(dst) = make_float2(v[0], v[1]);
    }
}

// dQ contribution of one (key tile, query tile) pair: dq[row][col], dq[row][col + 1] +=
// (x, y). Blocks of different key tiles add into the same rows, so this is a global f32
// reduction (no return value): one vector `red` of two floats on sm_90 (PTX 8.1), two
// scalar ones elsewhere.
__device__ __forceinline__ void red_add2(float* dst, float x, float y) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900 && \
    (__CUDACC_VER_MAJOR__ > 12 || (__CUDACC_VER_MAJOR__ == 12 && __CUDACC_VER_MINOR__ >= 1))
    asm volatile("red.global.add.v2.f32 [%0], {%1, %2};\n" ::"l"(dst), "f"(x), "f"(y) : "memory");
#else
    atomicAdd(dst, x);
    atomicAdd(dst + 1, y);
#endif
}

// Swizzled element offset of 16-byte chunk `ch` of row `r` in the [BN][BM] dS^T tile
// (8 chunks per row; conflict-free stores of the C fragments and ldmatrix.trans reads).
__device__ __forceinline__ int swz_s(int r, int ch) { return r * BM + ((ch ^ (r & 7)) << 3); }

// The backward's per-warp steps, shared by both backward kernels. A warp holds the
// transposed scores s[nb][e] of key rows kidx + 8 (e / 2) (launch indices; kidx includes
// the lane's g) and query columns q0 + 8 nb + 2t + e % 2, NB blocks of 8 (a query tile of
// 8 NB rows); sP holds the query tile's global positions (-1: none). Masked pairs get -inf.
template <int NB>
__device__ __forceinline__ void mask_scores_t(const Params& p, int h, int kind, int klimit, float (&s)[NB][4],
                                              int kidx, const int (&kpos)[2], const int (&kseg)[2], int q0,
                                              const int* sP, int t) {
    if (kind == MASK_AFFINE) {
        int kcut[2];
        #pragma unroll
        for (int r = 0; r < 2; ++r) kcut[r] = key_cut(p, kidx + 8 * r, klimit);
        #pragma unroll
        for (int nb = 0; nb < NB; ++nb)
            #pragma unroll
            for (int e = 0; e < 2; ++e) {
                const int qp = sP[nb * 8 + 2 * t + e];
                const int qcut = qp < 0 ? -1 : p.causal ? qp : CUT_MAX - 1;
                #pragma unroll
                for (int r = 0; r < 2; ++r)
                    if (kcut[r] > qcut) s[nb][2 * r + e] = NEG_INF;
            }
    } else if (kind == MASK_GENERIC) {
        // Bit (2 nb + e) of vis[r]: query column nb*8 + 2t + e is visible to key row r.
        static_assert(2 * NB <= 32, "one bit per column of the thread");
        u32 vis[2] = {0, 0};
        #pragma unroll 1
        for (int col = 0; col < 2 * NB; ++col) {
            const int qc = (col >> 1) * 8 + 2 * t + (col & 1);
            const int qp = sP[qc], qs = seg_of(p, q_axis(p), q0 + qc);
            #pragma unroll
            for (int r = 0; r < 2; ++r) vis[r] |= (u32)visible(p, h, qp, qs, kpos[r], kseg[r], klimit) << col;
        }
        #pragma unroll
        for (int nb = 0; nb < NB; ++nb)
            #pragma unroll
            for (int e = 0; e < 2; ++e)
                #pragma unroll
                for (int r = 0; r < 2; ++r)
                    if (!((vis[r] >> (2 * nb + e)) & 1u)) s[nb][2 * r + e] = NEG_INF;
    }
}

// f(qc, nb, e) for each query column qc = 8 nb + 2t + e of a warp's transposed scores
// s[nb][2 r + e] (the layout of mask_scores_t).
template <int NB, class F>
__device__ __forceinline__ void each_column_t(int t, F f) {
    #pragma unroll
    for (int nb = 0; nb < NB; ++nb)
        #pragma unroll
        for (int e = 0; e < 2; ++e) f(nb * 8 + 2 * t + e, nb, e);
}
// s <- P^T = 2^(s*scale*log2e - lse2), with the query tile's lse2 (sL) per column.
template <int NB>
__device__ __forceinline__ void probs_t(const Params& p, float (&s)[NB][4], const float* sL, int t) {
    each_column_t<NB>(t, [&](int qc, int nb, int e) {
        const float l2 = sL[qc];
        #pragma unroll
        for (int r = 0; r < 2; ++r) s[nb][2 * r + e] = ex2(fmaf(s[nb][2 * r + e], p.scale_log2, -l2));
    });
}
// dp <- dS^T = P^T o (dP^T - delta), with P^T from probs_t and the query tile's delta (sD)
// per column. (Separate from probs_t: the wgmma backward computes P^T while the tensor
// cores still compute dP^T.)
template <int NB>
__device__ __forceinline__ void dscores_t(float (&dp)[NB][4], const float (&s)[NB][4], const float* sD, int t) {
    each_column_t<NB>(t, [&](int qc, int nb, int e) {
        const float dl = sD[qc];
        #pragma unroll
        for (int r = 0; r < 2; ++r) dp[nb][2 * r + e] = s[nb][2 * r + e] * (dp[nb][2 * r + e] - dl);
    });
}

// One query stage of the backward (double-buffered in both kernels): the ROWS-row query
// tile's Q and dO, then per query row its lse2, delta, global position (-1: none) and
// tensor row (-1: none). SIZE is its size in u16 units, a multiple of 512 (1 KB).
// (A view of one base pointer: the parts are fixed offsets from it, which the loads and
// stores take as immediates, and only the base is live across the loop.)
template <int ROWS>
struct QueryStage {
    static constexpr int SIZE = 2 * ROWS * D + 4 * ROWS * 2;
    u16* base;
    __device__ u16* q() const { return base; }
    __device__ u16* o() const { return base + ROWS * D; }
    __device__ float* lse2() const { return reinterpret_cast<float*>(base + 2 * ROWS * D); }
    __device__ float* delta() const { return lse2() + ROWS; }
    __device__ int* pos() const { return reinterpret_cast<int*>(lse2() + 2 * ROWS); }
    __device__ int* row() const { return reinterpret_cast<int*>(lse2() + 3 * ROWS); }
};

// The lse2, delta, global position and tensor row of query tile q0's row `i` (one thread
// per row) into its stage. A live row's lse2 and delta come by cp.async, which the thread
// does not wait for: it returns true, and the caller's hand-over of the stage must wait for
// the copies (cp.async.mbarrier.arrive, or a cp.async wait). A missing row (-1) gets lse2 =
// +inf (P = 0) and delta = 0 by stores.
template <class Stage>
__device__ __forceinline__ bool stage_query_row(const Params& p, int b, int h, int q0, int i, const Stage& qs) {
    const int row = row_of(p, q_axis(p), q0 + i, h);
    qs.pos()[i] = pos_of(q_axis(p), row);
    qs.row()[i] = row;
    if (row < 0) {
        qs.lse2()[i] = POS_INF;
        qs.delta()[i] = 0.f;
        return false;
    }
    const size_t at = ((size_t)b * p.heads + h) * p.q_rows + row;
    cp_async4(qs.lse2() + i, p.lse2 + at);
    cp_async4(qs.delta() + i, p.delta + at);
    return true;
}

// dK (scaled) and dV rows of this thread: written, or added with `accumulate`.
__device__ __forceinline__ void store_dkdv(const Params& p, int b, int h, const float (&dk)[D / 8][4],
                                           const float (&dv)[D / 8][4], const int (&krow)[2], int t) {
    #pragma unroll
    for (int r = 0; r < 2; ++r) {
        if (krow[r] < 0) continue;
        size_t base = (((size_t)b * p.k_rows + krow[r]) * p.heads + h) * D;
        #pragma unroll
        for (int i = 0; i < D / 8; ++i) {
            float vk[2] = {dk[i][2 * r] * p.scale, dk[i][2 * r + 1] * p.scale};
            float vv[2] = {dv[i][2 * r], dv[i][2 * r + 1]};
            store_row(p.dk + base + i * 8 + 2 * t, vk, p.accumulate);
            store_row(p.dv + base + i * 8 + 2 * t, vv, p.accumulate);
        }
    }
}

#if !WGMMA
// The backward (flash-attention 2 structure): one block per 64 key rows (4 warps of 16
// keys), visiting the query tiles of the transposed plan. Per (key tile, query tile),
// with S^T = K Q^T (keys as rows), computed once:
//   P^T = exp(S^T - lse), dV += P^T dO, dS^T = P^T o (V dO^T - delta), dK += scale dS^T Q,
//   dQ += scale dS K (dS^T through shared memory; f32 reductions into dq, which the host
//   zeroes before the first launch of a call).
extern "C" __global__ void __launch_bounds__(NTHREADS) attn_bwd(const Params p) {
    extern __shared__ __align__(128) u16 smem[];
    // Query-side tiles are double-buffered: stage s holds Q, dO and the per-query lse2,
    // delta, global position (-1: none) and tensor row (-1: none) of one query tile.
    u16* sK = smem;
    u16* sV = sK + BN * D;
    u16* sStage = sV + BN * D;
    u16* sS = sStage + 2 * QueryStage<BM>::SIZE;  // dS^T of the current pair, [BN][BM]
    const Coords bc = block_coords(p, false);  // causal: the first key tiles are the heaviest
    const int kt = bc.tile, h = bc.h, b = bc.b;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int k0 = kt * BN;
    const int klimit = key_limit(p, b);
    const int qbeg = p.plan_ptr[kt];
    const int qend = keys_past_limit(p, k0, klimit) ? qbeg : p.plan_ptr[kt + 1];  // all keys padded: zeros

    int krow[2], kpos[2], kseg[2];
    #pragma unroll
    for (int r = 0; r < 2; ++r) {
        krow[r] = row_of(p, k_axis(p), k0 + warp * 16 + g + 8 * r, h);
        kseg[r] = seg_of(p, k_axis(p), k0 + warp * 16 + g + 8 * r);
        kpos[r] = pos_of(k_axis(p), krow[r]);
    }
    float dk[D / 8][4], dv[D / 8][4];
    #pragma unroll
    for (int i = 0; i < D / 8; ++i)
        #pragma unroll
        for (int e = 0; e < 4; ++e) dk[i][e] = dv[i][e] = 0.f;

    // Issue the loads of query tile `it` into its stage.
    auto fetch = [&](int it) {
        const int q0 = p.plan_idx[it] * BM;
        const QueryStage<BM> qs{sStage + ((it - qbeg) & 1) * QueryStage<BM>::SIZE};
        load_tile(qs.q(), p.q, p, q_axis(p), b, h, q0);
        load_tile(qs.o(), p.dout, p, q_axis(p), b, h, q0);
        if (threadIdx.x < BM) stage_query_row(p, b, h, q0, threadIdx.x, qs);
    };
    load_tile(sK, p.k, p, k_axis(p), b, h, k0);
    load_tile(sV, p.v, p, k_axis(p), b, h, k0);
    if (qbeg < qend) fetch(qbeg);
    cp_commit();
    for (int it = qbeg; it < qend; ++it) {
        const int q0 = p.plan_idx[it] * BM;
        const QueryStage<BM> qs{sStage + ((it - qbeg) & 1) * QueryStage<BM>::SIZE};
        cp_wait<0>();     // query tile `it` (and K, V) landed for this thread
        __syncthreads();  // for everyone, and every warp is done with tile it - 1 (and sS)
        if (it + 1 < qend) fetch(it + 1);
        cp_commit();
        float s[BM / 8][4], dp[BM / 8][4];
        #pragma unroll
        for (int nb = 0; nb < BM / 8; ++nb)
            #pragma unroll
            for (int e = 0; e < 4; ++e) s[nb][e] = dp[nb][e] = 0.f;
        #pragma unroll
        for (int kk = 0; kk < D / 16; kk += 2) {
            u32 ka[4], kb[4], va[4], vb[4];
            frag_a(ka, sK, warp * 16, kk, lane);
            frag_a(kb, sK, warp * 16, kk + 1, lane);
            frag_a(va, sV, warp * 16, kk, lane);
            frag_a(vb, sV, warp * 16, kk + 1, lane);
            #pragma unroll
            for (int nb = 0; nb < BM / 8; ++nb) {
                u32 bf[4];
                frag_b_rows(bf, qs.q(), nb, kk, lane);
                mma(s[nb], ka, bf[0], bf[1]);
                mma(s[nb], kb, bf[2], bf[3]);
                frag_b_rows(bf, qs.o(), nb, kk, lane);
                mma(dp[nb], va, bf[0], bf[1]);
                mma(dp[nb], vb, bf[2], bf[3]);
            }
        }
        // Masked pairs get s = -inf, so P = 2^-inf = 0 (and dS = 0) below.
        mask_scores_t(p, h, mask_kind(p, tile_full(p, h, q0, BM, k0, klimit)), klimit, s, k0 + warp * 16 + g, kpos,
                      kseg, q0, qs.pos(), t);
        probs_t(p, s, qs.lse2(), t);
        dscores_t(dp, s, qs.delta(), t);
        // dS^T (16-bit) as the A operand of dK and, through sS, of dQ: register
        // da[kk][j] holds key row warp*16 + g + 8 (j & 1), query columns
        // 16 kk + 8 (j >> 1) + 2t, +1.
        u32 da[BM / 16][4];
        #pragma unroll
        for (int kk = 0; kk < BM / 16; ++kk) {
            da[kk][0] = pack2(dp[2 * kk][0], dp[2 * kk][1]);
            da[kk][1] = pack2(dp[2 * kk][2], dp[2 * kk][3]);
            da[kk][2] = pack2(dp[2 * kk + 1][0], dp[2 * kk + 1][1]);
            da[kk][3] = pack2(dp[2 * kk + 1][2], dp[2 * kk + 1][3]);
            #pragma unroll
            for (int j = 0; j < 4; ++j)
                *reinterpret_cast<u32*>(sS + swz_s(warp * 16 + g + 8 * (j & 1), 2 * kk + (j >> 1)) + 2 * t) = da[kk][j];
        }
        #pragma unroll
        for (int kk = 0; kk < BM / 16; ++kk) {
            u32 pa[4] = {pack2(s[2 * kk][0], s[2 * kk][1]), pack2(s[2 * kk][2], s[2 * kk][3]),
                         pack2(s[2 * kk + 1][0], s[2 * kk + 1][1]), pack2(s[2 * kk + 1][2], s[2 * kk + 1][3])};
            #pragma unroll
            for (int cb = 0; cb < D / 8; cb += 2) {
                u32 bf[4];
                frag_b_cols(bf, qs.o(), kk, cb, lane);
                mma(dv[cb], pa, bf[0], bf[1]);
                mma(dv[cb + 1], pa, bf[2], bf[3]);
                frag_b_cols(bf, qs.q(), kk, cb, lane);
                mma(dk[cb], da[kk], bf[0], bf[1]);
                mma(dk[cb + 1], da[kk], bf[2], bf[3]);
            }
        }
        __syncthreads();  // every warp's dS^T rows are in sS
        // dQ rows warp*16 .. +15 of the query tile: A = dS (queries x keys) by
        // ldmatrix.trans of sS, B = K (keys x dims), reduced into dq per 16 columns.
        {
            u32 sa[BN / 16][4];
            #pragma unroll
            for (int kk = 0; kk < BN / 16; ++kk)
                ldsm4t(sa[kk], sS + swz_s(kk * 16 + (lane & 7) + (lane >> 4) * 8, 2 * warp + ((lane >> 3) & 1)));
            float* qrow[2];
            #pragma unroll
            for (int r = 0; r < 2; ++r) {
                const int row = qs.row()[warp * 16 + g + 8 * r];
                qrow[r] = row >= 0 ? p.dq + (((size_t)b * p.q_rows + row) * p.heads + h) * D + 2 * t : nullptr;
            }
            #pragma unroll
            for (int cb = 0; cb < D / 8; cb += 2) {
                float c0[4] = {0.f, 0.f, 0.f, 0.f}, c1[4] = {0.f, 0.f, 0.f, 0.f};
                #pragma unroll
                for (int kk = 0; kk < BN / 16; ++kk) {
                    u32 bf[4];
                    frag_b_cols(bf, sK, kk, cb, lane);
                    mma(c0, sa[kk], bf[0], bf[1]);
                    mma(c1, sa[kk], bf[2], bf[3]);
                }
                #pragma unroll
                for (int r = 0; r < 2; ++r)
                    if (qrow[r]) {
                        red_add2(qrow[r] + cb * 8, c0[2 * r] * p.scale, c0[2 * r + 1] * p.scale);
                        red_add2(qrow[r] + cb * 8 + 8, c1[2 * r] * p.scale, c1[2 * r + 1] * p.scale);
                    }
            }
        }
    }
    cp_wait<0>();
    store_dkdv(p, b, h, dk, dv, krow, t);
}
#endif  // !WGMMA

#if WGMMA
// ---------------------------------------------------------------- backward, wgmma (sm_90a)

// Flash-attention 2's backward on warpgroup MMAs: a block owns WB_KEYS = 128 key rows, 64
// per consumer warpgroup (warp w of a warpgroup: keys 16 w..), and visits the query tiles
// (QB rows: WB_QSUB plan tiles of 64) of its key tiles' plan rows. Per visited query tile,
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
//                                   so that it runs while dQ is staged (v19), as
//                                   flash-attention 3 orders them.
// Per FLOP, the L2 traffic of a visit (the Q / dO tiles it loads, the dQ tile it adds) falls
// with both the keys and the queries it covers; it is what bounds the d = 64 backward (83.6%
// of L2 throughput with one-warpgroup 64 x 64 visits: "After v21" in
// docs/benchmarks/gpu-bench.md). So d = 64 visits 128 queries x 128 keys, flash-attention
// 3's tile at that head dimension (v22: forward + backward 6-9% faster than v21's three
// one-warpgroup blocks per SM, 3% at causal n = 4096), and d = 128 64 x 128 (its registers
// hold no more). A third, producer warpgroup fills the query stages.
// Q and dO tiles come by TMA into WB_STAGES stages (gathered by the producer's cp.async
// where a compact tile is not evenly spaced), handed over by mbarriers: full[s] (the
// producer's 128 arrivals, those of the threads that copy a row's lse2 and delta made by
// cp.async once the copies land, plus the TMA's bytes), empty[s] (every consumer thread,
// once done with the tile). K and V are loaded once, by the consumers.
#define WB_WGS 2
#define WB_QSUB (D == 64 ? 2 : 1)  // plan tiles (64 query rows) per visited query tile
#define QB (BM * WB_QSUB)          // query rows per visited tile
#define QNB (QB / 8)               // 8-query column blocks of a warpgroup's S^T
// The producer warpgroup fills the query stages (Q, dO by TMA; each query's lse2 and delta
// by cp.async, its position and row by stores), running ahead of the consumers by the
// stages, so that neither consumer waits for the fill nor for the other at the barrier
// before dQ while it fills (v15: 3-4% faster forward + backward than warpgroup 0 filling
// after its softmax). Registers: 128 * 24 + 256 * 240 = 64512 (setmaxnreg). The consumers
// need 240 to keep dK's operand and the dQ accumulator live while dK runs (with 232 ptxas
// serialises every wgmma at d = 128); the producer's 24 spill 88 bytes (v23), which costs
// little: it waits for free stages most of the time (22% of the d = 64 backward's stall
// samples in v22's profile), and the consumers spill nothing.
#define WB_CONSUMERS (128 * WB_WGS)
#define WB_THREADS (WB_CONSUMERS + 128)
#define WB_PRODUCER_REGS 24
#define WB_CONSUMER_REGS 240
#define WB_KEYS (BN * WB_WGS)
#define WB_STAGES 2
static_assert(D * QB == 64 * 64 * WB_WGS, "warpgroup w computes a 64 x 64 block of the tile's dQ");
// dQ staging buffers (f32 [QB][D] each). d = 128 double-buffers them, so that a tile's dQ
// reductions have a whole tile's time to read theirs; d = 64 has room for one only (its
// 128-query stages and dS^T tiles take twice the space), which the last tile's reductions
// have read by the time this tile's dS^T is stored.
#define WB_DQ_BUFFERS (D == 64 ? 1 : 2)
// dS^T buffers ([WB_KEYS][QB] bf16 each): the warpgroups alternate two, so that a tile's
// dS^T stores need not wait for the other warpgroup's dQ MMA of the last tile to have read
// its buffer: that MMA read the other one, and the one this tile writes was read by the
// dQ MMAs of tile it - 2, which both warpgroups waited for before the barrier of tile
// it - 1 (v20).
#define WB_DS_BUFFERS 2

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

// Named barrier ID among THREADS threads (immediate operands: a register ID would make
// ptxas reserve all 16 barriers).
template <int ID, int THREADS>
__device__ __forceinline__ void bar_sync() {
    asm volatile("bar.sync %0, %1;\n" ::"n"(ID), "n"(THREADS) : "memory");
}

// The query tiles a block visits: the union of its warpgroups' key tiles' plan rows (each
// ascending), merged on the fly, in visits of WB_QSUB consecutive plan tiles. A key tile
// past the launch, or whose keys are all past the padding limit, visits nothing (its dK,
// dV are zeros).
struct QueryWalk {
    int pos[WB_WGS], end[WB_WGS];
};
__device__ __forceinline__ QueryWalk query_walk(const Params& p, int kb, int klimit) {
    QueryWalk w;
    const int tiles = (p.nk + BN - 1) / BN;
    #pragma unroll
    for (int i = 0; i < WB_WGS; ++i) {
        const int kt = kb * WB_WGS + i;
        const bool live = kt < tiles && !keys_past_limit(p, kt * BN, klimit);
        w.pos[i] = live ? p.plan_ptr[kt] : 0;
        w.end[i] = live ? p.plan_ptr[kt + 1] : 0;
    }
    return w;
}
// The next visited query tile (QB rows; -1: none left). Bit WB_QSUB i + j of `vis`:
// warpgroup i's key tile visits plan tile j of it (its other plan tiles are masked: a
// plan row lists every tile with a visible pair).
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
                vis |= 1u << (WB_QSUB * i + p.plan_idx[w.pos[i]] % WB_QSUB);
                ++w.pos[i];
            }
    return q == CUT_MAX ? -1 : q;
}

// One block per SM: two consumer warpgroups of up to 240 registers.
extern "C" __global__ void __launch_bounds__(WB_THREADS, 1)
    attn_bwd(const Params p, const __grid_constant__ TensorPair maps, const __grid_constant__ TensorMap dq_map) {
    using Stage = QueryStage<QB>;
    extern __shared__ __align__(1024) u16 smem_wb[];
    // The swizzled operands need a 1024-byte aligned base. Dynamic shared memory starts
    // there on sm_90 (0x400, after the 1 KB the system reserves), and the host requests no
    // slack to round up into: checked.
    if (threadIdx.x == 0 && ((u32)__cvta_generic_to_shared(smem_wb) & 1023)) __trap();
    u16* sK = smem_wb;
    u16* sV = sK + WB_KEYS * D;
    u16* sStage = sV + WB_KEYS * D;           // WB_STAGES query stages (Q, dO: swz_blocks layout)
    u16* sS = sStage + WB_STAGES * Stage::SIZE;  // WB_DS_BUFFERS x dS^T, [WB_KEYS][QB], swz_blocks
    float* sDQ = reinterpret_cast<float*>(sS + WB_DS_BUFFERS * WB_KEYS * QB);  // WB_DQ_BUFFERS x [QB][D] f32
    const u32 bars = (u32)__cvta_generic_to_shared(sDQ + WB_DQ_BUFFERS * QB * D);
    auto full = [&](int st) { return bars + 8 * st; };
    auto empty = [&](int st) { return bars + 8 * (WB_STAGES + st); };
    // Each stage's visit: its query tile (-1: the walk is over) and the `vis` bits of
    // next_query_tile, written by the producer before it arrives on `full`, so that the
    // consumers do not walk the plan (global loads at the top of every tile) themselves
    // (v23: forward + backward 1-5% faster at both head dimensions).
    int2* const slot = reinterpret_cast<int2*>(sDQ + WB_DQ_BUFFERS * QB * D) + WB_STAGES;
    const Coords bc = block_coords(p, false);  // causal: the first key tiles are the heaviest
    const int kb = bc.tile, h = bc.h, b = bc.b;
    const int wg = warp_uniform(threadIdx.x >> 7), warp = (threadIdx.x >> 5) & 3, lane = threadIdx.x & 31, g = lane >> 2,
              t = lane & 3;
    const bool leader = (threadIdx.x & 127) == 0;  // issues its warpgroup's TMA operations
    const int kw = (kb * WB_WGS + wg) * BN;        // this warpgroup's first key (launch index)
    const int klimit = key_limit(p, b);
    const int R = p.compact ? p.dil_rate : 1;
    if (threadIdx.x == 0)
        for (int st = 0; st < WB_STAGES; ++st) {
            mbar_init(full(st), 128);
            mbar_init(empty(st), WB_CONSUMERS);
        }
    __syncthreads();  // the barriers are ready

    // The producer warpgroup: every visit's fill, in order, starting while the consumers
    // load K and V (a block's start waits for one round trip to memory, not two in a row:
    // v19 in docs/benchmarks/gpu-bench.md). Query tile `qt` goes into the stage of visit
    // `it` once every consumer is done with the stage's previous tile: the TMA's boxes (one
    // thread) or a cp.async gather, waited for, and the per-query rows (thread ft, row ft).
    // After the last visit, one more stage carries only the end of the walk.
    if (threadIdx.x >= WB_CONSUMERS) {
        setmaxnreg_dec<WB_PRODUCER_REGS>();
        const unsigned ft = threadIdx.x - WB_CONSUMERS;
        QueryWalk walk = query_walk(p, kb, klimit);
        for (int it = 0;; ++it) {
            u32 vis;
            const int qt = next_query_tile(p, walk, vis), q0 = qt * QB, st = it % WB_STAGES;
            const Stage qs{sStage + st * Stage::SIZE};
            if (it >= WB_STAGES) mbar_wait(empty(st), (it / WB_STAGES - 1) & 1);
            if (ft == 0) slot[st] = make_int2(qt, (int)vis);
            if (qt < 0) {
                mbar_arrive(full(st));
                break;
            }
            int row0[WB_QSUB];
            bool box = true;
            #pragma unroll
            for (int r = 0; r < WB_QSUB; ++r) box = box && tile_is_box(p, q_axis(p), q0 + BM * r, h, row0[r]);
            if (!box) {
                load_tile<QB, 128, true>(qs.q(), p.q, p, q_axis(p), b, h, q0);
                load_tile<QB, 128, true>(qs.o(), p.dout, p, q_axis(p), b, h, q0);
                cp_commit();
                cp_wait<0>();
                fence_async_smem();
            }
            const bool copies = ft < QB && stage_query_row(p, b, h, q0, ft, qs);
            if (box && ft == 0) {
                mbar_expect_tx(full(st), 2 * QB * D * 2);
                #pragma unroll
                for (int cb = 0; cb < D / 64; ++cb)
                    #pragma unroll
                    for (int r = 0; r < WB_QSUB; ++r) {
                        const int at = cb * QB * 64 + r * BM * 64;
                        tma_box(qs.q() + at, &maps.a, cb * 64, h, row0[r], R, b, full(st));
                        tma_box(qs.o() + at, &maps.b, cb * 64, h, row0[r], R, b, full(st));
                    }
            }
            // This thread's arrival: once its lse2 / delta copies have landed, if it made any.
            if (copies)
                mbar_arrive_cp_async(full(st));
            else
                mbar_arrive(full(st));
        }
        return;
    }
    setmaxnreg_inc<WB_CONSUMER_REGS>();
    load_tile<WB_KEYS, WB_CONSUMERS, true>(sK, p.k, p, k_axis(p), b, h, kb * WB_KEYS);
    load_tile<WB_KEYS, WB_CONSUMERS, true>(sV, p.v, p, k_axis(p), b, h, kb * WB_KEYS);
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
    const u16* const sKdq = sK + (dq_col / 64) * WB_KEYS * 64;
    for (int it = 0;; ++it) {
        const int st = it % WB_STAGES;
        const Stage qs{sStage + st * Stage::SIZE};
        if (it > 0) {
            // Two buffers: the staging this tile's dQ reductions will use (tile it - 2's)
            // has been read.
            if (WB_DQ_BUFFERS == 2 && leader) bulk_wait_read<1>();
            mbar_arrive(empty((it - 1) % WB_STAGES));
        }
        mbar_wait(full(st), (it / WB_STAGES) & 1);
        const int2 visit = slot[st];
        if (visit.x < 0) break;
        const int q0 = visit.x * QB;
        // The plan tiles of this query tile that this warpgroup's keys visit (none: it
        // only helps with dQ).
        const u32 halves = ((u32)visit.y >> (WB_QSUB * wg)) & ((1u << WB_QSUB) - 1);
        const bool mine = halves != 0;

        // This warp's dS^T rows (keys 64 wg + 16 warp + g + 8 (j & 1)) into sS, for dQ:
        // zeros where the warpgroup's keys do not visit the tile.
        float s[QNB][4], dp[QNB][4];
        u32 da[QB / 16][4];
        if (mine) {
            // S^T and dP^T as two MMA groups, so that P^T (which needs S^T only) is
            // computed while the tensor cores compute dP^T.
            fence_acc(s);
            fence_acc(dp);
            wg_fence();
            issue_scores_t(s, sK + wg * BN * 64, qs.q());
            wg_commit();
            issue_scores_t(dp, sV + wg * BN * 64, qs.o());
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
            mask_scores_t(p, h, mask_kind(p, tile_full(p, h, q0, QB, kw, klimit)), klimit, s, kw + warp * 16 + g,
                          kpos, kseg, q0, qs.pos(), t);
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
            dscores_t(dp, s, qs.delta(), t);
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
        u16* const sSt = sS + (it % WB_DS_BUFFERS) * WB_KEYS * QB;  // this tile's dS^T
        #pragma unroll
        for (int kk = 0; kk < QB / 16; ++kk)
            #pragma unroll
            for (int j = 0; j < 4; ++j)
                *reinterpret_cast<u32*>(sSt + swz_blocks<WB_KEYS>(wg * BN + warp * 16 + g + 8 * (j & 1),
                                                                 2 * kk + (j >> 1)) +
                                        2 * t) = da[kk][j];
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
            // 64 rows x 64 columns as two [64][32] f32 blocks with the 128-byte swizzle.
            float* stage_f = sDQ + (it % WB_DQ_BUFFERS) * QB * D + wg * 64 * 64;
            #pragma unroll
            for (int i = 0; i < 8; ++i)
                #pragma unroll
                for (int r = 0; r < 2; ++r) {
                    const int row = warp * 16 + g + 8 * r, chunk = 2 * (i & 3) + (t >> 1);
                    *reinterpret_cast<float2*>(stage_f + (i >> 2) * 64 * 32 + row * 32 + ((chunk ^ (row & 7)) << 2) +
                                               2 * (t & 1)) = make_float2(c[i][2 * r] * p.scale, c[i][2 * r + 1] * p.scale);
                }
            fence_async_smem();
            if (wg == 0)  // the warpgroup's staging is complete
                bar_sync<2, 128>();
            else
                bar_sync<3, 128>();
            if (leader) {
                tma_reduce_add(&dq_map, stage_f, dq_col, h, qrow0, R, b);
                tma_reduce_add(&dq_map, stage_f + 64 * 32, dq_col + 32, h, qrow0, R, b);
                bulk_commit();
            }
        } else {
            #pragma unroll
            for (int r = 0; r < 2; ++r) {
                const int row = qs.row()[dq_row + warp * 16 + g + 8 * r];
                if (row < 0) continue;
                float* dst = p.dq + (((size_t)b * p.q_rows + row) * p.heads + h) * D + dq_col + 2 * t;
                #pragma unroll
                for (int i = 0; i < 8; ++i) red_add2(dst + i * 8, c[i][2 * r] * p.scale, c[i][2 * r + 1] * p.scale);
            }
        }
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
    store_dkdv(p, b, h, dk, dv, krow, t);
}
#endif  // WGMMA
