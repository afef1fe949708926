//! Host-side launch construction: argument validation, the kernel parameter block of
//! every launch of a call, its tile plans, and the launch description (kernel, grid,
//! block, shared memory) derived from the family table ([`crate::family`]). Pure host code
//! (no CUDA), so it is tested on machines without a GPU.

use crate::dilated_expr;
use crate::error::{CudaError, Result};
use crate::family::{Family, TILE};
use crate::mask_table::{self, MaskTable};
use crate::params::{OffsetRule, Params, PatternCode};
use crate::plan::expression::{self, ExprScope};
use crate::plan::{IndexMap, TilePlan, documents, plan, table};
use crate::shape::{Chunk, Shape};
use crate::spec::{GpuPattern, GpuSpec};
use ringdil_reference::pattern::{Branch, Offset};

// The call description and the family table, where launch construction takes them.

/// One kernel launch of a call: a dense/masked pattern is one launch; a dilated pattern is
/// one launch per branch, each merged into the call's result.
#[derive(Debug, Clone)]
pub struct LaunchSpec {
    pub params: Params,
    pub map: IndexMap,
    pub family: Family,
    pub head_dim: usize,
    /// Query rows per forward block ([`Family::forward_q_tile_for`]); it picks the forward
    /// kernel ([`Kernel::Forward`], or [`Kernel::ForwardNarrow`] for the narrow tile).
    pub fwd_q_tile: usize,
    /// Keys per forward tile ([`Family::forward_key_tile`]).
    pub fwd_k_tile: usize,
    /// Forward: query tile (of `fwd_q_tile` rows) -> key tiles (of `fwd_k_tile`).
    pub fwd: TilePlan,
    /// Backward: key tile -> query tiles of [`TILE`] rows (the single backward kernel
    /// produces dK, dV and dQ from it).
    pub cols: TilePlan,
    /// A table part's launch: where its mask table starts in the call's buffer
    /// (`Prepared::block_mask`), in bytes; 0 otherwise.
    pub table_offset: usize,
}

/// The attention kernels of a compiled module, by role.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kernel {
    /// `attn_fwd`: [`Family::forward_q_tile`] query rows per tile.
    Forward,
    /// `attn_fwd_128` (wgmma only): [`Family::forward_q_tile_narrow`] rows per tile.
    ForwardNarrow,
    /// `attn_bwd`.
    Backward,
}

impl Kernel {
    /// The kernel's `extern "C"` name in the module.
    pub fn name(self) -> &'static str {
        match self {
            Kernel::Forward => "attn_fwd",
            Kernel::ForwardNarrow => "attn_fwd_128",
            Kernel::Backward => "attn_bwd",
        }
    }

    /// The kernels `family` compiles.
    pub fn of(family: Family) -> &'static [Kernel] {
        match family {
            Family::Mma => &[Kernel::Forward, Kernel::Backward],
            Family::Wgmma => &[Kernel::Forward, Kernel::ForwardNarrow, Kernel::Backward],
        }
    }

    /// Dynamic shared memory every launch of this kernel requests.
    pub fn smem(self, family: Family, head_dim: usize) -> u32 {
        match self {
            Kernel::Forward | Kernel::ForwardNarrow => family.forward_smem(head_dim),
            Kernel::Backward => family.backward_smem(head_dim),
        }
    }
}

/// Everything a launch needs besides its arguments, from one place.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LaunchDims {
    pub kernel: Kernel,
    pub grid: (u32, u32, u32),
    pub block: u32,
    pub smem: u32,
}

impl LaunchSpec {
    /// Work items of the forward: (query tiles, heads, batch).
    pub fn grid_fwd(&self) -> (u32, u32, u32) {
        (self.fwd.row_tiles as u32, self.params.heads as u32, self.params.batch as u32)
    }

    /// Grid of the backward kernel: (blocks of `key_tiles` key tiles, heads, batch); see
    /// [`Family::backward_key_tiles`].
    pub fn grid_cols(&self, key_tiles: usize) -> (u32, u32, u32) {
        (self.cols.row_tiles.div_ceil(key_tiles) as u32, self.params.heads as u32, self.params.batch as u32)
    }

    /// The forward launch on a device of `sms` multiprocessors.
    pub fn forward_dims(&self, sms: u32) -> LaunchDims {
        let f = self.family;
        let kernel = if self.fwd_q_tile == f.forward_q_tile() { Kernel::Forward } else { Kernel::ForwardNarrow };
        LaunchDims {
            kernel,
            grid: f.forward_grid(self.grid_fwd(), sms),
            block: f.forward_threads(self.fwd_q_tile, self.head_dim),
            smem: kernel.smem(f, self.head_dim),
        }
    }

    /// The backward launch.
    pub fn backward_dims(&self) -> LaunchDims {
        let f = self.family;
        LaunchDims {
            kernel: Kernel::Backward,
            grid: self.grid_cols(f.backward_key_tiles()),
            block: f.backward_threads(self.head_dim),
            smem: Kernel::Backward.smem(f, self.head_dim),
        }
    }

