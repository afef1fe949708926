//! Packed variable-length sequences: documents inside a batch row (`docs/semantics.md`,
//! section 16).
//!
//! Training packs several documents into one row of `seq_len` tokens. Each batch row
//! `b` has a boundary list (flash-attention's `cu_seqlens`, per row)
//!
//! ```text
//!   c_0 = 0 <= c_1 <= ... <= c_m = seq_len
//! ```
//!
//! and document `k` is the tokens `[c_k, c_{k+1})`; equal neighbours are an empty
//! document, which is allowed. Query `i` lies in the document `D = [s, e)` with
//! `c_k <= i < c_{k+1}`; it sees key `j` iff `s <= j < e` and the pattern, applied to the
//! document *as its own sequence* of `e - s` tokens at positions `i - s`, `j - s` (same
//! head `h` of `H`), allows it; causality (`j <= i`) and key padding
//! (`j < key_lengths[b]`, absolute positions) then cut as without documents. A LongNet
//! segment (and a block-sparse block) is aligned to its document's start, and every
//! pattern sees `n = e - s`.
//!
//! [`Documents::per_row`] takes one list per batch row; [`Documents::flat`] takes one
//! list over the `batch * seq_len` tokens of the row-major concatenation of the rows,
//! with a boundary at every row start `b * seq_len`, and is split into per-row lists.
//! Both are checked by [`crate::Spec::validate`], which names the offending value.
//!
//! ```
//! use ringdil_reference::{attention, pattern::Dilated, random::normal_tensor, Documents, Spec};
//! let (q, k, v) = (normal_tensor([2, 10, 2, 4], 1), normal_tensor([2, 10, 2, 4], 2), normal_tensor([2, 10, 2, 4], 3));
//! // Row 0: documents 0..3, 3..10; row 1: 0..4, an empty one, 4..10.
//! let documents = Documents::per_row(vec![vec![0, 3, 10], vec![0, 4, 4, 10]]);
//! assert_eq!(Documents::flat(vec![0, 3, 10, 14, 14, 20]).split(10), documents.split(10));
//! let spec = Spec::new(Dilated::longnet(&[(4, 1), (8, 2)])).causal(true).documents(documents);
//! let out = attention(q.view(), k.view(), v.view(), &spec).unwrap();
//! assert_eq!(out.out.dim(), (2, 10, 2, 4));
//! ```

use crate::error::{Error, Result};
use crate::pattern::{KeyRun, Pattern};
use serde::{Deserialize, Serialize};
use std::ops::Range;

/// Document boundaries of every batch row. See the module docs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Documents {
    /// `lists[b]` is the boundary list of batch row `b`, positions `0..=seq_len`.
    PerRow(Vec<Vec<usize>>),
    /// One boundary list over the `batch * seq_len` tokens of all rows, row after row.
    Flat(Vec<usize>),
}

impl Documents {
    /// One boundary list per batch row: `c_0 = 0 <= ... <= c_m = seq_len`.
    pub fn per_row(lists: Vec<Vec<usize>>) -> Self {
        Documents::PerRow(lists)
    }

    /// One boundary list over the concatenated rows (`cu_seqlens` of a flattened batch):
    /// `0 <= ... <= batch * seq_len`, with a boundary at every row start `b * seq_len`.
    pub fn flat(boundaries: Vec<usize>) -> Self {
        Documents::Flat(boundaries)
    }

    /// Every row is one document (the same attention as no documents).
    pub fn whole(batch: usize, seq_len: usize) -> Self {
        Documents::PerRow(vec![vec![0, seq_len]; batch])
    }

    /// Check the boundaries for `batch` rows of `seq_len` tokens. Errors name the row
    /// (`None` for a flat list), the index and the values:
    /// [`Error::DocumentRows`], [`Error::DocumentStart`], [`Error::DocumentOrder`],
    /// [`Error::DocumentEnd`], [`Error::DocumentRowStart`].
    pub fn validate(&self, batch: usize, seq_len: usize) -> Result<()> {
        match self {
            Documents::PerRow(lists) => {
                if lists.len() != batch {
                    return Err(Error::DocumentRows { lists: lists.len(), batch });
                }
                lists.iter().enumerate().try_for_each(|(b, list)| check_list(Some(b), list, seq_len))
            }
            Documents::Flat(list) => {
                check_list(None, list, batch.saturating_mul(seq_len))?;
                for b in 1..batch {
                    let position = b * seq_len;
                    if list.binary_search(&position).is_err() {
                        return Err(Error::DocumentRowStart { row: b, position });
                    }
                }
                Ok(())
            }
        }
    }

