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
//! row that differs (compact launches, below, take rows packed differently: one set of
//! launches per row). A pattern whose keys may count twice (LongNet's softmax-denominator
//! branches) is split into parts as it is without documents, one per branch, each inside
//! the documents: multiplicities add per document as they add per sequence.
//!
//! A built-in LongNet pattern on contiguous rows (a whole sequence, or a ring piece of the
//! contiguous or zigzag layout; key padding or not) runs compact instead ([`GpuPattern::DilatedInDocuments`]): a table visits every tile its
//! lattice touches, `n w` pairs per branch and head, where compact launches visit the
//! kept rows only, `n w / r^2`. Inside a document `[s, e)` branch `(w, r)` has segments
//! `[s + k w, min(s + (k + 1) w, e))`, which is the pattern inside the document: LongNet
//! over `e - s` tokens cuts them so, its last segment short where `w` does not divide
//! `e - s`, and keeps position `o(h) + t r` of each. One launch per branch covers every
//! document: the kernels' compact launch, whose segment `s` is read from a segment table
//! ([`segment_starts`], `Params::seg_start`) instead of being `s w .. (s + 1) w`. Every
//! segment keeps the same number `m` of launch indices ([`segment_indices`]: the longest
//! segment's kept rows, rounded up to a query tile); a shorter one's last are holes, so
//! the launch index still gives the segment by one division. Causality compares
//! positions of one segment, hence of one document. A branch of dilation 1 keeps every
//! position of its segments: it runs as dense attention with its segments as the
//! documents (the kernels cut each query row to its document: `kernels/documents.cuh`),
//! whose spans ([`SegmentTables`]) the launch reads from the call's buffer, with full
//! tiles unmasked and the per-row plans of packed dense calls, where a compact launch
//! would gather and mask its tiles. Rows packed differently get a
//! launch per branch and row: each covers one batch row (`params.batch = 1`, the call's
//! buffers passed from that row: `LaunchSpec::row_elements`).
//!
//! Tables are built per boundary list (the host evaluates the pattern once per list,
//! heads in parallel; about 0.2 s for one LongNet branch inside 24 documents of a 64K
//! row on two cores) and kept ([`crate::mask_table::table`]: at most
//! [`crate::mask_table::KEPT`]): a packing that changes every step pays its build every
//! step.

use crate::error::{CudaError, Result};
use crate::mask_table::TablePattern;
use crate::plan::documents::position_spans;
use crate::shape::{Chunk, Shape};
use crate::spec::{GpuPattern, GpuSpec};
use ringdil_reference::Documents;
use ringdil_reference::pattern::{Combine, Dilated, InDocuments, Pattern};
use std::sync::Arc;

impl GpuSpec {
    /// The spec the kernels run for a call of `shape` over `chunk`: a mask expression equal
    /// to a built-in as the built-in ([`GpuPattern::lowered`]), and documents with a
    /// pattern the kernels cannot cut per document as that pattern inside them (module
    /// docs): a built-in LongNet pattern on contiguous rows (a whole sequence or a ring
    /// piece of a contiguous or zigzag layout) as [`GpuPattern::DilatedInDocuments`] (one
    /// launch per branch over every document), any other as mask tables. None where the
    /// kernels run the spec itself. Errors: the documents'
    /// own (the reference's, naming the value) and [`CudaError::DocumentTables`].
    pub fn lowered(&self, shape: &Shape, chunk: &Chunk) -> Result<Option<GpuSpec>> {
        let built_in =
            self.pattern.lowered().map(|pattern| GpuSpec { pattern, ..self.clone() }).or_else(|| self.nested_union());
        let spec = built_in.as_ref().unwrap_or(self);
        // Compaction needs contiguous rows (kept positions are found from segment starts).
        if let (GpuPattern::Dilated(d), Some(documents)) = (&spec.pattern, &spec.documents)
            && (chunk.q_stride, chunk.k_stride) == (1, 1)
            && spec.compact_documents()
            && shape.batch > 0
        {
            let mut rows = document_rows(documents, shape.batch, chunk.seq_len)?;
            if rows.iter().all(|r| *r == rows[0]) {
                rows.truncate(1);
            }
            let pattern = GpuPattern::DilatedInDocuments(d.clone(), rows);
            return Ok(Some(GpuSpec { pattern, documents: None, ..spec.clone() }));
        }
        let Some(boundaries) = spec.table_documents(shape.batch, chunk.seq_len)? else { return Ok(built_in) };
        Ok(Some(GpuSpec { pattern: spec.in_documents(boundaries), documents: None, ..spec.clone() }))
    }

    /// Documents that run as LongNet's launches over every document on contiguous rows (a
    /// built-in dilated pattern), rows packed alike or not.
    pub fn compact_documents(&self) -> bool {
        self.documents.is_some() && matches!(self.pattern, GpuPattern::Dilated(_))
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
        let mut rows = document_rows(documents, batch, seq_len)?.into_iter().enumerate();
        let (_, first) = rows.next().expect("batch >= 1");
        match rows.find(|(_, other)| *other != first) {
            Some((row, other)) => Err(CudaError::DocumentTables { row, first, other }),
            None => Ok(Some(first)),
        }
    }

