//! The interval-mask cases of the kernel check (`kernels/mask.cuh`, `MASK_INTERVAL`): the
//! patterns where a query sees one interval of key positions on a plain launch, each
//! query row's interval (forward) and each key row's interval of queries (backward) cut
//! by causality, key padding and documents.
//!
//! For each element type and head dim: window backward passes (with key padding, and
//! with documents, where the backward reads the key's document), a block-sparse band
//! forward and backward (no global tokens, stride or user mask: a band of blocks), a
//! dilated pattern of one dilation-1 branch (a plain launch that writes every row) in a
//! backward, and a ring step of a LongNet pattern whose first branch has dilation 1 (a
//! plain launch beside a compact one, on contiguous or striped rows).

use super::cases::{Case, Kind};
use crate::shape::Dtype;
use crate::spec::{GpuPattern, GpuSpec};
use ringdil_reference::Documents;
use ringdil_reference::pattern::{BlockSparse, Dilated};
use ringdil_reference::random::SplitMix64;

/// The interval cases, drawn from `rng` after every other case.
pub fn cases(rng: &mut SplitMix64, quick: bool) -> Vec<Case> {
    let mut out = Vec::new();
    for dtype in [Dtype::Bf16, Dtype::F16] {
        for head_dim in [64, 128] {
            let mut add = |kind: Kind, what: &str, spec: GpuSpec, rng: &mut SplitMix64| {
                out.push(Case::drawn(kind, &format!("interval {what}"), (dtype, head_dim), spec, quick, rng));
            };
            let causal = rng.uniform() < 0.5;
            let window = GpuPattern::Window { left: rng.range(0, 150), right: rng.range(0, 80) };
            let spec = GpuSpec::new(window.clone()).causal(causal).key_lengths(vec![]);
            add(Kind::Backward, "window backward + padding", spec, rng);
            let spec = GpuSpec::new(window).causal(!causal).documents(Documents::per_row(vec![]));
            add(Kind::Backward, "window backward + documents", spec, rng);
            let band = BlockSparse::local([16, 32, 64, 100][rng.range(0, 3)], rng.range(0, 2));
            add(Kind::Forward, "block band", GpuSpec::new(GpuPattern::BlockSparse(band.clone())).causal(causal), rng);
            let spec = GpuSpec::new(GpuPattern::BlockSparse(band)).causal(!causal).key_lengths(vec![]);
            add(Kind::Backward, "block band backward + padding", spec, rng);
            let one = Dilated::longnet(&[(rng.range(16, 300), 1)]);
            let spec = GpuSpec::new(GpuPattern::Dilated(one)).causal(causal).key_lengths(vec![]);
            add(Kind::Backward, "dilation 1 backward + padding", spec, rng);
            let longnet = Dilated::longnet(&[(rng.range(16, 200), 1), (rng.range(100, 600), 2)]);
            add(Kind::RingStep, "ring step dilation 1", GpuSpec::new(GpuPattern::Dilated(longnet)).causal(causal), rng);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::launch::launches;
    use crate::shape::{Chunk, Shape};

    /// Every case is valid and runs only interval launches (plain, with an interval
    /// pattern), but the ring step's second branch (compact).
    #[test]
    fn every_case_runs_the_interval_mask() {
        let c = cases(&mut SplitMix64::new(7), false);
        assert_eq!(c.len(), 24);
        for x in &c {
            x.spec.validate(x.batch, x.heads, x.seq).unwrap_or_else(|e| panic!("{}: {e}", x.name));
            let shape = Shape::square(x.batch, x.seq, x.heads, x.head_dim);
            let l = launches(&shape, &x.spec, &Chunk::whole(&shape)).unwrap();
            let plain = l.iter().filter(|l| l.params.compact == 0).count();
            assert_eq!(plain, 1, "{}", x.name);
            let p = l.iter().find(|l| l.params.compact == 0).expect("one plain launch").params;
            assert!(p.pattern != 3 || p.dil_rate == 1, "{}", x.name);
            assert!(p.pattern != 2 || (p.bs_global, p.bs_stride, p.bs_mask_blocks) == (0, 0, 0), "{}", x.name);
        }
        assert!(c.iter().any(|x| x.spec.documents.is_some() && x.kind == Kind::Backward));
        assert!(c.iter().any(|x| x.spec.causal) && c.iter().any(|x| !x.spec.causal));
    }
}
