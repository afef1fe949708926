// The backward's query stage: one query tile's Q, dO and per-row lse2, delta, position and
// tensor row, filled by either family's loads (stage_query_row: the per-row part).

// One query stage of the backward (double-buffered in both kernels): the ROWS-row query
// tile's Q (D columns) and dO (DV columns), then per query row its lse2, delta, global position (-1: none) and
// tensor row (-1: none). SIZE is its size in u16 units, a multiple of 512 (1 KB).
// (A view of one base pointer: the parts are fixed offsets from it, which the loads and
// stores take as immediates, and only the base is live across the loop.)
template <int ROWS>
struct QueryStage {
    static constexpr int SIZE = ROWS * (D + DV) + 4 * ROWS * 2;
    u16* base;
    __device__ u16* q() const { return base; }
    __device__ u16* o() const { return base + ROWS * D; }
    __device__ float* lse2() const { return reinterpret_cast<float*>(base + ROWS * (D + DV)); }
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
