//! Host-side launch configuration: argument validation, the kernel parameter block, the
//! tile plans and grid / shared-memory sizes of every launch. Pure host code (no CUDA), so
//! it is tested on machines without a GPU.

use crate::error::{CudaError, Result};
use crate::plan::{Axis, FWD_Q_TILE, IndexMap, TILE, TilePlan, plan};
use crate::spec::{GpuPattern, GpuSpec};
use ringdil_reference::pattern::{Branch, Offset};

/// Element type of q, k, v and d_out (accumulation and outputs are f32).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
pub enum Dtype {
    Bf16,
    F16,
}

/// Tensor sizes of one call: q / d_out / out are `[batch, q_rows, heads, head_dim]`,
/// k / v are `[batch, k_rows, heads, head_dim]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shape {
    pub batch: usize,
    pub heads: usize,
    pub head_dim: usize,
    pub q_rows: usize,
    pub k_rows: usize,
}

impl Shape {
    /// Self-attention over a whole sequence.
    pub fn square(batch: usize, seq: usize, heads: usize, head_dim: usize) -> Self {
        Shape { batch, heads, head_dim, q_rows: seq, k_rows: seq }
    }

    pub fn q_len(&self) -> usize {
        self.batch * self.q_rows * self.heads * self.head_dim
    }

    pub fn k_len(&self) -> usize {
        self.batch * self.k_rows * self.heads * self.head_dim
    }

    /// Elements of the `[batch, heads, q_rows]` log-sum-exp.
    pub fn lse_len(&self) -> usize {
        self.batch * self.heads * self.q_rows
    }
}

/// Where the tensors sit in the global sequence: query row `i` is global position
/// `q_offset + i * q_stride`, key row `j` is `k_offset + j * k_stride`; patterns are
/// defined on `0..seq_len`. One ring step is one chunk pair; stride 1 is a contiguous
/// piece, stride `P` a rank's rows of a striped layout.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Chunk {
    pub q_offset: usize,
    pub k_offset: usize,
    pub seq_len: usize,
    pub q_stride: usize,
    pub k_stride: usize,
}

impl Chunk {
    /// Contiguous query and key rows from the given offsets.
    pub fn new(q_offset: usize, k_offset: usize, seq_len: usize) -> Self {
        Chunk { q_offset, k_offset, seq_len, q_stride: 1, k_stride: 1 }
    }

    /// The whole sequence (self-attention).
    pub fn whole(shape: &Shape) -> Self {
        Chunk::new(0, 0, shape.q_rows)
    }

    /// The query and key axes of `shape` placed by this chunk.
    pub fn axes(&self, shape: &Shape) -> (Axis, Axis) {
        (
            Axis { offset: self.q_offset, stride: self.q_stride, rows: shape.q_rows },
            Axis { offset: self.k_offset, stride: self.k_stride, rows: shape.k_rows },
        )
    }
}

/// The kernels' parameter block, passed by value. Must match `struct Params` in
/// `kernels/attention.cu` field for field (pointers are raw device addresses, 0 = null).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Params {
    pub q: u64,
    pub k: u64,
    pub v: u64,
    pub out: u64,
    pub lse: u64,
    pub dout: u64,
    pub delta: u64,
    pub lse2: u64,
    pub dq: u64,
    pub dk: u64,
    pub dv: u64,
    pub key_len: u64,
    pub plan_ptr: u64,
    pub plan_idx: u64,
    pub block_mask: u64,
    pub batch: i32,
    pub heads: i32,
    pub nq: i32,
    pub nk: i32,
    pub q_rows: i32,
    pub k_rows: i32,
    pub q_offset: i32,
    pub k_offset: i32,
    pub seq_len: i32,
    pub causal: i32,
    pub pattern: i32,
    pub win_left: i32,
    pub win_right: i32,
    pub bs_block: i32,
    pub bs_radius: i32,
    pub bs_stride: i32,
    pub bs_global: i32,
    pub bs_mask_blocks: i32,
    pub dil_segment: i32,
    pub dil_rate: i32,
    pub dil_rule: i32,
    pub dil_fixed: i32,
    pub compact: i32,
    pub dil_per_seg: i32,
    pub q_stride: i32,
    pub k_stride: i32,
    pub q_cbase: i32,
    pub k_cbase: i32,
    pub accumulate: i32,
    pub scale: f32,
    pub scale_log2: f32,
}

