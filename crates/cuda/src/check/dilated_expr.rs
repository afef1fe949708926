//! The compact `dilated_expr` cases of the kernel check: expression branches that run as
//! the built-in dilated branches run (`GpuPattern::DilatedExpr`, [`crate::dilated_expr`]),
//! one compacted launch per branch with the offset of each (head, segment) read from a
//! table, against the reference evaluating the same `ExprDilated`.
//!
//! The built-in dilated cases already cover the compaction; what is new is where the
//! offset comes from, so the offsets here change with the segment *and* the head
//! ([`OFFSETS`]: rotating `h + s`, quadratic in `s`, alternating per segment, negative
//! before the floor modulo, ...): a segment read with its neighbour's offset, or a head
//! with another head's row of the table, changes the keys. Segments are drawn so that
//! they rarely divide the length (one form follows it, `max(8, n / 3 + 1)`: a short
//! last segment), dilations are 1 to 8 (one form an expression of the segment), and one to
//! three branches merge by their softmax denominators (a single branch may also say
//! `union`, which is the same pattern and compact too). Without a dilation-1 branch some
//! queries take part in no branch: rows with no key, which must come back exactly empty.
//!
//! For each element type and head dim 64 and 128: a forward with key padding, a
//! grouped-query backward (2 or 4 query heads per K/V head, whose heads read different
//! rows of a table over the same K/V rows), and a ring step (pieces at offsets, and
//! strided rows that evaluate the branch in place: the table is indexed by global
//! segments); per element type, a grouped-query backward with key padding at a head dim
//! of [`HEAD_DIMS`] (the mma family's wide kernels on every device). The `quick` list (the
//! GPU test's) drops one of the three cases of each 64/128 combination, a different one
//! each time, so that every kind stays in it. Every name starts with `dilated_expr`.

use super::cases::{Case, Kind, fit_spec, sizes};
use super::head_dims::HEAD_DIMS;
use crate::shape::Dtype;
use crate::spec::{GpuPattern, GpuSpec};
use ringdil_reference::pattern::expr::{Constants, ExprBranch, ExprCombine, ExprDilated};
use ringdil_reference::random::SplitMix64;

/// Offset formulas of head `h` and segment `s` (the kept residue is their value mod `r`),
/// each changing with both; the last two go negative (the floor modulo makes them
/// residues), the last one reads `w` and `n` too.
pub const OFFSETS: [&str; 6] =
    ["h + s", "3 * h - s * s", "if s % 2 == 0 then h else h + 1", "h * s + 1", "s / 2 - h", "h + s * w - n"];

/// A compact `dilated_expr` pattern of `branches`, each `(segment, dilation, offset)`
/// expression text, through [`GpuPattern::dilated_expr`] (the pattern files' path, which
/// chooses compact launches for it), keyed by its name [`name`]. Panics on a text that
/// does not parse (the check's own).
pub fn pattern(branches: &[(&str, &str, &str)], combine: ExprCombine) -> GpuPattern {
    let c = Constants::new();
    let parsed = branches
        .iter()
        .map(|&(w, r, o)| ExprBranch::new(w, r, o, None, &c).expect("the check's branches parse"))
        .collect();
    GpuPattern::dilated_expr(ExprDilated { branches: parsed, combine }, name(branches, combine))
}

/// `branches` and the combine as a case name: `(w, r, o)` per branch, then the combine.
pub fn name(branches: &[(&str, &str, &str)], combine: ExprCombine) -> String {
    let list: String = branches.iter().map(|(w, r, o)| format!("({w}, {r}, {o})")).collect();
    let combine = match combine {
        ExprCombine::SoftmaxDenominator => "softmax",
        ExprCombine::Union => "union",
    };
    format!("{list} {combine}")
}

/// One to three branches, segments longer with each branch (LongNet's shape; the last
/// one often past the length: a single segment), branch 0 with offset formula `first`
/// (so that a list of cases covers [`OFFSETS`]), the others' drawn.
fn draw_branches(first: &'static str, rng: &mut SplitMix64) -> (Vec<(String, String, &'static str)>, ExprCombine) {
    let count = rng.range(1, 3);
    let branches = (0..count)
        .map(|i| {
            let (lo, hi) = [(8, 96), (64, 400), (200, 1200)][i];
            let segment = if rng.uniform() < 0.25 { "max(8, n / 3 + 1)".into() } else { rng.range(lo, hi).to_string() };
            // At most 8, and every segment is at least 8: the dilation never exceeds it.
            let dilation = if rng.uniform() < 0.25 { "min(8, w / 16 + 1)".into() } else { rng.range(1, 8).to_string() };
            let offset = if i == 0 { first } else { OFFSETS[rng.range(0, OFFSETS.len() - 1)] };
            (segment, dilation, offset)
        })
        .collect();
    let combine = if count == 1 && rng.uniform() < 0.5 { ExprCombine::Union } else { ExprCombine::SoftmaxDenominator };
    (branches, combine)
}

