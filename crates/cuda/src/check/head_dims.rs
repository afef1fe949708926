//! The cases of the head dims beyond 64 and 128: d = 96, 192 and 256 (flash-attention 3's
//! others). 96 runs, on sm_90, the wgmma kernels of d = 128 over rows of 96
//! ([`crate::Family::tile_dim`]: boxes and gathers read columns 96.. as zeros, the
//! epilogues store none of them), and the mma family's with its own swizzle (12 chunks per
//! row) and 3-chunk copies where that family runs. 192 and 256 run, on sm_90,
//! the wgmma forward (two consumer warpgroups, K and V handed over apart) and everywhere the
//! mma backward whose warps split D (`kernels/sm80_backward_wide.cu`,
//! [`crate::Family::backward_family`]); the mma family's forward has 8-warp blocks there.
//!
//! For each element type and of these head dims: forward dense, causal, sliding window
//! and LongNet; a dilated ring step; a causal backward with key padding and a grouped-query
//! one. At 96, 192 and 256 (bf16), dense forwards with several work items per block of the
//! wgmma forward (its one Q buffer at d = 256 reused), outside the quick list. Every name starts with `d=D ` (`gpu_check --only "d=256"` runs one head dim's).

use super::cases::{Case, Kind, fit_spec, sizes};
use crate::shape::Dtype;
use crate::spec::{GpuPattern, GpuSpec};
use ringdil_reference::pattern::Dilated;
use ringdil_reference::random::SplitMix64;

/// The head dims these cases cover.
pub const HEAD_DIMS: [usize; 3] = [96, 192, 256];

/// The cases, drawn from `rng` after every other case (so that a seed gives the other
/// cases it always gave).
pub fn cases(rng: &mut SplitMix64, quick: bool) -> Vec<Case> {
    let mut out = Vec::new();
    for dtype in [Dtype::Bf16, Dtype::F16] {
        for head_dim in HEAD_DIMS {
            let mut add = |kind: Kind, what: &str, spec: GpuSpec, kv_heads: Option<usize>, rng: &mut SplitMix64| {
                let name = format!("d={head_dim} {what}");
                out.push(drawn_case(kind, &name, (dtype, head_dim, head_dim), spec, kv_heads, quick, rng));
            };
            let (longnet, _) = add_forwards(&mut add, rng);
            add(Kind::RingStep, "ring step dilated", longnet.causal(true), None, rng);
            let padded = GpuSpec::new(GpuPattern::Dense).causal(true).key_lengths(vec![]);
            add(Kind::Backward, "backward causal + padding", padded.clone(), None, rng);
            // Groups of 2 query heads over 1 to 3 K/V heads: dK, dV rows added from two blocks.
            let kv_heads = rng.range(1, 3);
            add(Kind::Backward, "gqa backward causal + padding", padded, Some(kv_heads), rng);
        }
    }
    if !quick {
        out.extend(several_items_per_block());
    }
    out
}

/// A case of `kind` named `name` with v's head dim `value_dim`, sizes drawn from `rng`
/// ([`sizes`], [`fit_spec`]); with `kv_heads`, grouped-query with groups of 2 query heads.
pub(super) fn drawn_case(
    kind: Kind,
    name: &str,
    (dtype, head_dim, value_dim): (Dtype, usize, usize),
    spec: GpuSpec,
    kv_heads: Option<usize>,
    quick: bool,
    rng: &mut SplitMix64,
) -> Case {
    let (seq, batch, heads) = sizes(quick, rng);
    let spec = fit_spec(spec, batch, seq, rng);
    let heads = kv_heads.map_or(heads, |kv| 2 * kv);
    let case = Case::new(kind, name, (dtype, head_dim), [batch, seq, heads], spec);
    Case { kv_heads: kv_heads.unwrap_or(heads), value_dim, ..case }
}

/// What adds one case: kind, name, spec, grouped-query K/V heads, the generator.
pub(super) type Add<'a> = dyn FnMut(Kind, &str, GpuSpec, Option<usize>, &mut SplitMix64) + 'a;

