//! The kernel families and their geometry: the one table of tile sizes, stage counts,
//! threads and shared memory that the host plans with and the kernels are compiled with.
//!
//! Every number here reaches the CUDA source as a `#define` of the generated contract
//! header ([`crate::kernel_source`]), so a tile size is changed in exactly one place: the
//! method below that returns it. The kernels hold no literal of their own for any of
//! them, and each shared-memory layout asserts at compile time that its size is the
//! host's [`Family::forward_smem`] / [`Family::backward_smem`] (NVRTC compiles at the
//! first call, so a disagreement fails at start-up, and in the `kernels_compile` test).

use crate::plan::IndexMap;

/// Rows of a plan tile: a key tile of every kernel except the wgmma forward at d = 64
/// (twice this: [`Family::forward_key_tile`]), and a query tile of the backward kernels
/// (the wgmma backward at d = 64 visits two at a time: [`Family::backward_q_tile`]).
/// `BM` (query side) and `BN` (key side) in the kernels.
pub const TILE: usize = 64;

/// Query rows per forward block of the mma family (`FBM`) at every head dim: 4 warps of 2
/// m16 tiles, or 8 warps of one ([`Family::forward_warp_tiles`]).
pub const FWD_Q_TILE: usize = 128;

/// Threads of an mma-family block (`NTHREADS`): 4 warps. Above d = 128 the forward and the
/// backward run twice as many ([`Family::forward_threads`], [`Family::backward_threads`]).
pub const MMA_THREADS: u32 = 128;

/// Head dims of the mma family: every one that flash-attention 3 serves.
const MMA_HEAD_DIMS: &[usize] = &[64, 96, 128, 192, 256];

/// Head dims of the wgmma family's forward: every one the mma family serves. Its TMA
/// boxes are 64 columns wide, so its tiles are a multiple of 64 wide
/// ([`Family::tile_dim`]: d = 96 computes in tiles of 128, their last 32 columns zero).
/// Above d = 128 only the two-warpgroup kernel (`attn_fwd_128`) is compiled: a consumer's
/// O is 64 x D f32, D / 2 registers per thread (128 at d = 256).
const WGMMA_HEAD_DIMS: &[usize] = &[64, 96, 128, 192, 256];

/// Head dims of v (and d_out, the output, dV) other than q's that the kernels pair with a
/// q / k head dim: MLA's d_qk = 192, d_v = 128. Only kernels above d = 128 take two dims
/// (`HEAD_DIM_V`): the mma family's (the wide backward splits dK and dV columns
/// separately) and the wgmma forward, whose split stages hold K and V at their own widths
/// (its backward at 192 is the mma family's).
const VALUE_DIMS: &[(usize, usize)] = &[(192, 128)];

/// Head dims of the wgmma family's backward: its tiles are tuned for 64 and 128 (96 runs
/// in the tiles of 128, [`Family::tile_dim`]); the backward of the others runs the mma
/// family's kernel ([`Family::backward_family`]).
const WGMMA_BACKWARD_HEAD_DIMS: &[usize] = &[64, 96, 128];

/// Threads of the producer warpgroup of a wgmma block (`WG_PRODUCERS`).
pub const PRODUCER_THREADS: u32 = 128;
/// sm_90's largest dynamic shared memory per block (opt-in), the budget of the wgmma
/// family's blocks.
pub const SM90_SMEM_PER_BLOCK: u32 = 227 * 1024;

/// Environment variable that forces the portable family on sm_90 (`mma`), so that it is
/// checked on the H100/H200 machines too. Unset or anything else: chosen by architecture.
pub const FAMILY_ENV: &str = "RINGDIL_KERNELS";

