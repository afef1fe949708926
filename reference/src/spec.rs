//! What attention to compute: pattern, causality, key padding and softmax scale.

use crate::error::{Error, Result};
use crate::pattern::{Dense, Pattern};
use std::sync::Arc;

/// Everything but the tensors. Cheap to clone (the pattern is shared).
///
/// The keys that query `i` (global position) of batch row `b` and head `h` sees are
/// the pattern's key runs, then
/// * if `causal`: only keys `j <= i`;
/// * if `key_lengths` is set: only keys `j < key_lengths[b]` (key padding).
///
/// `scale` defaults to `1 / sqrt(head_dim)`.
#[derive(Debug, Clone)]
pub struct Spec {
    pub pattern: Arc<dyn Pattern>,
    pub causal: bool,
    pub key_lengths: Option<Vec<usize>>,
    pub scale: Option<f64>,
}

impl Default for Spec {
    fn default() -> Self {
        Spec::new(Dense)
    }
}

impl Spec {
    /// Non-causal attention under `pattern`, no padding, default scale.
    pub fn new(pattern: impl Pattern + 'static) -> Self {
        Spec { pattern: Arc::new(pattern), causal: false, key_lengths: None, scale: None }
    }

    /// Plain dense attention.
    pub fn dense() -> Self {
        Self::default()
    }

    pub fn causal(mut self, causal: bool) -> Self {
        self.causal = causal;
        self
    }

    pub fn key_lengths(mut self, lengths: Vec<usize>) -> Self {
        self.key_lengths = Some(lengths);
        self
    }

    pub fn scale(mut self, scale: f64) -> Self {
        self.scale = Some(scale);
        self
    }

    /// The softmax scale for `head_dim`.
    pub fn scale_for(&self, head_dim: usize) -> f64 {
        self.scale.unwrap_or(1.0 / (head_dim as f64).sqrt())
    }

    /// Keys of batch row `batch` must lie below this limit (padding), before causality.
    pub fn key_limit(&self, batch: usize, seq_len: usize) -> usize {
        self.key_lengths.as_ref().map_or(seq_len, |l| l[batch])
    }

    /// Check the spec for tensors of `batch` rows, `heads` heads, `seq_len` tokens.
    pub fn validate(&self, batch: usize, heads: usize, seq_len: usize) -> Result<()> {
        if let Some(scale) = self.scale
            && !(scale.is_finite() && scale > 0.0)
        {
            return Err(Error::BadScale { scale });
        }
        if let Some(lengths) = &self.key_lengths {
            if lengths.len() != batch {
                return Err(Error::ShapeMismatch {
                    what: "key_lengths",
                    expected: vec![batch],
                    got: vec![lengths.len()],
                });
            }
            if let Some((b, &length)) = lengths.iter().enumerate().find(|&(_, &l)| l > seq_len) {
                return Err(Error::KeyPaddingTooLong { batch: b, length, seq: seq_len });
            }
        }
        self.pattern.validate(heads, seq_len)
    }
}
