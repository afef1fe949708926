// What every kernel file uses: the 16-bit element type, numeric constants, conversions
// and the swizzled shared-memory layouts.
//
// The translation unit starts with the generated contract header (HEAD_DIM, IS_F16,
// WGMMA, tile sizes, stages, threads, shared-memory sizes, pattern codes: see
// crates/cuda/src/kernel_source.rs). No CUDA header is included: bf16/f16 values are
// carried as raw 16-bit words and converted with PTX `cvt`, so NVRTC needs no include path.
//
// Layouts (the reference crate's): q, k, v, d_out, out, dq, dk, dv are
// [batch, rows, heads, HEAD_DIM]; lse and delta are [batch, heads, rows]. The design is
// described in docs/gpu.md.

#if IS_F16
#define DT "f16"
#else
#define DT "bf16"
#endif

typedef unsigned short u16;
typedef unsigned int u32;

#define D HEAD_DIM
#define DV HEAD_DIM_V  // head dim of v, d_out, out, dv (D but for d_qk = 192, d_v = 128)
// The tensors' own head dims, rows DM (q, k, dq, dk) and DVM (v, d_out, out, dv) elements
// apart in global memory. D and DV are the register and shared-memory tiles' widths: the
// same, except in the wgmma family at d = 96, whose tiles are 128 wide (two TMA boxes of 64
// columns in the 128-byte swizzle) with columns DM.. zero: loaded as zeros, never stored.
#define DM HEAD_DIM_MEM
#define DVM HEAD_DIM_V_MEM
#define CH (D / 8)     // 16-byte chunks per row of q, k
#define NKB (BN / 8)  // 8-key column blocks of a plan tile's scores
#define NEG_INF (__int_as_float(0xff800000))
#define POS_INF (__int_as_float(0x7f800000))
#define LOG2E 1.4426950408889634f
#define LN2 0.6931471805599453f

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

// Swizzled element offset of 16-byte chunk `ch` of row `r` in a [rows][W] tile (W = D, or DV
// for tiles of v and d_out), a permutation of the chunks of each row, so that ldmatrix's 8
// addresses of one 8 x 8 matrix (one chunk of 8 consecutive rows) hit the 8 different
// 16-byte bank groups of a 128-byte cycle. Where W / 8 is a multiple of 8 (d = 64, 128, 192,
// 256: a row is a whole number of cycles) the chunk is XOR-ed with r mod 8. At d = 96 (12
// chunks, rows of 192 bytes) that XOR would move chunks 8..11 out of the row, so there:
// * chunks 0..7 keep ch ^ (r mod 8). Row r starts 12 r = 4 (r mod 2) groups into a cycle
//   (mod 8), so chunk c lands in group c ^ (r mod 8) ^ 4 (r mod 2): r -> (r mod 8) ^ 4 (r mod
//   2) is a bijection of 0..7, 8 groups;
// * chunks 8..11 XOR their low 2 bits with (r / 2) mod 4 (staying in 8..11): group
//   4 (r mod 2) + ((c mod 4) ^ ((r / 2) mod 4)), and (r mod 2, (r / 2) mod 4) takes 8 values.
template <int W = D>
__device__ __forceinline__ int swz(int r, int ch) {
    static_assert(W % 64 == 0 || W == 96, "swz: the swizzle is derived for rows of 8k or 12 chunks");
    if constexpr (W % 64 == 0) {
        return r * W + ((ch ^ (r & 7)) << 3);
    } else {
        return r * W + ((ch < 8 ? ch ^ (r & 7) : ch ^ ((r >> 1) & 3)) << 3);
    }
}

// The wgmma operand layout ("128-byte swizzle", see the wgmma forward): a tile of ROWS rows is stored
// as D / 64 column blocks of ROWS x 64 elements (128-byte rows); in each block the 16-byte
// chunk c of row r sits at chunk c ^ (r mod 8), the XOR the tensor core's address unit
// undoes. Blocks start at multiples of 1024 bytes (8 rows: one swizzle period), as the
// descriptors below require. At D = 64 this is the layout `swz` gives.
template <int ROWS>
__device__ __forceinline__ int swz_blocks(int r, int ch) {
    return (ch >> 3) * ROWS * 64 + r * 64 + (((ch & 7) ^ (r & 7)) << 3);
}
