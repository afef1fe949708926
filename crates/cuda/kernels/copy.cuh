// Asynchronous copies from global to shared memory (cp.async, any sm_80+ device) and
// load_tile, the gather of a tile's rows through the launch's index map.

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
// Asynchronously copy ROWS rows (launch indices c0..) of query head h's view of a tensor
// (its head h / a.group) into a swizzled tile W columns wide; the tensor's rows are WMEM
// columns (DM for a tile of D, DVM for one of DV), and tile columns WMEM.. are zero-filled,
// as are rows outside the range or in a hole (so that 0 * garbage never yields NaN).
// Each of THREADS threads (threadIdx.x mod THREADS: a warp of the block may load alone)
// copies the same CPT 16-byte chunks of every (THREADS / LPR)-th row: a fixed trip count,
// one address per row, no per-chunk division. LPR, the threads of a row, is its chunk count
// CHW = W / 8 where that divides THREADS (W = 64, 128, 256: one chunk each); the 12 and 24
// chunks of 96 and 192 divide no power of two, so there a row takes CHW / 3 threads of 3
// chunks, CHW / 3 apart.
template <int ROWS = 64, int THREADS = NTHREADS, bool BLOCKS = false, int W = D>
__device__ __forceinline__ void load_tile(u16* tile, const u16* g, const Params& p, const Axis& a, int b, int h,
                                          int c0) {
    constexpr int WMEM = W == D ? DM : DVM;
    static_assert(W == D || W == DV, "load_tile: a tile of q / k's or of v's width");
    constexpr int CHW = W / 8, CPT = THREADS % CHW == 0 ? 1 : 3, LPR = CHW / CPT;
    constexpr int STEP = THREADS / LPR;  // rows per pass
    static_assert(CHW % CPT == 0 && THREADS % LPR == 0 && ROWS % STEP == 0, "tile rows must split evenly over the threads");
    const int tid = threadIdx.x % THREADS, r0 = tid / LPR, ch = tid % LPR;
    const u16* base = g + ((size_t)b * a.rows * a.heads + h / a.group) * WMEM + ch * 8;
    #pragma unroll
    for (int i = 0; i < ROWS / STEP; ++i) {
        const int r = r0 + i * STEP;
        const int row = row_of(p, a, c0 + r, h);
        #pragma unroll
        for (int j = 0; j < CPT; ++j) {
            const int c = ch + j * LPR;
            u16* const at = tile + (BLOCKS ? swz_blocks<ROWS>(r, c) : swz<W>(r, c));
            if constexpr (WMEM == W) {
                cp_async16(at, row >= 0 ? base + (size_t)row * a.heads * W + j * LPR * 8 : g, row >= 0);
            } else {
                const bool valid = row >= 0 && c * 8 < WMEM;
                cp_async16(at, valid ? base + (size_t)row * a.heads * WMEM + j * LPR * 8 : g, valid);
            }
        }
    }
}