// SAFETY: plain-old-data, `repr(C)`, laid out as the CUDA struct.
unsafe impl cudarc::driver::DeviceRepr for Params {}

/// One kernel launch of a call: a dense/masked pattern is one launch; a dilated pattern is
/// one launch per branch, merged afterwards.
#[derive(Debug, Clone)]
pub struct LaunchSpec {
    pub params: Params,
    pub map: IndexMap,
    /// Query rows per forward block ([`Family::forward_q_tile_for`]); it picks the forward
    /// kernel (wgmma: `attn_fwd`, or `attn_fwd_128` for 128 rows).
    pub fwd_q_tile: usize,
    /// Keys per forward tile ([`Family::forward_key_tile`]).
    pub fwd_k_tile: usize,
    /// Forward: query tile (of `fwd_q_tile` rows) -> key tiles (of `fwd_k_tile`).
    pub fwd: TilePlan,
    /// Backward: key tile -> query tiles of [`TILE`] rows (the single backward kernel
    /// produces dK, dV and dQ from it).
    pub cols: TilePlan,
}

impl LaunchSpec {
    /// Grid of the forward kernel: (query tiles, heads, batch).
    pub fn grid_fwd(&self) -> (u32, u32, u32) {
        (self.fwd.row_tiles as u32, self.params.heads as u32, self.params.batch as u32)
    }

    /// Grid of the backward kernel: (blocks of `key_tiles` key tiles, heads, batch); see
    /// [`Family::backward_key_tiles`].
    pub fn grid_cols(&self, key_tiles: usize) -> (u32, u32, u32) {
        (self.cols.row_tiles.div_ceil(key_tiles) as u32, self.params.heads as u32, self.params.batch as u32)
    }
}

/// Which kernel family a device runs. Both families walk tile plans of the same kind
/// (forward: query tiles of [`Family::forward_q_tile`] rows over key tiles of
/// [`Family::forward_key_tile`]; backward: key tiles over query tiles of [`TILE`]) and
/// compute the same results; the kernel source is compiled with `-DWGMMA=0|1` accordingly.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Family {
    /// `mma.sync` tensor-core tiles: any device from sm_80 on; 4 warps per block, K/V (or
    /// Q/dO) double-buffered with cp.async.
    Mma,
    /// Hopper's asynchronous warpgroup MMA (`wgmma`, sm_90a: H100, H200) with operands read
    /// by the tensor cores from shared memory, tiles copied by TMA. Forward: 3 consumer
    /// warpgroups and a producer warpgroup, [`WG_STAGES`] K/V stages handed over by
    /// mbarriers. Backward: two consumer warpgroups of 64 key rows and a producer
    /// warpgroup per block, visiting 128 query rows at a time at d = 64 and 64 at d = 128.
    Wgmma,
}

/// K/V stages of the wgmma forward (`WG_STAGES` in the kernel): tile j+1 computes while
/// tiles j+2 and j+3 load.
pub const WG_STAGES: usize = 4;

/// Q/dO stages of the wgmma backward (`WB_STAGES` in the kernel): one query tile computes
/// while the next loads.
pub const WB_STAGES: usize = 2;

/// Environment variable that forces the portable family on sm_90 (`mma`), so that it is
/// checked on the H100/H200 machines too. Unset or anything else: chosen by architecture.
pub const FAMILY_ENV: &str = "RINGDIL_KERNELS";