/// The forwards every head-dim list starts with, drawn in this order: dense, dense causal,
/// a sliding window and a LongNet pattern of three branches (causal or not, by one draw).
/// Returns the LongNet pattern (not causal) and that draw.
pub(super) fn add_forwards(add: &mut Add<'_>, rng: &mut SplitMix64) -> (GpuSpec, bool) {
    let causal = rng.uniform() < 0.5;
    let dense = GpuSpec::new(GpuPattern::Dense);
    add(Kind::Forward, "dense", dense.clone(), None, rng);
    add(Kind::Forward, "dense causal", dense.causal(true), None, rng);
    let window = GpuPattern::Window { left: rng.range(0, 150), right: rng.range(0, 80) };
    add(Kind::Forward, "sliding window", GpuSpec::new(window).causal(causal), None, rng);
    let branches = [(rng.range(16, 128), 1), (rng.range(100, 400), 2), (rng.range(400, 2000), 4)];
    let longnet = GpuSpec::new(GpuPattern::Dilated(Dilated::longnet(&branches)));
    add(Kind::Forward, "dilated longnet", longnet.clone().causal(causal), None, rng);
    (longnet, causal)
}

/// Forward cases at d = 96, 192 and 256 (bf16, dense, causal and not) whose 128-row work
/// items number at least two per block of a 132-multiprocessor device (the wgmma forward's
/// grid is one block per multiprocessor): a block's second item reuses its Q buffer (one at
/// d = 256: the producer waits for the first item's last S) and its K/V stages' phases (at
/// d = 96, the 192-row kernel's, over tiles of 128 columns).
/// The random sizes above give most blocks one item. Fixed sizes, no draws from the rng.
fn several_items_per_block() -> Vec<Case> {
    let mut out = Vec::new();
    for head_dim in HEAD_DIMS {
        for causal in [false, true] {
            let what = if causal { "dense causal" } else { "dense" };
            let name = format!("d={head_dim} {what}, several items per block");
            let spec = GpuSpec::new(GpuPattern::Dense).causal(causal);
            // d = 96's dense launches run the 192-row kernel (tiles of 128 columns).
            let seq = if head_dim <= 128 { SEVERAL_SEQ * 3 / 2 } else { SEVERAL_SEQ };
            out.push(Case::new(Kind::Forward, &name, (Dtype::Bf16, head_dim), [2, seq, SEVERAL_HEADS], spec));
        }
    }
    out
}

/// The sizes of [`several_items_per_block`]: 10 tiles of 128 rows (of 192 at d = 96: 1.5
/// times the length) x 16 heads x 2 batch rows = 320 items.
const SEVERAL_SEQ: usize = 1280;
const SEVERAL_HEADS: usize = 16;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_new_head_dim_has_forward_ring_and_backward_cases_named_by_it() {
        let mut rng = SplitMix64::new(7);
        let c = cases(&mut rng, false);
        assert_eq!(c.len(), 2 * HEAD_DIMS.len() * 7 + 2 * HEAD_DIMS.len());
        assert_eq!(cases(&mut SplitMix64::new(7), true).len(), 2 * HEAD_DIMS.len() * 7);
        for d in HEAD_DIMS {
            let tag = format!("d={d} ");
            let of_d: Vec<&Case> = c.iter().filter(|x| x.name.starts_with(&tag)).collect();
            assert_eq!(of_d.len(), 16);
            assert!(of_d.iter().all(|x| x.head_dim == d));
            for kind in [Kind::Forward, Kind::RingStep, Kind::Backward] {
                for dtype in [Dtype::Bf16, Dtype::F16] {
                    assert!(of_d.iter().any(|x| x.kind == kind && x.dtype == dtype), "d = {d} {kind:?} {dtype:?}");
                }
            }
            assert!(of_d.iter().any(|x| x.kind == Kind::Backward && x.kv_heads < x.heads));
        }
        for x in &c {
            assert!(x.heads % x.kv_heads == 0, "{}", x.name);
            x.spec.validate(x.batch, x.heads, x.seq).unwrap();
        }
        // Two items or more per block of 132 (the wgmma forward's dense tiles: 192 rows up to
        // d = 128, 128 above).
        let several: Vec<&Case> = c.iter().filter(|x| x.name.contains("several items per block")).collect();
        assert_eq!(several.len(), 6);
        for x in several {
            let rows = if x.head_dim <= 128 { 192 } else { 128 };
            assert!(x.seq.div_ceil(rows) * x.heads * x.batch >= 2 * 132, "{}", x.name);
        }
    }
}
