//! Block-sparse attention (BigBird / Sparse Transformer family).
//!
//! The sequence is cut into blocks of `block` tokens; the last block is shorter when
//! `block` does not divide the sequence and is used like any other. Query block `a`
//! sees key block `b` when any enabled rule allows it; the rules are OR-ed, so a key
//! allowed by two rules is still counted once:
//!
//! * `local_radius = Some(w)`: `|a - b| <= w`;
//! * `dilated_stride = Some(s)`: `(a - b) mod s == 0` (every `s`-th block, both sides);
//! * `global_tokens = g`: keys `0..g` are seen by every query, and queries `0..g` see
//!   every key;
//! * `block_mask = Some(m)`: `m[a][b]` is true.

use super::{KeyRun, Pattern, push_union};
use crate::error::{Error, Result};

#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct BlockSparse {
    pub block: usize,
    #[serde(default)]
    pub local_radius: Option<usize>,
    #[serde(default)]
    pub dilated_stride: Option<usize>,
    #[serde(default)]
    pub global_tokens: usize,
    #[serde(default)]
    pub block_mask: Option<Vec<Vec<bool>>>,
}

impl BlockSparse {
    /// Only the local band of `radius` blocks on each side.
    pub fn local(block: usize, radius: usize) -> Self {
        BlockSparse { block, local_radius: Some(radius), dilated_stride: None, global_tokens: 0, block_mask: None }
    }

    /// Does the block rule keep block pair `(a, b)` (global tokens aside)?
    pub fn block_allowed(&self, a: usize, b: usize) -> bool {
        self.local_radius.is_some_and(|w| a.abs_diff(b) <= w)
            || self.dilated_stride.is_some_and(|s| a.abs_diff(b) % s == 0)
            || self.block_mask.as_ref().is_some_and(|m| m[a][b])
    }
}

impl Pattern for BlockSparse {
    fn validate(&self, _heads: usize, seq_len: usize) -> Result<()> {
        if self.block == 0 {
            return Err(Error::ZeroParameter { pattern: "block_sparse", parameter: "block" });
        }
        if self.dilated_stride == Some(0) {
            return Err(Error::ZeroParameter { pattern: "block_sparse", parameter: "dilated_stride" });
        }
        if let Some(mask) = &self.block_mask {
            let needed = seq_len.div_ceil(self.block);
            let cols = mask.iter().map(Vec::len).min().unwrap_or(0);
            if mask.len() < needed || cols < needed {
                return Err(Error::BlockMaskTooSmall { blocks_needed: needed, rows: mask.len(), cols });
            }
        }
        Ok(())
    }

    fn key_runs(&self, query: usize, _head: usize, _heads: usize, seq_len: usize, out: &mut Vec<KeyRun>) {
        if query < self.global_tokens {
            out.push(KeyRun::range(0, seq_len));
            return;
        }
        let a = query / self.block;
        let mut ranges = vec![(0, self.global_tokens.min(seq_len))];
        ranges.extend(
            (0..seq_len.div_ceil(self.block))
                .filter(|&b| self.block_allowed(a, b))
                .map(|b| (b * self.block, ((b + 1) * self.block).min(seq_len))),
        );
        push_union(ranges, out);
    }
}
