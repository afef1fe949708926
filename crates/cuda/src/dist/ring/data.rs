//! What a rank holds: its query, key and value pieces on the device (uploaded from host
//! tensors in global token order) and the f32 gradients of those pieces.

use crate::dist::error::{DistError, DistResult};
use crate::dist::layout::DistPlan;
use crate::gpu::Gpu;
use crate::tensors::DeviceTensor;
use cudarc::driver::CudaSlice;

/// A rank's inputs, one device tensor per piece (see [`DistPlan::scatter`]).
pub struct RankData {
    pub q: Vec<DeviceTensor>,
    pub k: Vec<DeviceTensor>,
    pub v: Vec<DeviceTensor>,
}

impl RankData {
    /// Upload the pieces of `rank` from host tensors in global token order.
    pub fn upload(gpu: &Gpu, plan: &DistPlan, rank: usize, q: &[u16], k: &[u16], v: &[u16]) -> DistResult<Self> {
        Ok(RankData {
            q: upload_pieces(gpu, plan, rank, q)?,
            k: upload_pieces(gpu, plan, rank, k)?,
            v: upload_pieces(gpu, plan, rank, v)?,
        })
    }
}

/// Upload one `[batch, seq, heads, head_dim]` host tensor's pieces of `rank`.
pub fn upload_pieces(gpu: &Gpu, plan: &DistPlan, rank: usize, x: &[u16]) -> DistResult<Vec<DeviceTensor>> {
    let want = plan.batch * plan.seq_len() * plan.heads * plan.head_dim;
    if x.len() != want {
        return Err(DistError::ShapeMismatch { what: "host tensor", expected: vec![want], got: vec![x.len()] });
    }
    plan.scatter(x, plan.head_dim, rank)
        .iter()
        .enumerate()
        .map(|(i, p)| Ok(gpu.upload(p, plan.piece_dims(rank, i))?))
        .collect()
}

/// dQ of this rank's query pieces and dK, dV of its key pieces (f32).
pub struct RankGrads {
    pub dq: Vec<CudaSlice<f32>>,
    pub dk: Vec<CudaSlice<f32>>,
    pub dv: Vec<CudaSlice<f32>>,
}
