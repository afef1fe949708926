//! Sliding-window (local) attention.

use super::{KeyRun, Pattern};
use crate::error::Result;

/// Query `i` sees keys `i - left ..= i + right`, clipped to the sequence.
/// With [`crate::Spec::causal`] the right side is cut away, which gives the usual causal
/// window of `left + 1` keys (Longformer / Mistral style).
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct SlidingWindow {
    pub left: usize,
    pub right: usize,
}

impl Pattern for SlidingWindow {
    fn validate(&self, _heads: usize, _seq_len: usize) -> Result<()> {
        Ok(())
    }

    fn key_runs(&self, query: usize, _head: usize, _heads: usize, seq_len: usize, out: &mut Vec<KeyRun>) {
        let start = query.saturating_sub(self.left);
        let end = query.saturating_add(self.right).saturating_add(1).min(seq_len);
        out.push(KeyRun::range(start, end));
    }
}
