//! The cases of a v head dim other than q's: MLA's d_qk = 192 with d_v = 128
//! ([`crate::Family::value_dim_pairs`]). The mma family's kernels run them on every device
//! (on sm_90 too: the wgmma family runs equal dims only): the forward's V tiles, O and the
//! epilogue are 128 wide beside 192-wide Q and K tiles, and the backward's warps split dK
//! (96 columns each) and dV (64) apart, with dP^T = V dO^T summed over 128 dims and
//! S^T = K Q^T over 192 (`kernels/sm80_backward_wide.cu`). The scale is `1 / sqrt(192)`.
//!
//! For each element type: forward dense, causal, sliding window, LongNet and packed
//! documents; a dilated ring step and a merge of two ring steps (the merge kernel and the
//! epilogue's fused merge over 128-wide rows); a causal backward with key padding, a
//! grouped-query one (dK, dV rows added from two blocks) and a LongNet one (several
//! launches adding into dK, dV). Every name starts with `d=192 d_v=128 `.

use super::cases::{Case, Kind};
use super::head_dims::{add_forwards, drawn_case};
use crate::shape::Dtype;
use crate::spec::{GpuPattern, GpuSpec};
use ringdil_reference::Documents;
use ringdil_reference::random::SplitMix64;

/// The (q / k, v) head dims these cases cover.
pub const PAIR: (usize, usize) = (192, 128);

/// The cases, drawn from `rng` after every other case (so that a seed gives the other
/// cases it always gave).
pub fn cases(rng: &mut SplitMix64, quick: bool) -> Vec<Case> {
    let (head_dim, value_dim) = PAIR;
    let mut out = Vec::new();
    for dtype in [Dtype::Bf16, Dtype::F16] {
        let mut add = |kind: Kind, what: &str, spec: GpuSpec, kv_heads: Option<usize>, rng: &mut SplitMix64| {
            let name = format!("d={head_dim} d_v={value_dim} {what}");
            out.push(drawn_case(kind, &name, (dtype, head_dim, value_dim), spec, kv_heads, quick, rng));
        };
        let (longnet, causal) = add_forwards(&mut add, rng);
        let dense = GpuSpec::new(GpuPattern::Dense);
        let packed = dense.clone().causal(true).documents(Documents::per_row(vec![]));
        add(Kind::Forward, "packed documents causal", packed, None, rng);
        add(Kind::RingStep, "ring step dilated", longnet.clone().causal(true), None, rng);
        add(Kind::Merge, "ring merge causal", dense.clone().causal(true), None, rng);
        let padded = dense.causal(true).key_lengths(vec![]);
        add(Kind::Backward, "backward causal + padding", padded.clone(), None, rng);
        // Groups of 2 query heads over 1 to 3 K/V heads: dK, dV rows added from two blocks.
        let kv_heads = rng.range(1, 3);
        add(Kind::Backward, "gqa backward causal + padding", padded, Some(kv_heads), rng);
        add(Kind::Backward, "backward dilated longnet", longnet.causal(causal), None, rng);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_case_pairs_192_with_128_and_covers_each_kernel_and_type() {
        let c = cases(&mut SplitMix64::new(5), true);
        assert_eq!(c.len(), 2 * 10);
        for x in &c {
            assert_eq!((x.head_dim, x.value_dim), (192, 128), "{}", x.name);
            assert!(x.name.starts_with("d=192 d_v=128 "), "{}", x.name);
            assert!(super::super::cases::describe(x).contains("d=192 d_v=128 b="), "{}", x.name);
            assert!(x.heads % x.kv_heads == 0, "{}", x.name);
            x.spec.validate(x.batch, x.heads, x.seq).unwrap();
        }
        for kind in [Kind::Forward, Kind::RingStep, Kind::Merge, Kind::Backward] {
            for dtype in [Dtype::Bf16, Dtype::F16] {
                assert!(c.iter().any(|x| x.kind == kind && x.dtype == dtype), "{kind:?} {dtype:?}");
            }
        }
        assert!(c.iter().any(|x| x.kind == Kind::Backward && x.kv_heads < x.heads));
        assert!(c.iter().any(|x| x.spec.documents.is_some()));
    }
}
