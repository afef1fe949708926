// Epilogues: the forward's O / l and LSE per row (or the fused online-softmax merge into
// an accumulator), and the backward's dK, dV rows and dQ reductions.

// The epilogue: sigma O / l and the LSE of each row (sigma = p.out_scale, the pattern's
// output scale or 1; the LSE stays O's), or, with `accumulate`, this launch's result merged
// into the partial already in out / lse (the online-softmax merge of merge_partials,
// fused): a dilated pattern's branches and a ring step's pieces build one accumulator
// without a separate merge pass over the whole output per launch. The merge's weights come
// from the LSEs alone, so it is linear in the outputs: merging sigma O_2 into sigma O_1
// gives sigma merge(O_1, O_2), and launches that each scale their own result build the
// scaled accumulator. Every lane of a row's quad reads the old LSE before lane 0
// overwrites it (one warp owns each row; __syncwarp orders the two).
template <int WMT>
__device__ __forceinline__ void store_forward(const Params& p, int b, int h, const float (&o)[WMT][DV / 8][4],
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
            float* orow = p.out + (((size_t)b * p.q_rows + qrow) * p.heads + h) * DVM;
            float* lrow = p.lse + ((size_t)b * p.heads + h) * p.q_rows + qrow;
            if (!p.accumulate) {
                const float inv = lr > 0.f ? p.out_scale / lr : 0.f;
                if (p.half_out) {
                    // The same element offsets in a 16-bit tensor: two values per 32-bit store.
                    u16* hrow = reinterpret_cast<u16*>(p.out) + (((size_t)b * p.q_rows + qrow) * p.heads + h) * DVM;
                    #pragma unroll
                    for (int i = 0; i < DVM / 8; ++i)
                        *reinterpret_cast<u32*>(hrow + i * 8 + 2 * t) =
                            pack2(o[mt][i][2 * r] * inv, o[mt][i][2 * r + 1] * inv);
                } else {
                    #pragma unroll
                    for (int i = 0; i < DVM / 8; ++i)
                        *reinterpret_cast<float2*>(orow + i * 8 + 2 * t) =
                            make_float2(o[mt][i][2 * r] * inv, o[mt][i][2 * r + 1] * inv);
                }
                if (t == 0) *lrow = lnew;
                continue;
            }
            const float a = lold[mt][r], mx = fmaxf(a, lnew);
            if (mx == NEG_INF) continue;  // both empty: the identity already there stays
            const float ea = expf(a - mx), eb = expf(lnew - mx), sum = ea + eb;
            // Weights of the old partial and of this launch's output sigma O / l.
            const float wa = ea / sum, wb = lr > 0.f ? p.out_scale * eb / sum / lr : 0.f;
            #pragma unroll
            for (int i = 0; i < DVM / 8; ++i) {
                float2* at = reinterpret_cast<float2*>(orow + i * 8 + 2 * t);
                const float2 old = *at;
                *at = make_float2(wa * old.x + wb * o[mt][i][2 * r], wa * old.y + wb * o[mt][i][2 * r + 1]);
            }
            if (t == 0) *lrow = mx + logf(sum);
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
// Does a backward launch add its dK, dV into the buffers rather than write them? Then a
// row no query reaches may be left alone (adding zero), as a block that visits nothing.
__device__ __forceinline__ bool bwd_adds_kv(const Params& p) { return p.accumulate || p.kv_group > 1; }
// dK and dV rows of this thread (dS already holds the softmax scale and the output scale
// sigma, dscores_t; dV = sigma P^T dO takes sigma here, once per element): dK
// columns 8 NC slice .. + 8 NC - 1 (all D, or a warp's slice of D), dV columns 8 NCV
// slice .. of DV likewise; query head h's contribution to K/V head h / kv_group: written
// (in f32, or with `half_out` in the inputs' 16-bit type), or added (bwd_adds_kv): as
// global reductions into buffers the host has zeroed or holds running sums in. Under
// grouped-query attention the kv_group query heads of a K/V head add into the same rows
// from different blocks; with `accumulate` (a ring step's or a pattern branch's launch)
// one block adds into each row, and a reduction still needs no read: a load, add and
// store per pair waited for each load in turn (dk and dv may alias, so no load moves
// above a store), some 30 us per wave of blocks whatever the block's work.
template <int NC, int NCV = NC>
__device__ __forceinline__ void store_dkdv(const Params& p, int b, int h, const float (&dk)[NC][4],
                                           const float (&dv)[NCV][4], const int (&krow)[2], int slice, int t) {
    constexpr int N = NC > NCV ? NC : NCV;
    #pragma unroll
    for (int r = 0; r < 2; ++r) {
        if (krow[r] < 0) continue;
        const size_t row = ((size_t)b * p.k_rows + krow[r]) * p.kv_heads + h / p.kv_group;
        const size_t base = row * DM + slice * NC * 8, vbase = row * DVM + slice * NCV * 8;
        #pragma unroll
        for (int i = 0; i < N; ++i) {
            // Columns the tensors have (the wgmma tiles' zero columns DM.. are not stored;
            // DM == D folds the tests away).
            const bool kin = i < NC && (DM == D || slice * NC * 8 + i * 8 < DM),
                       vin = i < NCV && (DVM == DV || slice * NCV * 8 + i * 8 < DVM);
            float vk[2] = {i < NC ? dk[i][2 * r] : 0.f, i < NC ? dk[i][2 * r + 1] : 0.f};
            const float sigma = p.out_scale;
            float vv[2] = {i < NCV ? dv[i][2 * r] * sigma : 0.f, i < NCV ? dv[i][2 * r + 1] * sigma : 0.f};
            if (bwd_adds_kv(p)) {
                if (kin) red_add2(p.dk + base + i * 8 + 2 * t, vk[0], vk[1]);
                if (vin) red_add2(p.dv + vbase + i * 8 + 2 * t, vv[0], vv[1]);
            } else if (p.half_out) {
                // Written once (no accumulate, one query head per K/V head): 16-bit results.
                if (kin)
                    *reinterpret_cast<u32*>(reinterpret_cast<u16*>(p.dk) + base + i * 8 + 2 * t) = pack2(vk[0], vk[1]);
                if (vin)
                    *reinterpret_cast<u32*>(reinterpret_cast<u16*>(p.dv) + vbase + i * 8 + 2 * t) = pack2(vv[0], vv[1]);
            } else {
                if (kin) *reinterpret_cast<float2*>(p.dk + base + i * 8 + 2 * t) = make_float2(vk[0], vk[1]);
                if (vin) *reinterpret_cast<float2*>(p.dv + vbase + i * 8 + 2 * t) = make_float2(vv[0], vv[1]);
            }
        }
    }
}
