//! The packed-sequence cases of the kernel check (`docs/semantics.md`, section 16):
//! documents inside each batch row, with the dense and sliding-window patterns the GPU
//! runs them with.
//!
//! Document lengths are drawn long-tailed ([`draw_boundaries`]): empty documents,
//! one-token documents, documents shorter than a tile and documents spanning several
//! tiles, so that tiles inside one document (no document test), tiles across a boundary
//! (the per-row key interval) and tile pairs with no shared document (not in the plan)
//! all occur. Per-row and flat (`cu_seqlens` over the whole batch) lists both appear.
//! For each element type and head dim: dense causal and window forwards, a ring step,
//! a merge, and two backward passes (causal with key padding; grouped-query).

use super::cases::{Case, Kind, fit_spec, sizes};
use crate::shape::Dtype;
use crate::spec::{GpuPattern, GpuSpec};
use ringdil_reference::Documents;
use ringdil_reference::random::SplitMix64;

/// One boundary list `0 = c_0 <= ... <= c_m = n`: lengths 0, 1, 2..16, 17..80 and
/// 81..400 tokens with probabilities 0.1, 0.1, 0.3, 0.3, 0.2 (the tail spans tiles).
pub fn draw_boundaries(n: usize, rng: &mut SplitMix64) -> Vec<usize> {
    let mut list = vec![0];
    while *list.last().expect("starts at 0") < n {
        let u = rng.uniform();
        let len = if u < 0.1 {
            0
        } else if u < 0.2 {
            1
        } else if u < 0.5 {
            rng.range(2, 16)
        } else if u < 0.8 {
            rng.range(17, 80)
        } else {
            rng.range(81, 400)
        };
        list.push((list.last().expect("non-empty") + len).min(n));
    }
    list
}

/// Documents for `batch` rows of `seq` tokens in the form `like` asks for (an empty
/// per-row or flat list: "draw them", as [`fit_spec`] does for key lengths).
pub(super) fn draw_documents(like: &Documents, batch: usize, seq: usize, rng: &mut SplitMix64) -> Documents {
    let rows: Vec<Vec<usize>> = (0..batch).map(|_| draw_boundaries(seq, rng)).collect();
    match like {
        Documents::PerRow(_) => Documents::per_row(rows),
        Documents::Flat(_) => Documents::flat(
            rows.iter()
                .enumerate()
                .flat_map(|(b, r)| r[..r.len() - 1].iter().map(move |&c| c + b * seq))
                .chain([batch * seq])
                .collect(),
        ),
    }
}

/// The packed-sequence cases, drawn from `rng` after every other case.
pub fn cases(rng: &mut SplitMix64, quick: bool) -> Vec<Case> {
    let mut out = Vec::new();
    let (per_row, flat) = (Documents::per_row(vec![]), Documents::flat(vec![]));
    for dtype in [Dtype::Bf16, Dtype::F16] {
        for head_dim in [64, 128] {
            let combo = (dtype, head_dim);
            let mut add = |kind: Kind, what: &str, spec: GpuSpec, kv_group: usize, rng: &mut SplitMix64| {
                let (seq, batch, heads) = sizes(quick, rng);
                let spec = fit_spec(spec, batch, seq, rng);
                let name = format!("packed {what}");
                let heads = heads * kv_group;
                out.push(Case {
                    kv_heads: heads / kv_group,
                    ..Case::new(kind, &name, combo, [batch, seq, heads], spec)
                });
            };
            let causal = rng.uniform() < 0.5;
            let dense = GpuSpec::new(GpuPattern::Dense);
            let window = GpuSpec::new(GpuPattern::Window { left: rng.range(0, 150), right: rng.range(0, 80) });
            add(Kind::Forward, "dense causal", dense.clone().causal(true).documents(per_row.clone()), 1, rng);
            add(Kind::Forward, "window, flat list", window.clone().causal(causal).documents(flat.clone()), 1, rng);
            add(Kind::RingStep, "ring step dense", dense.clone().causal(causal).documents(per_row.clone()), 1, rng);
            add(Kind::Merge, "ring merge window", window.documents(per_row.clone()), 1, rng);
            let padded = dense.clone().causal(true).key_lengths(vec![]).documents(flat.clone());
            add(Kind::Backward, "backward causal + padding", padded, 1, rng);
            add(Kind::Backward, "gqa backward dense", dense.causal(causal).documents(per_row.clone()), 4, rng);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_case_packs_valid_documents_with_short_and_empty_ones() {
        let mut rng = SplitMix64::new(7);
        let c = cases(&mut rng, false);
        assert_eq!(c.len(), 24);
        let (mut empty, mut single) = (false, false);
        for x in &c {
            x.spec.validate(x.batch, x.heads, x.seq).unwrap();
            let docs = x.spec.documents.as_ref().expect("packed");
            for row in docs.split(x.seq) {
                empty |= row.windows(2).any(|w| w[0] == w[1]);
                single |= row.windows(2).any(|w| w[1] == w[0] + 1);
            }
        }
        assert!(empty && single);
        assert!(c.iter().any(|x| matches!(x.spec.documents, Some(Documents::Flat(_)))));
        assert!(c.iter().any(|x| x.kv_heads < x.heads && x.kind == Kind::Backward));
    }
}
