// Elementwise kernels, one thread per element or row in a grid-stride loop: the
// online-softmax merge of two partials, the merge identity, the backward's per-row
// delta and lse2, and the conversion of f32 results to 16 bits.

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
// `out` is the forward's f32 output (bwd_delta) or its 16-bit rounding (bwd_delta_half:
// flash-attention's choice, since a training step keeps only the 16-bit output).
__device__ __forceinline__ float out_value(const float* out, size_t e) { return out[e]; }
__device__ __forceinline__ float out_value(const u16* out, size_t e) { return to_f32(out[e]); }

template <typename Out>
__device__ __forceinline__ void delta_rows(const u16* dout, const Out* out, const float* lse, float* delta,
                                           float* lse2, int batch, int rows, int heads) {
    const size_t total = (size_t)batch * rows * heads;
    for (size_t row = (size_t)blockIdx.x * blockDim.x + threadIdx.x; row < total;
         row += (size_t)gridDim.x * blockDim.x) {
        float acc = 0.f;
        #pragma unroll
        for (int d = 0; d < D; ++d) acc += to_f32(dout[row * D + d]) * out_value(out, row * D + d);
        int hh = (int)(row % heads);
        size_t bi = row / heads;
        int i = (int)(bi % rows), bb = (int)(bi / rows);
        const size_t at = ((size_t)bb * heads + hh) * rows + i;
        const float L = lse[at];
        delta[at] = acc;
        lse2[at] = L == NEG_INF ? POS_INF : L * LOG2E;
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