impl Family {
    /// The family for compute capability `major.minor`: wgmma exists only on 9.0 (sm_90a
    /// features do not carry over to later architectures).
    pub fn for_device(major: i32, minor: i32, forced: Option<&str>) -> Self {
        if (major, minor) == (9, 0) && forced != Some("mma") { Family::Wgmma } else { Family::Mma }
    }

    /// NVRTC's `--gpu-architecture`: wgmma needs the architecture-specific target.
    pub fn target(self, major: i32, minor: i32) -> String {
        match self {
            Family::Mma => format!("sm_{major}{minor}"),
            Family::Wgmma => format!("sm_{major}{minor}a"),
        }
    }

    pub fn define(self) -> &'static str {
        match self {
            Family::Mma => "-DWGMMA=0",
            Family::Wgmma => "-DWGMMA=1",
        }
    }

    /// Query rows per forward block. mma: [`FWD_Q_TILE`] (4 warps of 2 m16 tiles). wgmma: 64
    /// per consumer warpgroup (`FWD_WGS` in the kernel), three of them, so that one
    /// warpgroup's softmax overlaps the other two's MMAs (v11, v12 in
    /// docs/benchmarks/gpu-bench.md).
    pub fn forward_q_tile(self) -> usize {
        match self {
            Family::Wgmma => 3 * TILE,
            Family::Mma => FWD_Q_TILE,
        }
    }

    /// Query rows per forward block of one launch: [`Family::forward_q_tile`], except that
    /// the wgmma family runs a compact dilated launch whose segments keep `m` rows, `m` not
    /// a multiple of its 192, with 128-row tiles (two of its three consumer warpgroups).
    /// Compact launch indices start at a segment boundary, so such a tile never straddles
    /// two segments when `m` is a multiple of 128 (LongNet's powers of two); a 192-row tile
    /// would, every few tiles, and visit both segments' keys under the generic mask. (v12
    /// with 192 rows everywhere: a LongNet branch (8192, 8) took 3.4x v11's time.)
    pub fn forward_q_tile_for(self, map: &IndexMap) -> usize {
        match *map {
            IndexMap::Compact { segment, dilation, .. }
                if self == Family::Wgmma && segment.div_ceil(dilation) % self.forward_q_tile() != 0 =>
            {
                2 * TILE
            }
            _ => self.forward_q_tile(),
        }
    }

    /// Keys per forward tile (`FBN` in the kernel): [`TILE`], and twice that for the wgmma
    /// family at d = 64 (flash-attention 3's tile there), where a 64-key tile's MMAs are
    /// short against the per-tile work around them that does not grow with the keys (stage
    /// hand-over, row maxima, O's rescale, MMA issue and wait).
    pub fn forward_key_tile(self, head_dim: usize) -> usize {
        match self {
            Family::Wgmma if head_dim == 64 => 2 * TILE,
            _ => TILE,
        }
    }

    /// Threads per forward block of a launch with `q_tile`-row tiles
    /// ([`Family::forward_q_tile_for`]): 4 warps (mma); one warpgroup per 64 query rows and a
    /// producer warpgroup (wgmma: 512 for `attn_fwd`, 384 for `attn_fwd_128`).
    pub fn forward_threads(self, q_tile: usize) -> u32 {
        match self {
            Family::Mma => 128,
            Family::Wgmma => (2 * q_tile + 128) as u32,
        }
    }

    /// Key tiles (of [`TILE`] rows) per backward block. mma: one (4 warps of 16 keys).
    /// wgmma: one per consumer warpgroup (`WB_WGS` in the kernel), two, so that each query
    /// tile's Q and dO serve 128 keys and the block adds its dQ into global memory once per
    /// 128 keys instead of once per 64 (v10 in docs/benchmarks/gpu-bench.md).
    pub fn backward_key_tiles(self) -> usize {
        match self {
            Family::Wgmma => 2,
            Family::Mma => 1,
        }
    }

    /// Query rows per backward visit (`QB` in the wgmma kernel): [`TILE`], and two plan
    /// tiles at d = 64 for wgmma (128 x 128 visits halve the L2 bytes per FLOP that bound
    /// that backward with 64 x 64 ones: "After v21" in docs/benchmarks/gpu-bench.md).
    pub fn backward_q_tile(self, head_dim: usize) -> usize {
        match self {
            Family::Wgmma if head_dim == 64 => 2 * TILE,
            _ => TILE,
        }
    }

    /// Threads per block of the backward kernel: 4 warps per key tile, and for wgmma a
    /// producer warpgroup that fills the query stages.
    pub fn backward_threads(self) -> u32 {
        let tiles = self.backward_key_tiles() as u32;
        128 * tiles + if self == Family::Wgmma { 128 } else { 0 }
    }

    /// Dynamic shared memory of the forward: a Q tile of [`Family::forward_q_tile`] rows and
    /// the K/V stages of [`Family::forward_key_tile`] rows (2 for mma; [`WG_STAGES`] for
    /// wgmma). wgmma's blocks run several work items each ([`Family::forward_grid`]): two Q
    /// tiles (the next item's loads while the last one computes); 8-byte mbarriers, full and
    /// empty per K/V stage, full, empty and slot-read per Q tile; the two items' slots (32
    /// bytes: number, plan, key limit); each stage's first key and key segment (8 bytes);
    /// and its base rounded up to 1 KB in the kernel (the swizzle of its operands is a
    /// function of address bits).
    pub fn forward_smem(self, head_dim: usize) -> u32 {
        let (row, q_tile, k_tile) = (head_dim * 2, self.forward_q_tile(), self.forward_key_tile(head_dim));
        match self {
            Family::Mma => ((q_tile + 4 * k_tile) * row) as u32,
            Family::Wgmma => {
                ((2 * q_tile + 2 * WG_STAGES * k_tile) * row + 2 * (WG_STAGES + 3) * 8 + 2 * 32 + WG_STAGES * 8 + 1024)
                    as u32
            }
        }
    }

    /// Launch grid of a forward whose work items (query tile, head, batch) form `items`
    /// ([`LaunchSpec::grid_fwd`]) on a device of `sms` multiprocessors. mma: one block per
    /// item. wgmma: one block per multiprocessor (at most one per item) that claims items
    /// until none is left, so that an item's Q and first K/V tiles load while the block's
    /// last item computes (a block start cost 5-7% of an n = 4096 forward: v21 in
    /// docs/benchmarks/gpu-bench.md).
    pub fn forward_grid(self, items: (u32, u32, u32), sms: u32) -> (u32, u32, u32) {
        match self {
            Family::Mma => items,
            Family::Wgmma => {
                let total = items.0 as u64 * items.1 as u64 * items.2 as u64;
                (total.min(sms.max(1) as u64) as u32, 1, 1)
            }
        }
    }

    /// Dynamic shared memory of the backward: the block's K and V tiles, two stages of the
    /// Q and dO tiles it visits with their per-query lse, delta, position and row, and the
    /// 16-bit dS^T tile of the current (key tiles, query tile) pair (the A operand of dQ).
    /// wgmma keeps two dS^T tiles, f32 staging tiles of the dQ reductions (two at d = 128,
    /// one at d = 64, whose 128-row query tiles take the room), a full and an empty
    /// mbarrier and the visit (query tile, warpgroups' plan tiles: 8 bytes) per stage; no
    /// slack to align the base (the kernel checks that it starts 1 KB-aligned, as sm_90
    /// places it).
    pub fn backward_smem(self, head_dim: usize) -> u32 {
        let (row, q_tile) = (head_dim * 2, self.backward_q_tile(head_dim));
        let stages = WB_STAGES * (2 * q_tile * row + 4 * q_tile * 4);
        let keys = TILE * self.backward_key_tiles();
        let kv_and_stages = 2 * keys * row + stages;
        let ds = keys * q_tile * 2;
        match self {
            Family::Mma => (kv_and_stages + ds) as u32,
            Family::Wgmma => {
                let staging = if head_dim == 64 { 1 } else { 2 };
                (kv_and_stages + 2 * ds + staging * q_tile * head_dim * 4 + 3 * WB_STAGES * 8) as u32
            }
        }
    }
}

