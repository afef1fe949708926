// Hopper's warpgroup MMA (sm_90a): operand descriptors, the wgmma instruction wrappers,
// and the attention's products over shared-memory tiles (S = Q K^T, O += P V).
//
// One instruction per warpgroup (4 warps, 128 threads) multiplies
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
// the backward's instructions (Nsight Compute source counters).
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
// Four 8 x 8 matrices of 16-bit pairs from the warp's registers into shared memory: lane L
// gives the address of row L & 7 of matrix L >> 3, and register j of lane (g, t) holds
// matrix j's row g, columns 2 t and 2 t + 1 (an mma fragment's layout).
__device__ __forceinline__ void stmatrix_x4(u16* dst, const u32 (&r)[4]) {
    asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};\n" ::"r"(
                     (u32)__cvta_generic_to_shared(dst)),
                 "r"(r[0]), "r"(r[1]), "r"(r[2]), "r"(r[3])
                 : "memory");
}
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

// d[64 x 80] (+)= A[64 x 16] * B[16 x 80], both from shared memory, K-major (S = Q K^T over
// the 80-key tiles of the forward above d = 128).
__device__ __forceinline__ void wgmma_ss_n80(float (&d)[10][4], Desc da, Desc db, int acc) {
    asm volatile(
        "{\n.reg .pred p;\n.reg .b64 da, db;\nsetp.ne.b32 p, %44, 0;\n"
        "mov.b64 da, {%40, %41};\nmov.b64 db, {%42, %43};\n"
        "wgmma.mma_async.sync.aligned.m64n80k16.f32." DT "." DT " "
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
        "%32, %33, %34, %35, %36, %37, %38, %39}, "
        "da, db, p, 1, 1, 0, 0;\n}\n"
        : WG_ACC8(d, 0), WG_ACC(d, 8), WG_ACC(d, 9)
        : "r"(da.lo), "r"(da.hi), "r"(db.lo), "r"(db.hi), "r"(acc));
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
// fragments (registers, KQ = D / 16 of them), B = the FBN key rows (shared memory, K-major).
// A template so that a module whose forward reads Q from shared memory (80-key tiles,
// above d = 128) does not compile it.
template <int KQ>
__device__ __forceinline__ void issue_scores(float (&s)[FNKB][4], const u32 (&qf)[KQ][4], const u16* sK) {
    static_assert(KQ == D / 16 && (FBN == 64 || FBN == 128), "Q in registers: D / 16 fragments, 64- or 128-key tiles");
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
#elif FBN == 80
        wgmma_ss_n80(s, a, b, k > 0);
#else
        wgmma_ss_n64<0, 0>(s, a, b, k > 0);
#endif
    }
}
// O += P V for one key tile: ROWS / 16 steps over the keys. In general acc += A B over the
// ROWS rows of an MN-major B tile of W columns (the head dimension contiguous: D, or v's
// DV in the forward), A from registers, 16 rows per step: the backward's dV += P^T dO and
// dK += dS^T Q over a query tile too. Above 128 columns (the forward only) a step is one
// wgmma per 128 columns of O and one of 64 for the rest (192), each reading its column
// blocks of the tile (ROWS x 64 apart).
template <int ROWS = BN, int W = D>
__device__ __forceinline__ void issue_pv(float (&o)[W / 8][4], const u32 (&pa)[ROWS / 16][4], const u16* sV) {
    const Desc dv = smem_desc(sV, ROWS * 128, 1024);
    #pragma unroll
    for (int k = 0; k < ROWS / 16; ++k) {
        const Desc desc = desc_step(dv, k * 16 * 64);
        if constexpr (W == 128) {
            wgmma_n128<1>(o, pa[k], desc, 1);
        } else if constexpr (W == 64) {
            wgmma_n64<1>(o, pa[k], desc, 1);
        } else {
            #pragma unroll
            for (int c = 0; c < W / 128; ++c)
                wgmma_n128<1>(*reinterpret_cast<float(*)[16][4]>(&o[16 * c]), pa[k], desc_step(desc, c * 2 * ROWS * 64),
                              1);
            if constexpr (W % 128 != 0)
                wgmma_n64<1>(*reinterpret_cast<float(*)[8][4]>(&o[16 * (W / 128)]), pa[k],
                             desc_step(desc, (W / 128) * 2 * ROWS * 64), 1);
        }
    }
}

// mbarriers (shared-memory arrival counters with a phase bit) hand the K/V stages between
