//! The kernels' parameter block and the codes it carries.
//!
//! `Params` is declared twice by necessity, here and in `kernels/params.cuh`; the two
//! must agree byte for byte. The macro below records every field's offset
//! ([`Params::LAYOUT`]), and the generated contract header turns them into
//! `static_assert`s on the CUDA struct ([`crate::kernel_source`]): a field added, removed,
//! reordered or retyped on one side only fails NVRTC's compilation, at start-up and in the
//! `kernels_compile` test, naming the field.

/// Declares `Params` and its layout table from one field list.
macro_rules! params {
    ($($(#[$doc:meta])* $name:ident: $ty:ty,)*) => {
        /// The kernels' parameter block, passed by value. Pointers are raw device
        /// addresses (0 = null). Must match `struct Params` in `kernels/params.cuh`
        /// (checked at compile time of the kernels: see the module docs).
        #[repr(C)]
        #[derive(Debug, Clone, Copy, Default, PartialEq)]
        pub struct Params {
            $($(#[$doc])* pub $name: $ty,)*
        }

        impl Params {
            /// Every field's name and byte offset, in declaration order.
            pub const LAYOUT: &'static [(&'static str, usize)] =
                &[$((stringify!($name), std::mem::offset_of!(Params, $name)),)*];
        }
    };
}

params! {
    q: u64,
    k: u64,
    v: u64,
    out: u64,
    lse: u64,
    dout: u64,
    delta: u64,
    /// Backward: lse * log2(e), +inf for lse = -inf (written by `bwd_delta`).
    lse2: u64,
    dq: u64,
    dk: u64,
    dv: u64,
    /// Per batch row; 0: no padding.
    key_len: u64,
    /// CSR of the tile plan: row tile -> visited column tiles.
    plan_ptr: u64,
    plan_idx: u64,
    /// Per entry of `plan_idx`, 1 where the planner proved every pair of the tile pair
    /// allowed (`TilePlan::full`); 0: no marks.
    plan_full: u64,
    /// Block-sparse user mask, `bs_mask_blocks^2` bytes; or (`PATTERN_TABLE`) the mask
    /// table, `bs_mask_blocks` tiles per side (`crate::mask_table`); or 0.
    block_mask: u64,
    /// Packed sequences: per (batch row, position), the first and the last position of
    /// its document (`[batch, seq_len]` i32 each); 0: no documents.
    doc_first: u64,
    doc_last: u64,
    /// A compact launch over packed documents (`crate::spec_documents`): compact segment
    /// `s` covers global positions `seg_start[s] .. seg_start[s + 1]` (i32, one more entry
    /// than segments); 0: segment `s` covers `s dil_segment .. (s + 1) dil_segment`.
    seg_start: u64,
    /// The wgmma forward's work counters, [`WORK_COUNTERS`] u32 of the call's own
    /// (`Prepared`): the next item to claim and the blocks that found none left. Zero
    /// before a launch; the launch's last block zeroes them again. 0 for other kernels.
    work: u64,
    batch: i32,
    heads: i32,
    /// K/V heads (`heads` is a multiple); query head `h` reads K/V head `h / kv_group`.
    kv_heads: i32,
    kv_group: i32,
    /// Launch index space (compact rows for a dilated branch).
    nq: i32,
    nk: i32,
    /// Physical rows of the q / k tensors.
    q_rows: i32,
    k_rows: i32,
    /// Global position of physical row 0. A launch over one piece of a document
    /// (`crate::spec_documents`) counts positions from the piece's start, so its row 0
    /// sits at minus that start.
    q_offset: i32,
    k_offset: i32,
    /// Global sequence length the pattern is defined on (a document piece's length).
    seq_len: i32,
    /// Query head `h` is head `head_base + h` of the `pattern_heads` the pattern is
    /// defined on (a head slice: Ulysses; 0 and `heads` otherwise).
    head_base: i32,
    pattern_heads: i32,
    /// The launch's work covers query heads `head_first .. head_first + head_count` of the
    /// tensors' `heads` (every head: 0 and `heads`; a head-group branch: its group's).
    head_first: i32,
    head_count: i32,
    causal: i32,
    /// A [`PatternCode`].
    pattern: i32,
    win_left: i32,
    win_right: i32,
    bs_block: i32,
    bs_radius: i32,
    bs_stride: i32,
    bs_global: i32,
    bs_mask_blocks: i32,
    dil_segment: i32,
    dil_rate: i32,
    /// An [`OffsetRule`].
    dil_rule: i32,
    dil_fixed: i32,
    /// [`OffsetRule::Table`]: segments per head of the offset table, `ceil(seq_len /
    /// dil_segment)`.
    dil_segments: i32,
    /// 1: launch index c -> row of the dilated branch (compact index space).
    compact: i32,
    /// ceil(dil_segment / dil_rate).
    dil_per_seg: i32,
    /// A nested union's piece (`crate::union_pieces`): 0, none; else the [`PieceSide`] of
    /// each row's hole whose keys the launch keeps (its queries, in the backward).
    ///
    /// [`PieceSide`]: crate::union_pieces::PieceSide
    hole_side: i32,
    /// The piece's hole table: `i32` widths from `block_mask + hole_table` (bytes),
    /// `hole_units` per pattern head, each for the `hole_unit` positions from `u hole_unit`.
    hole_table: i32,
    hole_unit: i32,
    hole_units: i32,
    /// Row i is at global position offset + i * stride.
    q_stride: i32,
    k_stride: i32,
    /// Compact: global compact index of launch index 0.
    q_cbase: i32,
    k_cbase: i32,
    /// Forward: merge into out / lse; backward: add into dq / dk / dv.
    accumulate: i32,
    /// 0: one tile plan serves every batch row; else batch row `b`'s plan rows start at
    /// `b * plan_rows` (packed sequences: each row's documents have their own plan).
    plan_rows: i32,
    /// 1: `out` (forward) or `dk`, `dv` (backward) address the inputs' 16-bit type and
    /// the epilogue rounds each value once as it stores it (to nearest, ties to even: the
    /// rounding of `to_half`). Only where every element is written by one store:
    /// `accumulate` 0, and for dK, dV `kv_group` 1.
    half_out: i32,
    scale: f32,
    /// scale * log2(e).
    scale_log2: f32,
    /// The factor of this launch's output rows (forward) and gradients (backward):
    /// the pattern's output scale where the call applies it, else 1
    /// (`crate::output_scale`).
    out_scale: f32,
    /// The backward's factor of delta: 1 / the pattern's output scale where the pattern
    /// has one (applied by the call or deferred to its caller), else 1.
    delta_scale: f32,
}

// SAFETY: plain-old-data, `repr(C)`, laid out as the CUDA struct (asserted when the
// kernels compile).
unsafe impl cudarc::driver::DeviceRepr for Params {}

/// The u32 counters behind `Params::work`: the next forward item to claim, and the
/// blocks that found no item left (the last of them zeroes both). They belong to the call
/// (`Prepared`), not to the module: two calls of one module on two streams then never
/// claim each other's items, and one call's launches are ordered by its stream (cudarc
/// records the kernel's write, so a launch of the same call on another stream waits).
pub const WORK_COUNTERS: usize = 2;

/// `Params::pattern`: which mask the kernels evaluate (`PATTERN_*` in the kernels).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(i32)]
pub enum PatternCode {
    Dense = 0,
    Window = 1,
    BlockSparse = 2,
    /// One dilated branch.
    Dilated = 3,
    /// A mask expression compiled into the module (`crate::expr_source`).
    Expr = 4,
    /// A pattern materialised as a mask table (`crate::mask_table`).
    Table = 5,
}

/// `Params::dil_rule`: a dilated branch's offset for head h (`OFFSET_*` in the kernels).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(i32)]
pub enum OffsetRule {
    /// `h mod r`.
    HeadMod = 0,
    /// `floor(h / ceil(H / r))`.
    HeadBlock = 1,
    /// `Params::dil_fixed`.
    Fixed = 2,
    /// Per head and segment, `o(h, s)`: the `i32` at `block_mask + 4 (h dil_segments + s)`
    /// (a `dilated_expr` branch's offset expression, `crate::dilated_expr`).
    Table = 3,
}

impl PatternCode {
    /// Every code with its kernel-side name.
    pub const ALL: [(&'static str, PatternCode); 6] = [
        ("PATTERN_DENSE", PatternCode::Dense),
        ("PATTERN_WINDOW", PatternCode::Window),
        ("PATTERN_BLOCK_SPARSE", PatternCode::BlockSparse),
        ("PATTERN_DILATED", PatternCode::Dilated),
        ("PATTERN_EXPR", PatternCode::Expr),
        ("PATTERN_TABLE", PatternCode::Table),
    ];
}

impl OffsetRule {
    /// Every rule with its kernel-side name.
    pub const ALL: [(&'static str, OffsetRule); 4] = [
        ("OFFSET_HEAD_MOD", OffsetRule::HeadMod),
        ("OFFSET_HEAD_BLOCK", OffsetRule::HeadBlock),
        ("OFFSET_FIXED", OffsetRule::Fixed),
        ("OFFSET_TABLE", OffsetRule::Table),
    ];
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_lists_every_field_in_order() {
        // 20 pointers, 42 ints, 4 floats, padded to a multiple of 8 bytes (the pointers'
        // alignment) as C pads the CUDA struct.
        assert_eq!(std::mem::size_of::<Params>(), (20 * 8 + 42 * 4 + 4 * 4usize).next_multiple_of(8));
        assert_eq!(Params::LAYOUT.len(), 20 + 42 + 4);
        assert_eq!(Params::LAYOUT[0], ("q", 0));
        assert_eq!(Params::LAYOUT[19], ("work", 152));
        assert_eq!(Params::LAYOUT[20], ("batch", 160));
        assert_eq!(Params::LAYOUT.last(), Some(&("delta_scale", 160 + 45 * 4)));
        assert!(Params::LAYOUT.windows(2).all(|w| w[0].1 < w[1].1), "declaration order");
    }
}