    /// Rows between consecutive launch indices of a tile, as the TMA view reads them: a
    /// compact branch's kept rows are its dilation apart.
    pub fn row_stride(&self) -> usize {
        match self.map {
            IndexMap::Compact { dilation, .. } => dilation,
            IndexMap::Identity { .. } => 1,
        }
    }
}

fn fits_i32(what: &'static str, value: usize) -> Result<i32> {
    i32::try_from(value).map_err(|_| CudaError::TooLarge { what, value, max: i32::MAX as usize })
}

/// Check a call's arguments for `family`'s kernels: head dim, positive sizes, chunk
/// placement, 32-bit indexing, grid limits and the spec itself. Every error names the
/// failing value.
pub fn validate(shape: &Shape, spec: &GpuSpec, chunk: &Chunk, family: Family) -> Result<()> {
    if !family.head_dims().contains(&shape.head_dim) {
        return Err(CudaError::UnsupportedHeadDim { head_dim: shape.head_dim, supported: family.head_dims().to_vec() });
    }
    for (dim, size) in [
        ("batch", shape.batch),
        ("heads", shape.heads),
        ("kv_heads", shape.kv_heads),
        ("q_rows", shape.q_rows),
        ("k_rows", shape.k_rows),
    ] {
        if size == 0 {
            return Err(CudaError::ZeroDim { tensor: "q/k/v", dim });
        }
    }
    validate_kv_heads(shape.heads, shape.kv_heads)?;
    let (qa, ka) = chunk.axes(shape);
    for (side, axis) in [("query", qa), ("key", ka)] {
        if axis.stride == 0 {
            return Err(CudaError::ZeroDim { tensor: side, dim: "stride" });
        }
        if axis.offset + (axis.rows - 1) * axis.stride >= chunk.seq_len {
            return Err(CudaError::ChunkOutOfRange {
                side,
                offset: axis.offset,
                rows: axis.rows,
                stride: axis.stride,
                seq_len: chunk.seq_len,
            });
        }
    }
    fits_i32("seq_len", chunk.seq_len)?;
    let all_heads = chunk.pattern_heads(shape.heads);
    if chunk.first_head + shape.heads > all_heads {
        return Err(CudaError::HeadSliceOutOfRange { first: chunk.first_head, heads: shape.heads, all_heads });
    }
    for (what, value) in [("heads", all_heads), ("batch", shape.batch)] {
        if value > 65_535 {
            return Err(CudaError::TooLarge { what, value, max: 65_535 });
        }
    }
    spec.validate(shape.batch, all_heads, chunk.seq_len)
}

/// `kv_heads` K/V heads for `heads` query heads: at least one, and dividing `heads`
/// (whole groups of query heads per K/V head).
pub fn validate_kv_heads(heads: usize, kv_heads: usize) -> Result<()> {
    if kv_heads == 0 {
        return Err(CudaError::ZeroDim { tensor: "q/k/v", dim: "kv_heads" });
    }
    if heads % kv_heads != 0 {
        return Err(CudaError::KvHeads { heads, kv_heads });
    }
    Ok(())
}

/// Validate and build every launch of a call (host side only), with the mma family's
/// forward query tiles (what a launch visits does not depend on the tile size).
pub fn launches(shape: &Shape, spec: &GpuSpec, chunk: &Chunk) -> Result<Vec<LaunchSpec>> {
    launches_for(shape, spec, chunk, Family::Mma)
}