/// The compact `dilated_expr` cases, drawn from `rng` after every other case.
pub fn cases(rng: &mut SplitMix64, quick: bool) -> Vec<Case> {
    let mut out: Vec<Case> = Vec::new();
    // One case: sizes, then a pattern whose first offset is the next of OFFSETS.
    let mut add =
        |kind: Kind, combo: (Dtype, usize), (causal, padded, group): (bool, bool, usize), rng: &mut SplitMix64| {
            let (seq, batch, heads) = sizes(quick, rng);
            let heads = heads * group;
            let (branches, combine) = draw_branches(OFFSETS[out.len() % OFFSETS.len()], rng);
            let texts: Vec<(&str, &str, &str)> =
                branches.iter().map(|(w, r, o)| (w.as_str(), r.as_str(), *o)).collect();
            let mut spec = GpuSpec::new(pattern(&texts, combine)).causal(causal);
            if padded {
                spec = spec.key_lengths(vec![]);
            }
            let spec = fit_spec(spec, batch, seq, rng);
            let wide = if [64, 128].contains(&combo.1) { String::new() } else { format!(" d={}", combo.1) };
            let name = format!(
                "dilated_expr{wide} {}{}{}",
                name(&texts, combine),
                if padded { " + padding" } else { "" },
                if group > 1 { " (gqa)" } else { "" }
            );
            out.push(Case { kv_heads: heads / group, ..Case::new(kind, &name, combo, [batch, seq, heads], spec) });
        };
    let combos = [(Dtype::Bf16, 64), (Dtype::Bf16, 128), (Dtype::F16, 64), (Dtype::F16, 128)];
    for (c, combo) in combos.into_iter().enumerate() {
        let causal = rng.uniform() < 0.5;
        let group = [2, 4][rng.range(0, 1)];
        let step_causal = rng.uniform() < 0.5;
        // (kind, (causal, key padding, query heads per K/V head))
        let kinds = [
            (Kind::Forward, (causal, true, 1)),
            (Kind::Backward, (!causal, false, group)),
            (Kind::RingStep, (step_causal, false, 1)),
        ];
        for (i, (kind, how)) in kinds.into_iter().enumerate() {
            if !(quick && i == c % kinds.len()) {
                add(kind, combo, how, rng);
            }
        }
    }
    for dtype in [Dtype::Bf16, Dtype::F16] {
        let head_dim = HEAD_DIMS[rng.range(0, HEAD_DIMS.len() - 1)];
        let causal = rng.uniform() < 0.5;
        add(Kind::Backward, (dtype, head_dim), (causal, true, 2), rng);
    }
    out.extend(small_segments());
    out.extend(mask_branch());
    out.extend(nested_unions());
    out
}

/// Nested unions of branches (`crate::union_pieces`): the first branch a compact launch,
/// each later one a piece cut by every row's hole, causal (one launch per later branch)
/// and not (two: the keys below the holes and above them), forward, grouped-query
/// backward and ring step, over 1500 positions (several tiles per segment; the last
/// segments short). The first union's first branch has dilation 2, so some rows have no
/// hole; the second's is LongNet's dense (2048, 1) scaled down, with rotating offsets.
fn nested_unions() -> Vec<Case> {
    type Branches = &'static [(&'static str, &'static str, &'static str)];
    let unions: [(Branches, (Dtype, usize)); 2] = [
        (&[("64", "2", "h"), ("128", "2", "h + s"), ("512", "4", "h * s + 1")], (Dtype::Bf16, 128)),
        (&[("128", "1", "0"), ("256", "4", "h + s"), ("512", "8", "h + s")], (Dtype::F16, 64)),
    ];
    let mut out = Vec::new();
    for (branches, combo) in unions {
        for causal in [true, false] {
            let spec = GpuSpec::new(pattern(branches, ExprCombine::Union)).causal(causal);
            let what = format!(
                "dilated_expr nested {}{}",
                name(branches, ExprCombine::Union),
                if causal { " causal" } else { "" }
            );
            for kind in [Kind::Forward, Kind::Backward, Kind::RingStep] {
                let kv_heads = if kind == Kind::Backward { 2 } else { 4 };
                out.push(Case { kv_heads, ..Case::new(kind, &what, combo, [2, 1500, 4], spec.clone()) });
            }
        }
    }
    out
}

