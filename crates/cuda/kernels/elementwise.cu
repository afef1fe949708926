// Elementwise kernels in grid-stride loops (a thread per element, or DELTA_LANES per row): the
// online-softmax merge of two partials, the merge identity, the backward's per-row
// delta and lse2, and the conversion of f32 results to 16 bits.

// The online-softmax merge of two partials (reference: Partial::merge). Writes a new
// result; never touches its inputs. One thread per output element (DVM per row).
extern "C" __global__ void merge_partials(const float* oa, const float* la, const float* ob, const float* lb,
                                          float* out, float* lse, int batch, int rows, int heads) {
    const size_t total = (size_t)batch * rows * heads * DVM;
    for (size_t e = (size_t)blockIdx.x * blockDim.x + threadIdx.x; e < total; e += (size_t)gridDim.x * blockDim.x) {
        size_t row = e / DVM;  // (b, i, h)
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
        if (e % DVM == 0) lse[li] = L;
    }
}

// The LSE of the merge identity (-inf; its output, 0, is a memset): what a dilated branch
// leaves in rows it skips.
extern "C" __global__ void fill_empty_lse(float* lse, size_t n) {
    for (size_t e = (size_t)blockIdx.x * blockDim.x + threadIdx.x; e < n; e += (size_t)gridDim.x * blockDim.x)
        lse[e] = NEG_INF;
}

// delta_i = sum_d dout_id * out_id over the DVM columns (flash-attention 2's D), and the
// row's lse in the form the backward's P = exp2(s * scale * log2(e) - lse2) takes:
// lse2 = lse * log2(e), +inf for a row that saw no key (lse = -inf; then P = 0, never
// inf * 0). Both then reach the backward's query stages by cp.async, with no arithmetic on
// the way.
// DELTA_LANES threads share a row: each loads 8 consecutive elements (16 bytes of dout) per
// step and the lanes add their sums by shuffles. A warp so reads 32 / DELTA_LANES
// consecutive rows in whole 16-byte words and uses every 128-byte line it touches in full
// (a thread per row would load 2 bytes from each of 32 lines per instruction).
// `out` is the forward's f32 output (bwd_delta) or its 16-bit rounding (bwd_delta_half:
// flash-attention's choice, since a training step keeps only the 16-bit output). Rows
// start 2 * DVM bytes apart from 16-byte aligned tensors (the callers' buffers are).
__device__ __forceinline__ void load8(const u16* x, float v[8]) {
    const uint4 w = *reinterpret_cast<const uint4*>(x);
    const u32 p[4] = {w.x, w.y, w.z, w.w};
    #pragma unroll
    for (int j = 0; j < 4; ++j) {
        v[2 * j] = to_f32((u16)(p[j] & 0xffffu));
        v[2 * j + 1] = to_f32((u16)(p[j] >> 16));
    }
}

__device__ __forceinline__ void load8(const float* x, float v[8]) {
    const float4 a = reinterpret_cast<const float4*>(x)[0], b = reinterpret_cast<const float4*>(x)[1];
    v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w, v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
}

template <typename Out>
__device__ __forceinline__ void delta_rows(const u16* dout, const Out* out, const float* lse, float* delta,
                                           float* lse2, int batch, int rows, int heads) {
    constexpr int ROWS_PER_WARP = 32 / DELTA_LANES;
    const size_t total = (size_t)batch * rows * heads;
    const int lane = threadIdx.x % DELTA_LANES, group = (threadIdx.x % 32) / DELTA_LANES;
    const size_t warps = (size_t)gridDim.x * blockDim.x / 32;
    // The bound is the warp's first row, the same for its 32 lanes: all reach the shuffles.
    for (size_t first = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) / 32 * ROWS_PER_WARP; first < total;
         first += warps * ROWS_PER_WARP) {
        const size_t row = first + group;
        float acc = 0.f;
        if (row < total) {
            #pragma unroll
            for (int c = lane; c < DVM / 8; c += DELTA_LANES) {
                float a[8], b[8];
                load8(dout + row * DVM + c * 8, a);
                load8(out + row * DVM + c * 8, b);
                #pragma unroll
                for (int j = 0; j < 8; ++j) acc += a[j] * b[j];
            }
        }
        #pragma unroll
        for (int m = DELTA_LANES / 2; m > 0; m /= 2) acc += __shfl_xor_sync(0xffffffffu, acc, m);
        if (row < total && lane == 0) {
            int hh = (int)(row % heads);
            size_t bi = row / heads;
            int i = (int)(bi % rows), bb = (int)(bi / rows);
            const size_t at = ((size_t)bb * heads + hh) * rows + i;
            const float L = lse[at];
            delta[at] = acc;
            lse2[at] = L == NEG_INF ? POS_INF : L * LOG2E;
        }
    }
}

extern "C" __global__ void bwd_delta(const u16* dout, const float* out, const float* lse, float* delta, float* lse2,
                                     int batch, int rows, int heads) {
    delta_rows(dout, out, lse, delta, lse2, batch, rows, heads);
}

extern "C" __global__ void bwd_delta_half(const u16* dout, const u16* out, const float* lse, float* delta,
                                          float* lse2, int batch, int rows, int heads) {
    delta_rows(dout, out, lse, delta, lse2, batch, rows, heads);
}

// f32 results (out, dq, dk, dv) to the module's 16-bit type, rounded to nearest (even):
// two elements per thread and step, packed as the kernels pack P. `pairs` = elements / 2
// (every tensor has an even number of elements: the head dim is even).
extern "C" __global__ void to_half(const float* x, u32* y, size_t pairs) {
    for (size_t e = (size_t)blockIdx.x * blockDim.x + threadIdx.x; e < pairs; e += (size_t)gridDim.x * blockDim.x)
        y[e] = pack2(x[2 * e], x[2 * e + 1]);
}
