//! What the GPU computes, in terms the kernels understand, and its exact counterpart in
//! the reference crate.
//!
//! The reference's [`ringdil_reference::Spec`] holds its pattern as a trait object, which
//! a GPU launcher cannot inspect; [`GpuSpec`] names the patterns the kernels evaluate
//! in-kernel from global indices and converts itself to the reference spec
//! ([`GpuSpec::to_reference`]), so that both sides are built from one value.

use crate::error::{CudaError, Result};
use crate::mask_table::TablePattern;
use ringdil_pattern_file::{Builtin, FileError, PatternFile};
use ringdil_reference::pattern::{
    BlockSparse, Dense, Dilated, ExprDilated, ExprPattern, InDocuments, Pattern, SlidingWindow,
};
use ringdil_reference::{Documents, Spec};
use std::ops::Range;
use std::sync::Arc;

/// The patterns with a GPU mask.
#[derive(Debug, Clone, PartialEq)]
pub enum GpuPattern {
    Dense,
    /// Query `i` sees keys `i - left ..= i + right`.
    Window {
        left: usize,
        right: usize,
    },
    BlockSparse(BlockSparse),
    /// LongNet branches, softmax-denominator combine: one kernel launch per branch, then
    /// the branch partials are merged (see the crate docs).
    Dilated(Dilated),
    /// A pattern file's mask expression, compiled into its own module
    /// ([`crate::expr_source`]); tiles the expression cannot reach are skipped (the tile
    /// plan classifies them with the reference's interval arithmetic).
    Expr(ExprPattern),
    /// Any reference pattern (a Rust `Pattern` impl, a `dilated_expr` file), materialised
    /// as a mask table the kernels read ([`crate::mask_table`]); each key at most once.
    Table(TablePattern),
    /// A `dilated_expr` pattern with a compact form (fixed segment and dilation per
    /// branch, offsets per head and segment, softmax-denominator merge): one compact
    /// launch per branch, offsets from a table ([`crate::dilated_expr`]). Build it with
    /// [`GpuPattern::dilated_expr`], which falls back to mask tables.
    DilatedExpr(ExprDilated),
    /// A LongNet pattern inside documents on a whole sequence: per branch, one launch
    /// whose segments restart at each document's start (`crate::spec_documents`): a
    /// compact launch reading a segment table, or for dilation 1 dense attention inside
    /// the segments. The boundary lists: one that every batch row shares (launches over
    /// every row), or one per batch row (launches per row). What
    /// [`GpuSpec::lowered`] makes of a built-in dilated pattern with documents where it can.
    DilatedInDocuments(Dilated, Vec<Vec<usize>>),
}

impl GpuPattern {
    /// The built-in pattern the kernels run in place of this one, where there is one with
    /// the same pairs: a mask expression that is literally a sliding window
    /// ([`ExprPattern::as_window`]) runs as [`GpuPattern::Window`] (one key interval per
    /// query: no per-element expression, exact tile marks).
    pub fn lowered(&self) -> Option<GpuPattern> {
        match self {
            GpuPattern::Expr(e) => e.as_window().map(|(left, right)| GpuPattern::Window { left, right }),
            _ => None,
        }
    }

    /// `pattern` on the GPU through a mask table ([`GpuPattern::Table`]).
    pub fn table(pattern: Arc<dyn Pattern>) -> Self {
        GpuPattern::Table(TablePattern::new(pattern))
    }

    /// A `dilated_expr` pattern on the GPU: compact launches where it has a compact form
    /// ([`ExprDilated::is_compact`]), else mask tables (one per part,
    /// [`ExprDilated::parts`]) identified by `key` (equal keys promise equal patterns: a
    /// pattern file's contents).
    pub fn dilated_expr(pattern: ExprDilated, key: String) -> Self {
        if pattern.is_compact() {
            return GpuPattern::DilatedExpr(pattern);
        }
        let parts = pattern.parts().into_iter().map(|p| Arc::new(p) as Arc<dyn Pattern>).collect();
        GpuPattern::Table(TablePattern::keyed(Arc::new(pattern), key).with_parts(parts))
    }

