//! Packed documents with the patterns the kernels cannot cut per document (block-sparse,
//! LongNet, expressions, `dilated_expr` files, Rust `Pattern` impls): the GPU runs them
//! as mask tables of the pattern inside the documents, or (built-in LongNet on contiguous
//! rows) as launches over the documents, one per branch (`crate::spec_documents`); the
//! case name says which ("compact per document" or "mask tables"). The check compares against the
//! reference evaluating the original spec, documents and all (`docs/semantics.md`
//! section 16: the pattern restarts at each document's start).
//!
//! Every batch row shares one boundary list (a table has no batch index; two LongNet
//! cases pack their two rows differently, which launches per row take), drawn
//! long-tailed as the other packed cases draw theirs ([`draw_boundaries`]), per row or
//! flat over the batch. Per element type and head dim two cases (bf16 at d = 128 four), the pattern kinds
//! rotating over the combinations: forwards, backwards (one grouped-query), a ring step
//! (tables are indexed by global positions), with causality and key padding drawn.

use super::cases::{Case, Kind, fit_spec, sizes};
use super::packed::draw_boundaries;
use super::tables::{Strided, rotating_softmax};
use crate::shape::{Chunk, Dtype, Shape};
use crate::spec::{GpuPattern, GpuSpec};
use ringdil_reference::Documents;
use ringdil_reference::pattern::expr::{Constants, ExprBranch, ExprCombine, ExprDilated, ExprPattern};
use ringdil_reference::pattern::{BlockSparse, Dilated};
use ringdil_reference::random::SplitMix64;
use std::sync::Arc;

/// One boundary list for all `batch` rows of `seq` tokens, per row or flat.
fn shared_documents(flat: bool, batch: usize, seq: usize, rng: &mut SplitMix64) -> Documents {
    let row = draw_boundaries(seq, rng);
    if !flat {
        return Documents::per_row(vec![row; batch]);
    }
    let inner = (0..batch).flat_map(|b| row[..row.len() - 1].iter().map(move |&c| c + b * seq));
    Documents::flat(inner.chain([batch * seq]).collect())
}

/// The patterns, by name: LongNet's softmax-denominator branches (a table per branch),
/// the head-group combine, local blocks with a global stripe, a mask expression, a
/// `dilated_expr` with a compact form, one rotating its offsets per segment, and a Rust
/// `Pattern` impl.
fn pattern(what: &str) -> GpuPattern {
    let c = Constants::new();
    match what {
        "longnet" | "longnet, rows apart" => GpuPattern::Dilated(Dilated::longnet(&[(16, 1), (64, 2), (256, 4)])),
        "head groups" => GpuPattern::Dilated(Dilated::head_groups(&[(32, 1), (128, 4)])),
        "block sparse" => GpuPattern::BlockSparse(BlockSparse { global_tokens: 8, ..BlockSparse::local(16, 1) }),
        "expression" => {
            GpuPattern::Expr(ExprPattern::new("(q / 16) % 3 == (k / 16) % 3 && q - k < 200", &c).expect("parses"))
        }
        "dilated_expr" => GpuPattern::dilated_expr(
            ExprDilated {
                branches: vec![
                    ExprBranch::new("32", "2", "h + s", None, &c).expect("parses"),
                    ExprBranch::new("n / 4 + 1", "1", "0", None, &c).expect("parses"),
                ],
                combine: ExprCombine::SoftmaxDenominator,
            },
            "packed check".into(),
        ),
        "rotating offsets" => GpuPattern::Table(rotating_softmax()),
        "strided" => GpuPattern::table(Arc::new(Strided(9))),
        _ => unreachable!("the cases name these"),
    }
}

