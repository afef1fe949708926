//! A pattern seen through a slice of heads, for ranks that hold only some heads
//! (Ulysses, or a plan that ships each head's rows separately).
//!
//! A dilated branch picks its offset from the head *index* (`o(h) = h mod r`, ...), so a
//! rank computing heads `first..first + m` of `H` must ask the pattern about head
//! `first + j` of `H`, not head `j` of `m`. This wrapper does exactly that, so the
//! single-device engine can run on a head slice unchanged.

use crate::error::Result;
use crate::pattern::{KeyRun, Pattern};
use crate::spec::Spec;
use std::ops::Range;
use std::sync::Arc;

#[derive(Debug)]
struct HeadSlice {
    inner: Arc<dyn Pattern>,
    first: usize,
    heads: usize,
}

impl Pattern for HeadSlice {
    fn validate(&self, _heads: usize, seq_len: usize) -> Result<()> {
        self.inner.validate(self.heads, seq_len)
    }

    fn key_runs(&self, query: usize, head: usize, _heads: usize, seq_len: usize, out: &mut Vec<KeyRun>) {
        self.inner.key_runs(query, self.first + head, self.heads, seq_len, out);
    }

    fn output_scale(&self, head: usize, _heads: usize) -> f64 {
        self.inner.output_scale(self.first + head, self.heads)
    }
}

/// `spec` restricted to `heads` of `total` heads: head `j` of the slice is head
/// `heads.start + j` of the whole.
pub(crate) fn head_slice(spec: &Spec, heads: &Range<usize>, total: usize) -> Spec {
    if heads.start == 0 && heads.end == total {
        return spec.clone();
    }
    let pattern = Arc::new(HeadSlice { inner: spec.pattern.clone(), first: heads.start, heads: total });
    Spec { pattern, ..spec.clone() }
}
