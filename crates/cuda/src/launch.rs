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
use crate::plan::{IndexMap, TilePlan, documents, plan, table, union};
use crate::shape::{Chunk, Shape};
use crate::spec::{GpuPattern, GpuSpec};
use crate::spec_documents::SegmentTables;
use crate::union_pieces::PieceSide;
use ringdil_reference::Documents;
use ringdil_reference::pattern::{Branch, Combine, Offset};
use std::sync::Arc;

// The call description and the family table, where launch construction takes them.

/// One kernel launch of a call: a dense/masked pattern is one launch; a dilated pattern is
/// one launch per branch, each merged into the call's result.
#[derive(Debug, Clone)]
pub struct LaunchSpec {
    pub params: Params,
    pub map: IndexMap,
    pub family: Family,
    pub head_dim: usize,
    /// v's head dim ([`Shape::value_dim`]).
    pub value_dim: usize,
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
    /// (`Prepared::block_mask`), in bytes; a compact launch over documents: its segment
    /// table ([`LaunchSpec::reads_segments`]); 0 otherwise.
    pub table_offset: usize,
    /// The one batch row this launch covers (its `params.batch` is 1, and the call's
    /// buffers are passed from that row on: [`crate::batch_row`]); None: every
    /// row. Compact launches over the documents of rows packed differently.
    pub batch_row: Option<usize>,
    /// The launch's document spans (`Params::doc_first`, `doc_last`) are its own, in the
    /// call's buffer at `table_offset` ([`LaunchSpec::buffer_spans`]): a dilation-1
    /// branch inside documents, run as dense attention inside its segments.
    pub spans_in_buffer: bool,
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

    /// The kernels `family`'s module for `head_dim` compiles: without `attn_fwd` where the
    /// wgmma family has only its narrow forward ([`Family::has_wide_forward`]), and without
    /// `attn_bwd` where another family runs the backward ([`Family::backward_family`]).
    pub fn of(family: Family, head_dim: usize) -> Vec<Kernel> {
        let forward = match (family, family.has_wide_forward(head_dim)) {
            (Family::Mma, _) => vec![Kernel::Forward],
            (Family::Wgmma, true) => vec![Kernel::Forward, Kernel::ForwardNarrow],
            (Family::Wgmma, false) => vec![Kernel::ForwardNarrow],
        };
        let backward = (family.backward_family(head_dim) == family).then_some(Kernel::Backward);
        forward.into_iter().chain(backward).collect()
    }

