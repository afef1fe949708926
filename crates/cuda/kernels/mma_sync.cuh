// mma.sync instruction helpers (sm_80 on): ldmatrix loads of swizzled tiles, the
// m16n8k16 tensor-core product, and the A / B fragments of S = Q K^T and O = P V. The
// wgmma forward uses ldsm4 too, to hold Q in registers.

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

// A fragment (16 rows from r0, k-step kk) of a swizzled row-major tile of W columns.
template <int W = D>
__device__ __forceinline__ void frag_a(u32* a, const u16* tile, int r0, int kk, int lane) {
    ldsm4(a, tile + swz<W>(r0 + (lane & 15), kk * 2 + (lane >> 4)));
}
// B fragments for n-block `nb` (8 rows of `tile` as columns n) and k-steps kk, kk+1:
// b[0], b[1] for kk; b[2], b[3] for kk + 1. (B = tile^T: S = Q K^T.)
template <int W = D>
__device__ __forceinline__ void frag_b_rows(u32* b, const u16* tile, int nb, int kk, int lane) {
    ldsm4(b, tile + swz<W>(nb * 8 + (lane & 7), kk * 2 + (lane >> 3)));
}
// B fragments for k-step kk (16 rows of `tile` as k) and column blocks cb, cb+1 (8 columns
// each): b[0], b[1] for cb; b[2], b[3] for cb + 1. (B = tile: O = P V.)
template <int W = D>
__device__ __forceinline__ void frag_b_cols(u32* b, const u16* tile, int kk, int cb, int lane) {
    ldsm4t(b, tile + swz<W>(kk * 16 + (lane & 7) + ((lane >> 3) & 1) * 8, cb + (lane >> 4)));
}