/// Which kernel family a device runs. Both families walk tile plans of the same kind
/// (forward: query tiles of [`Family::forward_q_tile`] rows over key tiles of
/// [`Family::forward_key_tile`]; backward: key tiles over query tiles of [`TILE`]) and
/// compute the same results.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Family {
    /// `mma.sync` tensor-core tiles: any device from sm_80 on; 4 warps per block, K/V (or
    /// Q/dO) double-buffered with cp.async. Kernel sources `sm80_*.cu`.
    Mma,
    /// Hopper's asynchronous warpgroup MMA (`wgmma`, sm_90a: H100, H200) with operands read
    /// by the tensor cores from shared memory, tiles copied by TMA. Forward: 3 consumer
    /// warpgroups (2 above d = 128) and a producer warpgroup, [`Family::forward_stages`]
    /// K/V stages handed over by mbarriers. Backward: two consumer warpgroups of 64 key rows and a producer
    /// warpgroup per block, visiting 128 query rows at a time at d = 64 and 64 at d = 128.
    /// Kernel sources `sm90_*.cu`.
    Wgmma,
}

impl Family {
    /// The family for compute capability `major.minor`: wgmma exists only on 9.0 (sm_90a
    /// features do not carry over to later architectures).
    pub fn for_device(major: i32, minor: i32, forced: Option<&str>) -> Self {
        if (major, minor) == (9, 0) && forced != Some("mma") { Family::Wgmma } else { Family::Mma }
    }

    /// Whether this family has kernels for `head_dim` whose blocks fit a device's
    /// `smem_per_block` bytes of shared memory (its opt-in maximum): the mma family at
    /// d = 256 (192 KB forward, 210 KB backward) needs sm_90's 227 KB; sm_80's 163 KB runs up
    /// to d = 192, sm_86 / sm_89's 99 KB d = 64 and 96 (d = 128's backward takes 106 KB).
    /// The wgmma family's forward at d = 192, 256 takes 193 KB, so with the mma backward
    /// it needs sm_90 as well.
    /// `value_dim` is v's head dim ([`Family::has_value_dim`]).
    pub fn fits(self, head_dim: usize, value_dim: usize, smem_per_block: u32) -> bool {
        let backward = self.backward_family(head_dim);
        self.head_dims().contains(&head_dim)
            && backward.head_dims().contains(&head_dim)
            && self.has_value_dim(head_dim, value_dim)
            && self.forward_smem(head_dim, value_dim).max(backward.backward_smem(head_dim, value_dim)) <= smem_per_block
    }

    /// Whether this family's kernels pair q / k head dim `head_dim` with v head dim
    /// `value_dim`: equal dims always, and MLA's 192 / 128 (`VALUE_DIMS`) in both
    /// families (the wgmma forward's split stages hold K and V at their own widths; its
    /// backward at 192 is the mma family's).
    pub fn has_value_dim(self, head_dim: usize, value_dim: usize) -> bool {
        value_dim == head_dim || VALUE_DIMS.contains(&(head_dim, value_dim))
    }

    /// The width of this family's register and shared-memory tiles for a tensor head dim
    /// `dim` (`HEAD_DIM`, `HEAD_DIM_V`; the tensors' own are `HEAD_DIM_MEM`,
    /// `HEAD_DIM_V_MEM`): `dim` itself in the mma family; in the wgmma family the next
    /// multiple of 64, since its operands are TMA boxes of 64 columns in the 128-byte
    /// swizzle. At d = 96 a tile is 128 wide: the boxes read columns 96.. as zeros (past the
    /// tensor's rows), the gathers zero-fill them, they add nothing to `Q K^T`, and the
    /// epilogues store none of them. The 64-byte swizzle a 32-column part would need, and
    /// descriptors of its own, would save the quarter of the MMA work those zeros take.
    pub fn tile_dim(self, dim: usize) -> usize {
        match self {
            Family::Mma => dim,
            Family::Wgmma => dim.next_multiple_of(64),
        }
    }

