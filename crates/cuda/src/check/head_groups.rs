//! The head-group combine cases of the kernel check (`docs/semantics.md` section 7.6):
//! the heads split into one contiguous group per dilated branch, each head seeing its
//! group's branch only, every output scaled by `1/G` (`crate::output_scale`; the branch
//! launches read offset tables that leave the other groups' heads out,
//! `crate::dilated_expr`).
//!
//! For each element type and head dim: a forward of 3 branches, a backward of 3 branches
//! (key padding), a grouped-query backward of 2 branches whose query heads of one K/V head
//! fall in different groups, and the same combine as a mask table (a Rust pattern on the
//! GPU, scaled the same way). Head counts from `G` (one head per group) up, so that groups
//! of unequal size occur.

use super::cases::{Case, Kind, fit_spec, sizes};
use crate::shape::Dtype;
use crate::spec::{GpuPattern, GpuSpec};
use ringdil_reference::pattern::{Dilated, Offset};
use ringdil_reference::random::SplitMix64;
use std::sync::Arc;

/// `(heads, kv_heads)` of the grouped-query case, 2 groups: in each, some K/V head's query
/// heads fall in both groups (6:3 splits heads 2, 3 across the boundary; multi-query
/// shares its one K/V head between the groups).
const GROUPINGS: [(usize, usize); 3] = [(6, 3), (4, 1), (6, 1)];

/// The head-group cases, drawn from `rng` after every other case.
pub fn cases(rng: &mut SplitMix64, quick: bool) -> Vec<Case> {
    let mut out = Vec::new();
    for dtype in [Dtype::Bf16, Dtype::F16] {
        for head_dim in [64, 128] {
            let combo = (dtype, head_dim);
            let mut add = |kind: Kind, what: &str, spec: GpuSpec, heads: (usize, usize), rng: &mut SplitMix64| {
                let (seq, batch, _) = sizes(quick, rng);
                let spec = fit_spec(spec, batch, seq, rng);
                let name = format!("head groups {what}");
                out.push(Case { kv_heads: heads.1, ..Case::new(kind, &name, combo, [batch, seq, heads.0], spec) });
            };
            let causal = rng.uniform() < 0.5;
            let mut three =
                Dilated::head_groups(&[(rng.range(16, 128), 1), (rng.range(64, 400), 2), (rng.range(256, 1200), 4)]);
            // The middle group's offsets by head (`h mod r`) rather than fixed.
            three.branches[1].offset = Offset::HeadMod;
            let heads = rng.range(3, 7);
            let spec = GpuSpec::new(GpuPattern::Dilated(three.clone())).causal(causal);
            add(Kind::Forward, "forward", spec, (heads, heads), rng);
            let heads = rng.range(3, 7);
            let spec = GpuSpec::new(GpuPattern::Dilated(three.clone())).causal(causal).key_lengths(vec![]);
            add(Kind::Backward, "backward + padding", spec, (heads, heads), rng);
            let two = Dilated::head_groups(&[(rng.range(32, 256), 2), (rng.range(128, 800), 4)]);
            let spec = GpuSpec::new(GpuPattern::Dilated(two)).causal(true);
            add(Kind::Backward, "gqa backward", spec, GROUPINGS[rng.range(0, GROUPINGS.len() - 1)], rng);
            let heads = rng.range(3, 5);
            let spec = GpuSpec::new(GpuPattern::table(Arc::new(three))).causal(causal);
            add(Kind::Backward, "as a mask table", spec, (heads, heads), rng);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_case_scales_its_output_by_one_over_the_groups() {
        let c = cases(&mut SplitMix64::new(7), false);
        assert_eq!(c.len(), 16);
        for x in &c {
            x.spec.validate(x.batch, x.heads, x.seq).unwrap_or_else(|e| panic!("{}: {e}", x.name));
            let groups = if x.name.contains("gqa") { 2.0 } else { 3.0 };
            assert_eq!(x.spec.output_scale(x.heads).unwrap(), 1.0 / groups, "{}", x.name);
        }
        assert!(c.iter().any(|x| x.kv_heads < x.heads && x.kind == Kind::Backward));
        assert!(c.iter().any(|x| matches!(x.spec.pattern, GpuPattern::Table(_))));
        assert!(c.iter().any(|x| x.heads % 3 != 0 && !x.name.contains("gqa")));
    }
}
