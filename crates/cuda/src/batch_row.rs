//! A launch over one batch row of a call: compact launches over the documents of rows
//! packed differently (`crate::spec_documents`) each cover one row, so the kernels see a batch
//! of 1 and every per-row buffer of the call is passed from that row on. The kernels
//! index a tensor `[batch, rows, heads, dim]` as `((b * rows + i) * heads + h) * dim` and
//! the row statistics `[batch, heads, rows]` as `(b * heads + h) * rows + i`, so with
//! `b = 0` a buffer starting `B * rows * heads * dim` elements later is row `B`'s.

use crate::launch::LaunchSpec;
use crate::shape::Shape;

/// Elements before a launch's batch row in each of the call's per-row buffers (all zero
/// for a launch over every row), and the tensors' dims as the launch sees them.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct RowElements {
    /// q and dQ: `b * q_rows * heads * head_dim`.
    pub q: usize,
    /// k and dK: `b * k_rows * kv_heads * head_dim`.
    pub k: usize,
    /// v and dV: `b * k_rows * kv_heads * value_dim`.
    pub v: usize,
    /// The output and dO: `b * q_rows * heads * value_dim`.
    pub out: usize,
    /// LSE, delta, lse2: `b * heads * q_rows`.
    pub lse: usize,
    /// Key lengths: `b`.
    pub row: usize,
    /// Whether the launch covers one row (tensor maps then see a batch of 1).
    pub single: bool,
}

impl RowElements {
    /// `dims` (`[batch, rows, heads, dim]`) as the launch sees them.
    pub fn dims(&self, dims: [usize; 4]) -> [usize; 4] {
        if self.single { [1, dims[1], dims[2], dims[3]] } else { dims }
    }
}

impl LaunchSpec {
    /// Where this launch's batch row starts in the buffers of a call of `shape`.
    pub fn row_elements(&self, shape: &Shape) -> RowElements {
        let Some(b) = self.batch_row else { return RowElements::default() };
        RowElements {
            q: b * shape.q_rows * shape.heads * shape.head_dim,
            k: b * shape.k_rows * shape.kv_heads * shape.head_dim,
            v: b * shape.k_rows * shape.kv_heads * shape.value_dim,
            out: b * shape.q_rows * shape.heads * shape.value_dim,
            lse: b * shape.heads * shape.q_rows,
            row: b,
            single: true,
        }
    }
}