    /// A pattern file's pattern on the GPU: the built-in kinds as themselves, a
    /// `dilated_expr` file as [`GpuPattern::dilated_expr`] keyed by the file's contents.
    pub fn from_file(file: &PatternFile) -> std::result::Result<Self, FileError> {
        if let Some(b) = file.builtin()? {
            return Ok(b.into());
        }
        let Some(p) = file.expr_dilated()? else { unreachable!("builtin() describes every kind but dilated_expr") };
        Ok(GpuPattern::dilated_expr(p, format!("{file:?}")))
    }
}

/// A pattern file's built-in kind as the kernels evaluate it (a file of a kind with no
/// GPU mask, `dilated_expr`, has no [`Builtin`]: `PatternFile::builtin` says so).
impl From<Builtin> for GpuPattern {
    fn from(b: Builtin) -> Self {
        match b {
            Builtin::Dense(_) => GpuPattern::Dense,
            Builtin::SlidingWindow(w) => GpuPattern::Window { left: w.left, right: w.right },
            Builtin::BlockSparse(b) => GpuPattern::BlockSparse(b),
            Builtin::Dilated(d) => GpuPattern::Dilated(d),
            Builtin::Expr(e) => GpuPattern::Expr(e),
        }
    }
}

/// Pattern, causality, key padding, packed documents and softmax scale, as in the
/// reference.
#[derive(Debug, Clone, PartialEq)]
pub struct GpuSpec {
    pub pattern: GpuPattern,
    pub causal: bool,
    pub key_lengths: Option<Vec<usize>>,
    pub scale: Option<f64>,
    /// Packed sequences (`docs/semantics.md` section 16): the kernels cut dense and window
    /// patterns to each document; the others run as mask tables of the pattern inside the
    /// documents ([`GpuSpec::lowered`], `spec_documents`).
    pub documents: Option<Documents>,
}

impl GpuSpec {
    pub fn new(pattern: GpuPattern) -> Self {
        GpuSpec { pattern, causal: false, key_lengths: None, scale: None, documents: None }
    }

    pub fn causal(mut self, causal: bool) -> Self {
        self.causal = causal;
        self
    }

    pub fn key_lengths(mut self, lengths: Vec<usize>) -> Self {
        self.key_lengths = Some(lengths);
        self
    }

    pub fn documents(mut self, documents: Documents) -> Self {
        self.documents = Some(documents);
        self
    }

    /// The same attention as a reference spec (the ground truth of every GPU check).
    pub fn to_reference(&self) -> Spec {
        let mut spec = match &self.pattern {
            GpuPattern::Dense => Spec::new(Dense),
            GpuPattern::Window { left, right } => Spec::new(SlidingWindow { left: *left, right: *right }),
            GpuPattern::BlockSparse(b) => Spec::new(b.clone()),
            GpuPattern::Dilated(d) => Spec::new(d.clone()),
            GpuPattern::Expr(e) => Spec::new(e.clone()),
            GpuPattern::Table(t) => Spec { pattern: t.pattern.clone(), ..Spec::dense() },
            GpuPattern::DilatedExpr(e) => Spec::new(e.clone()),
            GpuPattern::DilatedInDocuments(d, rows) if rows.len() == 1 => {
                Spec::new(InDocuments::new(d.clone(), rows[0].clone()))
            }
            GpuPattern::DilatedInDocuments(d, rows) => Spec::new(d.clone()).documents(Documents::per_row(rows.clone())),
        };
        spec.causal = self.causal;
        spec.key_lengths = self.key_lengths.clone();
        spec.scale = self.scale;
        spec.documents = self.documents.clone().or(spec.documents);
        spec
    }

