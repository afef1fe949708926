//! An explicit per-head count mask, the most general (and slowest) pattern.
//!
//! It exists so that any other pattern can be checked against a mask written out by
//! hand, and so that users can try a pattern before writing its rule.

use super::{KeyRun, Pattern};
use crate::error::{Error, Result};
use ndarray::Array3;

/// `counts[[h, i, j]]` is the multiplicity of key `j` for query `i` of head `h`
/// (0 = masked, 1 = allowed, `m` = counted `m` times in the softmax).
#[derive(Debug, Clone, PartialEq)]
pub struct Explicit {
    pub counts: Array3<u32>,
}

impl Explicit {
    /// The mask with `counts[[h, i, j]] = count(h, i, j)` for `heads` heads of `seq_len` tokens.
    pub fn from_fn(heads: usize, seq_len: usize, count: impl Fn(usize, usize, usize) -> u32) -> Self {
        Explicit { counts: Array3::from_shape_fn((heads, seq_len, seq_len), |(h, i, j)| count(h, i, j)) }
    }
}

impl Pattern for Explicit {
    fn validate(&self, heads: usize, seq_len: usize) -> Result<()> {
        let expected = vec![heads, seq_len, seq_len];
        if self.counts.shape() != expected.as_slice() {
            return Err(Error::MaskShape { expected, got: self.counts.shape().to_vec() });
        }
        Ok(())
    }

    fn key_runs(&self, query: usize, head: usize, _heads: usize, _seq_len: usize, out: &mut Vec<KeyRun>) {
        for (key, &count) in self.counts.slice(ndarray::s![head, query, ..]).iter().enumerate() {
            for _ in 0..count {
                out.push(KeyRun::range(key, key + 1));
            }
        }
    }
}
