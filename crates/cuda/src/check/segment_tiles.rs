//! The per-segment row tiles of the wgmma forward (`plan::RowTiles`, `fwd_rows` in
//! `kernels/tile_scheduler.cuh`): a compact dilated launch whose segments keep `m` rows,
//! `m` a multiple of 64 but not of 192, cut into 192-row tiles per segment, the last of
//! each short, so that no tile straddles two segments.
//!
//! For each element type and head dim: a forward, a ring step (pieces at offsets, so that
//! a launch starts inside a segment) and a backward with key padding of a LongNet pattern
//! whose compact branch keeps `m = 320` (tiles of 192 + 128 rows) or `m = 448` (192 +
//! 192 + 64) rows per segment, beside a plain dense-segment branch, over lengths holding
//! one full segment and a partial one (the partial segment's tiles past the launch's rows
//! are empty).

use super::cases::{Case, Kind, fit_spec};
use crate::shape::Dtype;
use crate::spec::{GpuPattern, GpuSpec};
use ringdil_reference::pattern::Dilated;
use ringdil_reference::random::SplitMix64;

/// Kept rows per segment of the compact branch (dilation 2): 2 and 3 tiles of 192 rows.
const KEPT: [usize; 2] = [320, 448];

/// The per-segment tile cases, drawn from `rng` after every other case.
pub fn cases(rng: &mut SplitMix64, quick: bool) -> Vec<Case> {
    let mut out = Vec::new();
    for dtype in [Dtype::Bf16, Dtype::F16] {
        for head_dim in [64, 128] {
            let combo = (dtype, head_dim);
            let mut add = |kind: Kind, what: &str, causal: bool, padding: bool, rng: &mut SplitMix64| {
                let m = KEPT[rng.range(0, KEPT.len() - 1)];
                let segment = 2 * m;
                let seq = segment + rng.range(1, if quick { 200 } else { segment - 1 });
                let (batch, heads) = (rng.range(1, 2), rng.range(1, 3));
                let longnet = Dilated::longnet(&[(rng.range(16, 128), 1), (segment, 2)]);
                let mut spec = GpuSpec::new(GpuPattern::Dilated(longnet)).causal(causal);
                if padding {
                    spec = spec.key_lengths(vec![]);
                }
                let spec = fit_spec(spec, batch, seq, rng);
                let name = format!("dilated per-segment tiles {what} (m = {m})");
                out.push(Case::new(kind, &name, combo, [batch, seq, heads], spec));
            };
            let causal = rng.uniform() < 0.5;
            add(Kind::Forward, "forward", causal, false, rng);
            add(Kind::RingStep, "ring step", true, false, rng);
            add(Kind::Backward, "backward + padding", !causal, true, rng);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::family::Family;
    use crate::launch::launches_for;
    use crate::shape::{Chunk, Shape};

    /// Every case runs its compact branch over per-segment tiles in the wgmma family, over
    /// a length that ends inside its second segment.
    #[test]
    fn cases_cut_tiles_per_segment() {
        for quick in [false, true] {
            for c in cases(&mut SplitMix64::new(3), quick) {
                let shape = Shape::square(c.batch, c.seq, c.heads, c.head_dim);
                let l = launches_for(&shape, &c.spec, &Chunk::whole(&shape), Family::Wgmma).unwrap();
                let per_segment: Vec<_> = l.iter().filter(|l| l.fwd_rows.segment > 0).collect();
                assert_eq!(per_segment.len(), 1, "{}: {:?}", c.name, l.iter().map(|l| l.fwd_rows).collect::<Vec<_>>());
                let segment = 2 * per_segment[0].fwd_rows.segment;
                assert!(c.seq > segment && c.seq < 2 * segment, "{}: n = {}, segments of {segment}", c.name, c.seq);
            }
        }
    }
}