    /// The same attention on batch rows `rows` of a batch of `batch` rows of `seq_len`
    /// tokens (one ring of the 2-D layout, `dist::grid`, runs a slice of the batch): key
    /// lengths and documents are per row, so they are cut to `rows`; a flat document list
    /// becomes the per-row lists of those rows (its boundaries count positions of the
    /// whole batch, which the slice no longer has). Errors: key lengths or documents
    /// invalid for `batch` rows (the reference's error), or `rows` empty or past `batch`
    /// ([`CudaError::BatchRows`]).
    pub fn batch_rows(&self, rows: Range<usize>, batch: usize, seq_len: usize) -> Result<GpuSpec> {
        if rows.is_empty() || rows.end > batch {
            return Err(CudaError::BatchRows { start: rows.start, end: rows.end, batch });
        }
        let per_row = GpuSpec {
            key_lengths: self.key_lengths.clone(),
            documents: self.documents.clone(),
            ..Self::new(GpuPattern::Dense)
        };
        per_row.to_reference().validate(batch, 1, seq_len)?;
        Ok(GpuSpec {
            key_lengths: self.key_lengths.as_ref().map(|l| l[rows.clone()].to_vec()),
            documents: self.documents.as_ref().map(|d| Documents::per_row(rows.map(|b| d.row(b, seq_len)).collect())),
            ..self.clone()
        })
    }

    /// Reject what the reference rejects (naming the value), then what only the GPU cannot do.
    pub fn validate(&self, batch: usize, heads: usize, seq_len: usize) -> Result<()> {
        self.to_reference().validate(batch, heads, seq_len)?;
        self.output_scale(heads)?;
        // Documents with a pattern other than dense and window run as mask tables, which
        // need one boundary list for every row, except LongNet's launches over the
        // documents (`spec_documents`; a striped ring piece's tables still need one).
        if !self.compact_documents() {
            self.table_documents(batch, seq_len)?;
        }
        Ok(())
    }

    /// The factor `sigma` every head's finished output is multiplied by (the reference's
    /// `Pattern::output_scale`, `docs/semantics.md` section 7.6): 1, or `1/G` for the
    /// head-group combine of `G` branches. The GPU applies one factor to the whole result
    /// (`out <- sigma O`; the backward takes `delta / sigma` and scales dQ, dK, dV by
    /// `sigma`), so a pattern whose heads have different factors is refused, naming two.
    pub fn output_scale(&self, heads: usize) -> Result<f64> {
        let pattern = self.to_reference().pattern;
        let first = pattern.output_scale(0, heads);
        match (1..heads).map(|h| (h, pattern.output_scale(h, heads))).find(|&(_, s)| s != first) {
            Some((head, other)) => Err(CudaError::OutputScales { first, head, other }),
            None => Ok(first),
        }
    }

    /// A mask expression that is literally a union of nested LongNet branches
    /// ([`ExprPattern::as_nested_union`]) as that `dilated_expr` union, which runs as
    /// disjoint compact pieces (`crate::union_pieces`); the mask's own causal test becomes
    /// the call's causality. Not with documents: inside them the mask runs as mask tables.
    ///
    /// [`ExprPattern::as_nested_union`]: ringdil_reference::pattern::ExprPattern::as_nested_union
    pub fn nested_union(&self) -> Option<GpuSpec> {
        let GpuPattern::Expr(e) = &self.pattern else { return None };
        if self.documents.is_some() {
            return None;
        }
        let (union, causal) = e.as_nested_union()?;
        Some(GpuSpec { pattern: GpuPattern::DilatedExpr(union), causal: self.causal || causal, ..self.clone() })
    }