    /// Dynamic shared memory every launch of this kernel requests (v's head dim
    /// `value_dim`).
    pub fn smem(self, family: Family, head_dim: usize, value_dim: usize) -> u32 {
        match self {
            Kernel::Forward | Kernel::ForwardNarrow => family.forward_smem(head_dim, value_dim),
            Kernel::Backward => family.backward_smem(head_dim, value_dim),
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
    /// Work items of the forward: (query tiles, the launch's heads, batch).
    pub fn grid_fwd(&self) -> (u32, u32, u32) {
        (self.fwd.row_tiles as u32, self.params.head_count as u32, self.params.batch as u32)
    }

    /// Grid of the backward kernel: (blocks of `key_tiles` key tiles, the launch's heads,
    /// batch); see [`Family::backward_key_tiles`].
    pub fn grid_cols(&self, key_tiles: usize) -> (u32, u32, u32) {
        (self.cols.row_tiles.div_ceil(key_tiles) as u32, self.params.head_count as u32, self.params.batch as u32)
    }

    /// The forward launch on a device of `sms` multiprocessors.
    pub fn forward_dims(&self, sms: u32) -> LaunchDims {
        let f = self.family;
        let kernel = if self.fwd_q_tile == f.forward_q_tile() { Kernel::Forward } else { Kernel::ForwardNarrow };
        LaunchDims {
            kernel,
            grid: f.forward_grid(self.grid_fwd(), sms),
            block: f.forward_threads(self.fwd_q_tile, self.head_dim),
            smem: kernel.smem(f, self.head_dim, self.value_dim),
        }
    }

    /// The family of the backward kernel ([`Family::backward_family`]).
    pub fn backward_family(&self) -> Family {
        self.family.backward_family(self.head_dim)
    }

    /// The backward launch.
    pub fn backward_dims(&self) -> LaunchDims {
        let f = self.backward_family();
        LaunchDims {
            kernel: Kernel::Backward,
            grid: self.grid_cols(f.backward_key_tiles()),
            block: f.backward_threads(self.head_dim),
            smem: Kernel::Backward.smem(f, self.head_dim, self.value_dim),
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

    /// Does the launch read a segment table (`Params::seg_start`, at `table_offset` in the
    /// call's buffer): a compact launch over packed documents?
    pub fn reads_segments(&self) -> bool {
        matches!(self.map, IndexMap::Compact { starts: Some(_), .. })
    }

    /// Where the launch's document spans lie when they are its own
    /// ([`LaunchSpec::spans_in_buffer`]): from `at`, the call's buffer plus `table_offset`,
    /// the first positions, then the last, `[batch, seq_len]` `i32`s each.
    pub fn buffer_spans(&self, at: u64) -> Option<(u64, u64)> {
        self.spans_in_buffer.then(|| (at, at + 4 * (self.params.batch as u64 * self.params.seq_len as u64)))
    }

    /// Does the forward write every query row of every head (a plain launch over all the
    /// tensors' heads and batch rows)? Each query tile's block writes its rows, an empty result (`lse =
    /// -inf`) where they see no key, so such a launch needs no merge identity beneath it.
    pub fn writes_every_row(&self) -> bool {
        matches!(self.map, IndexMap::Identity { .. })
            && self.batch_row.is_none()
            && self.params.head_first == 0
            && self.params.head_count == self.params.heads
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
    validate_value_dim(family, shape.head_dim, shape.value_dim)?;
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

/// v's head dim `value_dim` beside q's `head_dim`: a pair `family`'s kernels run
/// ([`Family::has_value_dim`]), else an error naming both and the pairs that run.
pub fn validate_value_dim(family: Family, head_dim: usize, value_dim: usize) -> Result<()> {
    if family.has_value_dim(head_dim, value_dim) {
        return Ok(());
    }
    let supported = Family::value_dim_pairs().iter().copied().filter(|&(d, v)| family.has_value_dim(d, v)).collect();
    Err(CudaError::UnsupportedValueDim { head_dim, value_dim, supported })
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
    let lowered = spec.lowered(shape, chunk)?;
    let spec = lowered.as_ref().unwrap_or(spec);
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
        head_first: 0,
        head_count: shape.heads as i32,
        causal: spec.causal as i32,
        scale: scale as f32,
        scale_log2: (scale * std::f64::consts::LOG2_E) as f32,
        out_scale: 1.0,
        delta_scale: 1.0,
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
    let offset_tables = dilated_expr::offset_tables(&spec.pattern, chunk.pattern_heads(shape.heads), chunk.seq_len)?;
    let heads = chunk.first_head..chunk.first_head + shape.heads;
    // A nested union's piece (`params.hole_side`): the hole table of the branch whose
    // offset table starts at `at`, and the side it keeps.
    let piece = |params: &Params, at: usize| {
        let t = offset_tables.as_ref()?;
        let side = PieceSide::ALL.iter().find(|s| s.1 as i32 == params.hole_side)?.1;
        let (_, holes) = t.holes[t.starts.iter().position(|&s| s == at)?].as_ref()?;
        Some((holes, side))
    };
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
        // (`Family::forward_q_tile_for`): a pattern's or a dilated branch's segments on a
        // plain launch; packed dense documents keep 192 (their partial tiles are few, and
        // 128-row blocks measured slower there).
        let masked = branch.is_some()
            || matches!(
                spec.pattern,
                GpuPattern::Window { .. } | GpuPattern::BlockSparse(_) | GpuPattern::Expr(_) | GpuPattern::Table(_)
            );
        let (fwd_q_tile, fwd_k_tile) = (
            family.forward_q_tile_for(&map, masked, shape.head_dim),
            family.forward_key_tile(shape.head_dim, shape.value_dim),
        );
        let fwd_tiles = (fwd_q_tile, fwd_k_tile);
        let piece = piece(&params, at);
        let tile_plan = |tiles| match (&spec.pattern, part, branch, piece) {
            (pattern, _, Some(b), Some(piece)) => union::plan(pattern, b, spec.causal, &map, tiles, piece),
            (GpuPattern::Expr(e), ..) if branch.is_none() => expression::plan(e, expr_scope, spec.causal, &map, tiles),
            (GpuPattern::Table(_), Some(t), ..) => table::plan(t, heads.clone(), spec.causal, &map, tiles),
            (pattern, ..) => plan(pattern, branch, spec.causal, &map, tiles),
        };
        let (mut fwd, mut cols) = (tile_plan(fwd_tiles), tile_plan((TILE, TILE)));
        if let Some(docs) = &spec.documents {
            fwd = documents::per_row(&fwd, &map, fwd_tiles, docs, shape.batch, chunk.seq_len);
            cols = documents::per_row(&cols, &map, (TILE, TILE), docs, shape.batch, chunk.seq_len);
        }
        let cols = cols.transpose();
        // The kernels' block order (`block_coords`) indexes (tile, head, batch) linearly.
        for (what, tiles) in
            [("query tiles x heads x batch", fwd.row_tiles), ("key tiles x heads x batch", cols.row_tiles)]
        {
            fits_i32(what, tiles * params.head_count as usize * shape.batch)?;
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
            value_dim: shape.value_dim,
            fwd_q_tile,
            fwd_k_tile,
            fwd,
            cols,
            table_offset: at,
            batch_row: None,
            spans_in_buffer: false,
        })
    };
    // Clamp to the sequence: a window wider than it changes nothing and must not overflow.
    let clamp = |x: usize| x.min(chunk.seq_len) as i32;
    // Branch (w, r) over a sequence of `len` positions, and `params` with its fields. A
    // segment longer than the sequence is the whole sequence (same segment starts), so
    // clamping changes no mask and keeps compact rows tight.
    let branch_params = |(segment, dilation): (usize, usize), params: Params, len: usize| -> Result<_> {
        let branch = Branch { segment: segment.min(len), dilation, offset: Offset::Fixed(0) };
        let params = Params {
            pattern: PatternCode::Dilated as i32,
            dil_segment: branch.segment as i32,
            dil_rate: fits_i32("dilation", dilation)?,
            dil_per_seg: branch.segment.div_ceil(dilation) as i32,
            ..params
        };
        Ok((branch, params))
    };
    // One launch of dilated branch (w, r) with `params`' offset rule, its table at `at`.
    let dilated = |wr: (usize, usize), params: Params, at: usize| {
        let (branch, params) = branch_params(wr, params, chunk.seq_len)?;
        // Compaction needs contiguous rows (kept positions are found from segment starts);
        // a strided (striped-layout) axis evaluates the branch mask in place. A branch of
        // dilation 1 (built-in, or of a compact `dilated_expr` pattern) keeps every
        // position (any offset is 0), so a plain launch visits exactly its work: whole
        // tiles inside a segment, unmasked (the plan marks them full), and one interval
        // per query row at segment ends (`MASK_INTERVAL`), where a compact launch would
        // test its segments per tile and per element.
        // (A union's piece keeps its compact launch: the plain launch's interval mask and
        // full tiles know no holes.)
        let every_position = branch.dilation == 1
            && params.hole_side == 0
            && matches!(spec.pattern, GpuPattern::Dilated(_) | GpuPattern::DilatedExpr(_));
        if qa.stride == 1 && ka.stride == 1 && !every_position {
            let map =
                IndexMap::Compact { segment: branch.segment, dilation: branch.dilation, q: qa, k: ka, starts: None };
            build(Params { compact: 1, ..params }, Some(&branch), None, at, map)
        } else {
            build(params, Some(&branch), None, at, identity.clone())
        }
    };
    // One compact launch of branch (w, r) over the documents of every batch row, or with
    // `row` over that row alone (rows packed differently), whose segments restart at each
    // document's start (`spec_documents`): `starts`, the segment table at `at` in the call's
    // buffer. Its segments keep m indices each (`spec_documents::segment_indices`: sized
    // by the table's longest segment, not by w).
    let in_documents =
        |wr: (usize, usize), params: Params, (at, starts): &(usize, Arc<[usize]>), row: Option<usize>| {
            let cut = (wr.0.min(chunk.seq_len), wr.1);
            let m = crate::spec_documents::segment_indices(starts, cut, family.forward_q_tile_narrow());
            let (branch, params) = branch_params(wr, params, m * wr.1)?;
            let params = Params { batch: if row.is_some() { 1 } else { params.batch }, compact: 1, ..params };
            let (segment, dilation, starts) = (branch.segment, branch.dilation, Some(starts.clone()));
            let map = IndexMap::Compact { segment, dilation, q: qa, k: ka, starts };
            Ok(LaunchSpec { batch_row: row, ..build(params, Some(&branch), None, *at, map)? })
        };
    // A dilation-1 branch inside documents keeps every position of its segments: dense
    // attention inside documents that are its segments, which the kernels cut per query
    // row (`documents.cuh`) at the packed-dense rate instead of gathering compact tiles;
    // the segments' spans are at `at` in the call's buffer. Planned as any packed dense
    // call is, over the launch's rows.
    let dense_in_segments = |params: Params, (at, starts): &(usize, Arc<[usize]>), row: Option<usize>| {
        let shape = Shape { batch: if row.is_some() { 1 } else { shape.batch }, ..*shape };
        let documents = Documents::per_row(vec![starts.to_vec(); shape.batch]);
        // A launch over one row pads its keys as that row does.
        let key_lengths = spec.key_lengths.as_ref().map(|l| row.map_or(l.clone(), |r| vec![l[r]]));
        let segments = GpuSpec { pattern: GpuPattern::Dense, documents: Some(documents), key_lengths, ..spec.clone() };
        let l = launches_for(&shape, &segments, chunk, family)?.pop().expect("a dense call is one launch");
        let params = Params { head_first: params.head_first, head_count: params.head_count, ..l.params };
        Ok(LaunchSpec { params, batch_row: row, table_offset: *at, spans_in_buffer: true, ..l })
    };
    let segment_tables = match &spec.pattern {
        GpuPattern::DilatedInDocuments(d, rows) => Some(SegmentTables::new(d, rows, shape.batch, chunk.seq_len)),
        _ => None,
    };
    // Branches reading offset tables: one compact launch each; a nested union's later
    // branches one per side of their holes that the pattern keeps (`PieceSide::of`).
    if let Some(t) = &offset_tables {
        let mut out = Vec::new();
        for ((b, &at), holes) in t.branches.iter().zip(&t.starts).zip(&t.holes) {
            let params = Params {
                dil_rule: OffsetRule::Table as i32,
                dil_segments: fits_i32("dilated segments", b.segments)?,
                ..base
            };
            let Some((table_at, table)) = holes else {
                out.push(dilated((b.segment, b.dilation), params, at)?);
                continue;
            };
            for &side in PieceSide::of(spec.causal) {
                let params = Params {
                    hole_side: side as i32,
                    hole_table: fits_i32("hole table offset", *table_at)?,
                    hole_unit: fits_i32("hole unit", table.unit)?,
                    hole_units: fits_i32("hole units", table.units)?,
                    ..params
                };
                out.push(dilated((b.segment, b.dilation), params, at)?);
            }
        }
        return Ok(out);
    }
    match &spec.pattern {
        GpuPattern::Dense => Ok(vec![build(base, None, None, 0, identity.clone())?]),
        GpuPattern::Window { left, right } => Ok(vec![build(
            Params { pattern: PatternCode::Window as i32, win_left: clamp(*left), win_right: clamp(*right), ..base },
            None,
            None,
            0,
            identity.clone(),
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
            Ok(vec![build(params, None, None, 0, identity.clone())?])
        }
        GpuPattern::Expr(_) => {
            Ok(vec![build(Params { pattern: PatternCode::Expr as i32, ..base }, None, None, 0, identity.clone())?])
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
                build(params, None, Some(t.as_ref()), at, identity.clone())
            })
            .collect(),
        // One launch per branch (inside documents, per branch and boundary list); under
        // the head-group combine over its group's heads only (those of the launch's heads:
        // a head slice may hold part of a group, or none).
        GpuPattern::Dilated(d) | GpuPattern::DilatedInDocuments(d, _) => d
            .branches
            .iter()
            .enumerate()
            .filter_map(|(i, b)| {
                let (rule, fixed) = match b.offset {
                    Offset::HeadMod => (OffsetRule::HeadMod, 0),
                    Offset::HeadBlock => (OffsetRule::HeadBlock, 0),
                    Offset::Fixed(o) => (OffsetRule::Fixed, o as i32),
                };
                let heads = match d.combine {
                    Combine::SoftmaxDenominator => 0..shape.heads,
                    Combine::HeadGroups => {
                        let group = d.head_group_range(i, chunk.pattern_heads(shape.heads));
                        let (first, end) = (chunk.first_head, chunk.first_head + shape.heads);
                        group.start.clamp(first, end) - first..group.end.clamp(first, end) - first
                    }
                };
                let params = Params {
                    dil_rule: rule as i32,
                    dil_fixed: fixed,
                    head_first: heads.start as i32,
                    head_count: heads.len() as i32,
                    ..base
                };
                let branch = (b.segment, b.dilation);
                (!heads.is_empty()).then(|| match &segment_tables {
                    // One list: a launch over every row; else one per row.
                    Some(t) => {
                        let row = |r: usize| (t.tables[i].len() > 1).then_some(r);
                        let launch = |(r, table)| match b.dilation {
                            1 => dense_in_segments(params, table, row(r)),
                            _ => in_documents(branch, params, table, row(r)),
                        };
                        t.tables[i].iter().enumerate().map(launch).collect()
                    }
                    None => Ok(vec![dilated(branch, params, 0)?]),
                })
            })
            .collect::<Result<Vec<Vec<LaunchSpec>>>>()
            .map(|l| l.into_iter().flatten().collect()),
        // Every other pattern has offset tables (made above) or was refused there.
        GpuPattern::DilatedExpr(_) => Err(dilated_expr::NOT_COMPACT),
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
        GpuPattern::DilatedExpr(_) | GpuPattern::Expr(_) | GpuPattern::Dilated(_) => {
            dilated_expr::offset_tables(&spec.pattern, chunk.pattern_heads(shape.heads), chunk.seq_len)?
                .map(|t| t.bytes)
        }
        GpuPattern::DilatedInDocuments(d, rows) => {
            Some(SegmentTables::new(d, rows, shape.batch, chunk.seq_len).bytes())
        }
        GpuPattern::Table(t) => {
            Some(mask_table::device_buffer(&mask_table::tables(t, chunk.pattern_heads(shape.heads), chunk.seq_len)?))
        }
        _ => None,
    })
}

#[cfg(test)]
#[path = "launch_tests.rs"]
mod tests;

#[cfg(test)]
#[path = "union_launch_tests.rs"]
mod union_tests;