/// [`launches`] for a kernel family: its head dims, its forward query tiles
/// ([`Family::forward_q_tile_for`], per launch) and key tiles, and its launch dimensions.
pub fn launches_for(shape: &Shape, spec: &GpuSpec, chunk: &Chunk, family: Family) -> Result<Vec<LaunchSpec>> {
    validate(shape, spec, chunk, family)?;
    let scale = spec.scale_for(shape.head_dim);
    let base = Params {
        batch: shape.batch as i32,
        heads: shape.heads as i32,
        kv_heads: shape.kv_heads as i32,
        kv_group: shape.kv_group() as i32,
        q_rows: shape.q_rows as i32,
        k_rows: shape.k_rows as i32,
        q_offset: chunk.q_offset as i32,
        k_offset: chunk.k_offset as i32,
        seq_len: chunk.seq_len as i32,
        head_base: chunk.first_head as i32,
        pattern_heads: chunk.pattern_heads(shape.heads) as i32,
        causal: spec.causal as i32,
        scale: scale as f32,
        scale_log2: (scale * std::f64::consts::LOG2_E) as f32,
        ..Params::default()
    };
    let (qa, ka) = chunk.axes(shape);
    let identity = IndexMap::Identity { q: qa, k: ka };
    let expr_scope = ExprScope {
        first: chunk.first_head,
        count: shape.heads,
        total: chunk.pattern_heads(shape.heads),
        seq_len: chunk.seq_len,
    };
    // A materialised pattern's tables, one per part (built at their first use, then kept:
    // mask_table::table), where each starts in the call's buffer, and the pattern heads of
    // this launch.
    let tables = match &spec.pattern {
        GpuPattern::Table(t) => mask_table::tables(t, chunk.pattern_heads(shape.heads), chunk.seq_len)?,
        _ => Vec::new(),
    };
    let table_offsets = mask_table::offsets(&tables);
    // Offset tables of the branches that run as compact launches reading them.
    let offset_tables = dilated_expr::compact_form(&spec.pattern)
        .map(|e| dilated_expr::offset_tables(&e, chunk.pattern_heads(shape.heads), chunk.seq_len))
        .transpose()?;
    let heads = chunk.first_head..chunk.first_head + shape.heads;
    // A launch of `params` over `map`: a dilated branch's (`branch`), or a table part's
    // (`part`: its table); `at`: where its table (mask or offsets) starts in the buffer.
    let build = |params: Params,
                 branch: Option<&Branch>,
                 part: Option<&MaskTable>,
                 at: usize,
                 map: IndexMap|
     -> Result<LaunchSpec> {
        let ((nq, nk), (qb, kb)) = (map.extents(), map.bases());
        // 128-row blocks for a mask with structure inside the sequence
        // (`Family::forward_q_tile_for`); packed dense documents keep 192 (their partial
        // tiles are few, and 128-row blocks measured slower there).
        let masked = matches!(
            spec.pattern,
            GpuPattern::Window { .. } | GpuPattern::BlockSparse(_) | GpuPattern::Expr(_) | GpuPattern::Table(_)
        );
        let (fwd_q_tile, fwd_k_tile) =
            (family.forward_q_tile_for(&map, masked), family.forward_key_tile(shape.head_dim));
        let fwd_tiles = (fwd_q_tile, fwd_k_tile);
        let tile_plan = |tiles| match (&spec.pattern, part) {
            (GpuPattern::Expr(e), _) if branch.is_none() => expression::plan(e, expr_scope, spec.causal, map, tiles),
            (GpuPattern::Table(_), Some(t)) => table::plan(t, heads.clone(), spec.causal, map, tiles),
            (pattern, _) => plan(pattern, branch, spec.causal, map, tiles),
        };
        let (mut fwd, mut cols) = (tile_plan(fwd_tiles), tile_plan((TILE, TILE)));
        if let Some(docs) = &spec.documents {
            fwd = documents::per_row(&fwd, map, fwd_tiles, docs, shape.batch, chunk.seq_len);
            cols = documents::per_row(&cols, map, (TILE, TILE), docs, shape.batch, chunk.seq_len);
        }
        let cols = cols.transpose();
        // The kernels' block order (`block_coords`) indexes (tile, head, batch) linearly.
        for (what, tiles) in
            [("query tiles x heads x batch", fwd.row_tiles), ("key tiles x heads x batch", cols.row_tiles)]
        {
            fits_i32(what, tiles * shape.heads * shape.batch)?;
        }
        let params = Params {
            nq: fits_i32("query launch rows", nq)?,
            nk: fits_i32("key launch rows", nk)?,
            q_stride: fits_i32("query stride", qa.stride)?,
            k_stride: fits_i32("key stride", ka.stride)?,
            q_cbase: fits_i32("query compact base", qb)?,
            k_cbase: fits_i32("key compact base", kb)?,
            ..params
        };
        Ok(LaunchSpec {
            params,
            map,
            family,
            head_dim: shape.head_dim,
            fwd_q_tile,
            fwd_k_tile,
            fwd,
            cols,
            table_offset: at,
        })
    };
    // Clamp to the sequence: a window wider than it changes nothing and must not overflow.
    let clamp = |x: usize| x.min(chunk.seq_len) as i32;
    // One launch of dilated branch (w, r) with `params`' offset rule, its table at `at`.
    let dilated = |(segment, dilation): (usize, usize), params: Params, at: usize| {
        // A segment longer than the sequence is the whole sequence (same segment starts),
        // so clamping changes no mask and keeps compact rows tight.
        let branch = Branch { segment: segment.min(chunk.seq_len), dilation, offset: Offset::Fixed(0) };
        let params = Params {
            pattern: PatternCode::Dilated as i32,
            dil_segment: branch.segment as i32,
            dil_rate: fits_i32("dilation", branch.dilation)?,
            dil_per_seg: branch.segment.div_ceil(branch.dilation) as i32,
            ..params
        };
        // Compaction needs contiguous rows (kept positions are found from segment starts);
        // a strided (striped-layout) axis evaluates the branch mask in place.
        if qa.stride == 1 && ka.stride == 1 {
            let map = IndexMap::Compact { segment: branch.segment, dilation: branch.dilation, q: qa, k: ka };
            build(Params { compact: 1, ..params }, Some(&branch), None, at, map)
        } else {
            build(params, Some(&branch), None, at, identity)
        }
    };
    match &spec.pattern {
        GpuPattern::Dense => Ok(vec![build(base, None, None, 0, identity)?]),
        GpuPattern::Window { left, right } => Ok(vec![build(
            Params { pattern: PatternCode::Window as i32, win_left: clamp(*left), win_right: clamp(*right), ..base },
            None,
            None,
            0,
            identity,
        )?]),
        GpuPattern::BlockSparse(bs) => {
            let params = Params {
                pattern: PatternCode::BlockSparse as i32,
                bs_block: clamp(bs.block).max(1),
                bs_radius: bs.local_radius.map_or(-1, clamp),
                bs_stride: bs.dilated_stride.map_or(0, clamp),
                bs_global: clamp(bs.global_tokens),
                bs_mask_blocks: bs.block_mask.as_ref().map_or(0, |m| m.len() as i32),
                ..base
            };
            Ok(vec![build(params, None, None, 0, identity)?])
        }
        GpuPattern::Expr(_) if offset_tables.is_none() => {
            Ok(vec![build(Params { pattern: PatternCode::Expr as i32, ..base }, None, None, 0, identity)?])
        }
        // One launch per part; several merge as a dilated pattern's branches do.
        GpuPattern::Table(_) => tables
            .iter()
            .zip(&table_offsets)
            .map(|(t, &at)| {
                let params = Params {
                    pattern: PatternCode::Table as i32,
                    bs_mask_blocks: fits_i32("mask table tiles", t.tiles)?,
                    ..base
                };
                build(params, None, Some(t.as_ref()), at, identity)
            })
            .collect(),
        GpuPattern::Dilated(d) => d
            .branches
            .iter()
            .map(|b| {
                let (rule, fixed) = match b.offset {
                    Offset::HeadMod => (OffsetRule::HeadMod, 0),
                    Offset::HeadBlock => (OffsetRule::HeadBlock, 0),
                    Offset::Fixed(o) => (OffsetRule::Fixed, o as i32),
                };
                dilated((b.segment, b.dilation), Params { dil_rule: rule as i32, dil_fixed: fixed, ..base }, 0)
            })
            .collect(),
        GpuPattern::DilatedExpr(_) | GpuPattern::Expr(_) => {
            let t = offset_tables.as_ref().expect("made above for these patterns");
            t.branches
                .iter()
                .zip(&t.starts)
                .map(|(b, &at)| {
                    let params = Params {
                        dil_rule: OffsetRule::Table as i32,
                        dil_segments: fits_i32("dilated_expr segments", b.segments)?,
                        ..base
                    };
                    dilated((b.segment, b.dilation), params, at)
                })
                .collect()
        }
    }
}

