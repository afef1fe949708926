// The kernels' parameter block, passed by value to every attention kernel. The host
// declares it too (crates/cuda/src/params.rs); the generated static_asserts that follow
// this file in the translation unit check every field's offset and the size against the
// host's, so the two cannot drift apart unnoticed.
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
    const unsigned char* plan_full;  // per plan_idx entry: 1 = every pair of the tile pair allowed (causality
                                     // included); launch end, padding and documents are the kernel's to test
    const unsigned char* block_mask;  // block-sparse user mask, bs_mask_blocks^2; or the mask table (PATTERN_TABLE); or the
                                      // offsets (int, OFFSET_TABLE); or null
    const int* doc_first;      // packed sequences: per (batch row, position), the first and
    const int* doc_last;       // last position of its document; null: no documents
    const int* seg_start;      // compact over documents: segment s is positions seg_start[s] .. seg_start[s + 1] - 1;
                               // null: s * dil_segment .. (s + 1) * dil_segment - 1
    unsigned* work;            // wgmma forward: the call's counters, [0] next item, [1] blocks done (zero
                               // between launches); null for other kernels
    int batch, heads;
    int kv_heads, kv_group;    // K/V heads; query head h reads K/V head h / kv_group (GQA)
    int nq, nk;                // launch index space (compact rows for a dilated branch)
    int q_rows, k_rows;        // physical rows of the q / k tensors
    int q_offset, k_offset;    // global position of physical row 0 (see Axis)
    int seq_len;               // global sequence length the pattern is defined on
    int head_base, pattern_heads;  // query head h is head head_base + h of pattern_heads (a head slice)
    int head_first, head_count;    // the launch's work: query heads head_first .. + head_count of the tensors'
    int causal;
    int pattern;               // PATTERN_DENSE, _WINDOW, _BLOCK_SPARSE, _DILATED (one branch)
    int win_left, win_right;
    int bs_block, bs_radius, bs_stride, bs_global, bs_mask_blocks;
    int dil_segment, dil_rate, dil_rule, dil_fixed;  // dil_rule: OFFSET_HEAD_MOD, _HEAD_BLOCK, _FIXED, _TABLE
    int dil_segments;          // OFFSET_TABLE: segments per head of the offset table
    int compact;               // 1: index c -> row of the dilated branch (see row_of)
    int dil_per_seg;           // ceil(dil_segment / dil_rate)
    int hole_side;             // a nested union's piece: 0 none, HOLE_BELOW or HOLE_ABOVE (see hole_width)
    int hole_table;            // its hole widths (int) at block_mask + hole_table bytes, hole_units per head,
    int hole_unit, hole_units; // each for hole_unit positions
    int q_stride, k_stride;    // row i is at global position offset + i * stride
    int q_cbase, k_cbase;      // compact: global compact index of launch index 0
    int accumulate;            // forward: merge into out/lse; backward: add into dq/dk/dv
    int plan_rows;             // 0: one tile plan for every batch row; else row b's start at b * plan_rows
    int half_out;              // 1: out (forward) or dk, dv (backward) point to the input's 16-bit type,
                               // each value written once (accumulate 0; dk, dv: kv_group 1)
    float scale;
    float scale_log2;          // scale * log2(e)
    float out_scale;           // factor of the output rows and gradients (crate::output_scale), else 1
    float delta_scale;         // backward: factor of delta, 1 / the pattern's output scale, else 1
};