    /// The number of batch rows the boundaries describe (for a flat list,
    /// `last / seq_len`). Meaningful after [`Documents::validate`].
    pub fn rows(&self, seq_len: usize) -> usize {
        match self {
            Documents::PerRow(lists) => lists.len(),
            Documents::Flat(list) => list.last().map_or(0, |&last| last.checked_div(seq_len).unwrap_or(0)),
        }
    }

    /// The boundary list of batch row `batch` (positions `0..=seq_len` of that row).
    /// For a valid value. A flat list's row `b` is `0`, its boundaries strictly inside
    /// `(b seq_len, (b + 1) seq_len)` shifted by `-b seq_len`, and `seq_len`: repeats of a
    /// row start (empty documents between rows, which hold no token) are dropped.
    pub fn row(&self, batch: usize, seq_len: usize) -> Vec<usize> {
        match self {
            Documents::PerRow(lists) => lists[batch].clone(),
            Documents::Flat(list) => {
                let (lo, hi) = (batch * seq_len, (batch + 1) * seq_len);
                let mut row = vec![0];
                row.extend(list.iter().filter(|&&c| lo < c && c < hi).map(|&c| c - lo));
                row.push(seq_len);
                row
            }
        }
    }

    /// The boundary lists of all `rows(seq_len)` rows.
    pub fn split(&self, seq_len: usize) -> Vec<Vec<usize>> {
        (0..self.rows(seq_len)).map(|b| self.row(b, seq_len)).collect()
    }

    /// The document `[s, e)` of batch row `batch` that holds `position` (`c_k <= position
    /// < c_{k+1}`). For a valid value and `position < seq_len`.
    pub fn document(&self, batch: usize, position: usize, seq_len: usize) -> Range<usize> {
        let (list, offset) = match self {
            Documents::PerRow(lists) => (lists[batch].as_slice(), 0),
            Documents::Flat(list) => (list.as_slice(), batch * seq_len),
        };
        let at = offset + position;
        let k = list.partition_point(|&c| c <= at);
        (list[k - 1] - offset)..(list[k] - offset)
    }

    /// The distinct lengths of the non-empty documents of all rows, ascending: the
    /// sequence lengths the pattern is applied to (and validated for).
    pub fn lengths(&self, seq_len: usize) -> Vec<usize> {
        let list_lengths = |list: &[usize]| list.windows(2).map(|w| w[1].saturating_sub(w[0])).collect::<Vec<_>>();
        let mut lengths: Vec<usize> = match self {
            Documents::PerRow(lists) => lists.iter().flat_map(|l| list_lengths(l)).collect(),
            Documents::Flat(list) => list_lengths(list),
        };
        lengths.retain(|&l| l > 0 && l <= seq_len);
        lengths.sort_unstable();
        lengths.dedup();
        lengths
    }
}

/// One boundary list from 0 to `end`.
fn check_list(row: Option<usize>, list: &[usize], end: usize) -> Result<()> {
    match list.first() {
        Some(0) => {}
        first => return Err(Error::DocumentStart { row, first: first.copied() }),
    }
    if let Some(index) = list.windows(2).position(|w| w[1] < w[0]) {
        return Err(Error::DocumentOrder { row, index: index + 1, previous: list[index], boundary: list[index + 1] });
    }
    let last = list[list.len() - 1];
    if last != end {
        return Err(Error::DocumentEnd { row, last, expected: end });
    }
    Ok(())
}

/// Append to `out` the key runs (global positions) that `pattern` gives query `query` of
/// head `head` (of `heads`) inside its document `doc = [s, e)`: the pattern's runs for
/// the document as a sequence of `e - s` tokens at position `query - s`, cut to the
/// document and shifted by `s` (the module docs' rule; [`crate::Spec::key_runs`] and
/// [`crate::pattern::InDocuments`] both apply it).
pub fn document_runs(
    pattern: &dyn Pattern,
    doc: Range<usize>,
    query: usize,
    head: usize,
    heads: usize,
    out: &mut Vec<KeyRun>,
) {
    let (s, len) = (doc.start, doc.end - doc.start);
    let first = out.len();
    pattern.key_runs(query - s, head, heads, len, out);
    for run in &mut out[first..] {
        let run_in = run.clipped(len);
        *run = KeyRun { start: run_in.start + s, end: run_in.end.max(run_in.start) + s, step: run_in.step };
    }
}
