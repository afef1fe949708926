//! The grouped-query cases of the kernel check (`docs/semantics.md`, section 15): k and v
//! with fewer heads than q, query head `h` reading K/V head `h / (heads / kv_heads)`.
//!
//! For each element type and head dim: a causal dense forward, a LongNet forward whose
//! offsets differ between the query heads of one group (so a K/V head's rows are read
//! at several offsets), a ring step, and three backward passes (causal + padding, LongNet,
//! multi-query), in which every query head of a group adds its dK, dV into the same K/V
//! rows. Group sizes 2 to 8; head counts up to 8.

use super::cases::{Case, Kind, fit_spec, sizes};
use crate::shape::Dtype;
use crate::spec::{GpuPattern, GpuSpec};
use ringdil_reference::pattern::Dilated;
use ringdil_reference::random::SplitMix64;

/// `(heads, kv_heads)` pairs: groups of 2, 3, 4 and 8 query heads, and multi-query.
const GROUPINGS: [(usize, usize); 6] = [(4, 2), (6, 2), (6, 3), (8, 2), (8, 1), (4, 1)];

/// The grouped-query cases, drawn from `rng` after every other case.
pub fn cases(rng: &mut SplitMix64, quick: bool) -> Vec<Case> {
    let mut out = Vec::new();
    for dtype in [Dtype::Bf16, Dtype::F16] {
        for head_dim in [64, 128] {
            let combo = (dtype, head_dim);
            let mut add =
                |kind: Kind, what: &str, spec: GpuSpec, groupings: &[(usize, usize)], rng: &mut SplitMix64| {
                    let (seq, batch, _) = sizes(quick, rng);
                    let (heads, kv_heads) = groupings[rng.range(0, groupings.len() - 1)];
                    let spec = fit_spec(spec, batch, seq, rng);
                    let name = format!("gqa {what}");
                    out.push(Case { kv_heads, ..Case::new(kind, &name, combo, [batch, seq, heads], spec) });
                };
            let causal = rng.uniform() < 0.5;
            let dense = GpuSpec::new(GpuPattern::Dense);
            let grouped = &GROUPINGS[..4];
            add(Kind::Forward, "dense causal", dense.clone().causal(true), grouped, rng);
            // Offsets h mod r over the query heads: heads of one group keep different rows.
            let branches = [(rng.range(16, 128), 1), (rng.range(64, 400), 2), (rng.range(256, 1200), 4)];
            let longnet = GpuPattern::Dilated(Dilated::longnet(&branches));
            add(Kind::Forward, "dilated longnet", GpuSpec::new(longnet.clone()).causal(causal), grouped, rng);
            let window = GpuPattern::Window { left: rng.range(0, 150), right: rng.range(0, 80) };
            add(Kind::RingStep, "ring step window", GpuSpec::new(window).causal(causal), grouped, rng);
            let padded = dense.clone().causal(true).key_lengths(vec![]);
            add(Kind::Backward, "backward causal + padding", padded, grouped, rng);
            add(Kind::Backward, "backward dilated", GpuSpec::new(longnet).causal(causal), grouped, rng);
            add(Kind::Backward, "mqa backward dense", dense.causal(causal), &GROUPINGS[4..], rng);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_case_groups_query_heads_over_fewer_kv_heads() {
        let mut rng = SplitMix64::new(7);
        let c = cases(&mut rng, false);
        assert_eq!(c.len(), 24);
        for x in &c {
            assert!(x.kv_heads < x.heads && x.heads % x.kv_heads == 0, "{}", x.name);
            x.spec.validate(x.batch, x.heads, x.seq).unwrap();
        }
        assert!(c.iter().any(|x| x.kv_heads == 1 && x.kind == Kind::Backward));
        assert!(c.iter().any(|x| x.heads / x.kv_heads >= 4 && x.kind == Kind::Backward));
    }
}
