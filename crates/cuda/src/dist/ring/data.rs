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
    /// `q` is `[batch, seq, heads, head_dim]`, `k` `[batch, seq, kv_heads, head_dim]` and
    /// `v` `[batch, seq, kv_heads, value_dim]`.
    pub fn upload(gpu: &Gpu, plan: &DistPlan, rank: usize, q: &[u16], k: &[u16], v: &[u16]) -> DistResult<Self> {
        Ok(RankData {
            q: upload_side(gpu, plan, rank, q, Side::Query)?,
            k: upload_side(gpu, plan, rank, k, Side::Key)?,
            v: upload_side(gpu, plan, rank, v, Side::Value)?,
        })
    }
}

/// Which heads and width a tensor has: q's `heads` at `head_dim`, d_out's `heads` at
/// `value_dim`, k's `kv_heads` at `head_dim`, v's `kv_heads` at `value_dim`.
#[derive(Clone, Copy)]
enum Side {
    Query,
    Out,
    Key,
    Value,
}

/// Upload the upstream gradient `[batch, seq, heads, value_dim]` (global token order) as
/// the pieces of `rank`.
pub fn upload_dout(gpu: &Gpu, plan: &DistPlan, rank: usize, x: &[u16]) -> DistResult<Vec<DeviceTensor>> {
    upload_side(gpu, plan, rank, x, Side::Out)
}

fn upload_side(gpu: &Gpu, plan: &DistPlan, rank: usize, x: &[u16], side: Side) -> DistResult<Vec<DeviceTensor>> {
    let (what, heads, width) = match side {
        Side::Query => ("host q tensor", plan.heads, plan.head_dim),
        Side::Out => ("host d_out tensor", plan.heads, plan.value_dim),
        Side::Key => ("host k tensor", plan.kv_heads, plan.head_dim),
        Side::Value => ("host v tensor", plan.kv_heads, plan.value_dim),
    };
    let want = plan.batch * plan.seq_len() * heads * width;
    if x.len() != want {
        return Err(DistError::ShapeMismatch { what, expected: vec![want], got: vec![x.len()] });
    }
    let pieces = plan.scatter_heads(x, heads, width, rank);
    pieces.iter().enumerate().map(|(i, p)| Ok(gpu.upload(p, plan.dims_at(rank, i, heads, width))?)).collect()
}

/// dQ of this rank's query pieces and dK, dV of its key pieces (f32).
pub struct RankGrads {
    pub dq: Vec<CudaSlice<f32>>,
    pub dk: Vec<CudaSlice<f32>>,
    pub dv: Vec<CudaSlice<f32>>,
}