    /// This spec's pattern inside the documents `boundaries`, as mask tables: one part per
    /// part of the pattern without documents, each inside them; the tables are kept under
    /// the pattern's identity and the list (two calls with one packing share them). What
    /// [`GpuSpec::lowered`] runs where no compact form applies (public for comparisons).
    pub fn in_documents(&self, boundaries: Vec<usize>) -> GpuPattern {
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

/// Every batch row's boundary list, once the documents are valid for `batch` rows of
/// `seq_len` tokens (else the reference's error, naming the value).
fn document_rows(documents: &Documents, batch: usize, seq_len: usize) -> Result<Vec<Vec<usize>>> {
    documents.validate(batch, seq_len)?;
    Ok((0..batch).map(|b| documents.row(b, seq_len)).collect())
}

/// The segment table of a branch of segment `w` inside the documents `boundaries` (module
/// docs): the first position of every segment, then the row's end (`Params::seg_start`).
/// A non-empty document `[s, e)` has segments from `s, s + w, s + 2w, ...`, the last one
/// shorter where `w` does not divide `e - s`; an empty document has none.
pub fn segment_starts(boundaries: &[usize], w: usize) -> Vec<usize> {
    let mut out: Vec<usize> = boundaries.windows(2).flat_map(|d| (d[0]..d[1]).step_by(w)).collect();
    out.extend(boundaries.last());
    out
}

/// Launch indices per segment, `m`, of a compact launch of branch `(w, r)` (w cut to the
/// row) over the segment table `starts`: enough for the kept rows of the longest segment,
/// of `w'` positions, `ceil(w' / r)`, rounded up to a multiple of `tile` (the launch's
/// query tile, so that a tile of indices stays inside one segment and loads as one box),
/// and at most `ceil(w / r)`. Indices past a segment's kept rows are holes that the launch
/// walks over; sized by w, a branch far wider than the documents (w = 262144 over
/// documents of a few thousand tokens) would be nearly all holes. A segment's positions
/// come from the table, so `m` changes no pair.
pub fn segment_indices(starts: &[usize], (w, r): (usize, usize), tile: usize) -> usize {
    let longest = starts.windows(2).map(|s| s[1] - s[0]).max().unwrap_or(0).max(1);
    longest.div_ceil(r).next_multiple_of(tile).min(w.div_ceil(r))
}

/// The segments of a LongNet pattern's launches inside documents, laid out in one buffer
/// (the call's `block_mask`): per branch `i` and boundary list `j` (one list for every
/// batch row, or one per row), [`segment_starts`] of the branch's segment (cut to the row,
/// as the launch cuts it), `tables[i][j].1`, and from byte `tables[i][j].0` what the
/// launch reads of them ([`SegmentTables::bytes`]): a compact launch the starts as `i32`s
/// (`Params::seg_start`); a dilation-1 branch, dense attention inside its segments, the
/// spans of its segments taken as documents (`Params::doc_first`, then `doc_last`,
/// `[rows, seq_len]` `i32`s each, over the launch's rows: every batch row for one list,
/// its own row for one per row). The layout is cheap; the buffer, whose spans grow with
/// the rows, is made only where it is uploaded.
pub struct SegmentTables {
    pub tables: Vec<Vec<(usize, Arc<[usize]>)>>,
    /// Per branch: dilation 1 (spans), else starts.
    dense: Vec<bool>,
    launch_rows: usize,
    seq_len: usize,
}

impl SegmentTables {
    /// The layout for `d`'s branches inside `rows` (valid boundary lists of `batch` rows
    /// of `seq_len` positions; a call's `seq_len` fits an `i32`: `launch::validate`).
    pub fn new(d: &Dilated, rows: &[Vec<usize>], batch: usize, seq_len: usize) -> Self {
        let launch_rows = if rows.len() == 1 { batch } else { 1 };
        let dense: Vec<bool> = d.branches.iter().map(|b| b.dilation == 1).collect();
        let mut len = 0;
        let tables = d
            .branches
            .iter()
            .zip(&dense)
            .map(|(b, &dense)| {
                rows.iter()
                    .map(|list| {
                        let starts = segment_starts(list, b.segment.min(seq_len));
                        let at = len;
                        len += 4 * if dense { 2 * launch_rows * seq_len } else { starts.len() };
                        (at, starts.into())
                    })
                    .collect()
            })
            .collect();
        SegmentTables { tables, dense, launch_rows, seq_len }
    }

    /// The buffer: every launch's table at its offset.
    pub fn bytes(&self) -> Vec<u8> {
        let mut bytes = Vec::new();
        for (tables, &dense) in self.tables.iter().zip(&self.dense) {
            for (at, starts) in tables {
                debug_assert_eq!(*at, bytes.len(), "the layout's offset");
                if dense {
                    let segments = Documents::per_row(vec![starts.to_vec(); self.launch_rows]);
                    let (first, last) = position_spans(&segments, self.launch_rows, self.seq_len);
                    bytes.extend(first.iter().chain(&last).flat_map(|s| s.to_ne_bytes()));
                } else {
                    bytes.extend(starts.iter().flat_map(|&s| (s as i32).to_ne_bytes()));
                }
            }
        }
        bytes
    }
}

/// Parts of a LongNet pattern whose key counts add up to its own, each keeping a key at
/// most once: one per branch under the softmax-denominator combine (branches may share
/// keys), the pattern itself under head groups (a head sees one branch).
fn dilated_parts(d: &Dilated) -> Vec<Arc<dyn Pattern>> {
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
