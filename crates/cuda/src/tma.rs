//! Tensor maps for Hopper's TMA unit (tensor memory accelerator): the wgmma kernels copy
//! each K / V (forward) or Q / dO (backward) tile with a few bulk "box" copies described by
//! these maps,
//! instead of one 16-byte `cp.async` per thread and row (which, issued by the producer
//! warpgroup, halved the kernel's speed at d = 128).
//!
//! A `[batch, rows, heads, head_dim]` tensor of 16-bit values is described to the TMA as a
//! 5-d tensor with dimensions (head_dim, heads, phase, step, batch), innermost first, where
//! row = step * R + phase for the launch's row stride R (a compact dilated branch's
//! dilation; 1 otherwise), and read in boxes of 64 x 1 x 1 x ROWS x 1: one head's 64
//! head dims (128 bytes) of ROWS rows R apart (a dilated branch's kept rows within a
//! segment; ROWS is [`TILE`], or the forward's 80-key tile above d = 128), written to
//! shared memory with the 128-byte swizzle, which is the kernel's `swz_blocks` layout. The view holds the rows below `(rows / R) * R`; past them a box
//! reads zeros (the kernel gathers tiles that reach further with cp.async). The backward
//! adds its dQ into dq (f32) the other way, by TMA reductions of 32-column boxes.

use crate::error::{CudaError, Result};
use crate::family::TILE;
use cudarc::driver::sys::{
    self, CUtensorMapDataType, CUtensorMapFloatOOBfill, CUtensorMapInterleave, CUtensorMapL2promotion,
    CUtensorMapSwizzle,
};

/// One encoded `CUtensorMap` (opaque, 128 bytes), laid out as the kernel's `TensorMap`.
/// Also a kernel parameter on its own: the backward's map of dq (f32), into which it adds
/// dQ boxes by TMA reductions.
#[repr(C, align(64))]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TensorMap {
    opaque: [u64; 16],
}

/// The kernel's `TensorPair` parameter: the maps of the two tensors a launch streams (K
/// and V in the forward, Q and dO in the backward).
#[repr(C, align(64))]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TensorPair {
    pub a: TensorMap,
    pub b: TensorMap,
}

// SAFETY: plain bytes, passed by value as kernel parameters of the same layout.
unsafe impl cudarc::driver::DeviceRepr for TensorPair {}
unsafe impl cudarc::driver::DeviceRepr for TensorMap {}

/// Element type of a mapped tensor: the 16-bit inputs, or f32 (dq).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Elem {
    U16,
    F32,
}

impl Elem {
    fn bytes(self) -> usize {
        match self {
            Elem::U16 => 2,
            Elem::F32 => 4,
        }
    }

    /// Columns of one box: 128 bytes, the span of the 128-byte swizzle.
    pub fn box_cols(self) -> usize {
        128 / self.bytes()
    }
}

impl TensorMap {
    /// The map of a `[batch, rows, heads, head_dim]` tensor of `elem` at device address
    /// `ptr`, read (or reduced into) `stride` rows apart.
    pub fn new(ptr: sys::CUdeviceptr, elem: Elem, dims: [usize; 4], stride: usize) -> Result<Self> {
        encode(ptr, elem, dims, stride, TILE)
    }
}

impl TensorPair {
    /// Maps of the 16-bit tensors at device addresses `a` and `b`, of dims `a_dims` and
    /// `b_dims` (`[batch, rows, heads, head_dim]`: K and V, whose head dims may differ, or
    /// Q and dO), read `stride` rows apart in boxes of `box_rows` rows (the forward's
    /// `KV_BOX`, [`crate::family::Family::forward_kv_box_rows`]; [`TILE`] in the backward).
    pub fn new(
        (a, a_dims): (sys::CUdeviceptr, [usize; 4]),
        (b, b_dims): (sys::CUdeviceptr, [usize; 4]),
        stride: usize,
        box_rows: usize,
    ) -> Result<Self> {
        Ok(TensorPair {
            a: encode(a, Elem::U16, a_dims, stride, box_rows)?,
            b: encode(b, Elem::U16, b_dims, stride, box_rows)?,
        })
    }
}

/// (sizes innermost first, byte strides of dimensions 1..5) of a `[batch, rows, heads,
/// head_dim]` tensor of `elem` viewed with row stride `r`, as `cuTensorMapEncodeTiled`
/// takes them. A tensor with fewer than `r` rows gets one step (the kernels never box
/// there).
pub fn geometry(elem: Elem, [batch, rows, heads, head_dim]: [usize; 4], r: usize) -> ([u64; 5], [u64; 4]) {
    let e = elem.bytes() as u64;
    let row = heads as u64 * head_dim as u64 * e;
    (
        [head_dim as u64, heads as u64, r as u64, (rows / r).max(1) as u64, batch as u64],
        [head_dim as u64 * e, row, row * r as u64, row * rows as u64],
    )
}