/// The call's `block_mask` buffer: a block-sparse user mask flattened row-major for the
/// kernel (`blocks x blocks` bytes), or a table pattern's tables ([`mask_table::device_buffer`]).
pub fn block_mask_bytes(spec: &GpuSpec, shape: &Shape, chunk: &Chunk) -> Result<Option<Vec<u8>>> {
    Ok(match &spec.pattern {
        GpuPattern::BlockSparse(bs) => bs.block_mask.as_ref().map(|m| {
            let n = m.len();
            m.iter().flat_map(|row| (0..n).map(|j| row.get(j).copied().unwrap_or(false) as u8)).collect()
        }),
        GpuPattern::DilatedExpr(_) | GpuPattern::Expr(_) => match dilated_expr::compact_form(&spec.pattern) {
            Some(e) => Some(dilated_expr::offset_tables(&e, chunk.pattern_heads(shape.heads), chunk.seq_len)?.bytes),
            None => None,
        },
        GpuPattern::Table(t) => {
            Some(mask_table::device_buffer(&mask_table::tables(t, chunk.pattern_heads(shape.heads), chunk.seq_len)?))
        }
        _ => None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::family::FWD_Q_TILE;
    use ringdil_reference::pattern::{BlockSparse, Dilated};

    fn dense() -> GpuSpec {
        GpuSpec::new(GpuPattern::Dense)
    }

    #[test]
    fn dense_launch_configuration() {
        let shape = Shape::square(2, 1000, 3, 128);
        let l = launches(&shape, &dense().causal(true), &Chunk::whole(&shape)).unwrap();
        assert_eq!(l.len(), 1);
        let l = &l[0];
        assert_eq!(l.grid_fwd(), (8, 3, 2)); // ceil(1000 / 128) forward query tiles
        assert_eq!(l.grid_cols(1), (16, 3, 2)); // ceil(1000 / 64) key tiles
        assert_eq!(l.grid_cols(2), (8, 3, 2)); // pairs of them (the last one alone)
        assert_eq!((l.params.nq, l.params.nk, l.params.causal, l.params.pattern), (1000, 1000, 1, 0));
        assert!((l.params.scale - 1.0 / 128f32.sqrt()).abs() < 1e-7);
        assert!((l.params.scale_log2 - l.params.scale * std::f32::consts::LOG2_E).abs() < 1e-6);
        assert_eq!(l.cols.visits(), 16 * 17 / 2);
        // Forward query tile r (rows 128r..128r+127) sees key tiles 0..=2r+1: sum = 72.
        assert_eq!(l.fwd.visits(), (0..8).map(|r| 2 * r + 2).sum::<usize>());
        // The launch description: one block per item (mma), 128 threads, the family's smem.
        let dims = l.forward_dims(132);
        assert_eq!(dims, LaunchDims { kernel: Kernel::Forward, grid: (8, 3, 2), block: 128, smem: 96 * 1024 });
        let bwd = l.backward_dims();
        assert_eq!((bwd.kernel, bwd.grid, bwd.block), (Kernel::Backward, (16, 3, 2), 128));
        assert_eq!(bwd.smem, Family::Mma.backward_smem(128));
        // Three consumer warpgroups: 192-row forward tiles.
        let l = launches_for(&shape, &dense().causal(true), &Chunk::whole(&shape), Family::Wgmma).unwrap();
        assert_eq!(l[0].grid_fwd(), (6, 3, 2)); // ceil(1000 / 192)
        assert_eq!((l[0].fwd_q_tile, l[0].fwd_k_tile), (192, 64));
        assert_eq!(l[0].fwd.visits(), (0..6).map(|r| (3 * r + 3).min(16)).sum::<usize>());
        // At d = 64 over 128-key tiles: query tile r sees key tiles 0..=(192 r + 191) / 128.
        let shape64 = Shape::square(2, 1000, 3, 64);
        let l = launches_for(&shape64, &dense().causal(true), &Chunk::whole(&shape64), Family::Wgmma).unwrap();
        assert_eq!((l[0].fwd_q_tile, l[0].fwd_k_tile, l[0].fwd.col_tiles), (192, 128, 8));
        assert_eq!(l[0].fwd.visits(), (0..6).map(|r| ((192 * r + 191) / 128 + 1).min(8)).sum::<usize>());
        assert_eq!(l[0].cols.visits(), 16 * 17 / 2); // the backward keeps 64 x 64 tiles
        // wgmma: one block per multiprocessor, 512 threads (three consumer warpgroups and a
        // producer), the backward over pairs of key tiles.
        let dims = l[0].forward_dims(132);
        assert_eq!((dims.kernel, dims.grid, dims.block), (Kernel::Forward, (36, 1, 1), 512));
        assert_eq!(dims.smem, Family::Wgmma.forward_smem(64));
        let bwd = l[0].backward_dims();
        assert_eq!((bwd.grid, bwd.block, bwd.smem), ((8, 3, 2), 384, Family::Wgmma.backward_smem(64)));
    }

    #[test]
    fn wide_head_dims_launch_eight_warps_over_the_same_tiles() {
        // Above d = 128 the mma blocks have 8 warps (one m16 tile each in the forward, half
        // of D each in the backward) over the plans of d <= 128.
        let spec = dense().causal(true);
        for (d, threads) in [(96, 128), (192, 256), (256, 256)] {
            let shape = Shape::square(2, 1000, 3, d);
            let l = &launches(&shape, &spec, &Chunk::whole(&shape)).unwrap()[0];
            assert_eq!((l.fwd_q_tile, l.fwd_k_tile, l.grid_fwd(), l.grid_cols(1)), (128, 64, (8, 3, 2), (16, 3, 2)));
            let (fwd, bwd) = (l.forward_dims(132), l.backward_dims());
            assert_eq!(
                (fwd.kernel, fwd.grid, fwd.block, fwd.smem),
                (Kernel::Forward, (8, 3, 2), threads, 768 * d as u32)
            );
            assert_eq!((bwd.grid, bwd.block, bwd.smem), ((16, 3, 2), threads, Family::Mma.backward_smem(d)));
            assert!((l.params.scale - 1.0 / (d as f32).sqrt()).abs() < 1e-7);
        }
    }

    #[test]
    fn dilated_launches_are_compact_on_whole_sequences_and_ring_chunks() {
        let d = Dilated::longnet(&[(512, 1), (1024, 4), (100_000, 16)]);
        let spec = GpuSpec::new(GpuPattern::Dilated(d));
        let shape = Shape::square(1, 4096, 8, 64);
        let l = launches(&shape, &spec, &Chunk::whole(&shape)).unwrap();
        assert_eq!(l.len(), 3);
        assert!(l.iter().all(|l| l.params.compact == 1 && l.params.pattern == 3));
        assert_eq!(l[1].params.nq, 4096 / 4);
        assert_eq!(l[1].params.dil_per_seg, 256);
        // The segment longer than the sequence is clamped to it: 4096 / 16 rows.
        assert_eq!((l[2].params.dil_segment, l[2].params.nq), (4096, 256));
        // Work (tiles) of each branch is its share n*w/r^2 of the dense n^2.
        assert_eq!(l[1].cols.visits(), 4096 * 1024 / 16 / (64 * 64));

        // A ring step: queries 2048..3072 over keys 1024..2048 stay compact (segment
        // bases per side), so the (1024, 4) branch costs its share of the step.
        let ring = Shape { q_rows: 1024, k_rows: 1024, ..shape };
        let l = launches(&ring, &spec, &Chunk::new(2048, 1024, 4096)).unwrap();
        assert!(l.iter().all(|l| l.params.compact == 1 && l.params.q_offset == 2048 && l.params.k_offset == 1024));
        assert_eq!((l[1].params.nq, l[1].params.q_cbase, l[1].params.k_cbase), (256, 2 * 256, 256));
        assert_eq!(l[1].cols.visits(), 0, "segments 2 and 1 of 1024 tokens do not meet");
        // A striped axis (stride 2) evaluates the branch mask in place.
        let striped = Chunk { q_stride: 2, k_stride: 2, ..Chunk::new(1, 0, 4096) };
        let l = launches(&Shape { q_rows: 2048, k_rows: 2048, ..shape }, &spec, &striped).unwrap();
        assert!(l.iter().all(|l| l.params.compact == 0 && l.params.q_stride == 2 && l.params.k_stride == 2));
        let e = launches(&Shape { q_rows: 2049, k_rows: 2048, ..shape }, &spec, &striped).unwrap_err();
        assert_eq!(e.to_string(), "query chunk: 2049 rows at positions 1 + i * 2 pass the global sequence length 4096");
    }

    #[test]
    fn dilated_expr_branches_are_compact_launches_reading_offset_tables() {
        use ringdil_reference::pattern::expr::{Constants, ExprBranch, ExprCombine, ExprDilated};
        let c = Constants::new();
        let pattern = ExprDilated {
            branches: vec![
                ExprBranch::new("64", "4", "h + s", None, &c).unwrap(),
                ExprBranch::new("n / 10", "2", "h * s", None, &c).unwrap(),
            ],
            combine: ExprCombine::SoftmaxDenominator,
        };
        let spec = GpuSpec::new(GpuPattern::dilated_expr(pattern.clone(), "test".into())).causal(true);
        assert!(matches!(spec.pattern, GpuPattern::DilatedExpr(_)));
        // Heads 2..5 of 6 (a head slice): the tables cover all 6 pattern heads.
        let shape = Shape::square(1, 1000, 3, 64);
        let chunk = Chunk::whole(&shape).heads_of(2, 6);
        let l = launches(&shape, &spec, &chunk).unwrap();
        assert_eq!(l.len(), 2);
        // 1000 / 64 -> 16 segments of 16 kept rows; 1000 / 100 -> 10 segments of 50.
        let per_branch = [(64, 4, 16, 16), (100, 2, 10, 50)];
        for (l, (w, r, segments, per_seg)) in l.iter().zip(per_branch) {
            let p = l.params;
            assert_eq!((p.pattern, p.compact, p.dil_rule), (PatternCode::Dilated as i32, 1, OffsetRule::Table as i32));
            assert_eq!((p.dil_segment, p.dil_rate, p.dil_segments, p.dil_per_seg), (w, r, segments, per_seg));
            assert_eq!((p.head_base, p.pattern_heads), (2, 6));
        }
        let bytes = block_mask_bytes(&spec, &shape, &chunk).unwrap().unwrap();
        let int = |at: usize| i32::from_le_bytes(bytes[at..at + 4].try_into().unwrap());
        // Branch 0's table: 6 heads x 16 segments (384 bytes); branch 1's starts after it.
        assert_eq!((l[0].table_offset, l[1].table_offset), (0, 384));
        assert_eq!(bytes.len(), 384 + 6 * 10 * 4);
        for h in 0..6 {
            for s in 0..16 {
                assert_eq!(int(4 * (h * 16 + s)), ((h + s) % 4) as i32);
            }
            for s in 0..10 {
                assert_eq!(int(384 + 4 * (h * 10 + s)), ((h * s) % 2) as i32);
            }
        }
        // A union of several branches has no compact form: mask tables.
        let union = ExprDilated { combine: ExprCombine::Union, ..pattern };
        assert!(matches!(GpuPattern::dilated_expr(union, "u".into()), GpuPattern::Table(_)));
    }

    #[test]
    fn a_mask_that_is_one_longnet_branch_runs_as_its_compact_launch() {
        use ringdil_reference::pattern::ExprPattern;
        use ringdil_reference::pattern::expr::Constants;
        let expr = |t: &str| GpuSpec::new(GpuPattern::Expr(ExprPattern::new(t, &Constants::new()).unwrap()));
        let shape = Shape::square(1, 1000, 3, 64);
        let whole = Chunk::whole(&shape);
        let branch = expr("q / 64 == k / 64 && q % 4 == h % 4 && k % 4 == h % 4");
        let l = launches(&shape, &branch, &whole).unwrap();
        assert_eq!(l.len(), 1);
        let p = l[0].params;
        assert_eq!((p.pattern, p.compact, p.dil_rule), (PatternCode::Dilated as i32, 1, OffsetRule::Table as i32));
        assert_eq!((p.dil_segment, p.dil_rate, p.dil_segments), (64, 4, 16));
        let bytes = block_mask_bytes(&branch, &shape, &whole).unwrap().unwrap();
        let int = |at: usize| i32::from_le_bytes(bytes[at..at + 4].try_into().unwrap());
        for h in 0..3 {
            assert!((0..16).all(|s| int(4 * (h * 16 + s)) == (h % 4) as i32), "head {h}");
        }
        // Same work as the built-in branch: the same forward tiles.
        let builtin = GpuSpec::new(GpuPattern::Dilated(Dilated::longnet(&[(64, 4)])));
        assert_eq!(l[0].fwd, launches(&shape, &builtin, &whole).unwrap()[0].fwd);
        // Another mask stays a mask expression launch, with no buffer.
        let other = expr("q / 64 == k / 64 && q % 4 == h % 4");
        let l = launches(&shape, &other, &whole).unwrap();
        assert_eq!((l.len(), l[0].params.pattern, l[0].params.compact), (1, PatternCode::Expr as i32, 0));
        assert_eq!(block_mask_bytes(&other, &shape, &whole).unwrap(), None);
    }

    #[test]
    fn wgmma_forward_tiles_do_not_straddle_dilated_segments() {
        // Kept rows per segment: 512 / 1 = 512 and 1024 / 4 = 256 (not multiples of 192),
        // 768 / 4 = 192 (one is), and a dense launch.
        let d = Dilated::longnet(&[(512, 1), (1024, 4), (768, 4)]);
        let shape = Shape::square(1, 3072, 8, 128);
        let l = launches_for(&shape, &GpuSpec::new(GpuPattern::Dilated(d)), &Chunk::whole(&shape), Family::Wgmma);
        let l = l.unwrap();
        let tiles: Vec<usize> = l.iter().map(|l| l.fwd_q_tile).collect();
        assert_eq!(tiles, [128, 128, 192]);
        let kernels: Vec<(Kernel, u32)> =
            l.iter().map(|l| (l.forward_dims(132).kernel, l.forward_dims(132).block)).collect();
        assert_eq!(kernels, [(Kernel::ForwardNarrow, 384), (Kernel::ForwardNarrow, 384), (Kernel::Forward, 512)]);
        for l in &l {
            let (m, q) = (l.params.dil_per_seg as usize, l.fwd_q_tile);
            assert_eq!(m % q, 0, "a {q}-row tile would straddle segments of {m} kept rows");
            assert_eq!(l.grid_fwd().0 as usize, (l.params.nq as usize).div_ceil(q));
        }
        let dense = launches_for(&shape, &dense(), &Chunk::whole(&shape), Family::Wgmma).unwrap();
        assert_eq!(dense[0].fwd_q_tile, 192);
        let mma =
            launches(&shape, &GpuSpec::new(GpuPattern::Dilated(Dilated::longnet(&[(768, 4)]))), &Chunk::whole(&shape));
        assert_eq!(mma.unwrap()[0].fwd_q_tile, FWD_Q_TILE);
    }

    #[test]
    fn block_sparse_and_window_parameters() {
        let bs = BlockSparse { dilated_stride: Some(4), global_tokens: 9, ..BlockSparse::local(32, 2) };
        let shape = Shape::square(1, 100, 1, 64);
        let l = &launches(&shape, &GpuSpec::new(GpuPattern::BlockSparse(bs)), &Chunk::whole(&shape)).unwrap()[0];
        let p = l.params;
        assert_eq!(
            (p.pattern, p.bs_block, p.bs_radius, p.bs_stride, p.bs_global, p.bs_mask_blocks),
            (2, 32, 2, 4, 9, 0)
        );
        let w = GpuSpec::new(GpuPattern::Window { left: usize::MAX, right: 3 });
        let p = launches(&shape, &w, &Chunk::whole(&shape)).unwrap()[0].params;
        assert_eq!((p.pattern, p.win_left, p.win_right), (1, 100, 3));
    }

    #[test]
    fn bad_arguments_are_typed_errors_naming_the_value() {
        let shape = Shape::square(1, 100, 2, 64);
        let whole = Chunk::whole(&shape);
        let err = |s: &Shape, spec: &GpuSpec, c: &Chunk| launches(s, spec, c).unwrap_err().to_string();
        assert_eq!(
            err(&Shape { head_dim: 80, ..shape }, &dense(), &whole),
            "head_dim 80 has no GPU kernel; supported: 64, 96, 128, 192, 256"
        );
        // The wgmma family has kernels for two of them (a device runs the others with mma's:
        // Gpu::family_for).
        let d96 = Shape { head_dim: 96, ..shape };
        assert!(matches!(
            launches_for(&d96, &dense(), &whole, Family::Wgmma),
            Err(CudaError::UnsupportedHeadDim { head_dim: 96, supported }) if supported == [64, 128]
        ));
        assert!(err(&Shape { heads: 0, ..shape }, &dense(), &whole).contains("`heads` is 0"));
        assert!(err(&shape.with_kv_heads(0), &dense(), &whole).contains("`kv_heads` is 0"));
        let gqa = Shape::square(1, 100, 6, 64);
        assert_eq!(
            err(&gqa.with_kv_heads(4), &dense(), &whole),
            "kv_heads = 4 does not divide heads = 6: grouped-query attention needs whole groups of query heads per K/V head"
        );
        for (kv_heads, group) in [(6, 1), (3, 2), (2, 3), (1, 6)] {
            let p = launches(&gqa.with_kv_heads(kv_heads), &dense(), &whole).unwrap()[0].params;
            assert_eq!((p.heads, p.kv_heads, p.kv_group), (6, kv_heads as i32, group));
        }
        let chunk = Chunk::new(50, 0, 120);
        assert_eq!(
            err(&shape, &dense(), &chunk),
            "query chunk: offset 50 + 100 rows exceeds the global sequence length 120"
        );
        assert!(err(&Shape { batch: 70_000, ..shape }, &dense(), &Chunk::whole(&shape)).contains("batch = 70000"));
        // 65535 x 65535 (batch, head) pairs of one tile: more than the 32-bit block index.
        let wide = Shape::square(65_535, 1, 65_535, 64);
        assert_eq!(
            err(&wide, &dense(), &Chunk::whole(&wide)),
            "query tiles x heads x batch = 4294836225 exceeds the GPU limit 2147483647"
        );
        let d = GpuSpec::new(GpuPattern::Dilated(Dilated::longnet(&[(16, 32)])));
        assert!(err(&shape, &d, &whole).contains("dilation_rate 32 exceeds segment_length 16"));
        let hg = GpuSpec::new(GpuPattern::Dilated(Dilated::head_groups(&[(16, 1), (32, 2)])));
        assert!(err(&shape, &hg, &whole).contains("head-group combine"));
        assert!(err(&shape, &dense().key_lengths(vec![101]), &whole).contains("length 101 > seq 100"));
        let bad_scale = GpuSpec { scale: Some(-1.0), ..dense() };
        assert!(err(&shape, &bad_scale, &whole).contains("scale -1"));
        assert!(matches!(
            launches(&shape, &GpuSpec::new(GpuPattern::BlockSparse(BlockSparse::local(0, 1))), &whole),
            Err(CudaError::Spec(ringdil_reference::Error::ZeroParameter { parameter: "block", .. }))
        ));
    }

    #[test]
    fn block_mask_is_flattened_row_major() {
        let m = vec![vec![true, false], vec![false, true]];
        let bs = BlockSparse { block_mask: Some(m), local_radius: None, ..BlockSparse::local(8, 0) };
        let (shape, whole) = (Shape::square(1, 16, 1, 64), Chunk::whole(&Shape::square(1, 16, 1, 64)));
        assert_eq!(
            block_mask_bytes(&GpuSpec::new(GpuPattern::BlockSparse(bs)), &shape, &whole).unwrap(),
            Some(vec![1, 0, 0, 1])
        );
        assert_eq!(block_mask_bytes(&dense(), &shape, &whole).unwrap(), None);
    }

    /// A launch over a slice of heads carries the slice's first head and the pattern's
    /// head count (the kernels' dilated offsets use them); a slice outside the pattern's
    /// heads is a typed error naming it.
    #[test]
    fn head_slices_carry_their_global_heads() {
        let spec = GpuSpec::new(GpuPattern::Dilated(Dilated::longnet(&[(256, 4)])));
        let shape = Shape::square(1, 1024, 3, 64);
        let whole = launches(&shape, &spec, &Chunk::new(0, 0, 1024)).unwrap();
        assert_eq!((whole[0].params.head_base, whole[0].params.pattern_heads), (0, 3));
        let slice = launches(&shape, &spec, &Chunk::new(0, 0, 1024).heads_of(5, 8)).unwrap();
        assert_eq!((slice[0].params.head_base, slice[0].params.pattern_heads), (5, 8));
        let e = launches(&shape, &spec, &Chunk::new(0, 0, 1024).heads_of(6, 8)).unwrap_err();
        assert!(matches!(e, CudaError::HeadSliceOutOfRange { first: 6, heads: 3, all_heads: 8 }), "{e}");
        assert_eq!(e.to_string(), "head slice 6..9 is not inside the pattern's 8 heads");
    }
}
