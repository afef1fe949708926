//! A pattern applied inside the documents of one packed row, as a pattern of its own.
//!
//! [`crate::Spec::documents`] applies a pattern per document (`docs/semantics.md`,
//! section 16): query `i` in document `[s, e)` sees the keys the pattern gives position
//! `i - s` of a sequence of `e - s` tokens, shifted by `s`. [`InDocuments`] is that rule
//! for one boundary list, as a [`Pattern`] over the whole row: so whatever runs any
//! pattern (the GPU's mask tables, which know no batch row) runs a packed row with any
//! pattern, LongNet segments and sparse blocks aligned to each document's start.
//!
//! ```
//! use ringdil_reference::pattern::{Dilated, InDocuments, Pattern, key_counts};
//! // Documents 0..5 and 5..12; LongNet (4, 1): segments 0..4, 4..5 | 5..9, 9..12.
//! let p = InDocuments::new(Dilated::longnet(&[(4, 1)]), vec![0, 5, 12]);
//! assert_eq!(key_counts(&p, 6, 0, 1, 12), [0, 0, 0, 0, 0, 1, 1, 1, 1, 0, 0, 0]);
//! assert_eq!(key_counts(&p, 4, 0, 1, 12), [0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0]);
//! ```

use super::{KeyRun, Pattern};
use crate::documents::{Documents, document_runs};
use crate::error::Result;
use std::fmt;
use std::sync::Arc;

/// `pattern` inside each document of the boundary list `boundaries` (`0 = c_0 <= ... <=
/// c_m = seq_len`). See the module docs.
#[derive(Clone)]
pub struct InDocuments {
    pattern: Arc<dyn Pattern>,
    boundaries: Vec<usize>,
}

impl InDocuments {
    pub fn new(pattern: impl Pattern + 'static, boundaries: Vec<usize>) -> Self {
        Self::shared(Arc::new(pattern), boundaries)
    }

    /// [`InDocuments::new`] of a pattern already shared.
    pub fn shared(pattern: Arc<dyn Pattern>, boundaries: Vec<usize>) -> Self {
        InDocuments { pattern, boundaries }
    }

    /// The boundary list.
    pub fn boundaries(&self) -> &[usize] {
        &self.boundaries
    }

    fn documents(&self) -> Documents {
        Documents::per_row(vec![self.boundaries.clone()])
    }
}

impl fmt::Debug for InDocuments {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "InDocuments({:?}, boundaries {:?})", self.pattern, self.boundaries)
    }
}

impl Pattern for InDocuments {
    /// The boundaries for one row of `seq_len` tokens (the errors of
    /// [`Documents::validate`], naming the value), then the pattern for every document
    /// length, as [`crate::Spec::validate`] checks a spec with documents.
    fn validate(&self, heads: usize, seq_len: usize) -> Result<()> {
        let documents = self.documents();
        documents.validate(1, seq_len)?;
        documents.lengths(seq_len).into_iter().try_for_each(|n| self.pattern.validate(heads, n))
    }

    fn key_runs(&self, query: usize, head: usize, heads: usize, seq_len: usize, out: &mut Vec<KeyRun>) {
        let doc = self.documents().document(0, query, seq_len);
        document_runs(self.pattern.as_ref(), doc, query, head, heads, out);
    }

    fn output_scale(&self, head: usize, heads: usize) -> f64 {
        self.pattern.output_scale(head, heads)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pattern::{BlockSparse, Dilated, key_counts};

    /// Every query's key counts against the rule transcribed directly: inside the query's
    /// document `[s, e)`, the pattern's counts for position `i - s` of `e - s` tokens,
    /// shifted by `s`; zero elsewhere.
    fn same_as_rule(pattern: impl Pattern + Clone + 'static, boundaries: Vec<usize>, heads: usize) {
        let n = *boundaries.last().unwrap();
        let p = InDocuments::new(pattern.clone(), boundaries.clone());
        p.validate(heads, n).unwrap();
        for w in boundaries.windows(2) {
            let (s, e) = (w[0], w[1]);
            for h in 0..heads {
                for i in s..e {
                    let mut expected = vec![0u32; n];
                    expected[s..e].copy_from_slice(&key_counts(&pattern, i - s, h, heads, e - s));
                    assert_eq!(key_counts(&p, i, h, heads, n), expected, "query {i} head {h}");
                }
            }
        }
    }

    #[test]
    fn applies_the_pattern_per_document() {
        same_as_rule(Dilated::longnet(&[(4, 1), (8, 2), (16, 4)]), vec![0, 3, 3, 14, 15, 40], 4);
        same_as_rule(BlockSparse::local(4, 1), vec![0, 9, 10, 31], 2);
    }

    #[test]
    fn bad_boundaries_are_the_documents_errors() {
        let p = InDocuments::new(Dilated::longnet(&[(4, 1)]), vec![0, 5, 9]);
        let e = p.validate(1, 12).unwrap_err().to_string();
        assert_eq!(e, Documents::per_row(vec![vec![0, 5, 9]]).validate(1, 12).unwrap_err().to_string());
        assert!(e.contains('9'), "{e}");
    }
}
