//! Packed documents with every pattern: the GPU's mask tables of the pattern inside the
//! documents.
//!
//! The kernels cut a query's keys to its document (`kernels/documents.cuh`), which is
//! the document-relative rule (`docs/semantics.md` section 16) only for patterns whose
//! rule is a difference of positions: dense and sliding window. A block-sparse, dilated
//! or expression pattern restarts at each document's start (LongNet's segments, the
//! sparse blocks), so a query at position `i` of document `[s, e)` keeps the keys the
//! pattern gives position `i - s` of `e - s` tokens, shifted by `s`. That is a pattern
//! over the whole row, the reference's [`InDocuments`], which the mask tables evaluate
//! like any other ([`crate::mask_table`]): [`GpuSpec::lowered`] turns such a spec into a
//! [`GpuPattern::Table`] of the pattern inside the row's documents, with no documents
//! left for the kernels.
//!
//! A table has no batch index: every batch row of the call must share one boundary list
//! (one row, or a batch packed alike), else [`CudaError::DocumentTables`] names the first
//! row that differs. A pattern whose keys may count twice (LongNet's softmax-denominator
//! branches) is split into parts as it is without documents, one per branch, each inside
//! the documents: multiplicities add per document as they add per sequence.
//!
//! Tables are built per boundary list (the host evaluates the pattern once per list,
//! heads in parallel; about 0.2 s for one LongNet branch inside 24 documents of a 64K
//! row on two cores) and kept ([`crate::mask_table::table`]: at most
//! [`crate::mask_table::KEPT`]): a packing that changes every step pays its build every
//! step.

use crate::error::{CudaError, Result};
use crate::mask_table::TablePattern;
use crate::spec::{GpuPattern, GpuSpec};
use ringdil_reference::pattern::{Combine, InDocuments, Pattern};
use std::sync::Arc;

impl GpuSpec {
    /// The spec the kernels run: a mask expression equal to a built-in as the built-in
    /// ([`GpuPattern::lowered`]), and documents with a pattern the kernels cannot cut per
    /// document as mask tables of the pattern inside them (module docs) for a batch of
    /// `batch` rows of `seq_len` tokens. None where the kernels run the spec itself.
    /// Errors: the documents' own (the reference's, naming the value) and
    /// [`CudaError::DocumentTables`].
    pub fn lowered(&self, batch: usize, seq_len: usize) -> Result<Option<GpuSpec>> {
        let built_in = self.pattern.lowered().map(|pattern| GpuSpec { pattern, ..self.clone() });
        let spec = built_in.as_ref().unwrap_or(self);
        Ok(match spec.table_documents(batch, seq_len)? {
            Some(boundaries) => {
                Some(GpuSpec { pattern: spec.in_documents(boundaries), documents: None, ..spec.clone() })
            }
            None => built_in,
        })
    }

    /// The boundary list every batch row shares, where the documents run through mask
    /// tables (a pattern other than dense and window); None without documents or where
    /// the kernels cut them. Errors as [`GpuSpec::lowered`].
    pub fn table_documents(&self, batch: usize, seq_len: usize) -> Result<Option<Vec<usize>>> {
        let Some(documents) = &self.documents else { return Ok(None) };
        // (No rows: the call's shape check names the zero.)
        if batch == 0 || matches!(self.pattern, GpuPattern::Dense | GpuPattern::Window { .. }) {
            return Ok(None);
        }
        documents.validate(batch, seq_len)?;
        let first = documents.row(0, seq_len);
        match (1..batch).map(|b| (b, documents.row(b, seq_len))).find(|(_, other)| *other != first) {
            Some((row, other)) => Err(CudaError::DocumentTables { row, first, other }),
            None => Ok(Some(first)),
        }
    }

    /// This spec's pattern inside the documents `boundaries`, as mask tables: one part per
    /// part of the pattern without documents, each inside them; the tables are kept under
    /// the pattern's identity and the list (two calls with one packing share them).
    fn in_documents(&self, boundaries: Vec<usize>) -> GpuPattern {
        let inside = |p: Arc<dyn Pattern>| Arc::new(InDocuments::shared(p, boundaries.clone())) as Arc<dyn Pattern>;
        let (whole, parts, identity): (Arc<dyn Pattern>, Vec<Arc<dyn Pattern>>, String) = match &self.pattern {
            // An unkeyed table's form names its parts' addresses; the kept tables hold
            // the parts (inside `InDocuments`), so no other pattern can take an address
            // while its table is kept.
            GpuPattern::Table(t) => (t.pattern.clone(), t.parts.clone(), t.key.clone().unwrap_or(format!("{t:?}"))),
            GpuPattern::DilatedExpr(e) => {
                let parts = e.parts().into_iter().map(|p| Arc::new(p) as Arc<dyn Pattern>).collect();
                (Arc::new(e.clone()), parts, format!("{e:?}"))
            }
            GpuPattern::Dilated(d) => (Arc::new(d.clone()), dilated_parts(d), format!("{d:?}")),
            other => {
                let whole = self.to_reference().pattern;
                (whole.clone(), vec![whole], format!("{other:?}"))
            }
        };
        let key = format!("{identity} in documents {boundaries:?}");
        GpuPattern::Table(TablePattern::keyed(inside(whole), key).with_parts(parts.into_iter().map(inside).collect()))
    }
}

/// Parts of a LongNet pattern whose key counts add up to its own, each keeping a key at
/// most once: one per branch under the softmax-denominator combine (branches may share
/// keys), the pattern itself under head groups (a head sees one branch).
fn dilated_parts(d: &ringdil_reference::pattern::Dilated) -> Vec<Arc<dyn Pattern>> {
    match d.combine {
        Combine::SoftmaxDenominator => {
            (0..d.branches.len()).map(|i| Arc::new(d.single_branch(i)) as Arc<dyn Pattern>).collect()
        }
        Combine::HeadGroups => vec![Arc::new(d.clone())],
    }
}

#[cfg(test)]
#[path = "spec_documents_tests.rs"]
mod tests;