fn fits_i32(what: &'static str, value: usize) -> Result<i32> {
    i32::try_from(value).map_err(|_| CudaError::TooLarge { what, value, max: i32::MAX as usize })
}

/// Check a call's arguments: head dim, positive sizes, chunk placement, 32-bit indexing,
/// grid limits and the spec itself. Every error names the failing value.
pub fn validate(shape: &Shape, spec: &GpuSpec, chunk: &Chunk) -> Result<()> {
    if !matches!(shape.head_dim, 64 | 128) {
        return Err(CudaError::UnsupportedHeadDim { head_dim: shape.head_dim });
    }
    for (dim, size) in
        [("batch", shape.batch), ("heads", shape.heads), ("q_rows", shape.q_rows), ("k_rows", shape.k_rows)]
    {
        if size == 0 {
            return Err(CudaError::ZeroDim { tensor: "q/k/v", dim });
        }
    }
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
    for (what, value) in [("heads", shape.heads), ("batch", shape.batch)] {
        if value > 65_535 {
            return Err(CudaError::TooLarge { what, value, max: 65_535 });
        }
    }
    spec.validate(shape.batch, shape.heads, chunk.seq_len)
}

/// Validate and build every launch of a call (host side only), with forward query tiles of
/// [`FWD_Q_TILE`] rows (what a launch visits does not depend on the tile size).
pub fn launches(shape: &Shape, spec: &GpuSpec, chunk: &Chunk) -> Result<Vec<LaunchSpec>> {
    launches_for(shape, spec, chunk, Family::Mma)
}

