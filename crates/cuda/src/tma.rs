//! Tensor maps for Hopper's TMA unit (tensor memory accelerator): the wgmma forward's
//! producer copies each K / V tile with a few bulk "box" copies described by these maps,
//! instead of one 16-byte `cp.async` per thread and row (which, issued by the producer
//! warpgroup, halved the kernel's speed at d = 128; docs/benchmarks/gpu-bench.md, v8).
//!
//! A `[batch, rows, heads, head_dim]` tensor of 16-bit values is described to the TMA as a
//! 4-d tensor with dimensions (head_dim, heads, rows, batch), innermost first, and read in
//! boxes of 64 x 1 x [`TILE`] x 1: one head's 64 head dims (128 bytes) of TILE consecutive
//! rows, written to shared memory with the 128-byte swizzle, which is the kernel's
//! `swz_blocks` layout. Rows past the tensor read as zeros.

use crate::error::{CudaError, Result};
use crate::plan::TILE;
use cudarc::driver::DriverError;
use cudarc::driver::sys::{
    self, CUtensorMapDataType, CUtensorMapFloatOOBfill, CUtensorMapInterleave, CUtensorMapL2promotion,
    CUtensorMapSwizzle,
};

/// Head dims per box: 128 bytes of 16-bit values, the span of the 128-byte swizzle.
pub const BOX_COLS: usize = 64;

/// One encoded `CUtensorMap` (opaque, 128 bytes), laid out as the kernel's `TensorMap`.
#[repr(C, align(64))]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TensorMap {
    opaque: [u64; 16],
}

/// The kernel's `KvMaps` parameter: the maps of K and V.
#[repr(C, align(64))]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KvMaps {
    pub k: TensorMap,
    pub v: TensorMap,
}

// SAFETY: plain bytes, passed by value as a kernel parameter of the same layout.
unsafe impl cudarc::driver::DeviceRepr for KvMaps {}

impl KvMaps {
    /// Maps of a launch that does not use the TMA (compact dilated branches gather their
    /// rows with cp.async): zeros, never read by the kernel.
    pub fn unused() -> Self {
        KvMaps { k: TensorMap { opaque: [0; 16] }, v: TensorMap { opaque: [0; 16] } }
    }

    /// Maps of the k and v tensors at device addresses `k`, `v`, both `dims` =
    /// `[batch, rows, heads, head_dim]`.
    pub fn new(k: sys::CUdeviceptr, v: sys::CUdeviceptr, dims: [usize; 4]) -> Result<Self> {
        Ok(KvMaps { k: encode(k, dims)?, v: encode(v, dims)? })
    }
}

/// (sizes innermost first, byte strides of dimensions 1..4) of a `[batch, rows, heads,
/// head_dim]` 16-bit tensor, as `cuTensorMapEncodeTiled` takes them.
pub fn geometry([batch, rows, heads, head_dim]: [usize; 4]) -> ([u64; 4], [u64; 3]) {
    let row = (heads * head_dim * 2) as u64;
    ([head_dim as u64, heads as u64, rows as u64, batch as u64], [(head_dim * 2) as u64, row, row * rows as u64])
}

fn encode(ptr: sys::CUdeviceptr, dims: [usize; 4]) -> Result<TensorMap> {
    let (size, strides) = geometry(dims);
    let boxed: [u32; 4] = [BOX_COLS as u32, 1, TILE as u32, 1];
    let step: [u32; 4] = [1; 4];
    let mut map = std::mem::MaybeUninit::<sys::CUtensorMap>::zeroed();
    // SAFETY: every array has the rank's length (4; 3 strides); the driver only writes the
    // 128-byte map. The address is a live device allocation of the given geometry.
    unsafe {
        sys::cuTensorMapEncodeTiled(
            map.as_mut_ptr(),
            CUtensorMapDataType::CU_TENSOR_MAP_DATA_TYPE_UINT16,
            4,
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
        .map_err(|e: DriverError| CudaError::Driver(e))?;
        Ok(TensorMap { opaque: map.assume_init().opaque })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn geometry_is_head_dim_heads_rows_batch() {
        let (size, strides) = geometry([2, 1000, 3, 128]);
        assert_eq!(size, [128, 3, 1000, 2]);
        // Next head: 256 bytes; next row: 3 heads; next batch row: 1000 rows.
        assert_eq!(strides, [256, 768, 768_000]);
        // The TMA needs 16-byte multiples: true for every head dim the kernels take.
        for d in [64, 128] {
            assert!(geometry([1, 7, 5, d]).1.iter().all(|s| s % 16 == 0));
        }
    }

    #[test]
    fn maps_match_the_kernel_parameter_layout() {
        assert_eq!(std::mem::size_of::<TensorMap>(), 128);
        assert_eq!(std::mem::align_of::<KvMaps>(), 64);
        assert_eq!(std::mem::offset_of!(KvMaps, v), 128);
        assert_eq!(std::mem::size_of::<sys::CUtensorMap>(), 128);
        let src = crate::KERNEL_SOURCE;
        assert!(src.contains("struct __align__(64) TensorMap {\n    unsigned long long opaque[16];\n};"));
        assert!(src.contains("struct KvMaps {\n    TensorMap k, v;\n};"));
        assert_eq!(BOX_COLS * 2, 128, "a box row is the 128-byte swizzle span");
    }
}