/// The packed mask-table cases, drawn from `rng` after every other case.
pub fn cases(rng: &mut SplitMix64, quick: bool) -> Vec<Case> {
    // Per combination: (kind, pattern, key padding, K/V group), twice.
    let plan = [
        [(Kind::Forward, "longnet", true, 1), (Kind::Backward, "block sparse", true, 1)],
        [(Kind::Forward, "expression", true, 1), (Kind::Backward, "longnet", false, 4)],
        [(Kind::Forward, "rotating offsets", false, 1), (Kind::Backward, "head groups", false, 1)],
        [(Kind::RingStep, "strided", true, 1), (Kind::Forward, "longnet", false, 1)],
        [(Kind::Backward, "dilated_expr", false, 1), (Kind::Backward, "head groups", true, 1)],
        [(Kind::Forward, "longnet, rows apart", false, 1), (Kind::Backward, "longnet, rows apart", true, 2)],
    ];
    let combos = [Dtype::Bf16, Dtype::F16]
        .into_iter()
        .flat_map(|t| [64, 128].map(|d| (t, d)))
        .chain([(Dtype::Bf16, 128), (Dtype::F16, 64)]);
    let mut out = Vec::new();
    for (combo, cases) in combos.zip(plan) {
        for (kind, what, padded, kv_group) in cases {
            let (seq, batch, heads) = sizes(quick, rng);
            // Rows packed differently: two rows, each its own list (LongNet runs compact
            // launches per row).
            let apart = what.ends_with("rows apart");
            let batch = if apart { 2 } else { batch };
            // The head-group combine needs a head per branch.
            let heads = if what == "head groups" { heads.max(2) } else { heads } * kv_group;
            let documents = match apart {
                true => Documents::per_row((0..batch).map(|_| draw_boundaries(seq, rng)).collect()),
                false => shared_documents(rng.uniform() < 0.5, batch, seq, rng),
            };
            let mut spec = GpuSpec::new(pattern(what)).causal(rng.uniform() < 0.5).documents(documents);
            if padded {
                spec = spec.key_lengths(vec![]);
            }
            let spec = fit_spec(spec, batch, seq, rng);
            let shape = Shape::square(batch, seq, heads, 64);
            let how = match spec.lowered(&shape, &Chunk::whole(&shape)) {
                Ok(Some(GpuSpec { pattern: GpuPattern::DilatedInDocuments(..), .. })) if kind != Kind::RingStep => {
                    "compact per document"
                }
                _ => "mask tables",
            };
            let name = format!("packed {what} ({how}){}", if kv_group > 1 { " (gqa)" } else { "" });
            out.push(Case { kv_heads: heads / kv_group, ..Case::new(kind, &name, combo, [batch, seq, heads], spec) });
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every case is valid, lowers as its name says with no documents left, shares one
    /// list over its rows, and the cases cover both list forms, both ways to run, every
    /// pattern and a backward with grouped K/V heads.
    #[test]
    fn every_case_runs_as_named_over_one_shared_list() {
        let mut rng = SplitMix64::new(11);
        let c = cases(&mut rng, false);
        assert_eq!(c.len(), 12);
        for x in &c {
            x.spec.validate(x.batch, x.heads, x.seq).unwrap();
            let shape = Shape::square(x.batch, x.seq, x.heads, 64);
            let lowered = x.spec.lowered(&shape, &Chunk::whole(&shape)).unwrap().expect("lowered");
            let compact = matches!(lowered.pattern, GpuPattern::DilatedInDocuments(..));
            assert!(compact || matches!(lowered.pattern, GpuPattern::Table(_)), "{}", x.name);
            assert_eq!(compact && x.kind != Kind::RingStep, x.name.contains("compact per document"), "{}", x.name);
            assert!(lowered.documents.is_none(), "{}", x.name);
            let rows = x.spec.documents.as_ref().expect("packed").split(x.seq);
            assert_eq!(rows.windows(2).all(|w| w[0] == w[1]), !x.name.contains("rows apart"), "{}", x.name);
        }
        let flat = c.iter().filter(|x| matches!(x.spec.documents, Some(Documents::Flat(_)))).count();
        assert!(flat > 0 && flat < c.len());
        assert!(c.iter().any(|x| x.kv_heads < x.heads && x.kind == Kind::Backward));
        assert!(c.iter().any(|x| x.spec.key_lengths.is_some()));
        let compact = c.iter().filter(|x| x.name.contains("compact per document")).count();
        // Every built-in LongNet case (head groups, key padding, rows apart among them) runs
        // compact; the other patterns as tables.
        assert!((4..c.len()).contains(&compact), "{compact}");
    }
}
