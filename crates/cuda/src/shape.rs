//! A call's sizes and placement: element type, tensor shapes, and where the rows sit in
//! the global sequence.

use crate::plan::Axis;

/// Element type of q, k, v and d_out (accumulation and outputs are f32).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
pub enum Dtype {
    Bf16,
    F16,
}

/// Tensor sizes of one call: q is `[batch, q_rows, heads, head_dim]`, k `[batch, k_rows,
/// kv_heads, head_dim]`, v `[batch, k_rows, kv_heads, value_dim]`, d_out and out `[batch,
/// q_rows, heads, value_dim]` (`value_dim = head_dim` but for MLA-style pairs such as
/// 192 / 128: [`crate::Family::value_dim_pairs`]; the softmax scale stays `1 / sqrt(head_dim)`).
///
/// Grouped-query attention (`docs/semantics.md`, section 15): `kv_heads` divides `heads`,
/// and query head `h` reads K/V head `h / (heads / kv_heads)`; multi-head attention is
/// `kv_heads = heads`, multi-query `kv_heads = 1`. The kernels read K/V at `kv_heads`
/// (no replication) and add the group's dK/dV contributions into the K/V head's rows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Shape {
    pub batch: usize,
    pub heads: usize,
    pub kv_heads: usize,
    pub head_dim: usize,
    pub value_dim: usize,
    pub q_rows: usize,
    pub k_rows: usize,
}

impl Shape {
    /// Self-attention over a whole sequence.
    pub fn square(batch: usize, seq: usize, heads: usize, head_dim: usize) -> Self {
        Shape { batch, heads, kv_heads: heads, head_dim, value_dim: head_dim, q_rows: seq, k_rows: seq }
    }

    /// The same sizes with v's head dim `value_dim`.
    pub fn with_value_dim(self, value_dim: usize) -> Self {
        Shape { value_dim, ..self }
    }

    /// The same sizes with `kv_heads` K/V heads (grouped-query attention).
    pub fn with_kv_heads(self, kv_heads: usize) -> Self {
        Shape { kv_heads, ..self }
    }

    /// Query heads per K/V head (1 without grouping); `kv_heads` must divide `heads`
    /// (`launch::validate` checks it).
    pub fn kv_group(&self) -> usize {
        self.heads / self.kv_heads.max(1)
    }

    /// `[batch, q_rows, heads, head_dim]`: q and dQ.
    pub fn q_dims(&self) -> [usize; 4] {
        [self.batch, self.q_rows, self.heads, self.head_dim]
    }

    /// `[batch, k_rows, kv_heads, head_dim]`: k and dK.
    pub fn k_dims(&self) -> [usize; 4] {
        [self.batch, self.k_rows, self.kv_heads, self.head_dim]
    }

    /// `[batch, k_rows, kv_heads, value_dim]`: v and dV.
    pub fn v_dims(&self) -> [usize; 4] {
        [self.batch, self.k_rows, self.kv_heads, self.value_dim]
    }

    /// `[batch, q_rows, heads, value_dim]`: the output and d_out.
    pub fn out_dims(&self) -> [usize; 4] {
        [self.batch, self.q_rows, self.heads, self.value_dim]
    }

    pub fn q_len(&self) -> usize {
        self.batch * self.q_rows * self.heads * self.head_dim
    }

    pub fn k_len(&self) -> usize {
        self.batch * self.k_rows * self.kv_heads * self.head_dim
    }

    pub fn v_len(&self) -> usize {
        self.batch * self.k_rows * self.kv_heads * self.value_dim
    }

    pub fn out_len(&self) -> usize {
        self.batch * self.q_rows * self.heads * self.value_dim
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
///
/// Heads are placed the same way: query head `h` of the tensors is head `first_head + h`
/// of the `all_heads` heads the pattern is defined on (`None`: the tensors hold every
/// head). A rank of head-parallel attention (Ulysses) holds a slice of the heads, and a
/// dilated branch's offset is a function of the *global* head index.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Chunk {
    pub q_offset: usize,
    pub k_offset: usize,
    pub seq_len: usize,
    pub q_stride: usize,
    pub k_stride: usize,
    pub first_head: usize,
    pub all_heads: Option<usize>,
}

impl Chunk {
    /// Contiguous query and key rows from the given offsets.
    pub fn new(q_offset: usize, k_offset: usize, seq_len: usize) -> Self {
        Chunk { q_offset, k_offset, seq_len, q_stride: 1, k_stride: 1, first_head: 0, all_heads: None }
    }

    /// This chunk for the query heads `first..first + m` of `all` (the tensors' `m` heads).
    pub fn heads_of(self, first: usize, all: usize) -> Self {
        Chunk { first_head: first, all_heads: Some(all), ..self }
    }

    /// The number of heads the pattern is defined on, for tensors of `heads` heads.
    pub fn pattern_heads(&self, heads: usize) -> usize {
        self.all_heads.unwrap_or(heads)
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
