//! Attention patterns: the single answer to "which keys may query `i` of head `h` see".
//!
//! Every attention routine in ringdil (full, chunked, ring, GPU) asks a [`Pattern`] and
//! nothing else, so a pattern is defined once. A pattern answers with a list of
//! [`KeyRun`]s: arithmetic progressions of *global* key positions. Runs may overlap; a
//! key covered by `m` runs has **multiplicity** `m`, meaning it enters the softmax `m`
//! times:
//!
//! ```text
//!   out_i = sum_j c_ij exp(s_ij) v_j / sum_j c_ij exp(s_ij),   s_ij = scale * q_i . k_j
//! ```
//!
//! with `c_ij` the multiplicity. Boolean masks are the case `c_ij in {0, 1}`. Counts are
//! what LongNet's softmax-denominator combine computes when two branches share a key
//! (see [`dilated`]), so they are part of the semantics, not an accident.
//!
//! Causality and key padding are not patterns; they are applied on top of any pattern by
//! [`crate::Spec`].
//!
//! # Adding a pattern
//! Write one file in this folder with a struct, implement [`Pattern`] for it (a
//! `validate` that names bad values, and `key_runs`), and export it here. Nothing else
//! in the crate changes: the blocked engine, the merge and the backward pass only ever
//! see key runs.

pub mod block_sparse;
pub mod dense;
pub mod dilated;
pub mod explicit;
pub mod expr;
pub mod in_documents;
pub mod window;

pub use block_sparse::BlockSparse;
pub use dense::Dense;
pub use dilated::{Branch, Combine, Dilated, Offset};
pub use explicit::Explicit;
pub use expr::{ExprBranch, ExprCombine, ExprDilated, ExprPattern};
pub use in_documents::InDocuments;
pub use window::SlidingWindow;

use crate::error::Result;
use std::fmt::Debug;

/// The global key positions `start, start + step, ...` below `end`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct KeyRun {
    pub start: usize,
    pub end: usize,
    pub step: usize,
}

impl KeyRun {
    /// A contiguous run `start..end`.
    pub fn range(start: usize, end: usize) -> Self {
        KeyRun { start, end, step: 1 }
    }

    /// The keys of the run that are also below `limit`.
    pub fn clipped(self, limit: usize) -> KeyRun {
        KeyRun { end: self.end.min(limit), ..self }
    }

    /// The positions in the run, ascending.
    pub fn iter(self) -> impl Iterator<Item = usize> {
        (self.start..self.end.max(self.start)).step_by(self.step.max(1))
    }

    /// How many positions the run holds.
    pub fn len(self) -> usize {
        if self.end <= self.start { 0 } else { (self.end - self.start).div_ceil(self.step.max(1)) }
    }

    pub fn is_empty(self) -> bool {
        self.len() == 0
    }
}

/// Which keys each query may see. See the module docs for the semantics of overlapping
/// runs.
pub trait Pattern: Debug + Send + Sync {
    /// Reject parameters that make no sense for `heads` heads, naming the bad value.
    /// Called once per attention call, before any work.
    fn validate(&self, heads: usize, seq_len: usize) -> Result<()>;

    /// Append to `out` the runs of keys that query `query` of head `head` (of `heads`)
    /// sees in a sequence of `seq_len` tokens. All positions are global and below
    /// `seq_len`. Causality and padding are applied by the caller; a pattern need not
    /// (but may) clip to `key <= query`.
    fn key_runs(&self, query: usize, head: usize, heads: usize, seq_len: usize, out: &mut Vec<KeyRun>);

    /// Factor applied to the normalised output of `head` after all keys are merged.
    /// 1 for every pattern except the head-group combine of the PyTorch LongNet ports,
    /// which divides each head's output by the number of groups.
    fn output_scale(&self, _head: usize, _heads: usize) -> f64 {
        1.0
    }
}

/// The multiplicity of every key for one query: a dense vector of length `seq_len`.
/// Slow (O(seq_len)) and only meant for tests, snapshots and pictures.
pub fn key_counts(pattern: &dyn Pattern, query: usize, head: usize, heads: usize, seq_len: usize) -> Vec<u32> {
    let mut runs = Vec::new();
    pattern.key_runs(query, head, heads, seq_len, &mut runs);
    let mut counts = vec![0u32; seq_len];
    for run in runs {
        for key in run.iter() {
            counts[key] += 1;
        }
    }
    counts
}

/// Merge sorted-or-not half-open ranges into disjoint contiguous runs, so that a key
/// allowed by several rules of one boolean pattern is still counted once.
pub(crate) fn push_union(mut ranges: Vec<(usize, usize)>, out: &mut Vec<KeyRun>) {
    ranges.retain(|&(a, b)| a < b);
    ranges.sort_unstable();
    let mut current: Option<(usize, usize)> = None;
    for (a, b) in ranges {
        current = match current {
            Some((ca, cb)) if a <= cb => Some((ca, cb.max(b))),
            Some((ca, cb)) => {
                out.push(KeyRun::range(ca, cb));
                Some((a, b))
            }
            None => Some((a, b)),
        };
    }
    if let Some((a, b)) = current {
        out.push(KeyRun::range(a, b));
    }
}