    /// The (q / k, v) head-dim pairs with different dims that the kernels run.
    pub fn value_dim_pairs() -> &'static [(usize, usize)] {
        VALUE_DIMS
    }

    /// The family whose backward kernel runs `head_dim` where `self` runs the forward:
    /// `self`, except the wgmma family above d = 128 (`WGMMA_BACKWARD_HEAD_DIMS`), whose
    /// backward is the mma family's. The two passes share only global-memory results (the
    /// output, its LSE, `delta`) whose layout is the same in both families.
    pub fn backward_family(self, head_dim: usize) -> Family {
        match self {
            Family::Wgmma if !WGMMA_BACKWARD_HEAD_DIMS.contains(&head_dim) => Family::Mma,
            f => f,
        }
    }

    /// The family that runs `head_dim` (v: `value_dim`) on a device whose family is `self`
    /// and whose blocks may take `smem_per_block` bytes of shared memory: `self` where its
    /// kernels for it fit ([`Family::fits`]), else mma (whose kernels run on every sm_80+
    /// device, sm_90 included); None where neither's do.
    pub fn for_head_dim(self, head_dim: usize, value_dim: usize, smem_per_block: u32) -> Option<Family> {
        [self, Family::Mma].into_iter().find(|f| f.fits(head_dim, value_dim, smem_per_block))
    }

    /// The head dims this family has a forward kernel for (the backward's family:
    /// [`Family::backward_family`]).
    pub fn head_dims(self) -> &'static [usize] {
        match self {
            Family::Mma => MMA_HEAD_DIMS,
            Family::Wgmma => WGMMA_HEAD_DIMS,
        }
    }

    /// NVRTC's `--gpu-architecture`: wgmma needs the architecture-specific target.
    pub fn target(self, major: i32, minor: i32) -> String {
        match self {
            Family::Mma => format!("sm_{major}{minor}"),
            Family::Wgmma => format!("sm_{major}{minor}a"),
        }
    }

    /// Short name, as `RINGDIL_KERNELS` takes it and logs print it.
    pub fn name(self) -> &'static str {
        match self {
            Family::Mma => "mma",
            Family::Wgmma => "wgmma",
        }
    }

    /// Query rows per forward block (`FBM`). mma: [`FWD_Q_TILE`]. wgmma: 64 per consumer
    /// warpgroup, three of them, so that one warpgroup's softmax overlaps the other two's
    /// MMAs (against two: 1.19-1.28x faster at d = 64, 1.01-1.06x at d = 128).
    pub fn forward_q_tile(self) -> usize {
        match self {
            Family::Wgmma => 3 * TILE,
            Family::Mma => FWD_Q_TILE,
        }
    }

    /// The wgmma forward's second instantiation (`FBM_NARROW`, kernel `attn_fwd_128`): two
    /// consumer warpgroups, for compact and masked launches ([`Family::forward_q_tile_for`]).
    pub fn forward_q_tile_narrow(self) -> usize {
        2 * TILE
    }

    /// Query rows per forward block of one launch: [`Family::forward_q_tile`], except that
    /// the wgmma family runs with [`Family::forward_q_tile_narrow`] rows
    /// * a compact dilated launch whose segments keep `m` rows, `m` not a multiple of its
    ///   192. Compact launch indices start at a segment boundary, so such a tile never
    ///   straddles two segments when `m` is a multiple of 128 (LongNet's powers of two); a
    ///   192-row tile would, every few tiles, and visit both segments' keys under the
    ///   generic mask (a LongNet branch (8192, 8) took 3.4x as long that way). (Where `m`
    ///   is a multiple of 192 the 192-row kernel masks its partial tiles with the generic
    ///   mask: the compact launches' interval mask, `MASK_COMPACT` in `kernels/mask.cuh`,
    ///   is compiled into the 128-row kernel only, as its registers would make the 192-row
    ///   kernel's consumers spill);
    /// * a launch whose mask has structure inside the sequence (`masked`: a window, blocks,
    ///   an expression or a table; `launch::launches_for` decides). A key tile is full for a block only if
    ///   it is for all of the block's rows: the taller the block, the more tiles at a
    ///   band's edges are masked per element, and a 192-row block straddles 128-token
    ///   blocks that a 128-row one covers exactly;
    /// * every launch above d = 128, which has no 192-row kernel.
    pub fn forward_q_tile_for(self, map: &IndexMap, masked: bool, head_dim: usize) -> usize {
        if !self.has_wide_forward(head_dim) {
            return self.forward_q_tile_narrow();
        }
        match *map {
            IndexMap::Compact { segment, dilation, .. }
                if self == Family::Wgmma && segment.div_ceil(dilation) % self.forward_q_tile() != 0 =>
            {
                self.forward_q_tile_narrow()
            }
            IndexMap::Identity { .. } if self == Family::Wgmma && masked => self.forward_q_tile_narrow(),
            _ => self.forward_q_tile(),
        }
    }

    /// Keys per forward tile (`FBN`): [`TILE`], except in the wgmma family, where the
    /// registers and shared memory hold a longer tile. A 64-key tile's MMAs are short
    /// against the per-tile work around them that does not grow with the keys (stage
    /// hand-over, row maxima, O's rescale, MMA issue and wait); above d = 128 the two
    /// consumer warpgroups leave the tensor pipe idle a third of the time on that chain.
    /// * d = 64: 128 keys (flash-attention 3's tile there).
    /// * MLA's d = 192 with d_v = 128: 128 keys. A consumer holds O (64 registers) beside a
    ///   128-key S (64) and P (32), and two stages of 128 keys (80 KB each) fit beside one Q
    ///   tile ([`Family::forward_q_buffers`]).
    /// * d = 192, 256: 80 keys (flash-attention 3's at d = 256): O takes 96 or 128
    ///   registers, leaving room for S of 80 keys (40) and P (20), and two stages of 80 keys
    ///   (60, 80 KB) fit beside two or one Q tiles; 128 keys fit neither.
    pub fn forward_key_tile(self, head_dim: usize, value_dim: usize) -> usize {
        match self {
            Family::Wgmma if head_dim == 64 || (head_dim, value_dim) == (192, 128) => 2 * TILE,
            Family::Wgmma if head_dim > 128 => 80,
            _ => TILE,
        }
    }

    /// Rows of a K / V TMA box of the forward (`KV_BOX`, the box rows of its tensor maps):
    /// a key tile is `k_tile / KV_BOX` boxes per 64-column block, of [`TILE`] rows where
    /// they divide it (one box of 64 rows is 8 KB, and 128-key tiles take two), else one
    /// box of the whole tile (80 keys).
    pub fn forward_kv_box_rows(k_tile: usize) -> usize {
        if k_tile % TILE == 0 { TILE } else { k_tile }
    }

    /// K/V stages of the forward (`FWD_STAGES`): mma double-buffers (tile j+1 loads while
    /// tile j computes); wgmma keeps 4 (tile j+1 computes while j+2 and j+3 load) up to
    /// d = 128, and 2 above, where a stage of 64 keys is 48 or 64 KB (then K and V are
    /// released separately: [`Family::forward_split_kv`]).
    pub fn forward_stages(self, head_dim: usize) -> usize {
        match self {
            Family::Wgmma if head_dim <= 128 => 4,
            _ => 2,
        }
    }

    /// Whether the wgmma forward hands a stage's K and V over separately (`FWD_SPLIT_KV`):
    /// K(j) is free once S(j) = Q K(j)^T is done and V(j) once O += P(j) V(j) is, each
    /// with its own full and empty mbarriers (flash-attention 3's two pipelines). With two
    /// stages (above d = 128) a stage released whole only after P(j) V(j) would leave the
    /// next tile's load in the consumers' path; split, K(j + 2) loads while P(j) V(j) runs.
    pub fn forward_split_kv(self, head_dim: usize) -> bool {
        self == Family::Wgmma && self.forward_stages(head_dim) == 2
    }

    /// Rows of a Q buffer of the forward (`FWD_Q_ROWS`): the largest forward tile the
    /// module compiles ([`Family::forward_q_tile`]; wgmma above d = 128:
    /// [`Family::forward_q_tile_narrow`], its only kernel there).
    pub fn forward_q_rows(self, head_dim: usize) -> usize {
        match self {
            Family::Wgmma if head_dim > 128 => self.forward_q_tile_narrow(),
            f => f.forward_q_tile(),
        }
    }

    /// Whether the module of `head_dim` has the forward of [`Family::forward_q_tile`] rows
    /// (`attn_fwd`): every one but the wgmma family's above d = 128, whose only forward is
    /// the narrow one ([`Family::forward_q_rows`]).
    pub fn has_wide_forward(self, head_dim: usize) -> bool {
        self.forward_q_rows(head_dim) == self.forward_q_tile()
    }

    /// Q buffers of the wgmma forward (`FWD_Q_BUFS`): two (the next item's Q loads while
    /// the last one computes) where they fit beside the K/V stages in sm_90's 227 KB
    /// ([`SM90_SMEM_PER_BLOCK`]), else one: d = 256 (a 64 KB Q tile beside two 64 KB
    /// stages) and MLA's 192 / 128 (48 KB beside two 80 KB stages of 128 keys). mma: one.
    pub fn forward_q_buffers(self, head_dim: usize, value_dim: usize) -> usize {
        let (head_dim, value_dim) = (self.tile_dim(head_dim), self.tile_dim(value_dim));
        match self {
            Family::Wgmma if self.wgmma_forward_smem(head_dim, value_dim, 2) <= SM90_SMEM_PER_BLOCK as usize => 2,
            _ => 1,
        }
    }

    /// m16 row tiles per warp of the mma forward (`WM`). A warp holds O, 16 rows x D f32 per
    /// tile: D / 2 registers per thread. Two tiles (every K / V fragment read from shared
    /// memory feeds two products) up to d = 128: O 2 x 64 and S 2 x 16 x 64 / 32 = 64
    /// registers, 192 of 255. Above, one: at d = 256 two would be O alone at 256; one is O 128
    /// + S 32 (d = 192: 96 + 32), and the block keeps its 128 rows with 8 warps.
    pub fn forward_warp_tiles(self, head_dim: usize) -> usize {
        if head_dim <= 128 { 2 } else { 1 }
    }

    /// Threads per forward block of a launch with `q_tile`-row tiles
    /// ([`Family::forward_q_tile_for`]): one warp per [`Family::forward_warp_tiles`] m16
    /// tiles (mma: 4 warps, 8 above d = 128); one warpgroup per 64 query rows and a producer
    /// warpgroup (wgmma: 512 for `attn_fwd`, 384 for `attn_fwd_128`).
    pub fn forward_threads(self, q_tile: usize, head_dim: usize) -> u32 {
        match self {
            Family::Mma => (q_tile / (16 * self.forward_warp_tiles(head_dim)) * 32) as u32,
            Family::Wgmma => (2 * q_tile) as u32 + PRODUCER_THREADS,
        }
    }

    /// Key tiles (of [`TILE`] rows) per backward block (`WB_WGS`). mma: one (4 warps of 16
    /// keys). wgmma: one per consumer warpgroup, two, so that each query tile's Q and dO
    /// serve 128 keys and the block adds its dQ into global memory once per 128 keys
    /// instead of once per 64 (1.07-1.13x faster forward + backward at d = 128).
    pub fn backward_key_tiles(self) -> usize {
        match self {
            Family::Wgmma => 2,
            Family::Mma => 1,
        }
    }

    /// Query rows per backward visit (`QB`): [`TILE`], and two plan tiles at d = 64 for
    /// wgmma (128 x 128 visits halve the L2 bytes per FLOP that bound that backward with
    /// 64 x 64 ones).
    pub fn backward_q_tile(self, head_dim: usize) -> usize {
        match self {
            Family::Wgmma if head_dim == 64 => 2 * TILE,
            _ => TILE,
        }
    }

    /// Query stages of the backward (`BWD_STAGES`): one query tile computes while the next
    /// loads, in both families.
    pub fn backward_stages(self) -> usize {
        2
    }

    /// dS^T tiles of the backward (`WB_DS_BUFFERS`): wgmma's two warpgroups alternate two,
    /// so that a tile's dS^T stores need not wait for the other warpgroup's dQ MMA of the
    /// last tile; mma has one.
    pub fn backward_ds_buffers(self) -> usize {
        match self {
            Family::Wgmma => 2,
            Family::Mma => 1,
        }
    }

    /// f32 dQ staging tiles of the wgmma backward (`WB_DQ_BUFFERS`, [`Family::backward_q_tile`]
    /// x head_dim each): two at d = 128 (a tile's TMA reductions get a whole tile's time
    /// to read theirs), one at d = 64, whose 128-query stages and dS^T tiles take the
    /// room. mma adds dQ element by element and stages nothing.
    pub fn backward_dq_buffers(self, head_dim: usize) -> usize {
        match self {
            Family::Wgmma if head_dim == 64 => 1,
            Family::Wgmma => 2,
            Family::Mma => 0,
        }
    }

    /// Slices of D that the mma backward's warps split dK, dV and dQ into
    /// (`BWD_DIM_SLICES`; wgmma: 1). Its 4 warps of 16 keys each hold their keys' dK and dV
    /// rows, 2 x 16 x D f32 over 32 lanes = D registers per thread, with S^T and dP^T (32 +
    /// 32) beside them: 192 at d = 128, 256 (more than a thread has) at d = 192. Above d =
    /// 128, two slices: 8 warps, a key group's two warps each own half of D (dK, dV: D / 2
    /// registers, 128 at d = 256) and half of the tile's 64 queries for S^T and dP^T (16 +
    /// 16), whose P^T and dS^T go through shared memory (`kernels/sm80_backward_wide.cu`).
    pub fn backward_dim_slices(self, head_dim: usize) -> usize {
        if self == Family::Mma && head_dim > 128 { 2 } else { 1 }
    }

    /// 16-bit P^T tiles of the backward (`BWD_P_TILES`): the mma backward with D split
    /// ([`Family::backward_dim_slices`]) hands P^T between its warps in one; the others keep
    /// P^T in registers.
    pub fn backward_p_tiles(self, head_dim: usize) -> usize {
        (self.backward_dim_slices(head_dim) > 1) as usize
    }

    /// Threads per block of the backward kernel: 4 warps per key tile and D slice
    /// ([`Family::backward_dim_slices`]), and for wgmma a producer warpgroup that fills the
    /// query stages.
    pub fn backward_threads(self, head_dim: usize) -> u32 {
        let warps4 = (self.backward_key_tiles() * self.backward_dim_slices(head_dim)) as u32;
        MMA_THREADS * warps4 + if self == Family::Wgmma { PRODUCER_THREADS } else { 0 }
    }

    /// Dynamic shared memory of the forward (`FWD_SMEM_BYTES`; the kernels' `FwdSmem`
    /// layouts assert the same sum): a Q tile of [`Family::forward_q_tile`] rows and the
    /// [`Family::forward_stages`] K/V stages of [`Family::forward_key_tile`] rows. wgmma's
    /// blocks run several work items each ([`Family::forward_grid`]):
    /// [`Family::forward_q_buffers`] Q tiles of [`Family::forward_q_rows`]; 8-byte
    /// mbarriers, full and empty per K/V stage (twice that where K and V are handed over
    /// separately, [`Family::forward_split_kv`]), full, empty and slot-read per item slot
    /// (two); the two items' slots (32 bytes each: number, plan, key limit, warpgroups'
    /// tiles, head offset); each stage's first key and key segment (8 bytes); and 1 KB of
    /// slack to round the base up to 1 KB in the kernel (the swizzle of its operands is a
    /// function of address bits). V's rows are `value_dim` wide.
    pub fn forward_smem(self, head_dim: usize, value_dim: usize) -> u32 {
        let (head_dim, value_dim) = (self.tile_dim(head_dim), self.tile_dim(value_dim));
        let bytes = match self {
            Family::Mma => self.forward_q_tile() * head_dim * 2 + self.forward_kv_smem(head_dim, value_dim),
            Family::Wgmma => self.wgmma_forward_smem(head_dim, value_dim, self.forward_q_buffers(head_dim, value_dim)),
        };
        bytes as u32
    }

    /// The forward's K/V stages, in bytes.
    fn forward_kv_smem(self, head_dim: usize, value_dim: usize) -> usize {
        self.forward_stages(head_dim) * self.forward_key_tile(head_dim, value_dim) * (head_dim + value_dim) * 2
    }

    /// [`Family::forward_smem`] of the wgmma family with `q_buffers` Q tiles.
    fn wgmma_forward_smem(self, head_dim: usize, value_dim: usize, q_buffers: usize) -> usize {
        let stages = self.forward_stages(head_dim);
        let stage_bars = if self.forward_split_kv(head_dim) { 4 } else { 2 };
        q_buffers * self.forward_q_rows(head_dim) * head_dim * 2
            + self.forward_kv_smem(head_dim, value_dim)
            + (stage_bars * stages + 6) * 8
            + 2 * 32
            + stages * 8
            + 1024
    }

    /// Dynamic shared memory of the backward (`BWD_SMEM_BYTES`; asserted by the kernels'
    /// `BwdSmem` layouts): the block's K and V tiles, [`Family::backward_stages`] stages of
    /// the Q and dO tiles it visits with their per-query lse2, delta, position and row, the
    /// 16-bit dS^T tiles ([`Family::backward_ds_buffers`]) and P^T tiles
    /// ([`Family::backward_p_tiles`]), and the f32 dQ staging tiles
    /// ([`Family::backward_dq_buffers`]); wgmma adds a full and an empty mbarrier and the
    /// visit (query tile, warpgroups' plan tiles: 8 bytes) per stage, and no slack to
    /// align the base (the kernel checks that it starts 1 KB-aligned, as sm_90 places it).
    /// V and dO rows are `value_dim` wide.
    pub fn backward_smem(self, head_dim: usize, value_dim: usize) -> u32 {
        let (head_dim, value_dim) = (self.tile_dim(head_dim), self.tile_dim(value_dim));
        let (q_tile, stages) = (self.backward_q_tile(head_dim), self.backward_stages());
        let keys = TILE * self.backward_key_tiles();
        let stage = q_tile * (head_dim + value_dim) * 2 + 4 * q_tile * 4;
        let ds = (self.backward_ds_buffers() + self.backward_p_tiles(head_dim)) * keys * q_tile * 2;
        let dq = self.backward_dq_buffers(head_dim) * q_tile * head_dim * 4;
        let bars = if self == Family::Wgmma { 3 * stages * 8 } else { 0 };
        (keys * (head_dim + value_dim) * 2 + stages * stage + ds + dq + bars) as u32
    }

    /// Launch grid of a forward whose work items (query tile, head, batch) form `items`
    /// on a device of `sms` multiprocessors. mma: one block per item. wgmma: one block per
    /// multiprocessor (at most one per item) that claims items until none is left, so
    /// that an item's Q and first K/V tiles load while the block's last item computes (a
    /// block start cost 5-7% of an n = 4096 forward).
    pub fn forward_grid(self, items: (u32, u32, u32), sms: u32) -> (u32, u32, u32) {
        match self {
            Family::Mma => items,
            Family::Wgmma => {
                let total = items.0 as u64 * items.1 as u64 * items.2 as u64;
                (total.min(sms.max(1) as u64) as u32, 1, 1)
            }
        }
    }
}

#[cfg(test)]
#[path = "family_tests.rs"]
mod tests;