/// [`launches`] with the forward query tiles of a kernel family
/// ([`Family::forward_q_tile_for`], per launch).
pub fn launches_for(shape: &Shape, spec: &GpuSpec, chunk: &Chunk, family: Family) -> Result<Vec<LaunchSpec>> {
    validate(shape, spec, chunk)?;
    let scale = spec.scale_for(shape.head_dim);
    let base = Params {
        batch: shape.batch as i32,
        heads: shape.heads as i32,
        q_rows: shape.q_rows as i32,
        k_rows: shape.k_rows as i32,
        q_offset: chunk.q_offset as i32,
        k_offset: chunk.k_offset as i32,
        seq_len: chunk.seq_len as i32,
        causal: spec.causal as i32,
        scale: scale as f32,
        scale_log2: (scale * std::f64::consts::LOG2_E) as f32,
        ..Params::default()
    };
    let (qa, ka) = chunk.axes(shape);
    let identity = IndexMap::Identity { q: qa, k: ka };
    let build = |params: Params, branch: Option<&Branch>, map: IndexMap| -> Result<LaunchSpec> {
        let ((nq, nk), (qb, kb)) = (map.extents(), map.bases());
        let (fwd_q_tile, fwd_k_tile) = (family.forward_q_tile_for(&map), family.forward_key_tile(shape.head_dim));
        let fwd = plan(&spec.pattern, branch, spec.causal, map, (fwd_q_tile, fwd_k_tile));
        let cols = plan(&spec.pattern, branch, spec.causal, map, (TILE, TILE)).transpose();
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
        Ok(LaunchSpec { params, map, fwd_q_tile, fwd_k_tile, fwd, cols })
    };
    // Clamp to the sequence: a window wider than it changes nothing and must not overflow.
    let clamp = |x: usize| x.min(chunk.seq_len) as i32;
    match &spec.pattern {
        GpuPattern::Dense => Ok(vec![build(base, None, identity)?]),
        GpuPattern::Window { left, right } => Ok(vec![build(
            Params { pattern: 1, win_left: clamp(*left), win_right: clamp(*right), ..base },
            None,
            identity,
        )?]),
        GpuPattern::BlockSparse(bs) => {
            let params = Params {
                pattern: 2,
                bs_block: clamp(bs.block).max(1),
                bs_radius: bs.local_radius.map_or(-1, clamp),
                bs_stride: bs.dilated_stride.map_or(0, clamp),
                bs_global: clamp(bs.global_tokens),
                bs_mask_blocks: bs.block_mask.as_ref().map_or(0, |m| m.len() as i32),
                ..base
            };
            Ok(vec![build(params, None, identity)?])
        }
        GpuPattern::Dilated(d) => d
            .branches
            .iter()
            .map(|b| {
                // A segment longer than the sequence is the whole sequence (same segment
                // starts), so clamping changes no mask and keeps compact rows tight.
                let branch = Branch { segment: b.segment.min(chunk.seq_len), ..*b };
                let (rule, fixed) = match b.offset {
                    Offset::HeadMod => (0, 0),
                    Offset::HeadBlock => (1, 0),
                    Offset::Fixed(o) => (2, o as i32),
                };
                let params = Params {
                    pattern: 3,
                    dil_segment: branch.segment as i32,
                    dil_rate: fits_i32("dilation", branch.dilation)?,
                    dil_rule: rule,
                    dil_fixed: fixed,
                    dil_per_seg: branch.segment.div_ceil(branch.dilation) as i32,
                    ..base
                };
                // Compaction needs contiguous rows (kept positions are found from segment
                // starts); a strided (striped-layout) axis evaluates the branch mask in place.
                if qa.stride == 1 && ka.stride == 1 {
                    let map = IndexMap::Compact { segment: branch.segment, dilation: branch.dilation, q: qa, k: ka };
                    build(Params { compact: 1, ..params }, Some(&branch), map)
                } else {
                    build(params, Some(&branch), identity)
                }
            })
            .collect(),
    }
}