/// A LongNet branch written as a mask expression, which runs as that branch (compact
/// launches, `ExprPattern::as_dilated`), forward and backward, causal: the key's and
/// the query's residues and the offset `(h + 1) mod 3` as the recogniser reads them.
fn mask_branch() -> Vec<Case> {
    let text = "q / 96 == k / 96 && q % 96 % 3 == (h + 1) % 3 && k % 96 % 3 == (h + 1) % 3";
    let mask = ringdil_reference::pattern::ExprPattern::new(text, &Constants::new()).expect("the check's mask parses");
    let spec = GpuSpec::new(GpuPattern::Expr(mask)).causal(true);
    let mut out: Vec<Case> = [Kind::Forward, Kind::Backward]
        .map(|kind| {
            Case::new(kind, &format!("dilated_expr as a mask: {text}"), (Dtype::Bf16, 128), [2, 700, 4], spec.clone())
        })
        .into();
    // A nested union written as one mask (notebook 01's rotating rule, scaled down) with
    // its own causal test, on a call that is not causal: it runs as the union's pieces,
    // causal (`GpuSpec::nested_union`).
    let text = "k <= q && (q / 64 == k / 64 \
        || (q / 128 == k / 128 && q % 128 % 4 == (h + q / 128) % 4 && k % 128 % 4 == (h + k / 128) % 4) \
        || (q / 256 == k / 256 && q % 256 % 8 == (h + q / 256) % 8 && k % 256 % 8 == (h + k / 256) % 8))";
    let mask = ringdil_reference::pattern::ExprPattern::new(text, &Constants::new()).expect("the check's mask parses");
    let spec = GpuSpec::new(GpuPattern::Expr(mask));
    let name = "dilated_expr nested union as a mask: k <= q && ((64, 1) || (128, 4, h + s) || (256, 8, h + s))";
    out.extend(
        [Kind::Forward, Kind::Backward].map(|kind| Case::new(kind, name, (Dtype::F16, 64), [2, 900, 4], spec.clone())),
    );
    out
}

/// Segments of 8 and 20 kept rows at d = 64, forward and backward: a 64- or 128-row tile
/// spans three or more segments whose offsets differ, where rows evenly spaced at the
/// tile's ends need not be inside it (the wgmma kernels must gather such tiles row by
/// row instead of loading them as TMA boxes).
fn small_segments() -> Vec<Case> {
    let branches = [("24", "3", "3 * h - s * s"), ("40", "2", "if s % 2 == 0 then h else h + 1")];
    let spec = GpuSpec::new(pattern(&branches, ExprCombine::SoftmaxDenominator));
    let what = format!("dilated_expr small segments {}", name(&branches, ExprCombine::SoftmaxDenominator));
    [Kind::Forward, Kind::Backward]
        .map(|kind| Case::new(kind, &what, (Dtype::Bf16, 64), [1, 1000, 4], spec.clone()))
        .into()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::launch::launches;
    use crate::shape::{Chunk, Shape};
    use crate::union_pieces::PieceSide;

    /// Every case is compact (`dilated_expr` chose compact launches: one per branch, their
    /// offset tables built), valid, and the lists hold what the module docs promise.
    #[test]
    fn every_case_runs_compact_launches() {
        for (quick, count) in [(false, 32), (true, 28)] {
            let c = cases(&mut SplitMix64::new(7), quick);
            assert_eq!(c.len(), count, "quick = {quick}");
            for x in &c {
                x.spec.validate(x.batch, x.heads, x.seq).unwrap_or_else(|e| panic!("{}: {e}", x.name));
                let shape = Shape::square(x.batch, x.seq, x.heads, x.head_dim).with_kv_heads(x.kv_heads);
                // What the kernels run: a mask that is a nested union runs as that union.
                let spec = x.spec.lowered(&shape, &Chunk::whole(&shape)).unwrap().unwrap_or_else(|| x.spec.clone());
                let Some(p) = crate::dilated_expr::compact_branches(&spec.pattern, x.heads, x.seq) else {
                    panic!("{}: not compact", x.name)
                };
                let l = launches(&shape, &x.spec, &Chunk::whole(&shape)).unwrap();
                // A nested union's later branches: one launch per kept side of the holes.
                let nested = matches!(&spec.pattern, GpuPattern::DilatedExpr(e) if e.is_nested_union());
                let sides = if nested { PieceSide::of(spec.causal).len() } else { 1 };
                assert_eq!(l.len(), 1 + (p.len() - 1) * sides, "{}", x.name);
                assert_eq!(nested, x.name.contains("nested"), "{}", x.name);
                assert!(x.name.starts_with("dilated_expr"));
            }
            for kind in [Kind::Forward, Kind::Backward, Kind::RingStep] {
                for dtype in [Dtype::Bf16, Dtype::F16] {
                    assert!(c.iter().any(|x| x.kind == kind && x.dtype == dtype), "{kind:?} {dtype:?}");
                }
            }
            assert!(c.iter().any(|x| x.kv_heads < x.heads && x.kind == Kind::Backward));
            assert!(c.iter().any(|x| x.spec.key_lengths.is_some()));
            assert!(c.iter().any(|x| HEAD_DIMS.contains(&x.head_dim)));
            assert!(OFFSETS.iter().all(|o| c.iter().any(|x| x.name.contains(o))));
        }
    }
}