fn encode(ptr: sys::CUdeviceptr, elem: Elem, dims: [usize; 4], stride: usize, box_rows: usize) -> Result<TensorMap> {
    let (size, strides) = geometry(elem, dims, stride);
    let boxed: [u32; 5] = [elem.box_cols() as u32, 1, 1, box_rows as u32, 1];
    let dtype = match elem {
        Elem::U16 => CUtensorMapDataType::CU_TENSOR_MAP_DATA_TYPE_UINT16,
        Elem::F32 => CUtensorMapDataType::CU_TENSOR_MAP_DATA_TYPE_FLOAT32,
    };
    let step: [u32; 5] = [1; 5];
    let mut map = std::mem::MaybeUninit::<sys::CUtensorMap>::zeroed();
    // SAFETY: every array has the rank's length (5; 4 strides); the driver only writes the
    // 128-byte map. The address is a live device allocation of the given geometry.
    unsafe {
        sys::cuTensorMapEncodeTiled(
            map.as_mut_ptr(),
            dtype,
            5,
            ptr as *mut std::ffi::c_void,
            size.as_ptr(),
            strides.as_ptr(),
            boxed.as_ptr(),
            step.as_ptr(),
            CUtensorMapInterleave::CU_TENSOR_MAP_INTERLEAVE_NONE,
            CUtensorMapSwizzle::CU_TENSOR_MAP_SWIZZLE_128B,
            CUtensorMapL2promotion::CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
            CUtensorMapFloatOOBfill::CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE,
        )
        .result()
        .map_err(CudaError::Driver)?;
        Ok(TensorMap { opaque: map.assume_init().opaque })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn geometry_is_head_dim_heads_phase_step_batch() {
        let (size, strides) = geometry(Elem::U16, [2, 1000, 3, 128], 1);
        assert_eq!(size, [128, 3, 1, 1000, 2]);
        // Next head: 256 bytes; next phase / row: 3 heads; next batch row: 1000 rows.
        assert_eq!(strides, [256, 768, 768, 768_000]);
        // Dilation 4: rows 4 apart are one step apart; 1001 rows keep 250 whole steps.
        let (size, strides) = geometry(Elem::U16, [2, 1001, 3, 128], 4);
        assert_eq!(size, [128, 3, 4, 250, 2]);
        assert_eq!(strides, [256, 768, 3072, 768_768]);
        // Fewer rows than the stride: one step (never used by the kernel), not an empty view.
        assert_eq!(geometry(Elem::U16, [1, 3, 1, 64], 8).0, [64, 1, 8, 1, 1]);
        // f32 (dq): twice the bytes per element and per row.
        assert_eq!(geometry(Elem::F32, [2, 1000, 3, 128], 1).1, [512, 1536, 1536, 1_536_000]);
        // The TMA needs 16-byte multiples: true for every head dim the kernels take.
        for d in [64, 128] {
            for r in [1, 3, 8] {
                for e in [Elem::U16, Elem::F32] {
                    assert!(geometry(e, [1, 7, 5, d], r).1.iter().all(|s| s % 16 == 0));
                }
            }
        }
    }

    /// The view reaches every row below (rows / r) * r exactly once (row = step * r +
    /// phase) and nothing past it.
    #[test]
    fn the_view_covers_whole_steps_exactly() {
        for (rows, r) in [(1000, 1), (1001, 4), (64, 8), (130, 3)] {
            let (size, strides) = geometry(Elem::U16, [1, rows, 1, 64], r);
            let mut seen = vec![0; rows];
            for phase in 0..size[2] {
                for step in 0..size[3] {
                    let byte = phase * strides[1] + step * strides[2];
                    seen[(byte / strides[1]) as usize] += 1;
                }
            }
            let whole = rows / r * r;
            assert!(seen[..whole].iter().all(|&c| c == 1), "rows {rows} r {r}");
            assert!(seen[whole..].iter().all(|&c| c == 0), "rows {rows} r {r}");
        }
    }

    #[test]
    fn maps_match_the_kernel_parameter_layout() {
        assert_eq!(std::mem::size_of::<TensorMap>(), 128);
        assert_eq!(std::mem::align_of::<TensorPair>(), 64);
        assert_eq!(std::mem::offset_of!(TensorPair, b), 128);
        assert_eq!(std::mem::size_of::<sys::CUtensorMap>(), 128);
        let src: String = crate::kernel_source::files(crate::family::Family::Wgmma).map(|(_, text)| text).collect();
        assert!(src.contains("struct __align__(64) TensorMap {\n    unsigned long long opaque[16];\n};"));
        assert!(src.contains("struct TensorPair {  // the two tensors a launch streams: K, V (forward); Q, dO (backward)\n    TensorMap a, b;\n};"));
        assert!(src.contains("cp.async.bulk.tensor.5d"), "the kernel's boxes are 5-d, as encoded here");
        // A box row is the 128-byte swizzle span: the kernels' 64 bf16 / 32 f32 columns.
        assert_eq!((Elem::U16.box_cols(), Elem::F32.box_cols()), (64, 32));
        assert!(src.contains("cp.reduce.async.bulk.tensor.5d"));
    }
}
