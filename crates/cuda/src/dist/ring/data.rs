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
    /// `q` is `[batch, seq, heads, head_dim]`, `k` and `v` `[batch, seq, kv_heads, head_dim]`.
    pub fn upload(gpu: &Gpu, plan: &DistPlan, rank: usize, q: &[u16], k: &[u16], v: &[u16]) -> DistResult<Self> {
        Ok(RankData {
            q: upload_pieces(gpu, plan, rank, q)?,
            k: upload_side(gpu, plan, rank, k, Side::Kv)?,
            v: upload_side(gpu, plan, rank, v, Side::Kv)?,
        })
    }
}

/// Which heads a tensor has: the query side's `heads` or the K/V side's `kv_heads`.
#[derive(Clone, Copy)]
enum Side {
    Query,
    Kv,
}

/// Upload one query-side `[batch, seq, heads, head_dim]` host tensor's pieces of `rank`
/// (q, d_out).
pub fn upload_pieces(gpu: &Gpu, plan: &DistPlan, rank: usize, x: &[u16]) -> DistResult<Vec<DeviceTensor>> {
    upload_side(gpu, plan, rank, x, Side::Query)
}

fn upload_side(gpu: &Gpu, plan: &DistPlan, rank: usize, x: &[u16], side: Side) -> DistResult<Vec<DeviceTensor>> {
    let (what, heads) = match side {
        Side::Query => ("host tensor", plan.heads),
        Side::Kv => ("host K/V tensor", plan.kv_heads),
    };
    let want = plan.batch * plan.seq_len() * heads * plan.head_dim;
    if x.len() != want {
        return Err(DistError::ShapeMismatch { what, expected: vec![want], got: vec![x.len()] });
    }
    let pieces = match side {
        Side::Query => plan.scatter(x, plan.head_dim, rank),
        Side::Kv => plan.scatter_kv(x, plan.head_dim, rank),
    };
    let dims = |i| match side {
        Side::Query => plan.piece_dims(rank, i),
        Side::Kv => plan.kv_piece_dims(rank, i),
    };
    pieces.iter().enumerate().map(|(i, p)| Ok(gpu.upload(p, dims(i))?)).collect()
}

/// dQ of this rank's query pieces and dK, dV of its key pieces (f32).
pub struct RankGrads {
    pub dq: Vec<CudaSlice<f32>>,
    pub dk: Vec<CudaSlice<f32>>,
    pub dv: Vec<CudaSlice<f32>>,
}