    /// The softmax scale for `head_dim`.
    pub fn scale_for(&self, head_dim: usize) -> f64 {
        self.scale.unwrap_or(1.0 / (head_dim as f64).sqrt())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A slice of the batch keeps its rows' key lengths and documents, a flat list as the
    /// per-row lists of its rows (row-local positions); bad rows and bad per-row values
    /// are typed errors naming them.
    #[test]
    fn batch_rows_keep_their_rows_documents_and_key_lengths() {
        let n = 10;
        // Rows: [0, 3, 10], [0, 4, 4, 10], [0, 10] as one flat list over 30 tokens.
        let flat = Documents::flat(vec![0, 3, 10, 14, 14, 20, 30]);
        let spec = GpuSpec::new(GpuPattern::Window { left: 2, right: 0 }).key_lengths(vec![9, 8, 7]);
        let cut = spec.clone().documents(flat).batch_rows(1..3, 3, n).unwrap();
        assert_eq!(cut.documents, Some(Documents::per_row(vec![vec![0, 4, 4, 10], vec![0, 10]])));
        assert_eq!((cut.key_lengths, cut.pattern), (Some(vec![8, 7]), spec.pattern.clone()));
        let per_row = Documents::per_row(vec![vec![0, 10], vec![0, 5, 10], vec![0, 1, 10]]);
        let cut = spec.clone().documents(per_row).batch_rows(2..3, 3, n).unwrap();
        assert_eq!(cut.documents, Some(Documents::per_row(vec![vec![0, 1, 10]])));
        assert_eq!(GpuSpec::new(GpuPattern::Dense).batch_rows(0..2, 3, n).unwrap(), GpuSpec::new(GpuPattern::Dense));
        for rows in [2..4, 1..1] {
            let e = spec.batch_rows(rows.clone(), 3, n).unwrap_err().to_string();
            assert!(e.contains(&format!("batch rows {}..{}", rows.start, rows.end)), "{e}");
        }
        let e = spec.clone().documents(Documents::per_row(vec![vec![0, 10]; 2])).batch_rows(0..1, 3, n).unwrap_err();
        assert!(matches!(e, CudaError::Spec(ringdil_reference::Error::DocumentRows { lists: 2, batch: 3 })), "{e}");
    }

    /// The output scale is the pattern's, one for every head: the head-group combine's
    /// `1/G` (as a built-in or through a mask table), and a pattern whose heads differ is
    /// a typed error naming the first head that differs; distributed plans refuse a scale.
    #[test]
    fn the_output_scale_is_one_factor_for_every_head() {
        use ringdil_reference::pattern::{Dilated, KeyRun};
        #[derive(Debug)]
        struct HalfOfHeadTwo;
        impl Pattern for HalfOfHeadTwo {
            fn validate(&self, _: usize, _: usize) -> ringdil_reference::Result<()> {
                Ok(())
            }
            fn key_runs(&self, q: usize, _: usize, _: usize, _: usize, out: &mut Vec<KeyRun>) {
                out.push(KeyRun { start: q, end: q + 1, step: 1 });
            }
            fn output_scale(&self, head: usize, _: usize) -> f64 {
                if head == 2 { 0.5 } else { 1.0 }
            }
        }
        let groups = Dilated::head_groups(&[(16, 1), (32, 2), (64, 4)]);
        for pattern in [GpuPattern::Dilated(groups.clone()), GpuPattern::table(Arc::new(groups))] {
            assert_eq!(GpuSpec::new(pattern.clone()).output_scale(5).unwrap(), 1.0 / 3.0);
            assert!(GpuSpec::new(pattern).validate(1, 5, 100).is_ok());
        }
        assert_eq!(GpuSpec::new(GpuPattern::Dense).output_scale(5).unwrap(), 1.0);
        let uneven = GpuSpec::new(GpuPattern::table(Arc::new(HalfOfHeadTwo)));
        assert_eq!(uneven.output_scale(2).unwrap(), 1.0);
        let e = uneven.validate(1, 4, 100).unwrap_err();
        assert!(matches!(e, CudaError::OutputScales { first: 1.0, head: 2, other: 0.5 }), "{e:?}");
        assert_eq!(
            e.to_string(),
            "the pattern scales head 0's output by 1 and head 2's by 0.5: the GPU applies one output scale to every head"
        );
    }
}
