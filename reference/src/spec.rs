//! What attention to compute: pattern, documents, causality, key padding and softmax scale.

use crate::documents::Documents;
use crate::error::{Error, Result};
use crate::pattern::{Dense, KeyRun, Pattern};
use std::sync::Arc;

/// Everything but the tensors. Cheap to clone (the pattern is shared).
///
/// The keys that query `i` (global position) of batch row `b` and head `h` sees are
/// the pattern's key runs ([`Spec::key_runs`]: with `documents`, those of the pattern
/// applied to the query's document `[s, e)` as a sequence of its own, shifted by `s`),
/// then
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
    /// Packed sequences: document boundaries per batch row (`docs/semantics.md`, section 16).
    pub documents: Option<Documents>,
}

impl Default for Spec {
    fn default() -> Self {
        Spec::new(Dense)
    }
}

impl Spec {
    /// Non-causal attention under `pattern`, no padding, default scale.
    pub fn new(pattern: impl Pattern + 'static) -> Self {
        Spec { pattern: Arc::new(pattern), causal: false, key_lengths: None, scale: None, documents: None }
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

    /// Pack documents into the batch rows ([`Documents`]).
    pub fn documents(mut self, documents: Documents) -> Self {
        self.documents = Some(documents);
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

    /// The document `[s, e)` of query (or key) `position` of batch row `batch`: the whole
    /// row `0..seq_len` without documents.
    pub fn document(&self, batch: usize, position: usize, seq_len: usize) -> std::ops::Range<usize> {
        match &self.documents {
            Some(d) => d.document(batch, position, seq_len),
            None => 0..seq_len,
        }
    }

    /// Append to `out` the key runs (global positions) of query `query` of batch row
    /// `batch` and head `head` of `heads`, before causality and key padding: the
    /// pattern's runs for the query's document `[s, e)` as a sequence of `e - s` tokens
    /// at position `query - s`, cut to the document and shifted by `s`. Without
    /// documents, the pattern's runs for the whole row.
    pub fn key_runs(
        &self,
        batch: usize,
        query: usize,
        head: usize,
        heads: usize,
        seq_len: usize,
        out: &mut Vec<KeyRun>,
    ) {
        let Some(documents) = &self.documents else {
            self.pattern.key_runs(query, head, heads, seq_len, out);
            return;
        };
        let doc = documents.document(batch, query, seq_len);
        crate::documents::document_runs(self.pattern.as_ref(), doc, query, head, heads, out);
    }

    /// The multiplicity of every key (length `seq_len`) that query `query` of batch row
    /// `batch` and head `head` sees: documents, pattern, causality and key padding. Slow
    /// (`O(seq_len)`); for tests and fuzzing.
    pub fn key_counts(&self, batch: usize, query: usize, head: usize, heads: usize, seq_len: usize) -> Vec<u32> {
        let mut runs = Vec::new();
        self.key_runs(batch, query, head, heads, seq_len, &mut runs);
        let cut = self.key_cut(batch, query, seq_len);
        let mut counts = vec![0u32; seq_len];
        for run in runs {
            for key in run.clipped(cut).iter() {
                counts[key] += 1;
            }
        }
        counts
    }

    /// The keys of batch row `batch` a query at `query` may see lie below this limit:
    /// key padding, and `query + 1` if causal.
    pub fn key_cut(&self, batch: usize, query: usize, seq_len: usize) -> usize {
        let limit = self.key_limit(batch, seq_len);
        if self.causal { limit.min(query + 1) } else { limit }
    }

    /// Call `f(batch, cut)` for each batch row whose key sets a batch-independent caller
    /// (a schedule: a row is shipped for the whole batch) must take the union over, with
    /// the key cut of [`Spec::key_cut`]. Without documents the pattern is the same for
    /// every row, and one call with the largest key-padding length stands for all.
    pub(crate) fn for_each_row(&self, query: usize, seq_len: usize, mut f: impl FnMut(usize, usize)) {
        let cut = |limit: usize| if self.causal { limit.min(query + 1) } else { limit };
        match &self.documents {
            Some(documents) => {
                for b in 0..documents.rows(seq_len) {
                    f(b, cut(self.key_limit(b, seq_len)));
                }
            }
            None => {
                let limit =
                    self.key_lengths.as_ref().map_or(seq_len, |l| l.iter().copied().max().unwrap_or(0).min(seq_len));
                f(0, cut(limit));
            }
        }
    }

    /// Check what does not depend on the batch size: the documents against `seq_len`
    /// (their row count is [`Documents::rows`]) and the pattern for `heads` heads, for
    /// every length of a non-empty document (the pattern's `n`), or for `seq_len`
    /// without documents; with documents, `key_lengths` must have one entry per row.
    /// What schedules check.
    pub fn validate_pattern(&self, heads: usize, seq_len: usize) -> Result<()> {
        match &self.documents {
            None => self.pattern.validate(heads, seq_len),
            Some(documents) => {
                let rows = documents.rows(seq_len);
                documents.validate(rows, seq_len)?;
                if let Some(lengths) = self.key_lengths.as_ref().filter(|l| l.len() != rows) {
                    return Err(Error::ShapeMismatch {
                        what: "key_lengths",
                        expected: vec![rows],
                        got: vec![lengths.len()],
                    });
                }
                documents.lengths(seq_len).into_iter().try_for_each(|n| self.pattern.validate(heads, n))
            }
        }
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
        if let Some(documents) = &self.documents {
            documents.validate(batch, seq_len)?;
        }
        self.validate_pattern(heads, seq_len)
    }
}