/// Block-sparse user mask flattened row-major for the kernel (`blocks x blocks` bytes).
pub fn block_mask_bytes(spec: &GpuSpec) -> Option<Vec<u8>> {
    match &spec.pattern {
        GpuPattern::BlockSparse(bs) => bs.block_mask.as_ref().map(|m| {
            let n = m.len();
            m.iter().flat_map(|row| (0..n).map(|j| row.get(j).copied().unwrap_or(false) as u8)).collect()
        }),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ringdil_reference::pattern::{BlockSparse, Dilated};

    fn dense() -> GpuSpec {
        GpuSpec::new(GpuPattern::Dense)
    }

    #[test]
    fn params_layout_matches_the_cuda_struct() {
        // 15 pointers, 29 ints, 2 floats, padded to 8 bytes.
        assert_eq!(std::mem::size_of::<Params>(), 15 * 8 + 29 * 4 + 2 * 4 + 4);
        assert_eq!(std::mem::offset_of!(Params, batch), 120);
        assert_eq!(std::mem::offset_of!(Params, scale), 120 + 29 * 4);
        // The CUDA source declares the same fields in the same order.
        let src = crate::KERNEL_SOURCE;
        let body = &src[src.find("struct Params {").unwrap()..];
        let body = &body[..body.find("};").unwrap()];
        let names: Vec<&str> = body
            .lines()
            .skip(1)
            .map(|l| l.split("//").next().unwrap().trim().trim_end_matches(';'))
            .filter(|l| !l.is_empty())
            .flat_map(|l| l.split(',').map(|f| f.trim().rsplit([' ', '*']).next().unwrap()).collect::<Vec<_>>())
            .collect();
        let expected = [
            "q",
            "k",
            "v",
            "out",
            "lse",
            "dout",
            "delta",
            "lse2",
            "dq",
            "dk",
            "dv",
            "key_len",
            "plan_ptr",
            "plan_idx",
            "block_mask",
            "batch",
            "heads",
            "nq",
            "nk",
            "q_rows",
            "k_rows",
            "q_offset",
            "k_offset",
            "seq_len",
            "causal",
            "pattern",
            "win_left",
            "win_right",
            "bs_block",
            "bs_radius",
            "bs_stride",
            "bs_global",
            "bs_mask_blocks",
            "dil_segment",
            "dil_rate",
            "dil_rule",
            "dil_fixed",
            "compact",
            "dil_per_seg",
            "q_stride",
            "k_stride",
            "q_cbase",
            "k_cbase",
            "accumulate",
            "scale",
            "scale_log2",
        ];
        assert_eq!(names, expected);
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
        assert_eq!(Family::Mma.forward_smem(128), 96 * 1024);
        assert_eq!(Family::Mma.forward_smem(64), 48 * 1024);
        assert_eq!(Family::Wgmma.forward_smem(128), 224 * 1024 + 208 + 1024);
        // sm_90's largest dynamic shared memory per block is 227 KB.
        assert!(Family::Wgmma.forward_smem(128) <= 227 * 1024);
        // d = 64: two Q tiles (48 KB) and four stages of 128-key K / V tiles (128 KB).
        assert_eq!(Family::Wgmma.forward_smem(64), 176 * 1024 + 208 + 1024);
        assert!(Family::Wgmma.forward_smem(64) <= 227 * 1024);
        // One block per multiprocessor, at most one per item; mma keeps one per item.
        assert_eq!(Family::Wgmma.forward_grid((22, 16, 4), 132), (132, 1, 1));
        assert_eq!(Family::Wgmma.forward_grid((3, 2, 1), 132), (6, 1, 1));
        assert_eq!(Family::Wgmma.forward_grid((u32::MAX, 65535, 65535), 132), (132, 1, 1));
        assert_eq!(Family::Mma.forward_grid((22, 16, 4), 132), (22, 16, 4));
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
        assert_eq!(Family::Mma.backward_smem(128), 96 * 1024 + 2048 + 8192);
        assert_eq!(Family::Mma.backward_smem(64), 48 * 1024 + 2048 + 8192);
        // d = 128: K, V of 128 keys (64 KB), two stages of 64 queries (66 KB), two dS^T tiles
        // (32 KB), two dQ staging tiles (64 KB). d = 64: K, V (32 KB), two stages of 128
        // queries (68 KB), two dS^T tiles (64 KB), one staging tile (32 KB). Then 48 bytes of
        // mbarriers and visits. Both within sm_90's 227 KB per block.
        assert_eq!(Family::Wgmma.backward_smem(128), (64 + 66 + 32 + 64) * 1024 + 48);
        assert_eq!(Family::Wgmma.backward_smem(64), (32 + 68 + 64 + 32) * 1024 + 48);
        for d in [64, 128] {
            assert!(Family::Wgmma.backward_smem(d) <= 227 * 1024, "d = {d}");
        }
    }

    #[test]
    fn kernel_family_follows_the_architecture() {
        assert_eq!(Family::for_device(9, 0, None), Family::Wgmma);
        assert_eq!(Family::for_device(9, 0, Some("mma")), Family::Mma);
        assert_eq!(Family::for_device(9, 0, Some("wgmma")), Family::Wgmma);
        for (major, minor) in [(8, 0), (8, 9), (10, 0), (12, 0)] {
            assert_eq!(Family::for_device(major, minor, None), Family::Mma, "sm_{major}{minor}");
        }
        assert_eq!(Family::Wgmma.target(9, 0), "sm_90a");
        assert_eq!(Family::Mma.target(9, 0), "sm_90");
        // The kernel's constants are the host's.
        let src = crate::KERNEL_SOURCE;
        assert!(src.contains(&format!("#define WG_STAGES {WG_STAGES} ")));
        assert!(src.contains("#define FWD_WGS 3\n"));
        // Block threads: CONSUMERS = 128 WGS plus the producer warpgroup.
        assert!(src.contains("CONSUMERS = 128 * WGS, THREADS = CONSUMERS + WG_PRODUCERS;"));
        assert!(src.contains("#define WG_PRODUCERS 128 "));
        assert!(src.contains("__launch_bounds__(FwdBlock<FWD_WGS>::THREADS, 1)\n    attn_fwd(const Params p"));
        assert_eq!((Family::Wgmma.forward_threads(192), Family::Wgmma.forward_q_tile()), (512, 192));
        // forward_q_tile_for's 128-row tiles: the kernel instantiated with two warpgroups.
        assert!(src.contains("__launch_bounds__(FwdBlock<2>::THREADS, 1)\n    attn_fwd_128(const Params p"));
        assert!(src.contains("attn_fwd_body<2>(p, maps, q_map)"));
        assert_eq!(Family::Wgmma.forward_threads(128), 384);
        // Forward key tiles: FBN in the kernel.
        assert!(src.contains("#define FBN (D == 64 ? 2 * BN : BN)\n"));
        assert_eq!((Family::Wgmma.forward_key_tile(64), Family::Wgmma.forward_key_tile(128)), (2 * TILE, TILE));
        for d in [64, 128] {
            assert_eq!(Family::Mma.forward_key_tile(d), TILE);
        }
        assert_eq!((Family::Mma.forward_threads(FWD_Q_TILE), Family::Mma.forward_q_tile()), (128, FWD_Q_TILE));
        assert!(src.contains(&format!("#define NTHREADS {}\n", Family::Mma.forward_threads(FWD_Q_TILE))));
        assert!(src.contains(&format!("#define WB_STAGES {WB_STAGES}\n")));
        assert!(src.contains("#define WB_WGS 2\n"));
        assert!(src.contains("#define WB_CONSUMERS (128 * WB_WGS)\n"));
        assert!(src.contains("#define WB_THREADS (WB_CONSUMERS + 128)\n"));
        assert!(src.contains("#define WB_QSUB (D == 64 ? 2 : 1) "));
        assert!(src.contains("#define QB (BM * WB_QSUB) "));
        assert!(src.contains("#define WB_DQ_BUFFERS (D == 64 ? 1 : 2)\n"));
        assert_eq!((Family::Wgmma.backward_key_tiles(), Family::Mma.backward_key_tiles()), (2, 1));
        assert_eq!(Family::Wgmma.backward_threads(), 384);
        assert_eq!((Family::Wgmma.backward_q_tile(64), Family::Wgmma.backward_q_tile(128)), (2 * TILE, TILE));
        for d in [64, 128] {
            assert_eq!(Family::Mma.backward_q_tile(d), TILE);
        }
        assert_eq!(Family::Mma.backward_threads(), Family::Mma.forward_threads(FWD_Q_TILE));
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
    fn wgmma_forward_tiles_do_not_straddle_dilated_segments() {
        // Kept rows per segment: 512 / 1 = 512 and 1024 / 4 = 256 (not multiples of 192),
        // 768 / 4 = 192 (one is), and a dense launch.
        let d = Dilated::longnet(&[(512, 1), (1024, 4), (768, 4)]);
        let shape = Shape::square(1, 3072, 8, 128);
        let l = launches_for(&shape, &GpuSpec::new(GpuPattern::Dilated(d)), &Chunk::whole(&shape), Family::Wgmma);
        let l = l.unwrap();
        let tiles: Vec<usize> = l.iter().map(|l| l.fwd_q_tile).collect();
        assert_eq!(tiles, [128, 128, 192]);
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
            err(&Shape { head_dim: 96, ..shape }, &dense(), &whole),
            "head_dim 96 has no GPU kernel; supported: 64, 128"
        );
        assert!(err(&Shape { heads: 0, ..shape }, &dense(), &whole).contains("`heads` is 0"));
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
        assert_eq!(block_mask_bytes(&GpuSpec::new(GpuPattern::BlockSparse(bs))), Some(vec![1, 0, 0, 1]));
        assert_eq!(block_mask_bytes(&dense()), None);
    }
}
