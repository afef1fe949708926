//! What the GPU computes, in terms the kernels understand, and its exact counterpart in
//! the reference crate.
//!
//! The reference's [`ringdil_reference::Spec`] holds its pattern as a trait object, which
//! a GPU launcher cannot inspect; [`GpuSpec`] names the patterns the kernels evaluate
//! in-kernel from global indices and converts itself to the reference spec
//! ([`GpuSpec::to_reference`]), so that both sides are built from one value.

use crate::error::{CudaError, Result};
use ringdil_reference::pattern::{BlockSparse, Combine, Dense, Dilated, SlidingWindow};
use ringdil_reference::{Documents, Spec};

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
}

/// Pattern, causality, key padding, packed documents and softmax scale, as in the
/// reference.
#[derive(Debug, Clone, PartialEq)]
pub struct GpuSpec {
    pub pattern: GpuPattern,
    pub causal: bool,
    pub key_lengths: Option<Vec<usize>>,
    pub scale: Option<f64>,
    /// Packed sequences (`docs/semantics.md` section 16): with dense and window patterns.
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
        };
        spec.causal = self.causal;
        spec.key_lengths = self.key_lengths.clone();
        spec.scale = self.scale;
        spec.documents = self.documents.clone();
        spec
    }

    /// Reject what the reference rejects (naming the value), then what only the GPU cannot do.
    pub fn validate(&self, batch: usize, heads: usize, seq_len: usize) -> Result<()> {
        self.to_reference().validate(batch, heads, seq_len)?;
        if let GpuPattern::Dilated(d) = &self.pattern
            && d.combine == Combine::HeadGroups
        {
            return Err(CudaError::Unsupported {
                what: "dilated head-group combine (use the softmax-denominator combine)",
            });
        }
        // The kernels cut each query's key interval to its document: the document-relative
        // rule of a pattern is that cut only where the rule is a difference of positions.
        if self.documents.is_some() && !matches!(self.pattern, GpuPattern::Dense | GpuPattern::Window { .. }) {
            return Err(CudaError::Unsupported {
                what: "packed documents with a block-sparse or dilated pattern on the GPU (dense and sliding window \
                       take documents; the CPU reference takes every pattern)",
            });
        }
        Ok(())
    }

    /// The softmax scale for `head_dim`.
    pub fn scale_for(&self, head_dim: usize) -> f64 {
        self.scale.unwrap_or(1.0 / (head_dim as f64).sqrt())
    }
}
