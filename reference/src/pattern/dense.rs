//! Dense attention: every query sees every key (before causality and padding).

use super::{KeyRun, Pattern};
use crate::error::Result;

/// All keys `0..seq_len`, multiplicity 1.
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Dense;

impl Pattern for Dense {
    fn validate(&self, _heads: usize, _seq_len: usize) -> Result<()> {
        Ok(())
    }

    fn key_runs(&self, _query: usize, _head: usize, _heads: usize, seq_len: usize, out: &mut Vec<KeyRun>) {
        out.push(KeyRun::range(0, seq_len));
    }
}
