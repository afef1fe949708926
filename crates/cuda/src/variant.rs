//! What one kernel module is specialised for besides its NVRTC target: the element type,
//! the head dim, whether its launches carry packed documents, the mask expression compiled
//! into it, whether it reads mask tables and whether its launches cut rows by a nested
//! union's holes.
//!
//! Documents are a property of the module, not a run-time switch, so that launches
//! without documents run the kernels as they were before documents existed: in a module
//! compiled with `DOCS 0` the per-position document spans, the per-row document cut of the
//! masks and the tile test `docs_cover` compile away (`kernels/documents.cuh`). The module
//! with documents is compiled only when a call with documents first needs it.

use crate::expr_source::ExprId;
use crate::shape::Dtype;

/// A kernel module's specialisation ([`crate::compile::compile`] caches one per target
/// and variant).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Variant {
    pub dtype: Dtype,
    pub head_dim: usize,
    /// v's head dim (`HEAD_DIM_V`): `head_dim` but for the pairs of
    /// [`crate::Family::value_dim_pairs`].
    pub value_dim: usize,
    /// Launches of this module may carry packed documents (`Params::doc_first`).
    pub documents: bool,
    /// The mask expression compiled into this module (`PATTERN_EXPR` launches), if any.
    pub expr: Option<ExprId>,
    /// Launches of this module may read a materialised mask table (`PATTERN_TABLE`,
    /// [`crate::mask_table`]); without it the table lookup compiles away.
    pub table: bool,
    /// Launches of this module may be a nested union's pieces (`Params::hole_side`,
    /// [`crate::union_pieces`]); without it the per-row hole cut compiles away, so that
    /// other launches keep their registers.
    pub holes: bool,
}

impl Variant {
    /// The module for `dtype` and `head_dim` (v's too), without documents.
    pub fn new(dtype: Dtype, head_dim: usize) -> Self {
        Variant { dtype, head_dim, value_dim: head_dim, documents: false, expr: None, table: false, holes: false }
    }

    /// The same module with v's head dim `value_dim`.
    pub fn with_value_dim(self, value_dim: usize) -> Self {
        Variant { value_dim, ..self }
    }

    /// The same module with document support compiled in (or not).
    pub fn with_documents(self, documents: bool) -> Self {
        Variant { documents, ..self }
    }

    /// The same module with a mask expression compiled in (or none).
    pub fn with_expr(self, expr: Option<ExprId>) -> Self {
        Variant { expr, ..self }
    }

    /// The same module with the mask-table lookup compiled in (or not).
    pub fn with_table(self, table: bool) -> Self {
        Variant { table, ..self }
    }

    /// The same module with the hole cut of union pieces compiled in (or not).
    pub fn with_holes(self, holes: bool) -> Self {
        Variant { holes, ..self }
    }

    /// The module's name part, e.g. `Bf16_d128`, `F16_d64_docs`, `Bf16_d64_expr3`,
    /// `Bf16_d128_table`, `Bf16_d64_holes` or `Bf16_d192v128` (v's head dim where it
    /// differs).
    pub fn tag(&self) -> String {
        let value = if self.value_dim != self.head_dim { format!("v{}", self.value_dim) } else { String::new() };
        let docs = if self.documents { "_docs" } else { "" };
        let expr = self.expr.map_or(String::new(), |e| format!("_expr{}", e.0));
        let table = if self.table { "_table" } else { "" };
        let holes = if self.holes { "_holes" } else { "" };
        format!("{:?}_d{}{value}{docs}{expr}{table}{holes}", self.dtype, self.head_dim)
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
        let expr = Variant::new(Dtype::Bf16, 64).with_expr(Some(ExprId(3)));
        assert_eq!(expr.tag(), "Bf16_d64_expr3");
        assert_ne!(expr, expr.with_expr(Some(ExprId(4))));
        let table = Variant::new(Dtype::Bf16, 128).with_table(true);
        assert_eq!(table.tag(), "Bf16_d128_table");
        assert_ne!(table, table.with_table(false));
        let holes = Variant::new(Dtype::F16, 64).with_holes(true);
        assert_eq!(holes.tag(), "F16_d64_holes");
        assert_ne!(holes, holes.with_holes(false));
        let mla = Variant::new(Dtype::Bf16, 192).with_value_dim(128);
        assert_eq!(
            (mla.tag(), Variant::new(Dtype::Bf16, 192).with_value_dim(192).tag()),
            ("Bf16_d192v128".into(), "Bf16_d192".into())
        );
        assert_ne!(mla, Variant::new(Dtype::Bf16, 192));
    }
}
