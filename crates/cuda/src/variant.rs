//! What one kernel module is specialised for besides its NVRTC target: the element type,
//! the head dim, and whether its launches carry packed documents.
//!
//! Documents are a property of the module, not a run-time switch, so that launches
//! without documents run the kernels as they were before documents existed: in a module
//! compiled with `DOCS 0` the per-position document spans, the per-row document cut of the
//! masks and the tile test `docs_cover` compile away (`kernels/documents.cuh`). The module
//! with documents is compiled only when a call with documents first needs it.

use crate::shape::Dtype;

/// A kernel module's specialisation ([`crate::compile::compile`] caches one per target
/// and variant).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Variant {
    pub dtype: Dtype,
    pub head_dim: usize,
    /// Launches of this module may carry packed documents (`Params::doc_first`).
    pub documents: bool,
}

impl Variant {
    /// The module for `dtype` and `head_dim`, without documents.
    pub fn new(dtype: Dtype, head_dim: usize) -> Self {
        Variant { dtype, head_dim, documents: false }
    }

    /// The same module with document support compiled in (or not).
    pub fn with_documents(self, documents: bool) -> Self {
        Variant { documents, ..self }
    }

    /// The module's name part, e.g. `Bf16_d128` or `F16_d64_docs`.
    pub fn tag(&self) -> String {
        format!("{:?}_d{}{}", self.dtype, self.head_dim, if self.documents { "_docs" } else { "" })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tags_name_every_field() {
        assert_eq!(Variant::new(Dtype::Bf16, 128).tag(), "Bf16_d128");
        assert_eq!(Variant::new(Dtype::F16, 64).with_documents(true).tag(), "F16_d64_docs");
        assert_ne!(Variant::new(Dtype::F16, 64), Variant::new(Dtype::F16, 64).with_documents(true));
    }
}
