// ringdil GPU kernels: masked / dilated flash attention (forward, backward) and the
// online-softmax merge. Compiled at run time by NVRTC, once per (architecture, element
// type, head dimension), with
//   -DHEAD_DIM=64|128   the head dimension (a compile-time constant: register tiles)
//   -DIS_F16=0|1        bf16 (0) or f16 (1) inputs; accumulation is always f32.
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
    int q_offset, k_offset;    // global position of physical row 0
    int seq_len;               // global sequence length the pattern is defined on
    int causal;
    int pattern;               // 0 dense, 1 sliding window, 2 block sparse, 3 dilated branch
    int win_left, win_right;
    int bs_block, bs_radius, bs_stride, bs_global, bs_mask_blocks;
    int dil_segment, dil_rate, dil_rule, dil_fixed;
    int compact;               // 1: index c -> row of the dilated branch (see row_of)
    int dil_per_seg;           // ceil(dil_segment / dil_rate)
    int accumulate;            // backward: add into dq/dk/dv instead of overwriting
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

// Two f32 -> one register of two 16-bit values, `lo` in the low half (round to nearest).
__device__ __forceinline__ u32 pack2(float lo, float hi) {
    u32 r;
    asm("cvt.rn." DT "x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
}

// Swizzled element offset of 16-byte chunk `ch` of row `r` in a [rows][D] tile: the chunk
// index is XOR-ed with r mod 8 so that ldmatrix's 8 row addresses hit 8 different banks.
__device__ __forceinline__ int swz(int r, int ch) { return r * D + ((ch ^ (r & 7)) << 3); }

__device__ __forceinline__ void cp_async16(u16* smem, const u16* gmem, bool valid) {
    u32 s = (u32)__cvta_generic_to_shared(smem);
    int n = valid ? 16 : 0;  // 0 bytes read: the 16 bytes are zero-filled
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(gmem), "r"(n));
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

// c[16x8] += a[16x16] * b[16x8], f32 accumulate.
__device__ __forceinline__ void mma(float* c, const u32* a, u32 b0, u32 b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32." DT "." DT ".f32 "
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

// Physical row of launch index c (< n) on a side with `rows` rows, or -1. In compact mode
// index c is kept position t = c mod m of segment s = c div m (m = dil_per_seg): row
// s*w + o(h) + t*r, a hole (-1) when that lies past the segment's end.
__device__ __forceinline__ int row_of(const Params& p, int c, int n, int rows, int h) {
    if (c >= n) return -1;
    if (!p.compact) return c;
    int s = c / p.dil_per_seg, t = c - s * p.dil_per_seg;
    int row = s * p.dil_segment + dil_offset(p, h) + t * p.dil_rate;
    return row < min((s + 1) * p.dil_segment, rows) ? row : -1;
}

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

// Compact segment of launch index c (0 outside compact mode).
__device__ __forceinline__ int seg_of(const Params& p, int c) { return p.compact ? c / p.dil_per_seg : 0; }

// The element mask with per-row precomputed positions (-1: no row) and compact segments.
// In compact mode every valid index pair of one segment is a kept pair of the branch, so
// only segment, causality and padding remain: no division per element.
__device__ __forceinline__ bool visible(const Params& p, int h, int qpos, int qseg, int kpos, int kseg, int klimit) {
    if (qpos < 0 || kpos < 0) return false;
    if (p.compact) return qseg == kseg && kpos < klimit && (!p.causal || kpos <= qpos);
    return allowed(p, h, qpos, kpos, klimit);
}

// A tile (query indices q0..q0+qn-1, keys k0..k0+BN-1) that needs no per-element mask:
// every key is a valid row visible to every query.
__device__ __forceinline__ bool tile_full(const Params& p, int h, int q0, int qn, int k0, int klimit) {
    const int k1 = k0 + BN - 1;
    if (p.compact) {
        // One segment for the whole tile, no hole (rows grow within a segment, so the
        // last key decides), below the diagonal, inside the padding limit.
        const int s = seg_of(p, k0);
        const int last = row_of(p, k1, p.nk, p.k_rows, h);
        return seg_of(p, k1) == s && seg_of(p, q0) == s && seg_of(p, q0 + qn - 1) == s && last >= 0 &&
               last < klimit && (!p.causal || k1 <= q0);
    }
    return p.pattern == 0 && k1 < p.nk && p.k_offset + k1 < klimit &&
           (!p.causal || p.k_offset + k1 <= p.q_offset + q0);
}

__device__ __forceinline__ int key_limit(const Params& p, int b) {
    return p.key_len ? min(p.key_len[b], p.seq_len) : p.seq_len;
}

// Are all keys of the tile starting at launch index k0 past the padding limit? Rows grow
// with the index, so the tile's first possible position decides. The plan is per
// (row tile), shared by the batch; padding is per batch row, so it is skipped here.
__device__ __forceinline__ bool keys_past_limit(const Params& p, int k0, int klimit) {
    int first = p.compact ? (k0 / p.dil_per_seg) * p.dil_segment : k0;
    return p.k_offset + first >= klimit;
}

// Asynchronously copy ROWS rows (launch indices c0..) of one head into a swizzled tile;
// rows outside the range or in a hole are zero-filled (so that 0 * garbage never yields NaN).
template <int ROWS = 64>
__device__ __forceinline__ void load_tile(u16* tile, const u16* g, const Params& p, int b, int h, int c0,
                                          int n, int rows) {
#pragma unroll
    for (int idx = threadIdx.x; idx < ROWS * CH; idx += NTHREADS) {
        int r = idx / CH, ch = idx - r * CH;
        int row = row_of(p, c0 + r, n, rows, h);
        const u16* src = row >= 0 ? g + (((size_t)b * rows + row) * p.heads + h) * D + ch * 8 : g;
        cp_async16(tile + swz(r, ch), src, row >= 0);
    }
}

// ---------------------------------------------------------------- forward

// Each warp owns WM m16 row tiles, so every K / V fragment read from shared memory feeds
// WM tensor-core products (the smem traffic per flop falls by WM).
#define WM 2
#define FBM (16 * 4 * WM)  // query rows per forward block

// One block: FBM query rows (launch indices) of one (batch, head); 4 warps of 16*WM rows.
// Visits only the key tiles of its plan row; online softmax in the log2 domain.
extern "C" __global__ void __launch_bounds__(NTHREADS) attn_fwd(const Params p) {
    extern __shared__ __align__(128) u16 smem[];
    u16* sQ = smem;
    u16* sK = sQ + FBM * D;
    u16* sV = sK + BN * D;
    const int qt = blockIdx.x, h = blockIdx.y, b = blockIdx.z;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int q0 = qt * FBM;
    const int klimit = key_limit(p, b);
    const int kbeg = p.plan_ptr[qt];
    int kend = p.plan_ptr[qt + 1];  // plan rows are ascending: drop the padded tail
    while (kend > kbeg && keys_past_limit(p, p.plan_idx[kend - 1] * BN, klimit)) --kend;

    int qrow[WM][2], qpos[WM][2], qseg[WM][2];
    #pragma unroll
    for (int mt = 0; mt < WM; ++mt)
        #pragma unroll
        for (int r = 0; r < 2; ++r) {
            const int c = q0 + (warp * WM + mt) * 16 + g + 8 * r;
            qrow[mt][r] = row_of(p, c, p.nq, p.q_rows, h);
            qpos[mt][r] = qrow[mt][r] >= 0 ? p.q_offset + qrow[mt][r] : -1;
            qseg[mt][r] = seg_of(p, c);
        }
    float o[WM][D / 8][4];
    #pragma unroll
    for (int mt = 0; mt < WM; ++mt)
        #pragma unroll
        for (int i = 0; i < D / 8; ++i) o[mt][i][0] = o[mt][i][1] = o[mt][i][2] = o[mt][i][3] = 0.f;
    float m[WM][2], l[WM][2];
    #pragma unroll
    for (int mt = 0; mt < WM; ++mt) m[mt][0] = m[mt][1] = NEG_INF, l[mt][0] = l[mt][1] = 0.f;

    load_tile<FBM>(sQ, p.q, p, b, h, q0, p.nq, p.q_rows);
    if (kbeg < kend) load_tile(sK, p.k, p, b, h, p.plan_idx[kbeg] * BN, p.nk, p.k_rows);
    cp_commit();
    if (kbeg < kend) load_tile(sV, p.v, p, b, h, p.plan_idx[kbeg] * BN, p.nk, p.k_rows);
    cp_commit();

    for (int it = kbeg; it < kend; ++it) {
        const int k0 = p.plan_idx[it] * BN;
        cp_wait<1>();  // Q (first time) and K of this tile have landed
        __syncthreads();

        float s[WM][BN / 8][4];
        #pragma unroll
        for (int mt = 0; mt < WM; ++mt)
            #pragma unroll
            for (int nb = 0; nb < BN / 8; ++nb) s[mt][nb][0] = s[mt][nb][1] = s[mt][nb][2] = s[mt][nb][3] = 0.f;
        #pragma unroll
        for (int kk = 0; kk < D / 16; kk += 2) {
            u32 qa[WM][2][4];
            #pragma unroll
            for (int mt = 0; mt < WM; ++mt) {
                frag_a(qa[mt][0], sQ, (warp * WM + mt) * 16, kk, lane);
                frag_a(qa[mt][1], sQ, (warp * WM + mt) * 16, kk + 1, lane);
            }
            #pragma unroll
            for (int nb = 0; nb < BN / 8; ++nb) {
                u32 bf[4];
                frag_b_rows(bf, sK, nb, kk, lane);
                #pragma unroll
                for (int mt = 0; mt < WM; ++mt) {
                    mma(s[mt][nb], qa[mt][0], bf[0], bf[1]);
                    mma(s[mt][nb], qa[mt][1], bf[2], bf[3]);
                }
            }
        }
        __syncthreads();  // every warp is done with sK: prefetch the next key tile
        if (it + 1 < kend) load_tile(sK, p.k, p, b, h, p.plan_idx[it + 1] * BN, p.nk, p.k_rows);
        cp_commit();

        if (!tile_full(p, h, q0, FBM, k0, klimit)) {
            #pragma unroll
            for (int nb = 0; nb < BN / 8; ++nb)
                #pragma unroll
                for (int e = 0; e < 2; ++e) {
                    const int kc = k0 + nb * 8 + 2 * t + e;
                    const int krow = row_of(p, kc, p.nk, p.k_rows, h);
                    const int kpos = krow >= 0 ? p.k_offset + krow : -1, kseg = seg_of(p, kc);
                    #pragma unroll
                    for (int mt = 0; mt < WM; ++mt)
                        #pragma unroll
                        for (int r = 0; r < 2; ++r)
                            if (!visible(p, h, qpos[mt][r], qseg[mt][r], kpos, kseg, klimit))
                                s[mt][nb][2 * r + e] = NEG_INF;
                }
        }
        #pragma unroll
        for (int mt = 0; mt < WM; ++mt)
            #pragma unroll
            for (int r = 0; r < 2; ++r) {
                float mx = m[mt][r];
                #pragma unroll
                for (int nb = 0; nb < BN / 8; ++nb)
                    mx = fmaxf(mx, fmaxf(s[mt][nb][2 * r], s[mt][nb][2 * r + 1]) * p.scale_log2);
                mx = fmaxf(mx, __shfl_xor_sync(0xffffffff, mx, 1));
                mx = fmaxf(mx, __shfl_xor_sync(0xffffffff, mx, 2));
                const float base = mx == NEG_INF ? 0.f : mx;  // a row with no key yet: no NaN
                const float alpha = exp2f(m[mt][r] - base);
                m[mt][r] = mx;
                l[mt][r] *= alpha;
                #pragma unroll
                for (int i = 0; i < D / 8; ++i) {
                    o[mt][i][2 * r] *= alpha;
                    o[mt][i][2 * r + 1] *= alpha;
                }
                #pragma unroll
                for (int nb = 0; nb < BN / 8; ++nb)
                    #pragma unroll
                    for (int e = 0; e < 2; ++e) {
                        float pe = exp2f(fmaf(s[mt][nb][2 * r + e], p.scale_log2, -base));
                        s[mt][nb][2 * r + e] = pe;
                        l[mt][r] += pe;
                    }
            }

        cp_wait<1>();  // V of this tile has landed (the next K may still be in flight)
        __syncthreads();
        #pragma unroll
        for (int kk = 0; kk < BN / 16; ++kk) {
            u32 a[WM][4];
            #pragma unroll
            for (int mt = 0; mt < WM; ++mt) {
                a[mt][0] = pack2(s[mt][2 * kk][0], s[mt][2 * kk][1]);
                a[mt][1] = pack2(s[mt][2 * kk][2], s[mt][2 * kk][3]);
                a[mt][2] = pack2(s[mt][2 * kk + 1][0], s[mt][2 * kk + 1][1]);
                a[mt][3] = pack2(s[mt][2 * kk + 1][2], s[mt][2 * kk + 1][3]);
            }
            #pragma unroll
            for (int cb = 0; cb < D / 8; cb += 2) {
                u32 bf[4];
                frag_b_cols(bf, sV, kk, cb, lane);
                #pragma unroll
                for (int mt = 0; mt < WM; ++mt) {
                    mma(o[mt][cb], a[mt], bf[0], bf[1]);
                    mma(o[mt][cb + 1], a[mt], bf[2], bf[3]);
                }
            }
        }
        __syncthreads();  // every warp is done with sV
        if (it + 1 < kend) load_tile(sV, p.v, p, b, h, p.plan_idx[it + 1] * BN, p.nk, p.k_rows);
        cp_commit();
    }
    cp_wait<0>();

    #pragma unroll
    for (int mt = 0; mt < WM; ++mt)
        #pragma unroll
        for (int r = 0; r < 2; ++r) {
            float lr = l[mt][r];
            lr += __shfl_xor_sync(0xffffffff, lr, 1);
            lr += __shfl_xor_sync(0xffffffff, lr, 2);
            if (qrow[mt][r] < 0) continue;
            const float inv = lr > 0.f ? 1.f / lr : 0.f;
            float* orow = p.out + (((size_t)b * p.q_rows + qrow[mt][r]) * p.heads + h) * D;
            #pragma unroll
            for (int i = 0; i < D / 8; ++i)
                *reinterpret_cast<float2*>(orow + i * 8 + 2 * t) =
                    make_float2(o[mt][i][2 * r] * inv, o[mt][i][2 * r + 1] * inv);
            if (t == 0)
                p.lse[((size_t)b * p.heads + h) * p.q_rows + qrow[mt][r]] =
                    lr > 0.f ? (m[mt][r] + log2f(lr)) * LN2 : NEG_INF;
        }
}

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

// delta_i = sum_d dout_id * out_id (flash-attention 2's D), one thread per row.
extern "C" __global__ void bwd_delta(const u16* dout, const float* out, float* delta, int batch, int rows,
                                     int heads) {
    const size_t total = (size_t)batch * rows * heads;
    for (size_t row = (size_t)blockIdx.x * blockDim.x + threadIdx.x; row < total;
         row += (size_t)gridDim.x * blockDim.x) {
        float acc = 0.f;
        #pragma unroll
        for (int d = 0; d < D; ++d) acc += to_f32(dout[row * D + d]) * out[row * D + d];
        int hh = (int)(row % heads);
        size_t bi = row / heads;
        int i = (int)(bi % rows), bb = (int)(bi / rows);
        delta[((size_t)bb * heads + hh) * rows + i] = acc;
    }
}

// ---------------------------------------------------------------- backward

// P_ij = exp(s_ij - lse_i) as exp2(s*scale*log2e - lse2_i): lse2 = lse*log2e, +inf for a
// row that saw no key (then P = 0, never inf * 0).
__device__ __forceinline__ float lse2_of(const Params& p, int b, int h, int row) {
    if (row < 0) return POS_INF;
    float L = p.lse[((size_t)b * p.heads + h) * p.q_rows + row];
    return L == NEG_INF ? POS_INF : L * LOG2E;
}

__device__ __forceinline__ void store_row(float* dst, const float* v, bool acc) {
    if (acc) {
        float2 old = *reinterpret_cast<float2*>(dst);
        *reinterpret_cast<float2*>(dst) = make_float2(old.x + v[0], old.y + v[1]);
    } else {
        *reinterpret_cast<float2*>(dst) = make_float2(v[0], v[1]);
    }
}

// dQ: one block per 64 query rows, same plan as the forward.
//   dS = P o (dO V^T - delta),  dQ = scale * dS K.
extern "C" __global__ void __launch_bounds__(NTHREADS) attn_bwd_dq(const Params p) {
    extern __shared__ __align__(128) u16 smem[];
    u16* sQ = smem;
    u16* sO = sQ + BM * D;  // d_out
    u16* sK = sO + BM * D;
    u16* sV = sK + BN * D;
    const int qt = blockIdx.x, h = blockIdx.y, b = blockIdx.z;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int q0 = qt * BM;
    const int klimit = key_limit(p, b);
    const int kbeg = p.plan_ptr[qt];
    int kend = p.plan_ptr[qt + 1];  // plan rows are ascending: drop the padded tail
    while (kend > kbeg && keys_past_limit(p, p.plan_idx[kend - 1] * BN, klimit)) --kend;

    int qrow[2], qpos[2], qseg[2];
    float lse2[2], dl[2];
    #pragma unroll
    for (int r = 0; r < 2; ++r) {
        qrow[r] = row_of(p, q0 + warp * 16 + g + 8 * r, p.nq, p.q_rows, h);
        qseg[r] = seg_of(p, q0 + warp * 16 + g + 8 * r);
        qpos[r] = qrow[r] >= 0 ? p.q_offset + qrow[r] : -1;
        lse2[r] = lse2_of(p, b, h, qrow[r]);
        dl[r] = qrow[r] >= 0 ? p.delta[((size_t)b * p.heads + h) * p.q_rows + qrow[r]] : 0.f;
    }
    float acc[D / 8][4];
    #pragma unroll
    for (int i = 0; i < D / 8; ++i) acc[i][0] = acc[i][1] = acc[i][2] = acc[i][3] = 0.f;
    u32 qf[D / 16][4], of[D / 16][4];

    load_tile(sQ, p.q, p, b, h, q0, p.nq, p.q_rows);
    load_tile(sO, p.dout, p, b, h, q0, p.nq, p.q_rows);
    cp_commit();
    for (int it = kbeg; it < kend; ++it) {
        const int k0 = p.plan_idx[it] * BN;
        load_tile(sK, p.k, p, b, h, k0, p.nk, p.k_rows);
        load_tile(sV, p.v, p, b, h, k0, p.nk, p.k_rows);
        cp_commit();
        cp_wait<0>();
        __syncthreads();
        if (it == kbeg)
            #pragma unroll
            for (int kk = 0; kk < D / 16; ++kk) {
                frag_a(qf[kk], sQ, warp * 16, kk, lane);
                frag_a(of[kk], sO, warp * 16, kk, lane);
            }
        float s[BN / 8][4], dp[BN / 8][4];
        #pragma unroll
        for (int nb = 0; nb < BN / 8; ++nb)
            #pragma unroll
            for (int e = 0; e < 4; ++e) s[nb][e] = dp[nb][e] = 0.f;
        #pragma unroll
        for (int kk = 0; kk < D / 16; kk += 2)
            #pragma unroll
            for (int nb = 0; nb < BN / 8; ++nb) {
                u32 bf[4];
                frag_b_rows(bf, sK, nb, kk, lane);
                mma(s[nb], qf[kk], bf[0], bf[1]);
                mma(s[nb], qf[kk + 1], bf[2], bf[3]);
                frag_b_rows(bf, sV, nb, kk, lane);
                mma(dp[nb], of[kk], bf[0], bf[1]);
                mma(dp[nb], of[kk + 1], bf[2], bf[3]);
            }
        const bool full = tile_full(p, h, q0, BM, k0, klimit);
        #pragma unroll
        for (int nb = 0; nb < BN / 8; ++nb)
            #pragma unroll
            for (int e = 0; e < 2; ++e) {
                int kpos = 0, kseg = 0;
                if (!full) {
                    const int kc = k0 + nb * 8 + 2 * t + e;
                    const int krow = row_of(p, kc, p.nk, p.k_rows, h);
                    kpos = krow >= 0 ? p.k_offset + krow : -1;
                    kseg = seg_of(p, kc);
                }
                #pragma unroll
                for (int r = 0; r < 2; ++r) {
                    bool ok = full || visible(p, h, qpos[r], qseg[r], kpos, kseg, klimit);
                    float pe = ok ? exp2f(fmaf(s[nb][2 * r + e], p.scale_log2, -lse2[r])) : 0.f;
                    s[nb][2 * r + e] = pe * (dp[nb][2 * r + e] - dl[r]);
                }
            }
        #pragma unroll
        for (int kk = 0; kk < BN / 16; ++kk) {
            u32 a[4] = {pack2(s[2 * kk][0], s[2 * kk][1]), pack2(s[2 * kk][2], s[2 * kk][3]),
                        pack2(s[2 * kk + 1][0], s[2 * kk + 1][1]), pack2(s[2 * kk + 1][2], s[2 * kk + 1][3])};
            #pragma unroll
            for (int cb = 0; cb < D / 8; cb += 2) {
                u32 bf[4];
                frag_b_cols(bf, sK, kk, cb, lane);
                mma(acc[cb], a, bf[0], bf[1]);
                mma(acc[cb + 1], a, bf[2], bf[3]);
            }
        }
        __syncthreads();
    }
    cp_wait<0>();
    #pragma unroll
    for (int r = 0; r < 2; ++r) {
        if (qrow[r] < 0) continue;
        float* row = p.dq + (((size_t)b * p.q_rows + qrow[r]) * p.heads + h) * D;
        #pragma unroll
        for (int i = 0; i < D / 8; ++i) {
            float v[2] = {acc[i][2 * r] * p.scale, acc[i][2 * r + 1] * p.scale};
            store_row(row + i * 8 + 2 * t, v, p.accumulate);
        }
    }
}

// dK, dV: one block per 64 key rows (4 warps of 16 keys), visiting the query tiles of the
// transposed plan. With S^T = K Q^T (keys as rows):
//   P^T = exp(S^T - lse), dV = P^T dO, dS^T = P^T o (V dO^T - delta), dK = scale * dS^T Q.
extern "C" __global__ void __launch_bounds__(NTHREADS) attn_bwd_dkdv(const Params p) {
    extern __shared__ __align__(128) u16 smem[];
    u16* sK = smem;
    u16* sV = sK + BN * D;
    u16* sQ = sV + BN * D;
    u16* sO = sQ + BM * D;
    float* sL = reinterpret_cast<float*>(sO + BM * D);  // lse2 of the query tile
    float* sD = sL + BM;                                // delta of the query tile
    int* sP = reinterpret_cast<int*>(sD + BM);          // global position of each query, -1: none
    const int kt = blockIdx.x, h = blockIdx.y, b = blockIdx.z;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int k0 = kt * BN;
    const int klimit = key_limit(p, b);
    const int qbeg = p.plan_ptr[kt];
    const int qend = keys_past_limit(p, k0, klimit) ? qbeg : p.plan_ptr[kt + 1];  // all keys padded: zeros

    int krow[2], kpos[2], kseg[2];
    #pragma unroll
    for (int r = 0; r < 2; ++r) {
        krow[r] = row_of(p, k0 + warp * 16 + g + 8 * r, p.nk, p.k_rows, h);
        kseg[r] = seg_of(p, k0 + warp * 16 + g + 8 * r);
        kpos[r] = krow[r] >= 0 ? p.k_offset + krow[r] : -1;
    }
    float dk[D / 8][4], dv[D / 8][4];
    #pragma unroll
    for (int i = 0; i < D / 8; ++i)
        #pragma unroll
        for (int e = 0; e < 4; ++e) dk[i][e] = dv[i][e] = 0.f;

    load_tile(sK, p.k, p, b, h, k0, p.nk, p.k_rows);
    load_tile(sV, p.v, p, b, h, k0, p.nk, p.k_rows);
    cp_commit();
    for (int it = qbeg; it < qend; ++it) {
        const int q0 = p.plan_idx[it] * BM;
        load_tile(sQ, p.q, p, b, h, q0, p.nq, p.q_rows);
        load_tile(sO, p.dout, p, b, h, q0, p.nq, p.q_rows);
        cp_commit();
        if (threadIdx.x < BM) {
            int row = row_of(p, q0 + threadIdx.x, p.nq, p.q_rows, h);
            sP[threadIdx.x] = row >= 0 ? p.q_offset + row : -1;
            sL[threadIdx.x] = lse2_of(p, b, h, row);
            sD[threadIdx.x] = row >= 0 ? p.delta[((size_t)b * p.heads + h) * p.q_rows + row] : 0.f;
        }
        cp_wait<0>();
        __syncthreads();
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
                frag_b_rows(bf, sQ, nb, kk, lane);
                mma(s[nb], ka, bf[0], bf[1]);
                mma(s[nb], kb, bf[2], bf[3]);
                frag_b_rows(bf, sO, nb, kk, lane);
                mma(dp[nb], va, bf[0], bf[1]);
                mma(dp[nb], vb, bf[2], bf[3]);
            }
        }
        const bool full = tile_full(p, h, q0, BM, k0, klimit);
        #pragma unroll
        for (int nb = 0; nb < BM / 8; ++nb)
            #pragma unroll
            for (int e = 0; e < 2; ++e) {
                const int qc = nb * 8 + 2 * t + e;
                const int qp = sP[qc], qs = seg_of(p, q0 + qc);
                #pragma unroll
                for (int r = 0; r < 2; ++r) {
                    bool ok = full || visible(p, h, qp, qs, kpos[r], kseg[r], klimit);
                    float pe = ok ? exp2f(fmaf(s[nb][2 * r + e], p.scale_log2, -sL[qc])) : 0.f;
                    s[nb][2 * r + e] = pe;
                    dp[nb][2 * r + e] = pe * (dp[nb][2 * r + e] - sD[qc]);
                }
            }
        #pragma unroll
        for (int kk = 0; kk < BM / 16; ++kk) {
            u32 pa[4] = {pack2(s[2 * kk][0], s[2 * kk][1]), pack2(s[2 * kk][2], s[2 * kk][3]),
                         pack2(s[2 * kk + 1][0], s[2 * kk + 1][1]), pack2(s[2 * kk + 1][2], s[2 * kk + 1][3])};
            u32 da[4] = {pack2(dp[2 * kk][0], dp[2 * kk][1]), pack2(dp[2 * kk][2], dp[2 * kk][3]),
                         pack2(dp[2 * kk + 1][0], dp[2 * kk + 1][1]), pack2(dp[2 * kk + 1][2], dp[2 * kk + 1][3])};
            #pragma unroll
            for (int cb = 0; cb < D / 8; cb += 2) {
                u32 bf[4];
                frag_b_cols(bf, sO, kk, cb, lane);
                mma(dv[cb], pa, bf[0], bf[1]);
                mma(dv[cb + 1], pa, bf[2], bf[3]);
                frag_b_cols(bf, sQ, kk, cb, lane);
                mma(dk[cb], da, bf[0], bf[1]);
                mma(dk[cb + 1], da, bf[2], bf[3]);
            }
        }
        __syncthreads();
    }
    cp_wait<0>();
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
